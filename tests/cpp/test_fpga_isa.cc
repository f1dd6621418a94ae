// The fpga ISA v1 stream: encode -> decode round trips on random layer lists over the whole field
// ranges; every corruption refused with InvalidInput before anything could run (each bit of each
// word flipped, bursts inside a word, truncation at every length, trailing words, bad magic /
// version / counts, out-of-range fields and bad DMA placement patched in and resealed so that only
// the field check can catch them); the disassembler on good and bad streams; the cost model's
// numbers against hand-computed ones. Replay with DNNFUSION_TEST_SEED=<printed seed>.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "target/fpga/isa/isa.h"

namespace dnnfusion::fpga {
namespace {

uint64_t seed() {
  static const uint64_t s = [] {
    const char* e = std::getenv("DNNFUSION_TEST_SEED");
    const uint64_t v = e && *e ? std::strtoull(e, nullptr, 10) : 20240531ull;
    std::printf("test_fpga_isa: seed %llu (replay with DNNFUSION_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(v), static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}
std::string seed_note() { return "replay with DNNFUSION_TEST_SEED=" + std::to_string(seed()); }

int64_t uniform(std::mt19937_64& g, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
// Log-uniform in [1, hi]: small and huge values both appear.
int log_uniform(std::mt19937_64& g, int hi) {
  const double e = std::uniform_real_distribution<double>(0, std::log2(static_cast<double>(hi) + 1))(g);
  return static_cast<int>(std::clamp<int64_t>(static_cast<int64_t>(std::exp2(e)), 1, hi));
}

// Places regions one after another with random 64-byte gaps.
struct Bump {
  uint64_t next = 0;
  uint64_t take(std::mt19937_64& g, uint64_t bytes) {
    if (!bytes) return 0;
    next += 64 * uniform(g, 0, 3);
    const uint64_t at = next;
    next += (bytes + 63) / 64 * 64;
    return at;
  }
};

LayerDesc random_shape(std::mt19937_64& g) {
  for (;;) {
    LayerDesc d;
    d.type = static_cast<LayerType>(uniform(g, 1, 5));
    d.in_channels = log_uniform(g, kMaxChannels);
    d.out_channels = d.type == LayerType::kConv3x3 || d.type == LayerType::kConv1x1 ? log_uniform(g, kMaxChannels)
                                                                                       : d.in_channels;
    d.in_h = log_uniform(g, kMaxSpatial);
    d.in_w = log_uniform(g, kMaxSpatial);
    d.kernel = d.type == LayerType::kConv1x1 || d.type == LayerType::kAdd ? 1 : 3;
    d.stride = d.type == LayerType::kAdd ? 1 : static_cast<int>(uniform(g, 1, 2));
    d.pad = d.kernel == 3 ? static_cast<int>(uniform(g, 0, 1)) : 0;
    if (d.type == LayerType::kMaxPool) {
      d.kernel = static_cast<int>(uniform(g, 1, 8));
      d.stride = static_cast<int>(uniform(g, 1, 8));
      d.pad = static_cast<int>(uniform(g, 0, d.kernel - 1));
    }
    d.act_lo = static_cast<int>(uniform(g, -128, 127));
    d.act_hi = static_cast<int>(uniform(g, d.act_lo, 127));
    if (d.in_h + 2 * d.pad < d.kernel || d.in_w + 2 * d.pad < d.kernel) continue;
    const uint64_t cap = uint64_t{1} << 26;
    if (activation_bytes(d.in_channels, d.in_h, d.in_w) > cap || weight_bytes(d) > cap ||
        activation_bytes(d.out_channels, out_h(d), out_w(d)) > cap)
      continue;  // 12 layers of 5 regions stay inside 4 GiB
    return d;
  }
}

void place(std::mt19937_64& g, LayerDesc& d, Bump& b) {
  d.weight_offset = b.take(g, weight_bytes(d));
  d.param_offset = b.take(g, param_bytes(d));
  d.input_offset = b.take(g, activation_bytes(d.in_channels, d.in_h, d.in_w));
  d.input_b_offset = d.type == LayerType::kAdd ? b.take(g, activation_bytes(d.in_channels, d.in_h, d.in_w)) : 0;
  d.output_offset = b.take(g, activation_bytes(d.out_channels, out_h(d), out_w(d)));
}

struct Stream {
  std::vector<LayerDesc> layers;
  uint64_t memory = 0;
  std::vector<uint32_t> words;
};

Stream random_stream(std::mt19937_64& g, int max_layers) {
  Stream s;
  Bump b;
  const int n = static_cast<int>(uniform(g, 1, max_layers));
  for (int i = 0; i < n; ++i) {
    s.layers.push_back(random_shape(g));
    place(g, s.layers.back(), b);
  }
  s.memory = std::max<uint64_t>(64, b.next + 64 * uniform(g, 0, 100));
  s.words = encode(s.layers, s.memory);
  return s;
}

// A small fixed stream: conv3x3 -> maxpool -> add, used by the corruption tests.
Stream small_stream() {
  Stream s;
  LayerDesc c;
  c.type = LayerType::kConv3x3;
  c.in_channels = 3, c.out_channels = 10, c.in_h = 9, c.in_w = 7, c.kernel = 3, c.stride = 2, c.pad = 1;
  c.act_lo = 0, c.act_hi = 127;
  LayerDesc p;
  p.type = LayerType::kMaxPool;
  p.in_channels = p.out_channels = 10, p.in_h = 5, p.in_w = 4, p.kernel = 3, p.stride = 2, p.pad = 1;
  LayerDesc a;
  a.type = LayerType::kAdd;
  a.in_channels = a.out_channels = 10, a.in_h = 3, a.in_w = 2, a.kernel = 1, a.stride = 1, a.pad = 0;
  a.act_lo = 0, a.act_hi = 90;
  Bump b;
  std::mt19937_64 g(1);
  for (LayerDesc* d : {&c, &p, &a}) place(g, *d, b);
  s.layers = {c, p, a};
  s.memory = b.next + 640;
  s.words = encode(s.layers, s.memory);
  return s;
}

// Expects decode to refuse `w` with an InvalidInput whose message contains `needle`.
void expect_refused(const std::vector<uint32_t>& w, const std::string& needle) {
  try {
    decode(w.data(), w.size());
    ADD_FAILURE() << "decoded a stream that should be refused (" << needle << ")";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what() << "\nexpected: " << needle;
  }
}

void expect_encode_refused(const std::vector<LayerDesc>& layers, uint64_t memory, const std::string& needle) {
  try {
    encode(layers, memory);
    ADD_FAILURE() << "encoded layers that should be refused (" << needle << ")";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what() << "\nexpected: " << needle;
  }
}

// Word index of register slot `slot` (0 = RESET ... 12 = END) of layer `layer`.
size_t at(size_t layer, size_t slot) { return kHeaderWords + kWordsPerLayer * layer + slot; }

// Patches the payload bits [lsb, lsb + bits) of one word and reseals the stream.
std::vector<uint32_t> patched(std::vector<uint32_t> w, size_t index, int lsb, int bits, uint32_t value) {
  const uint32_t mask = ((bits == 32 ? 0u : (1u << bits)) - 1) << lsb;
  w[index] = (w[index] & ~mask) | ((value << lsb) & mask);
  reseal(w);
  return w;
}

TEST(FpgaIsa, Crc32IsTheIeeeOne) {
  const uint32_t ascii_12345678[] = {0x34333231, 0x38373635};
  EXPECT_EQ(crc32_words(ascii_12345678, 2), 0x9AE0DAAFu);
  const uint32_t ascii_123456789abc[] = {0x34333231, 0x38373635, 0x63626139};
  EXPECT_EQ(crc32_words(ascii_123456789abc, 3), 0xBDB0C0E4u);
}

TEST(FpgaIsa, RoundTripRandomLayerLists) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 g(seed() + 1);
  for (int t = 0; t < 300; ++t) {
    const Stream s = random_stream(g, 12);
    ASSERT_EQ(s.words.size(), kHeaderWords + kWordsPerLayer * s.layers.size() + 1);
    const Program p = decode_program(s.words.data(), s.words.size());
    EXPECT_EQ(p.memory_bytes, s.memory);
    ASSERT_EQ(p.layers.size(), s.layers.size());
    for (size_t i = 0; i < s.layers.size(); ++i) EXPECT_TRUE(p.layers[i] == s.layers[i]) << "trial " << t << " layer " << i;
    EXPECT_EQ(encode(p.layers, p.memory_bytes), s.words);  // one spelling per program
  }
}

TEST(FpgaIsa, LimitsOfTheFields) {
  // The largest shapes the fields hold, and the networks they are meant for (resnet18 /
  // mobilenet_v2 at 224x224: 2048 padded channels at 7x7, 32+ channels at 112x112 or 224x224).
  LayerDesc d;
  d.type = LayerType::kConv1x1;
  d.in_channels = kMaxChannels, d.out_channels = 2048, d.in_h = d.in_w = 7, d.kernel = 1, d.stride = 1;
  LayerDesc e;
  e.type = LayerType::kDepthwise3x3;
  e.in_channels = e.out_channels = 32, e.in_h = e.in_w = kMaxSpatial, e.kernel = 3, e.stride = 2, e.pad = 1;
  Bump b;
  std::mt19937_64 g(2);
  place(g, d, b);
  place(g, e, b);
  const uint64_t memory = (b.next + 63) / 64 * 64;
  ASSERT_LE(memory, kMaxMemoryBytes);
  const auto w = encode({d, e}, memory);
  const auto back = decode(w.data(), w.size());
  EXPECT_TRUE(back[0] == d);
  EXPECT_TRUE(back[1] == e);
  // A region ending exactly at the top of a 4 GiB memory is inside it.
  LayerDesc top = d;
  top.weight_offset = 0;
  top.param_offset = weight_bytes(d);
  top.input_offset = (top.param_offset + param_bytes(d) + 63) / 64 * 64;
  top.output_offset = kMaxMemoryBytes - activation_bytes(top.out_channels, 7, 7);
  const auto wt = encode({top}, kMaxMemoryBytes);
  EXPECT_TRUE(decode(wt.data(), wt.size())[0] == top);
}

TEST(FpgaIsa, EveryFlippedBitIsRefused) {
  const Stream s = small_stream();
  for (size_t i = 0; i < s.words.size(); ++i)
    for (int bit = 0; bit < 32; ++bit) {
      std::vector<uint32_t> w = s.words;
      w[i] ^= 1u << bit;
      EXPECT_THROW(decode(w.data(), w.size()), InvalidInput) << "word " << i << " bit " << bit;
    }
}

TEST(FpgaIsa, BurstsInsideAWordAreRefused) {
  // CRC-32 detects every error burst of at most 32 bits, wherever the field checks do not.
  SCOPED_TRACE(seed_note());
  std::mt19937_64 g(seed() + 2);
  for (int t = 0; t < 2000; ++t) {
    Stream s = random_stream(g, 4);
    const size_t i = static_cast<size_t>(uniform(g, 0, static_cast<int64_t>(s.words.size()) - 1));
    uint32_t flip = 0;
    while (!flip) flip = static_cast<uint32_t>(g());
    s.words[i] ^= flip;
    EXPECT_THROW(decode(s.words.data(), s.words.size()), InvalidInput) << "word " << i << " xor " << flip;
  }
}

TEST(FpgaIsa, TruncationAndTrailingWordsAreRefused) {
  const Stream s = small_stream();
  for (size_t n = 0; n < s.words.size(); ++n) {
    EXPECT_THROW(decode(s.words.data(), n), InvalidInput) << "prefix of " << n << " words";
    // Also truncated from the front: a stream missing its first words.
    EXPECT_THROW(decode(s.words.data() + (s.words.size() - n), n), InvalidInput) << "suffix of " << n << " words";
  }
  std::vector<uint32_t> longer = s.words;
  longer.push_back(0);
  expect_refused(longer, "trailing words");
  expect_refused(std::vector<uint32_t>(s.words.begin(), s.words.end() - 1), "truncated");
  EXPECT_THROW(decode(nullptr, 20), InvalidInput);
}

TEST(FpgaIsa, BadHeadersAreRefused) {
  const Stream s = small_stream();
  expect_refused(patched(s.words, 0, 0, 32, 0x444E4642), "magic");
  expect_refused(patched(s.words, 1, 16, 16, 2), "ISA version 2 not supported");
  expect_refused(patched(s.words, 1, 16, 16, 0), "ISA version 0");
  expect_refused(patched(s.words, 1, 0, 16, 0), "layer count = 0");
  expect_refused(patched(s.words, 1, 0, 16, kMaxLayers + 1), "layer count = 4097");
  expect_refused(patched(s.words, 1, 0, 16, 2), "total word count");  // says 2 layers, holds 3
  expect_refused(patched(s.words, 3, 0, 32, static_cast<uint32_t>(s.words.size() + 13)), "total word count");
  expect_refused(patched(s.words, 2, 0, 32, 0), "device memory size 0");
  expect_refused(patched(s.words, 2, 0, 32, (1u << 26) + 1), "allowed a multiple of 64 in 64..2^32");
  expect_refused(patched(s.words, 2, 0, 32, static_cast<uint32_t>(s.memory / 64 - 20)), "outside the device memory");
}

TEST(FpgaIsa, BrokenLayerFramingIsRefused) {
  const Stream s = small_stream();
  auto swap = [&](size_t a, size_t b) {
    std::vector<uint32_t> w = s.words;
    std::swap(w[a], w[b]);
    reseal(w);
    return w;
  };
  expect_refused(swap(at(0, 0), at(0, 1)), "Control_REG PARAM, expected RESET");
  expect_refused(swap(at(1, 3), at(1, 4)), "register id 3 (REG1), expected 2 (REG0)");
  expect_refused(patched(s.words, at(0, 11), 0, 2, 0), "Control_REG IDLE, expected COMPUTE");
  expect_refused(patched(s.words, at(2, 6), 28, 4, 0xB), "register id 11");
  expect_refused(patched(s.words, at(0, 2), 0, 4, 0), "Switch_REG layer type 0");
  expect_refused(patched(s.words, at(0, 2), 0, 4, 6), "Switch_REG layer type 6");
  expect_refused(patched(s.words, at(0, 2), 4, 1, 1), "reserved bits");
  expect_refused(patched(s.words, at(0, 0), 27, 1, 1), "reserved bits");
  expect_refused(patched(s.words, at(0, 3), 24, 4, 1), "reserved bits");
  expect_refused(patched(s.words, at(0, 4), 22, 6, 5), "reserved bits");
  expect_refused(patched(s.words, at(0, 5), 25, 3, 4), "reserved bits");
  expect_refused(patched(s.words, at(1, 12), 16, 12, 5), "layer index 5, expected 1");
  // A wrong layer checksum under a correct trailer: only the END word can tell.
  std::vector<uint32_t> w = s.words;
  w[at(1, 12)] ^= 0x40;
  w.back() = crc32_words(w.data(), w.size() - 1);
  expect_refused(w, "layer checksum");
  std::vector<uint32_t> t = s.words;
  t.back() ^= 0x80000000u;
  expect_refused(t, "stream CRC-32");
}

TEST(FpgaIsa, OutOfRangeFieldsAreRefused) {
  const Stream s = small_stream();
  // REG2 of layer 0 (conv3x3): kernel-1 [2:0], stride-1 [5:3], pad [8:6], lo [16:9], hi [24:17].
  const size_t r2 = at(0, 5);
  expect_refused(patched(s.words, r2, 3, 3, 2), "stride = 3, conv3x3 allows 1 or 2");
  expect_refused(patched(s.words, r2, 6, 3, 2), "pad = 2, conv3x3 allows 0 or 1");
  expect_refused(patched(s.words, r2, 0, 3, 1), "kernel = 2, conv3x3 allows 3");
  expect_refused(patched(s.words, r2, 17, 8, static_cast<uint8_t>(-5)), "act_hi = -5, allowed 0..127");
  // Layer 0 as conv1x1 keeps pad 1: refused.
  expect_refused(patched(s.words, at(0, 2), 0, 4, 2), "kernel = 3, conv1x1 allows 1");
  // Layer 1 (maxpool 3x3): pad 3 >= kernel, nonzero weight offset, channels out != in.
  expect_refused(patched(s.words, at(1, 5), 6, 3, 3), "pad = 3, allowed 0..2");
  expect_refused(patched(s.words, at(1, 6), 0, 28, 1), "weight_offset = 0x40, must be 0 for maxpool");
  expect_refused(patched(s.words, at(1, 3), 12, 12, 11), "out_channels = 12 but maxpool needs");
  expect_refused(patched(s.words, at(0, 9), 0, 28, 3), "input_b_offset = 0xc0, must be 0 for conv3x3");
  // Layer 2 (add): stride must be 1.
  expect_refused(patched(s.words, at(2, 5), 3, 3, 1), "stride = 2, add allows 1");
  // conv3x3 with pad 0 on a 2-row input has no output.
  std::vector<uint32_t> w = patched(s.words, r2, 6, 3, 0);
  expect_refused(patched(w, at(0, 4), 0, 11, 1), "smaller than the kernel");
}

TEST(FpgaIsa, BadDmaPlacementIsRefused) {
  const Stream s = small_stream();
  const uint32_t top = static_cast<uint32_t>(s.memory / 64);
  expect_refused(patched(s.words, at(0, 10), 0, 28, top), "outside the device memory");       // output starts at the end
  expect_refused(patched(s.words, at(0, 10), 0, 28, top - 1), "outside the device memory");   // runs past the end
  expect_refused(patched(s.words, at(0, 6), 0, 28, 0x0FFFFFFF), "outside the device memory"); // weights far away
  const uint32_t in0 = static_cast<uint32_t>(s.layers[0].input_offset / 64);
  expect_refused(patched(s.words, at(0, 10), 0, 28, in0), "overlaps the layer's input");
  const uint32_t w0 = static_cast<uint32_t>(s.layers[0].weight_offset / 64);
  expect_refused(patched(s.words, at(0, 10), 0, 28, w0), "overlaps the layer's weights");
  expect_refused(patched(s.words, at(0, 7), 0, 28, w0), "overlaps parameter table");
  // Layer 2 (add) writing over layer 0's parameter table: a later inference would read garbage.
  const uint32_t p0 = static_cast<uint32_t>(s.layers[0].param_offset / 64);
  expect_refused(patched(s.words, at(2, 10), 0, 28, p0), "overlaps the parameter table of layer 0");
  const uint32_t b2 = static_cast<uint32_t>(s.layers[2].input_b_offset / 64);
  expect_refused(patched(s.words, at(2, 10), 0, 28, b2), "overlaps the layer's input B");
}

TEST(FpgaIsa, EncodeRefusesWhatDecodeWould) {
  const Stream s = small_stream();
  auto with = [&](size_t layer, const std::function<void(LayerDesc&)>& f) {
    std::vector<LayerDesc> l = s.layers;
    f(l[layer]);
    return l;
  };
  expect_encode_refused({}, s.memory, "0 layers, allowed 1..4096");
  expect_encode_refused(s.layers, s.memory + 1, "multiple of 64");
  expect_encode_refused(s.layers, kMaxMemoryBytes + 64, "allowed a multiple of 64 in 64..2^32");
  expect_encode_refused(with(0, [](LayerDesc& d) { d.input_offset += 1; }), s.memory, "not a multiple of 64");
  expect_encode_refused(with(0, [](LayerDesc& d) { d.type = static_cast<LayerType>(9); }), s.memory, "layer type 9");
  expect_encode_refused(with(0, [](LayerDesc& d) { d.in_channels = 0; }), s.memory, "in_channels = 0, allowed 1..4096");
  expect_encode_refused(with(0, [](LayerDesc& d) { d.out_channels = 4097; }), s.memory, "out_channels = 4097");
  expect_encode_refused(with(0, [](LayerDesc& d) { d.in_w = 2049; }), s.memory, "in_w = 2049, allowed 1..2048");
  expect_encode_refused(with(0, [](LayerDesc& d) { d.act_lo = -129; }), s.memory, "act_lo = -129");
  expect_encode_refused(with(1, [](LayerDesc& d) { d.kernel = 9; }), s.memory, "kernel = 9, allowed 1..8");
  expect_encode_refused(with(1, [](LayerDesc& d) { d.param_offset = 64; }), s.memory, "param_offset = 0x40");
  expect_encode_refused(with(2, [](LayerDesc& d) { d.output_offset = d.input_b_offset; }), s.memory, "input B");
  expect_encode_refused(with(2, [&](LayerDesc& d) { d.output_offset = s.layers[0].weight_offset; }), s.memory,
                        "overlaps the weights of layer 0");
}

TEST(FpgaIsa, RandomGarbageIsRefusedWithoutCrashing) {
  SCOPED_TRACE(seed_note());
  std::mt19937_64 g(seed() + 3);
  const Stream s = small_stream();
  for (int t = 0; t < 3000; ++t) {
    std::vector<uint32_t> w;
    if (t % 2) {  // a valid header, then noise of the right length
      w.assign(s.words.begin(), s.words.begin() + kHeaderWords);
      while (w.size() < s.words.size()) w.push_back(static_cast<uint32_t>(g()));
    } else {
      w.resize(static_cast<size_t>(uniform(g, 0, 60)));
      for (auto& x : w) x = static_cast<uint32_t>(g());
    }
    EXPECT_THROW(decode(w.data(), w.size()), InvalidInput);
    EXPECT_EQ(disassemble(w.data(), w.size()).size(), w.size());
  }
}

TEST(FpgaIsa, Disassembly) {
  const Stream s = small_stream();
  const auto lines = disassemble(s.words.data(), s.words.size());
  ASSERT_EQ(lines.size(), s.words.size());
  EXPECT_EQ(lines[0], "0000 444e4641 MAGIC");
  EXPECT_EQ(lines[1], "0001 00010003 VERSION 1 layers=3");
  EXPECT_NE(lines[at(0, 0)].find("CTRL RESET"), std::string::npos);
  EXPECT_NE(lines[at(0, 1)].find("CTRL PARAM"), std::string::npos);
  EXPECT_NE(lines[at(0, 2)].find("SWITCH conv3x3"), std::string::npos);
  EXPECT_NE(lines[at(0, 3)].find("REG0 in_channels=3 out_channels=10"), std::string::npos);
  EXPECT_NE(lines[at(0, 4)].find("REG1 in_h=9 in_w=7"), std::string::npos);
  EXPECT_NE(lines[at(0, 5)].find("REG2 kernel=3 stride=2 pad=1 act=[0,127]"), std::string::npos);
  EXPECT_NE(lines[at(0, 11)].find("CTRL COMPUTE"), std::string::npos);
  EXPECT_NE(lines[at(2, 12)].find("END layer=2"), std::string::npos);
  EXPECT_EQ(lines.back().substr(14), "CRC32");
  std::vector<uint32_t> bad = s.words;
  bad[at(1, 2)] = 0xF0000000;
  const auto bad_lines = disassemble(bad.data(), bad.size());
  EXPECT_NE(bad_lines[at(1, 2)].find("<unknown register id 15>"), std::string::npos);
  EXPECT_NE(bad_lines.back().find("<mismatch>"), std::string::npos);
  EXPECT_TRUE(disassemble(nullptr, 0).empty());

  const auto f = fields(s.layers[0]);
  ASSERT_EQ(f.size(), 17u);
  EXPECT_EQ(f[0], (std::pair<std::string, int64_t>{"type", 1}));
  EXPECT_EQ(f[5], (std::pair<std::string, int64_t>{"out_h", 5}));
  EXPECT_EQ(f[6], (std::pair<std::string, int64_t>{"out_w", 4}));
  EXPECT_EQ(f[16].first, "output_offset");
  EXPECT_EQ(f[16].second, static_cast<int64_t>(s.layers[0].output_offset));
}

TEST(FpgaIsa, CostModel) {
  LayerDesc c;  // resnet18 layer1 conv: 64 -> 64, 56x56, 3x3 s1 p1
  c.type = LayerType::kConv3x3;
  c.in_channels = c.out_channels = 64, c.in_h = c.in_w = 56, c.kernel = 3, c.stride = 1, c.pad = 1;
  const LayerCost k = estimate(c);
  EXPECT_EQ(k.macs, 64ull * 64 * 9 * 56 * 56);
  EXPECT_EQ(k.compute_cycles, 56ull * 56 * 8 * 8);
  EXPECT_EQ(k.ddr_read_bytes, 64ull * 64 * 9 + 64 * 16 + 64 * 56 * 56);
  EXPECT_EQ(k.ddr_write_bytes, 64ull * 56 * 56);
  EXPECT_EQ(k.memory_cycles, (k.ddr_read_bytes + k.ddr_write_bytes + 63) / 64);  // 12.8 GB/s at 200 MHz
  EXPECT_EQ(k.cycles, k.compute_cycles + 2000);
  EXPECT_DOUBLE_EQ(k.seconds, k.cycles / 200e6);

  LayerDesc p = c;  // 40 input channels pad to one and a quarter 32-steps: two steps issued
  p.type = LayerType::kConv1x1, p.in_channels = 40, p.out_channels = 20, p.kernel = 1, p.pad = 0, p.stride = 2;
  const LayerCost kp = estimate(p);
  EXPECT_EQ(kp.macs, 28ull * 28 * 3 * 2 * 256);
  EXPECT_EQ(kp.compute_cycles, 28ull * 28 * 3 * 2);
  EXPECT_EQ(kp.ddr_read_bytes, 24ull * 64 + 24 * 16 + 40 * 56 * 56);
  EXPECT_EQ(kp.cycles, std::max(kp.compute_cycles, kp.memory_cycles) + 2000);

  LayerDesc m;  // resnet18 stem pool: 3x3 s2 p1 on 64 x 112 x 112, memory bound
  m.type = LayerType::kMaxPool;
  m.in_channels = m.out_channels = 64, m.in_h = m.in_w = 112, m.kernel = 3, m.stride = 2, m.pad = 1;
  CostModel slow;
  slow.ddr_bytes_per_s = 1.6e9;  // 8 bytes per cycle
  slow.layer_overhead_cycles = 0;
  const LayerCost km = estimate(m, slow);
  EXPECT_EQ(km.macs, 0u);
  EXPECT_EQ(km.compute_cycles, 56ull * 56 * 64 * 9 / 8);
  EXPECT_EQ(km.memory_cycles, (64ull * 112 * 112 + 64 * 56 * 56) / 8);
  EXPECT_EQ(km.cycles, km.compute_cycles);

  LayerDesc a;
  a.type = LayerType::kAdd;
  a.in_channels = a.out_channels = 3, a.in_h = 5, a.in_w = 5, a.kernel = 1, a.stride = 1;
  const LayerCost ka = estimate(a);
  EXPECT_EQ(ka.compute_cycles, 25u);
  EXPECT_EQ(ka.ddr_read_bytes, 2u * 8 * 25 + 8 * 16);

  CostModel broken;
  broken.clock_hz = 0;
  EXPECT_THROW(estimate(c, broken), InvalidInput);
  c.stride = 3;
  EXPECT_THROW(estimate(c), InvalidInput);
}

}  // namespace
}  // namespace dnnfusion::fpga
