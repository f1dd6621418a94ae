// Random ISA v1 layers and device-memory images for the fpga datapath tests: layer shapes of every
// type (odd sizes, channels not multiples of 8, stride 2, pool windows up to 8), their logical data
// (NCHW inputs, KCRS weights, biases near the int32 limits, requantizations sweeping shifts 0..31,
// ReLU / ReLU6 / none / arbitrary clamps, inputs all -128 or all 127 at times), the naive
// reference's output, and an image builder that places regions 64-byte aligned with random gaps
// and random bytes everywhere not written on purpose (garbage in padded input lanes included), so
// nothing can depend on zeroed memory. The ideas are test_fpga_simulate.cc's.
//
// Precondition: callers pass one std::mt19937_64 seeded from fpga_test_seed() (replayable with
// DNNFUSION_TEST_SEED). Postcondition: every layer these build satisfies check_layer for the image
// it was placed in, and distinct placed layers never overlap one another's regions.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "quant/requant.h"
#include "target/fpga/datapath/reference_int8.h"
#include "target/fpga/isa/isa.h"
#include "target/fpga/isa/weight_layout.h"

namespace dnnfusion::fpga::test_util {

using quant::Requant;

inline uint64_t fpga_test_seed() {
  static const uint64_t s = [] {
    const char* e = std::getenv("DNNFUSION_TEST_SEED");
    const uint64_t v = e && *e ? std::strtoull(e, nullptr, 10) : 20240531ull;
    std::printf("fpga tests: seed %llu (replay with DNNFUSION_TEST_SEED=%llu)\n", static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}
inline std::string fpga_seed_note() { return "replay with DNNFUSION_TEST_SEED=" + std::to_string(fpga_test_seed()); }

inline int64_t uniform(std::mt19937_64& g, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(g);
}
inline bool chance(std::mt19937_64& g, double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }

// Uniform int8, or (extremes) only -128 and 127, or one constant (all -128 / all 127).
inline std::vector<int8_t> random_int8(std::mt19937_64& g, size_t n, bool extremes) {
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(extremes ? (chance(g, 0.5) ? -128 : 127) : uniform(g, -128, 127));
  return v;
}
inline std::vector<int8_t> random_input(std::mt19937_64& g, size_t n) {
  const int64_t kind = uniform(g, 0, 19);
  if (kind == 0) return std::vector<int8_t>(n, -128);
  if (kind == 1) return std::vector<int8_t>(n, 127);
  return random_int8(g, n, kind < 4);
}

// Shifts drawn, to check that all 32 were exercised.
inline std::set<int>& shifts_seen() {
  static std::set<int> s;
  return s;
}

// Mostly a scale that keeps outputs in range for accumulators of magnitude `typical` (at full and
// at forced precision), sometimes arbitrary or extreme multipliers.
inline Requant random_requant(std::mt19937_64& g, double typical, int forced_shift) {
  const double scale = 60.0 / typical * std::exp2(std::uniform_real_distribution<double>(-2, 2)(g));
  Requant q;
  switch (uniform(g, 0, 9)) {
    case 0: case 1: case 2: case 3: case 4:
      q = quant::choose_multiplier(scale);
      break;
    case 5: case 6: case 7:
      q.shift = forced_shift;
      q.multiplier = static_cast<int32_t>(std::clamp(std::nearbyint(std::ldexp(scale, q.shift)), 0.0, 2147483647.0));
      break;
    case 8:
      q = {static_cast<int32_t>(uniform(g, 0, 2147483647)), static_cast<int32_t>(uniform(g, 0, 31))};
      break;
    default:
      q = {chance(g, 0.5) ? 0 : 2147483647, static_cast<int32_t>(uniform(g, 0, 31))};
  }
  shifts_seen().insert(q.shift);
  return q;
}

// Biases near the int32 limits now and then, so bias + products wraps mod 2^32.
inline std::vector<int32_t> random_bias(std::mt19937_64& g, size_t n, double typical) {
  std::vector<int32_t> b(n);
  const int32_t big = std::numeric_limits<int32_t>::max();
  for (auto& x : b) {
    if (chance(g, 0.05))
      x = static_cast<int32_t>(chance(g, 0.5) ? uniform(g, big - (1 << 22), big) : uniform(g, -big - 1, -big - 1 + (1 << 22)));
    else
      x = static_cast<int32_t>(uniform(g, -static_cast<int64_t>(2 * typical), static_cast<int64_t>(2 * typical)));
  }
  return b;
}

inline void random_activation(std::mt19937_64& g, LayerDesc& d) {
  switch (uniform(g, 0, 3)) {
    case 0: d.act_lo = -128, d.act_hi = 127; break;  // none
    case 1: d.act_lo = 0, d.act_hi = 127; break;     // ReLU
    case 2: d.act_lo = 0, d.act_hi = quant::relu6_bound(std::uniform_real_distribution<double>(0.01, 0.3)(g)); break;
    default:
      d.act_lo = static_cast<int32_t>(uniform(g, -128, 127));
      d.act_hi = static_cast<int32_t>(uniform(g, d.act_lo, 127));
  }
}

// One layer's logical data (NCHW, KCRS) and its descriptor.
struct Case {
  LayerDesc d;
  std::vector<int8_t> x, xb, w;
  std::vector<int32_t> bias;
  std::vector<Requant> q, qb;
  bool same_input = false;  // an add of a tensor to itself (input B aliases input A)
};

inline Case make_case(std::mt19937_64& g, const LayerDesc& d, int forced_shift) {
  Case c;
  c.d = d;
  const LayerType type = d.type;
  c.x = random_input(g, static_cast<size_t>(d.in_channels) * d.in_h * d.in_w);
  const int taps = d.kernel * d.kernel;
  const double typical = type == LayerType::kAdd ? 74.0
                         : type == LayerType::kDepthwise3x3 ? 5500.0 * 3
                                                            : 5500.0 * std::sqrt(double(d.in_channels) * taps);
  if (type == LayerType::kConv3x3 || type == LayerType::kConv1x1)
    c.w = random_int8(g, static_cast<size_t>(d.out_channels) * d.in_channels * taps, chance(g, 0.05));
  if (type == LayerType::kDepthwise3x3) c.w = random_int8(g, static_cast<size_t>(d.in_channels) * 9, chance(g, 0.05));
  if (type != LayerType::kMaxPool && type != LayerType::kAdd) c.bias = random_bias(g, d.out_channels, typical);
  for (int k = 0; k < d.out_channels && type != LayerType::kMaxPool; ++k) {
    c.q.push_back(random_requant(g, typical, forced_shift));
    if (type == LayerType::kAdd) c.qb.push_back(random_requant(g, typical, (forced_shift + 7) % 32));
  }
  if (type == LayerType::kAdd) {
    c.same_input = chance(g, 0.1);
    c.xb = c.same_input ? c.x : random_input(g, c.x.size());
  }
  return c;
}

inline LayerDesc shape(LayerType type, int c, int k, int h, int w, int kernel, int stride, int pad) {
  LayerDesc d;
  d.type = type;
  d.in_channels = c, d.out_channels = k, d.in_h = h, d.in_w = w, d.kernel = kernel, d.stride = stride, d.pad = pad;
  return d;
}

inline LayerDesc random_shape(std::mt19937_64& g, LayerType type) {
  auto n = [&](int lo, int hi) { return static_cast<int>(uniform(g, lo, hi)); };
  switch (type) {
    case LayerType::kConv3x3:
    case LayerType::kDepthwise3x3: {
      const int c = n(1, type == LayerType::kConv3x3 ? 40 : 48);
      const int k = type == LayerType::kConv3x3 ? n(1, 40) : c;
      const int stride = n(1, 2), pad = n(0, 1);
      return shape(type, c, k, n(3 - 2 * pad, 13), n(3 - 2 * pad, 21), 3, stride, pad);
    }
    case LayerType::kConv1x1:  // up to 80 input channels: one, two and three 32-channel steps
      return shape(type, n(1, 80), n(1, 40), n(1, 13), n(1, 21), 1, n(1, 2), 0);
    case LayerType::kMaxPool: {
      const int c = n(1, 40);
      const int kernel = chance(g, 0.1) ? n(1, 8) : n(1, 4);
      const int stride = chance(g, 0.1) ? n(1, 8) : n(1, 3);
      const int pad = n(0, kernel - 1), lo = std::max(1, kernel - 2 * pad);
      return shape(type, c, c, n(lo, 16), n(lo, 20), kernel, stride, pad);
    }
    case LayerType::kAdd: {
      const int c = n(1, 48);
      return shape(type, c, c, n(1, 14), n(1, 20), 1, 1, 0);
    }
  }
  return {};
}

inline Case random_case(std::mt19937_64& g, LayerType type, int index) {
  LayerDesc d = random_shape(g, type);
  random_activation(g, d);
  return make_case(g, d, index % 32);
}

inline std::vector<int8_t> reference(const Case& c) {
  const LayerDesc& d = c.d;
  const ref::Shape s{d.in_channels, d.in_h, d.in_w};
  switch (d.type) {
    case LayerType::kConv3x3:
      return ref::conv2d(c.x, s, c.w, d.out_channels, 3, d.stride, d.pad, c.bias, c.q, d.act_lo, d.act_hi);
    case LayerType::kConv1x1:
      return ref::conv2d(c.x, s, c.w, d.out_channels, 1, d.stride, 0, c.bias, c.q, d.act_lo, d.act_hi);
    case LayerType::kDepthwise3x3:
      return ref::depthwise3x3(c.x, s, c.w, d.stride, d.pad, c.bias, c.q, d.act_lo, d.act_hi);
    case LayerType::kMaxPool:
      return ref::maxpool(c.x, s, d.kernel, d.stride, d.pad, d.act_lo, d.act_hi);
    case LayerType::kAdd:
      return ref::add(c.x, c.xb, s, c.q, c.qb, d.act_lo, d.act_hi);
  }
  return {};
}

// A device memory image under construction: regions one after another, 64-byte aligned, with
// random gaps; every byte not written on purpose is random.
struct Image {
  std::vector<uint8_t> bytes;
  std::mt19937_64* g;
  uint64_t reserve(uint64_t n) {
    const uint64_t at = (bytes.size() + 63) / 64 * 64 + 64 * uniform(*g, 0, 2);
    const uint64_t end = (at + n + 63) / 64 * 64;
    while (bytes.size() < end) bytes.push_back(static_cast<uint8_t>((*g)()));
    return at;
  }
  uint64_t put(const std::vector<uint8_t>& data) {
    const uint64_t at = reserve(data.size());
    std::copy(data.begin(), data.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at));
    return at;
  }
  // An activation whose padded lanes hold garbage: the datapath must ignore them.
  uint64_t put_activation(const std::vector<int8_t>& x, int c, int h, int w) {
    std::vector<uint8_t> packed = pack_activation(x, c, h, w);
    for (int ch = c; ch < pad8(c); ++ch)
      for (int y = 0; y < h; ++y)
        for (int xx = 0; xx < w; ++xx) packed[blocked_index(ch, y, xx, h, w)] = static_cast<uint8_t>((*g)());
    return put(packed);
  }
  std::vector<uint8_t> finish() {
    reserve(uniform(*g, 0, 200));
    return bytes;
  }
};

// Places a case's data in the image and fills in its descriptor's offsets.
inline void place(Case& c, Image& img) {
  LayerDesc& d = c.d;
  if (!c.w.empty()) d.weight_offset = img.put(pack_weights(d.type, d.out_channels, d.in_channels, c.w));
  if (d.type == LayerType::kAdd) d.param_offset = img.put(pack_add_params(c.q, c.qb));
  else if (d.type != LayerType::kMaxPool) d.param_offset = img.put(pack_params(c.bias, c.q));
  d.input_offset = img.put_activation(c.x, d.in_channels, d.in_h, d.in_w);
  if (d.type == LayerType::kAdd)
    d.input_b_offset = c.same_input ? d.input_offset : img.put_activation(c.xb, d.in_channels, d.in_h, d.in_w);
  d.output_offset = img.reserve(activation_bytes(d.out_channels, out_h(d), out_w(d)));
}

inline uint64_t output_bytes(const LayerDesc& d) { return activation_bytes(d.out_channels, out_h(d), out_w(d)); }

// Layer d's output in `mem`, NCHW; a failure for every padded output lane that is not 0.
inline std::vector<int8_t> read_output(const std::vector<uint8_t>& mem, const LayerDesc& d) {
  const int k = d.out_channels, h = out_h(d), w = out_w(d);
  for (int ch = k; ch < pad8(k); ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        EXPECT_EQ(mem[d.output_offset + blocked_index(ch, y, x, h, w)], 0) << "padded output lane " << ch;
  return unpack_activation(mem.data() + d.output_offset, output_bytes(d), k, h, w);
}

inline std::string describe(const LayerDesc& d) {
  std::string s = layer_type_name(d.type);
  for (const auto& [name, v] : fields(d)) s += " " + name + "=" + std::to_string(v);
  return s;
}

// A five-layer program as one stream: conv3x3 (stride 2, ReLU) -> dw3x3 -> conv1x1 ->
// add(conv3x3 out, conv1x1 out) -> maxpool 3x3 s2 p1. Each layer reads what the earlier ones wrote;
// the add's output reuses the depthwise output's buffer (dead after the 1x1 conv). Every Case's x
// (and the add's xb) holds the logical result of its producer, so reference(c) is each layer's
// expected output.
struct Chain {
  Case a, b, p, s, m;
  std::vector<uint8_t> image;
  std::vector<LayerDesc> layers;
};

inline Chain random_chain(std::mt19937_64& g, int trial) {
  const int c0 = static_cast<int>(uniform(g, 1, 20)), k = static_cast<int>(uniform(g, 1, 24));
  const int h = static_cast<int>(uniform(g, 3, 17)), w = static_cast<int>(uniform(g, 3, 17));
  LayerDesc da = shape(LayerType::kConv3x3, c0, k, h, w, 3, 2, 1);
  da.act_lo = 0, da.act_hi = 127;
  Chain ch;
  Case& a = ch.a;
  a = make_case(g, da, trial % 32);
  const int h1 = out_h(a.d), w1 = out_w(a.d);
  Case& b = ch.b = make_case(g, shape(LayerType::kDepthwise3x3, k, k, h1, w1, 3, 1, 1), trial % 32);
  Case& p = ch.p = make_case(g, shape(LayerType::kConv1x1, k, k, h1, w1, 1, 1, 0), trial % 32);
  Case& s = ch.s = make_case(g, shape(LayerType::kAdd, k, k, h1, w1, 1, 1, 0), trial % 32);
  Case& m = ch.m = make_case(g, shape(LayerType::kMaxPool, k, k, h1, w1, 3, 2, 1), trial % 32);
  b.x = reference(a);
  p.x = reference(b);
  s.x = reference(a), s.xb = reference(p);
  m.x = reference(s);

  Image img{{}, &g};
  place(a, img);
  b.d.weight_offset = img.put(pack_weights(LayerType::kDepthwise3x3, k, k, b.w));
  b.d.param_offset = img.put(pack_params(b.bias, b.q));
  p.d.weight_offset = img.put(pack_weights(LayerType::kConv1x1, k, k, p.w));
  p.d.param_offset = img.put(pack_params(p.bias, p.q));
  s.d.param_offset = img.put(pack_add_params(s.q, s.qb));
  b.d.input_offset = a.d.output_offset;
  b.d.output_offset = img.reserve(activation_bytes(k, h1, w1));
  p.d.input_offset = b.d.output_offset;
  p.d.output_offset = img.reserve(activation_bytes(k, h1, w1));
  s.d.input_offset = a.d.output_offset, s.d.input_b_offset = p.d.output_offset;
  s.d.output_offset = b.d.output_offset;
  m.d.input_offset = s.d.output_offset;
  m.d.output_offset = img.reserve(output_bytes(m.d));
  ch.image = img.finish();
  ch.layers = {a.d, b.d, p.d, s.d, m.d};
  return ch;
}

}  // namespace dnnfusion::fpga::test_util
