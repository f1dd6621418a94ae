// Packing and unpacking of the ISA v1 memory images. Each layout is one index function (the byte a
// weight lands on), used by both directions so they cannot disagree.
#include "target/fpga/isa/weight_layout.h"

#include <string>

#include "common/error.h"

namespace dnnfusion::fpga {
namespace {

[[noreturn]] void bad(const std::string& what) { throw InvalidInput("fpga weight layout: " + what); }

void check_channels(const char* name, int v) {
  if (v < 1 || v > kMaxChannels) bad(detail::str_cat(name, " = ", v, ", allowed 1..", kMaxChannels));
}

void check_count(const char* name, size_t n) {
  if (n < 1 || n > static_cast<size_t>(kMaxChannels)) bad(detail::str_cat(name, " = ", n, ", allowed 1..", kMaxChannels));
}

void check_size(const char* what, size_t got, size_t want) {
  if (got != want) bad(detail::str_cat(what, " has ", got, " elements, expected ", want));
}

void check_requant(const quant::Requant& q, size_t i) {
  if (q.multiplier < 0 || q.shift < 0 || q.shift > 31)
    bad(detail::str_cat("requantization of channel ", i, " is (M=", q.multiplier, ", shift=", q.shift,
                        "), allowed M in [0, 2^31) and shift 0..31"));
}

size_t kernel_taps(LayerType type) {
  switch (type) {
    case LayerType::kConv3x3:
    case LayerType::kDepthwise3x3: return 9;
    case LayerType::kConv1x1: return 1;
    default: bad(detail::str_cat("layer type ", layer_type_name(type), " has no weights"));
  }
}

// Byte offset of weight (ko, ci, tap) in the packed image (ISA.md "Weights").
size_t packed_index(LayerType type, int c, int ko, int ci, int tap) {
  switch (type) {
    case LayerType::kConv3x3: {
      const size_t cb = pad8(c) / 8;
      return ((static_cast<size_t>(ko / 8) * cb + ci / 8) * 9 + tap) * 64 + (ko % 8) * 8 + ci % 8;
    }
    case LayerType::kConv1x1: {
      const size_t cs = pad32(c) / 32;
      return ((static_cast<size_t>(ko / 8) * cs + ci / 32) * 8 + ko % 8) * 32 + ci % 32;
    }
    default:  // depthwise: ko is the channel, ci is 0
      return (static_cast<size_t>(ko / 8) * 9 + tap) * 8 + ko % 8;
  }
}

LayerDesc shape_of(LayerType type, int k, int c) {
  LayerDesc d;
  d.type = type;
  d.in_channels = c;
  d.out_channels = k;
  return d;
}

// Calls f(packed byte index, KCRS index) for every real weight of the layer.
template <typename F>
void for_each_weight(LayerType type, int k, int c, F f) {
  const size_t taps = kernel_taps(type);
  if (type == LayerType::kDepthwise3x3) {
    if (k != c) bad(detail::str_cat("depthwise weights need K == C, got K=", k, " C=", c));
    for (int ch = 0; ch < c; ++ch)
      for (size_t t = 0; t < taps; ++t) f(packed_index(type, c, ch, 0, static_cast<int>(t)), ch * taps + t);
    return;
  }
  for (int ko = 0; ko < k; ++ko)
    for (int ci = 0; ci < c; ++ci)
      for (size_t t = 0; t < taps; ++t)
        f(packed_index(type, c, ko, ci, static_cast<int>(t)), (static_cast<size_t>(ko) * c + ci) * taps + t);
}

size_t weight_count(LayerType type, int k, int c) {
  return type == LayerType::kDepthwise3x3 ? static_cast<size_t>(c) * 9 : static_cast<size_t>(k) * c * kernel_taps(type);
}

}  // namespace

std::vector<uint8_t> pack_weights(LayerType type, int k, int c, const std::vector<int8_t>& kcrs) {
  check_channels("K", k);
  check_channels("C", c);
  check_size("the KCRS weight vector", kcrs.size(), weight_count(type, k, c));
  std::vector<uint8_t> out(weight_bytes(shape_of(type, k, c)), 0);
  for_each_weight(type, k, c, [&](size_t p, size_t i) { out[p] = static_cast<uint8_t>(kcrs[i]); });
  return out;
}

std::vector<int8_t> unpack_weights(LayerType type, int k, int c, const std::vector<uint8_t>& packed) {
  check_channels("K", k);
  check_channels("C", c);
  check_size("the packed weight image", packed.size(), weight_bytes(shape_of(type, k, c)));
  std::vector<int8_t> out(weight_count(type, k, c));
  for_each_weight(type, k, c, [&](size_t p, size_t i) { out[i] = static_cast<int8_t>(packed[p]); });
  return out;
}

std::vector<uint8_t> pack_params(const std::vector<int32_t>& bias, const std::vector<quant::Requant>& q) {
  check_count("K (bias length)", bias.size());
  check_size("the requantization vector", q.size(), bias.size());
  std::vector<uint8_t> out(static_cast<size_t>(pad8(static_cast<int64_t>(bias.size()))) * kParamEntryBytes, 0);
  for (size_t i = 0; i < bias.size(); ++i) {
    check_requant(q[i], i);
    uint8_t* e = &out[i * kParamEntryBytes];
    put_le32(e, bias[i]);
    put_le32(e + 4, q[i].multiplier);
    put_le32(e + 8, q[i].shift);
  }
  return out;
}

void unpack_params(const std::vector<uint8_t>& table, int k, std::vector<int32_t>* bias,
                   std::vector<quant::Requant>* q) {
  check_channels("K", k);
  check_size("the parameter table", table.size(), static_cast<size_t>(pad8(k)) * kParamEntryBytes);
  bias->assign(k, 0);
  q->assign(k, {});
  for (int i = 0; i < k; ++i) {
    const uint8_t* e = &table[static_cast<size_t>(i) * kParamEntryBytes];
    (*bias)[i] = get_le32(e);
    (*q)[i] = {get_le32(e + 4), get_le32(e + 8)};
  }
}

std::vector<uint8_t> pack_add_params(const std::vector<quant::Requant>& qa, const std::vector<quant::Requant>& qb) {
  check_count("C (requantization length)", qa.size());
  check_size("the input-B requantization vector", qb.size(), qa.size());
  std::vector<uint8_t> out(static_cast<size_t>(pad8(static_cast<int64_t>(qa.size()))) * kParamEntryBytes, 0);
  for (size_t i = 0; i < qa.size(); ++i) {
    check_requant(qa[i], i);
    check_requant(qb[i], i);
    uint8_t* e = &out[i * kParamEntryBytes];
    put_le32(e, qa[i].multiplier);
    put_le32(e + 4, qa[i].shift);
    put_le32(e + 8, qb[i].multiplier);
    put_le32(e + 12, qb[i].shift);
  }
  return out;
}

void unpack_add_params(const std::vector<uint8_t>& table, int c, std::vector<quant::Requant>* qa,
                       std::vector<quant::Requant>* qb) {
  check_channels("C", c);
  check_size("the parameter table", table.size(), static_cast<size_t>(pad8(c)) * kParamEntryBytes);
  qa->assign(c, {});
  qb->assign(c, {});
  for (int i = 0; i < c; ++i) {
    const uint8_t* e = &table[static_cast<size_t>(i) * kParamEntryBytes];
    (*qa)[i] = {get_le32(e), get_le32(e + 4)};
    (*qb)[i] = {get_le32(e + 8), get_le32(e + 12)};
  }
}

std::vector<uint8_t> pack_activation(const std::vector<int8_t>& chw, int c, int h, int w) {
  check_channels("C", c);
  if (h < 1 || w < 1 || h > kMaxSpatial || w > kMaxSpatial)
    bad(detail::str_cat("spatial size ", h, "x", w, ", allowed 1..", kMaxSpatial, " each"));
  check_size("the NCHW activation", chw.size(), static_cast<size_t>(c) * h * w);
  std::vector<uint8_t> out(activation_bytes(c, h, w), 0);
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        out[blocked_index(ch, y, x, h, w)] = static_cast<uint8_t>(chw[(static_cast<size_t>(ch) * h + y) * w + x]);
  return out;
}

std::vector<int8_t> unpack_activation(const uint8_t* blocked, size_t bytes, int c, int h, int w) {
  check_channels("C", c);
  if (h < 1 || w < 1 || h > kMaxSpatial || w > kMaxSpatial)
    bad(detail::str_cat("spatial size ", h, "x", w, ", allowed 1..", kMaxSpatial, " each"));
  check_size("the blocked activation", bytes, activation_bytes(c, h, w));
  if (!blocked) bad("null blocked activation pointer");
  std::vector<int8_t> out(static_cast<size_t>(c) * h * w);
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        out[(static_cast<size_t>(ch) * h + y) * w + x] = static_cast<int8_t>(blocked[blocked_index(ch, y, x, h, w)]);
  return out;
}

}  // namespace dnnfusion::fpga
