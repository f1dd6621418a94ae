// The ISA v1 encoder, validator, disassembler and cost model. The bit positions below are the ones
// of ISA.md "Instruction words"; encode and decode share the field table so they cannot drift apart.
#include "target/fpga/isa/isa.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "common/error.h"

namespace dnnfusion::fpga {
namespace {

constexpr uint32_t kPayloadMask = 0x0FFFFFFF;  // bits [27:0]

// A contiguous bit field of a register payload.
struct Field {
  int lsb, bits;
  constexpr uint32_t get(uint32_t w) const { return (w >> lsb) & ((1u << bits) - 1); }
  constexpr uint32_t put(uint32_t v) const { return (v & ((1u << bits) - 1)) << lsb; }
  constexpr uint32_t mask() const { return ((1u << bits) - 1) << lsb; }
};

// Reg0: channels. Reg1: input size. Reg2: window and activation clamp.
constexpr Field kChanIn{0, 12}, kChanOut{12, 12};
constexpr Field kHeight{0, 11}, kWidth{11, 11};
constexpr Field kKernel{0, 3}, kStride{3, 3}, kPad{6, 3}, kActLo{9, 8}, kActHi{17, 8};
constexpr Field kCtrlState{0, 2}, kSwitchType{0, 4};
constexpr Field kEndIndex{16, 12}, kEndSum{0, 16};
constexpr uint32_t kReg0Used = kChanIn.mask() | kChanOut.mask();
constexpr uint32_t kReg1Used = kHeight.mask() | kWidth.mask();
constexpr uint32_t kReg2Used = kKernel.mask() | kStride.mask() | kPad.mask() | kActLo.mask() | kActHi.mask();

uint32_t word(RegId id, uint32_t payload) { return (static_cast<uint32_t>(id) << 28) | (payload & kPayloadMask); }
RegId id_of(uint32_t w) { return static_cast<RegId>(w >> 28); }
uint32_t payload(uint32_t w) { return w & kPayloadMask; }

// The 13 words of a layer, in order: which register each one must address.
constexpr std::array<RegId, kWordsPerLayer> kLayerSlots = {
    RegId::kCtrl, RegId::kCtrl, RegId::kSwitch, RegId::kReg0, RegId::kReg1, RegId::kReg2, RegId::kReg3,
    RegId::kReg4, RegId::kReg5, RegId::kReg6, RegId::kReg7, RegId::kCtrl, RegId::kEnd};

const char* reg_name(RegId id) {
  switch (id) {
    case RegId::kCtrl: return "CTRL";
    case RegId::kSwitch: return "SWITCH";
    case RegId::kReg0: return "REG0";
    case RegId::kReg1: return "REG1";
    case RegId::kReg2: return "REG2";
    case RegId::kReg3: return "REG3";
    case RegId::kReg4: return "REG4";
    case RegId::kReg5: return "REG5";
    case RegId::kReg6: return "REG6";
    case RegId::kReg7: return "REG7";
    case RegId::kEnd: return "END";
  }
  return "?";
}

const char* control_name(uint32_t s) {
  static const char* names[] = {"IDLE", "COMPUTE", "PARAM", "RESET"};
  return s < 4 ? names[s] : "?";
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw InvalidInput("fpga instruction stream: " + where + ": " + what);
}

void check_range(const std::string& where, const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    bad(where, detail::str_cat(name, " = ", v, ", allowed ", lo, "..", hi));
}

void check_one_of(const std::string& where, const char* name, int64_t v, std::initializer_list<int64_t> allowed,
                  const char* type) {
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return;
  std::string list;
  for (int64_t a : allowed) list += (list.empty() ? "" : " or ") + std::to_string(a);
  bad(where, detail::str_cat(name, " = ", v, ", ", type, " allows ", list));
}

void check_zero(const std::string& where, const char* name, uint64_t v, const char* type) {
  if (v != 0) bad(where, detail::str_cat(name, " = ", hex(v), ", must be 0 for ", type, " (unused)"));
}

struct Region {
  const char* name;
  uint64_t begin, bytes;
  bool overlaps(const Region& o) const {
    return bytes && o.bytes && begin < o.begin + o.bytes && o.begin < begin + bytes;
  }
};

std::string describe(const Region& r) {
  return detail::str_cat(r.name, " [", hex(r.begin), ", ", hex(r.begin + r.bytes), ")");
}

struct Regions {
  Region weights, params, input, input_b, output;
};

Regions regions_of(const LayerDesc& d) {
  const bool add = d.type == LayerType::kAdd;
  const uint64_t in_bytes = activation_bytes(d.in_channels, d.in_h, d.in_w);
  return {{"weights", d.weight_offset, weight_bytes(d)},
          {"parameter table", d.param_offset, param_bytes(d)},
          {"input", d.input_offset, in_bytes},
          {"input B", d.input_b_offset, add ? in_bytes : 0},
          {"output", d.output_offset, activation_bytes(d.out_channels, out_h(d), out_w(d))}};
}

void check_type_fields(const LayerDesc& d, const std::string& where) {
  const char* t = layer_type_name(d.type);
  const bool same_channels = d.type != LayerType::kConv3x3 && d.type != LayerType::kConv1x1;
  if (same_channels && d.out_channels != d.in_channels)
    bad(where, detail::str_cat("out_channels = ", d.out_channels, " but ", t, " needs out_channels == in_channels = ",
                               d.in_channels));
  switch (d.type) {
    case LayerType::kConv3x3:
    case LayerType::kDepthwise3x3:
      check_one_of(where, "kernel", d.kernel, {3}, t);
      check_one_of(where, "stride", d.stride, {1, 2}, t);
      check_one_of(where, "pad", d.pad, {0, 1}, t);
      break;
    case LayerType::kConv1x1:
      check_one_of(where, "kernel", d.kernel, {1}, t);
      check_one_of(where, "stride", d.stride, {1, 2}, t);
      check_one_of(where, "pad", d.pad, {0}, t);
      break;
    case LayerType::kMaxPool:
      check_range(where, "kernel", d.kernel, 1, 8);
      check_range(where, "stride", d.stride, 1, 8);
      check_range(where, "pad", d.pad, 0, d.kernel - 1);
      check_zero(where, "weight_offset", d.weight_offset, t);
      check_zero(where, "param_offset", d.param_offset, t);
      break;
    case LayerType::kAdd:
      check_one_of(where, "kernel", d.kernel, {1}, t);
      check_one_of(where, "stride", d.stride, {1}, t);
      check_one_of(where, "pad", d.pad, {0}, t);
      check_zero(where, "weight_offset", d.weight_offset, t);
      break;
  }
  if (d.type != LayerType::kAdd) check_zero(where, "input_b_offset", d.input_b_offset, t);
}

void check_regions(const LayerDesc& d, uint64_t memory_bytes, const std::string& where) {
  const Regions r = regions_of(d);
  for (const Region* g : {&r.weights, &r.params, &r.input, &r.input_b, &r.output}) {
    if (g->begin % kDmaUnit) bad(where, detail::str_cat(g->name, " offset ", hex(g->begin), " is not a multiple of 64"));
    if (g->bytes && (g->begin > memory_bytes || g->bytes > memory_bytes - g->begin))
      bad(where, detail::str_cat(describe(*g), " lies outside the device memory of ", hex(memory_bytes), " bytes"));
  }
  for (const Region* g : {&r.weights, &r.params, &r.input, &r.input_b})
    if (r.output.overlaps(*g))
      bad(where, detail::str_cat(describe(r.output), " overlaps the layer's ", describe(*g),
                                 " (a layer may not write what it reads)"));
  if (r.weights.overlaps(r.params)) bad(where, describe(r.weights) + " overlaps " + describe(r.params));
}

// A layer must not write into any layer's weights or parameter table: the stream runs once per
// inference and the constants must survive for the next one.
void check_constants_kept(const std::vector<LayerDesc>& layers, const std::vector<std::string>& where) {
  std::vector<std::pair<Region, size_t>> constants;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Regions r = regions_of(layers[i]);
    if (r.weights.bytes) constants.push_back({r.weights, i});
    if (r.params.bytes) constants.push_back({r.params, i});
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const Region out = regions_of(layers[i]).output;
    for (const auto& [c, owner] : constants)
      if (out.overlaps(c))
        bad(where[i], detail::str_cat(describe(out), " overlaps the ", c.name, " of layer ", owner, " ",
                                      describe(c), " (constants must survive every inference)"));
  }
}

void check_memory_size(uint64_t memory_bytes, const std::string& where) {
  if (memory_bytes < kDmaUnit || memory_bytes > kMaxMemoryBytes || memory_bytes % kDmaUnit)
    bad(where, detail::str_cat("device memory size ", memory_bytes,
                               " bytes, allowed a multiple of 64 in 64..2^32"));
}

// ---- words of one layer ----
std::array<uint32_t, kWordsPerLayer> layer_words(const LayerDesc& d, size_t index) {
  auto ctrl = [](Control c) { return word(RegId::kCtrl, kCtrlState.put(static_cast<uint32_t>(c))); };
  auto units = [](uint64_t off) { return static_cast<uint32_t>(off / kDmaUnit); };
  std::array<uint32_t, kWordsPerLayer> w = {
      ctrl(Control::kReset),
      ctrl(Control::kParam),
      word(RegId::kSwitch, kSwitchType.put(static_cast<uint32_t>(d.type))),
      word(RegId::kReg0, kChanIn.put(d.in_channels - 1) | kChanOut.put(d.out_channels - 1)),
      word(RegId::kReg1, kHeight.put(d.in_h - 1) | kWidth.put(d.in_w - 1)),
      word(RegId::kReg2, kKernel.put(d.kernel - 1) | kStride.put(d.stride - 1) | kPad.put(d.pad) |
                             kActLo.put(static_cast<uint32_t>(d.act_lo)) | kActHi.put(static_cast<uint32_t>(d.act_hi))),
      word(RegId::kReg3, units(d.weight_offset)),
      word(RegId::kReg4, units(d.param_offset)),
      word(RegId::kReg5, units(d.input_offset)),
      word(RegId::kReg6, units(d.input_b_offset)),
      word(RegId::kReg7, units(d.output_offset)),
      ctrl(Control::kCompute),
      0};
  const uint32_t sum = crc32_words(w.data(), kWordsPerLayer - 1) & 0xFFFF;
  w[kWordsPerLayer - 1] = word(RegId::kEnd, kEndIndex.put(static_cast<uint32_t>(index)) | kEndSum.put(sum));
  return w;
}

std::string word_where(size_t i) { return "word " + std::to_string(i); }

int32_t sign_extend8(uint32_t v) { return static_cast<int32_t>(static_cast<int8_t>(static_cast<uint8_t>(v))); }

// Checks each word's register id and reserved bits, then the checksum; returns the fields.
LayerDesc read_layer(const uint32_t* w, size_t base, size_t index) {
  static const Control expected_ctrl[] = {Control::kReset, Control::kParam, Control::kCompute};
  const uint32_t used[kWordsPerLayer] = {kCtrlState.mask(), kCtrlState.mask(), kSwitchType.mask(), kReg0Used,
                                         kReg1Used, kReg2Used, kPayloadMask, kPayloadMask, kPayloadMask,
                                         kPayloadMask, kPayloadMask, kCtrlState.mask(),
                                         kEndIndex.mask() | kEndSum.mask()};
  int ctrl_seen = 0;
  for (int k = 0; k < kWordsPerLayer; ++k) {
    const uint32_t x = w[base + k];
    const std::string where = word_where(base + k) + " (layer " + std::to_string(index) + ")";
    if (id_of(x) != kLayerSlots[k])
      bad(where, detail::str_cat("register id ", x >> 28, " (", reg_name(id_of(x)), "), expected ",
                                 static_cast<uint32_t>(kLayerSlots[k]), " (", reg_name(kLayerSlots[k]), ")"));
    if (payload(x) & ~used[k]) bad(where, detail::str_cat("reserved bits set: ", hex(payload(x) & ~used[k])));
    if (kLayerSlots[k] == RegId::kCtrl) {
      const Control want = expected_ctrl[ctrl_seen++];
      if (kCtrlState.get(x) != static_cast<uint32_t>(want))
        bad(where, detail::str_cat("Control_REG ", control_name(kCtrlState.get(x)), ", expected ",
                                   control_name(static_cast<uint32_t>(want)), " (sequence RESET, PARAM, ..., COMPUTE)"));
    }
  }
  const uint32_t end = w[base + kWordsPerLayer - 1];
  const std::string end_where = word_where(base + kWordsPerLayer - 1) + " (END of layer " + std::to_string(index) + ")";
  if (kEndIndex.get(end) != index)
    bad(end_where, detail::str_cat("layer index ", kEndIndex.get(end), ", expected ", index));
  const uint32_t sum = crc32_words(w + base, kWordsPerLayer - 1) & 0xFFFF;
  if (kEndSum.get(end) != sum)
    bad(end_where, detail::str_cat("layer checksum ", hex(kEndSum.get(end)), " does not match the layer's words (",
                                   hex(sum), "): corrupted stream"));
  const uint32_t type = kSwitchType.get(w[base + 2]);
  if (type < 1 || type > 5)
    bad(word_where(base + 2), detail::str_cat("Switch_REG layer type ", type,
                                              ", allowed 1 (conv3x3), 2 (conv1x1), 3 (dw3x3), 4 (maxpool), 5 (add)"));
  LayerDesc d;
  d.type = static_cast<LayerType>(type);
  d.in_channels = kChanIn.get(w[base + 3]) + 1;
  d.out_channels = kChanOut.get(w[base + 3]) + 1;
  d.in_h = kHeight.get(w[base + 4]) + 1;
  d.in_w = kWidth.get(w[base + 4]) + 1;
  d.kernel = kKernel.get(w[base + 5]) + 1;
  d.stride = kStride.get(w[base + 5]) + 1;
  d.pad = kPad.get(w[base + 5]);
  d.act_lo = sign_extend8(kActLo.get(w[base + 5]));
  d.act_hi = sign_extend8(kActHi.get(w[base + 5]));
  d.weight_offset = uint64_t{payload(w[base + 6])} * kDmaUnit;
  d.param_offset = uint64_t{payload(w[base + 7])} * kDmaUnit;
  d.input_offset = uint64_t{payload(w[base + 8])} * kDmaUnit;
  d.input_b_offset = uint64_t{payload(w[base + 9])} * kDmaUnit;
  d.output_offset = uint64_t{payload(w[base + 10])} * kDmaUnit;
  return d;
}

// Returns the layer count after checking the four header words against n.
size_t read_header(const uint32_t* w, size_t n, uint64_t* memory_bytes) {
  if (n > 0 && !w) bad("words", "null pointer with a nonzero length");
  if (n < kHeaderWords + 1)
    bad("length", detail::str_cat("truncated: ", n, " words, a stream needs at least ", kHeaderWords + 1,
                                  " (4 header words and the trailer)"));
  if (w[0] != kStreamMagic) bad("word 0", detail::str_cat("magic ", hex(w[0]), ", expected ", hex(kStreamMagic)));
  const uint32_t version = w[1] >> 16, layers = w[1] & 0xFFFF;
  if (version != kIsaVersion)
    bad("word 1", detail::str_cat("ISA version ", version, " not supported (this decoder reads version ", kIsaVersion, ")"));
  check_range("word 1", "layer count", layers, 1, kMaxLayers);
  *memory_bytes = uint64_t{w[2]} * kDmaUnit;
  check_memory_size(*memory_bytes, "word 2");
  const uint64_t expected = kHeaderWords + uint64_t{kWordsPerLayer} * layers + 1;
  if (w[3] != expected)
    bad("word 3", detail::str_cat("total word count ", w[3], ", but ", layers, " layers make ", expected));
  if (n != expected)
    bad("length", detail::str_cat(n < expected ? "truncated" : "trailing words", ": ", n, " words, the header says ",
                                  expected));
  return layers;
}

std::string layer_where(size_t i, size_t base) {
  return detail::str_cat("layer ", i, " (words ", base, "..", base + kWordsPerLayer - 1, ")");
}

}  // namespace

bool operator==(const LayerDesc& a, const LayerDesc& b) {
  return a.type == b.type && a.in_channels == b.in_channels && a.out_channels == b.out_channels &&
         a.in_h == b.in_h && a.in_w == b.in_w && a.kernel == b.kernel && a.stride == b.stride && a.pad == b.pad &&
         a.act_lo == b.act_lo && a.act_hi == b.act_hi && a.weight_offset == b.weight_offset &&
         a.param_offset == b.param_offset && a.input_offset == b.input_offset &&
         a.input_b_offset == b.input_b_offset && a.output_offset == b.output_offset;
}

int32_t out_h(const LayerDesc& d) { return (d.in_h + 2 * d.pad - d.kernel) / d.stride + 1; }
int32_t out_w(const LayerDesc& d) { return (d.in_w + 2 * d.pad - d.kernel) / d.stride + 1; }

uint64_t activation_bytes(int64_t c, int64_t h, int64_t w) { return static_cast<uint64_t>(pad8(c) * h * w); }

uint64_t weight_bytes(const LayerDesc& d) {
  switch (d.type) {
    case LayerType::kConv3x3: return static_cast<uint64_t>(pad8(d.out_channels) * pad8(d.in_channels) * 9);
    case LayerType::kConv1x1: return static_cast<uint64_t>(pad8(d.out_channels) * pad32(d.in_channels));
    case LayerType::kDepthwise3x3: return static_cast<uint64_t>(pad8(d.in_channels) * 9);
    default: return 0;
  }
}

uint64_t param_bytes(const LayerDesc& d) {
  return d.type == LayerType::kMaxPool ? 0 : static_cast<uint64_t>(pad8(d.out_channels) * kParamEntryBytes);
}

const char* layer_type_name(LayerType t) {
  switch (t) {
    case LayerType::kConv3x3: return "conv3x3";
    case LayerType::kConv1x1: return "conv1x1";
    case LayerType::kDepthwise3x3: return "dw3x3";
    case LayerType::kMaxPool: return "maxpool";
    case LayerType::kAdd: return "add";
  }
  return "?";
}

void check_shape(const LayerDesc& d, const std::string& where) {
  const auto t = static_cast<uint32_t>(d.type);
  if (t < 1 || t > 5) bad(where, detail::str_cat("layer type ", t, ", allowed 1..5 (conv3x3, conv1x1, dw3x3, maxpool, add)"));
  check_range(where, "in_channels", d.in_channels, 1, kMaxChannels);
  check_range(where, "out_channels", d.out_channels, 1, kMaxChannels);
  check_range(where, "in_h", d.in_h, 1, kMaxSpatial);
  check_range(where, "in_w", d.in_w, 1, kMaxSpatial);
  check_range(where, "act_lo", d.act_lo, -128, 127);
  check_range(where, "act_hi", d.act_hi, d.act_lo, 127);
  check_type_fields(d, where);
  if (d.in_h + 2 * d.pad < d.kernel || d.in_w + 2 * d.pad < d.kernel)
    bad(where, detail::str_cat("input ", d.in_h, "x", d.in_w, " with pad ", d.pad, " is smaller than the kernel ",
                               d.kernel, " (no output)"));
}

void check_layer(const LayerDesc& d, uint64_t memory_bytes, const std::string& where) {
  check_shape(d, where);
  check_regions(d, memory_bytes, where);
}

uint32_t crc32_words(const uint32_t* words, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i)
    for (int b = 0; b < 4; ++b) c = table[(c ^ (words[i] >> (8 * b))) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::vector<uint32_t> encode(const std::vector<LayerDesc>& layers, uint64_t memory_bytes) {
  check_memory_size(memory_bytes, "encode");
  if (layers.empty() || layers.size() > static_cast<size_t>(kMaxLayers))
    bad("encode", detail::str_cat(layers.size(), " layers, allowed 1..", kMaxLayers));
  std::vector<std::string> where;
  for (size_t i = 0; i < layers.size(); ++i) {
    where.push_back("layer " + std::to_string(i));
    check_layer(layers[i], memory_bytes, where.back());
  }
  check_constants_kept(layers, where);
  const size_t n = kHeaderWords + kWordsPerLayer * layers.size() + 1;
  std::vector<uint32_t> w = {kStreamMagic, (kIsaVersion << 16) | static_cast<uint32_t>(layers.size()),
                             static_cast<uint32_t>(memory_bytes / kDmaUnit), static_cast<uint32_t>(n)};
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto lw = layer_words(layers[i], i);
    w.insert(w.end(), lw.begin(), lw.end());
  }
  w.push_back(crc32_words(w.data(), w.size()));
  return w;
}

Program decode_program(const uint32_t* w, size_t n) {
  Program p;
  const size_t count = read_header(w, n, &p.memory_bytes);
  std::vector<std::string> where;
  for (size_t i = 0; i < count; ++i) {
    const size_t base = kHeaderWords + kWordsPerLayer * i;
    where.push_back(layer_where(i, base));
    p.layers.push_back(read_layer(w, base, i));
    check_layer(p.layers.back(), p.memory_bytes, where.back());
  }
  check_constants_kept(p.layers, where);
  const uint32_t crc = crc32_words(w, n - 1);
  if (w[n - 1] != crc)
    bad(word_where(n - 1), detail::str_cat("stream CRC-32 ", hex(w[n - 1]), " does not match the words (", hex(crc),
                                           "): corrupted stream"));
  return p;
}

std::vector<LayerDesc> decode(const uint32_t* words, size_t n) { return decode_program(words, n).layers; }

void reseal(std::vector<uint32_t>& w) {
  const size_t n = w.size();
  if (n < kHeaderWords + 1 || (n - kHeaderWords - 1) % kWordsPerLayer)
    bad("reseal", detail::str_cat(n, " words is not 5 + 13 * layers"));
  for (size_t base = kHeaderWords; base + kWordsPerLayer < n; base += kWordsPerLayer) {
    uint32_t& end = w[base + kWordsPerLayer - 1];
    end = (end & ~kEndSum.mask()) | kEndSum.put(crc32_words(&w[base], kWordsPerLayer - 1) & 0xFFFF);
  }
  w[n - 1] = crc32_words(w.data(), n - 1);
}

namespace {

std::string describe_word(uint32_t x) {
  const uint32_t p = payload(x);
  switch (id_of(x)) {
    case RegId::kCtrl: return std::string("CTRL ") + control_name(kCtrlState.get(x));
    case RegId::kSwitch: return std::string("SWITCH ") + layer_type_name(static_cast<LayerType>(kSwitchType.get(x)));
    case RegId::kReg0: return detail::str_cat("REG0 in_channels=", kChanIn.get(x) + 1, " out_channels=", kChanOut.get(x) + 1);
    case RegId::kReg1: return detail::str_cat("REG1 in_h=", kHeight.get(x) + 1, " in_w=", kWidth.get(x) + 1);
    case RegId::kReg2:
      return detail::str_cat("REG2 kernel=", kKernel.get(x) + 1, " stride=", kStride.get(x) + 1, " pad=", kPad.get(x),
                             " act=[", sign_extend8(kActLo.get(x)), ",", sign_extend8(kActHi.get(x)), "]");
    case RegId::kReg3: return "REG3 weights @" + hex(uint64_t{p} * kDmaUnit);
    case RegId::kReg4: return "REG4 params @" + hex(uint64_t{p} * kDmaUnit);
    case RegId::kReg5: return "REG5 input @" + hex(uint64_t{p} * kDmaUnit);
    case RegId::kReg6: return "REG6 input_b @" + hex(uint64_t{p} * kDmaUnit);
    case RegId::kReg7: return "REG7 output @" + hex(uint64_t{p} * kDmaUnit);
    case RegId::kEnd: return detail::str_cat("END layer=", kEndIndex.get(x), " checksum=", hex(kEndSum.get(x)));
  }
  return detail::str_cat("<unknown register id ", x >> 28, ">");
}

}  // namespace

std::vector<std::string> disassemble(const uint32_t* w, size_t n) {
  std::vector<std::string> out;
  if (!w) return out;
  for (size_t i = 0; i < n; ++i) {
    std::string text;
    if (i == 0) text = w[0] == kStreamMagic ? "MAGIC" : "MAGIC <wrong, expected " + hex(kStreamMagic) + ">";
    else if (i == 1) text = detail::str_cat("VERSION ", w[1] >> 16, " layers=", w[1] & 0xFFFF);
    else if (i == 2) text = detail::str_cat("MEMORY ", hex(uint64_t{w[2]} * kDmaUnit), " bytes");
    else if (i == 3) text = detail::str_cat("WORDS ", w[3]);
    else if (i == n - 1) text = std::string("CRC32") + (crc32_words(w, n - 1) == w[i] ? "" : " <mismatch>");
    else text = describe_word(w[i]);
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "%04zu %08x ", i, w[i]);
    out.push_back(prefix + text);
  }
  return out;
}

std::vector<std::pair<std::string, int64_t>> fields(const LayerDesc& d) {
  return {{"type", static_cast<int64_t>(d.type)},
          {"in_channels", d.in_channels},
          {"out_channels", d.out_channels},
          {"in_h", d.in_h},
          {"in_w", d.in_w},
          {"out_h", out_h(d)},
          {"out_w", out_w(d)},
          {"kernel", d.kernel},
          {"stride", d.stride},
          {"pad", d.pad},
          {"act_lo", d.act_lo},
          {"act_hi", d.act_hi},
          {"weight_offset", static_cast<int64_t>(d.weight_offset)},
          {"param_offset", static_cast<int64_t>(d.param_offset)},
          {"input_offset", static_cast<int64_t>(d.input_offset)},
          {"input_b_offset", static_cast<int64_t>(d.input_b_offset)},
          {"output_offset", static_cast<int64_t>(d.output_offset)}};
}

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Datapath steps (one per cycle) and the MACs they issue, per ISA.md "Cost model".
void compute_cost(const LayerDesc& d, const CostModel& m, LayerCost& c) {
  const uint64_t pixels = static_cast<uint64_t>(out_h(d)) * out_w(d);
  const uint64_t kb = pad8(d.out_channels) / 8, cb = pad8(d.in_channels) / 8;
  switch (d.type) {
    case LayerType::kConv3x3:
      c.macs = pixels * kb * cb * 576;
      c.compute_cycles = ceil_div(c.macs, static_cast<uint64_t>(m.conv3x3_macs_per_cycle));
      break;
    case LayerType::kConv1x1:
      c.macs = pixels * kb * (pad32(d.in_channels) / 32) * 256;
      c.compute_cycles = ceil_div(c.macs, static_cast<uint64_t>(m.conv1x1_macs_per_cycle));
      break;
    case LayerType::kDepthwise3x3:
      c.macs = pixels * cb * 72;
      c.compute_cycles = ceil_div(c.macs, static_cast<uint64_t>(m.dw_macs_per_cycle));
      break;
    case LayerType::kMaxPool:
      c.compute_cycles = ceil_div(pixels * pad8(d.in_channels) * d.kernel * d.kernel, static_cast<uint64_t>(m.pool_lanes));
      break;
    case LayerType::kAdd:
      c.compute_cycles = ceil_div(pixels * pad8(d.in_channels), static_cast<uint64_t>(m.add_lanes));
      break;
  }
}

}  // namespace

LayerCost estimate(const LayerDesc& d, const CostModel& m) {
  if (!(m.clock_hz > 0) || !(m.ddr_bytes_per_s > 0) || m.conv3x3_macs_per_cycle < 1 || m.conv1x1_macs_per_cycle < 1 ||
      m.dw_macs_per_cycle < 1 || m.pool_lanes < 1 || m.add_lanes < 1 || m.layer_overhead_cycles < 0)
    throw InvalidInput("fpga cost model: clock, bandwidth and per-cycle rates must be positive, overhead >= 0");
  check_shape(d, "estimate");  // placement is not the estimate's concern
  LayerCost c;
  compute_cost(d, m, c);
  const Regions r = regions_of(d);
  c.ddr_read_bytes = r.weights.bytes + r.params.bytes + r.input.bytes + r.input_b.bytes;
  c.ddr_write_bytes = r.output.bytes;
  const double bytes_per_cycle = m.ddr_bytes_per_s / m.clock_hz;
  c.memory_cycles = static_cast<uint64_t>(std::ceil((c.ddr_read_bytes + c.ddr_write_bytes) / bytes_per_cycle));
  c.cycles = std::max(c.compute_cycles, c.memory_cycles) + static_cast<uint64_t>(m.layer_overhead_cycles);
  c.seconds = c.cycles / m.clock_hz;
  return c;
}

}  // namespace dnnfusion::fpga
