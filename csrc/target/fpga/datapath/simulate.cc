// The datapath model. Loop order is the hardware's (ISA.md "Datapath order"): output-channel block,
// then output pixel, then input-channel step, then tap. Accumulators are uint32 so that the
// wrap-around the ISA defines is what C++ does too; lanes beyond the real channel count are
// computed like the others and masked to 0 on write, as the hardware does.
#include "target/fpga/datapath/simulate.h"

#include <algorithm>
#include <array>
#include <limits>

#include "common/error.h"
#include "quant/requant.h"
#include "target/fpga/isa/weight_layout.h"

namespace dnnfusion::fpga {
namespace {

using Acc8 = std::array<uint32_t, 8>;

// A channel-blocked activation tensor in device memory.
struct Tensor {
  uint8_t* base;
  int c, h, w;
  int blocks() const { return static_cast<int>(pad8(c) / 8); }
  // The 8 lanes of channel block cb at (y, x); null when (y, x) lies in the zero padding.
  const int8_t* pixel(int cb, int y, int x) const {
    if (y < 0 || y >= h || x < 0 || x >= w) return nullptr;
    return reinterpret_cast<const int8_t*>(base + ((static_cast<size_t>(cb) * h + y) * w + x) * 8);
  }
  uint8_t* out_pixel(int cb, int y, int x) const { return base + ((static_cast<size_t>(cb) * h + y) * w + x) * 8; }
};

// One parameter-table entry as the hardware reads it: the multiplier's sign bit and the shift's
// upper bits are not wired (a packer never sets them; weight_layout refuses such values).
struct Entry {
  int32_t bias = 0;
  quant::Requant q, q_b;
};

Entry conv_entry(const uint8_t* table, int k) {
  const uint8_t* e = table + static_cast<size_t>(k) * kParamEntryBytes;
  Entry r;
  r.bias = get_le32(e);
  r.q = {get_le32(e + 4) & 0x7FFFFFFF, get_le32(e + 8) & 31};
  return r;
}

Entry add_entry(const uint8_t* table, int c) {
  const uint8_t* e = table + static_cast<size_t>(c) * kParamEntryBytes;
  Entry r;
  r.q = {get_le32(e) & 0x7FFFFFFF, get_le32(e + 4) & 31};
  r.q_b = {get_le32(e + 8) & 0x7FFFFFFF, get_le32(e + 12) & 31};
  return r;
}

std::array<Entry, 8> conv_entries(const uint8_t* table, int block) {
  std::array<Entry, 8> e;
  for (int i = 0; i < 8; ++i) e[i] = conv_entry(table, block * 8 + i);
  return e;
}

Acc8 bias_acc(const std::array<Entry, 8>& e) {
  Acc8 a;
  for (int i = 0; i < 8; ++i) a[i] = static_cast<uint32_t>(e[i].bias);
  return a;
}

uint32_t mul(int8_t a, int8_t b) { return static_cast<uint32_t>(int32_t{a} * int32_t{b}); }

// Requantizes and writes the 8 lanes of one output pixel; lanes at or past `real` become 0.
void write_lanes(uint8_t* out, const Acc8& acc, const std::array<Entry, 8>& e, int first, int real, int lo, int hi) {
  for (int i = 0; i < 8; ++i) {
    const int32_t v = first + i < real ? quant::requantize(static_cast<int32_t>(acc[i]), e[i].q, lo, hi) : 0;
    out[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
  }
}

struct Layer {
  const LayerDesc& d;
  uint8_t* mem;
  Tensor in() const { return {mem + d.input_offset, d.in_channels, d.in_h, d.in_w}; }
  Tensor in_b() const { return {mem + d.input_b_offset, d.in_channels, d.in_h, d.in_w}; }
  Tensor out() const { return {mem + d.output_offset, d.out_channels, out_h(d), out_w(d)}; }
  const int8_t* weights() const { return reinterpret_cast<const int8_t*>(mem + d.weight_offset); }
  const uint8_t* table() const { return mem + d.param_offset; }
};

// 3x3: per tap, one 64-byte line = 8 output x 8 input channels, [ko][ci].
void conv3x3(const Layer& L) {
  const Tensor in = L.in(), out = L.out();
  const int cbs = in.blocks();
  for (int kb = 0; kb < out.blocks(); ++kb) {
    const auto e = conv_entries(L.table(), kb);
    for (int oy = 0; oy < out.h; ++oy)
      for (int ox = 0; ox < out.w; ++ox) {
        Acc8 acc = bias_acc(e);
        for (int cb = 0; cb < cbs; ++cb)
          for (int tap = 0; tap < 9; ++tap) {
            const int8_t* x = in.pixel(cb, oy * L.d.stride - L.d.pad + tap / 3, ox * L.d.stride - L.d.pad + tap % 3);
            if (!x) continue;
            const int8_t* line = L.weights() + ((static_cast<size_t>(kb) * cbs + cb) * 9 + tap) * 64;
            for (int ko = 0; ko < 8; ++ko)
              for (int ci = 0; ci < 8; ++ci) acc[ko] += mul(line[ko * 8 + ci], x[ci]);
          }
        write_lanes(out.out_pixel(kb, oy, ox), acc, e, kb * 8, out.c, L.d.act_lo, L.d.act_hi);
      }
  }
}

// 1x1: per step, 256 bytes = 8 output rows of 32 input channels; the step's four 8-channel input
// blocks are fetched at one pixel, and a block past the tensor's pad8(C) reads as zeros.
void conv1x1(const Layer& L) {
  const Tensor in = L.in(), out = L.out();
  const int steps = static_cast<int>(pad32(in.c) / 32);
  for (int kb = 0; kb < out.blocks(); ++kb) {
    const auto e = conv_entries(L.table(), kb);
    for (int oy = 0; oy < out.h; ++oy)
      for (int ox = 0; ox < out.w; ++ox) {
        Acc8 acc = bias_acc(e);
        for (int s = 0; s < steps; ++s) {
          std::array<int8_t, 32> x{};
          for (int j = 0; j < 4 && s * 4 + j < in.blocks(); ++j)
            std::copy_n(in.pixel(s * 4 + j, oy * L.d.stride, ox * L.d.stride), 8, x.begin() + 8 * j);
          const int8_t* step = L.weights() + (static_cast<size_t>(kb) * steps + s) * 256;
          for (int ko = 0; ko < 8; ++ko)
            for (int ci = 0; ci < 32; ++ci) acc[ko] += mul(step[ko * 32 + ci], x[ci]);
        }
        write_lanes(out.out_pixel(kb, oy, ox), acc, e, kb * 8, out.c, L.d.act_lo, L.d.act_hi);
      }
  }
}

// Depthwise: per tap, 8 bytes = one weight per lane of the channel block.
void depthwise3x3(const Layer& L) {
  const Tensor in = L.in(), out = L.out();
  for (int cb = 0; cb < out.blocks(); ++cb) {
    const auto e = conv_entries(L.table(), cb);
    for (int oy = 0; oy < out.h; ++oy)
      for (int ox = 0; ox < out.w; ++ox) {
        Acc8 acc = bias_acc(e);
        for (int tap = 0; tap < 9; ++tap) {
          const int8_t* x = in.pixel(cb, oy * L.d.stride - L.d.pad + tap / 3, ox * L.d.stride - L.d.pad + tap % 3);
          if (!x) continue;
          const int8_t* line = L.weights() + (static_cast<size_t>(cb) * 9 + tap) * 8;
          for (int i = 0; i < 8; ++i) acc[i] += mul(line[i], x[i]);
        }
        write_lanes(out.out_pixel(cb, oy, ox), acc, e, cb * 8, out.c, L.d.act_lo, L.d.act_hi);
      }
  }
}

// Max pool: running max starts at -128, so padded positions (skipped) and -128 padding agree.
void maxpool(const Layer& L) {
  const Tensor in = L.in(), out = L.out();
  const int k = L.d.kernel;
  for (int cb = 0; cb < out.blocks(); ++cb)
    for (int oy = 0; oy < out.h; ++oy)
      for (int ox = 0; ox < out.w; ++ox) {
        std::array<int32_t, 8> m;
        m.fill(-128);
        for (int r = 0; r < k; ++r)
          for (int s = 0; s < k; ++s) {
            const int8_t* x = in.pixel(cb, oy * L.d.stride - L.d.pad + r, ox * L.d.stride - L.d.pad + s);
            if (!x) continue;
            for (int i = 0; i < 8; ++i) m[i] = std::max<int32_t>(m[i], x[i]);
          }
        uint8_t* o = out.out_pixel(cb, oy, ox);
        for (int i = 0; i < 8; ++i)
          o[i] = static_cast<uint8_t>(
              static_cast<int8_t>(cb * 8 + i < out.c ? std::clamp(m[i], L.d.act_lo, L.d.act_hi) : 0));
      }
}

// Residual add: each input requantized into the output scale with 32-bit saturation, summed in 64
// bits, clamped to the activation bounds.
void add(const Layer& L) {
  const Tensor a = L.in(), b = L.in_b(), out = L.out();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  for (int cb = 0; cb < out.blocks(); ++cb) {
    std::array<Entry, 8> e;
    for (int i = 0; i < 8; ++i) e[i] = add_entry(L.table(), cb * 8 + i);
    for (int y = 0; y < out.h; ++y)
      for (int x = 0; x < out.w; ++x) {
        const int8_t *pa = a.pixel(cb, y, x), *pb = b.pixel(cb, y, x);
        uint8_t* o = out.out_pixel(cb, y, x);
        for (int i = 0; i < 8; ++i) {
          const int64_t s = int64_t{quant::requantize(pa[i], e[i].q, kMin, kMax)} +
                            quant::requantize(pb[i], e[i].q_b, kMin, kMax);
          const int64_t v = cb * 8 + i < out.c ? std::clamp<int64_t>(s, L.d.act_lo, L.d.act_hi) : 0;
          o[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
        }
      }
  }
}

}  // namespace

void simulate_layer(uint8_t* memory, size_t memory_bytes, const LayerDesc& d) {
  if (!memory) throw InvalidInput("fpga simulate: null device memory");
  check_layer(d, memory_bytes, "fpga simulate");
  const Layer L{d, memory};
  switch (d.type) {
    case LayerType::kConv3x3: return conv3x3(L);
    case LayerType::kConv1x1: return conv1x1(L);
    case LayerType::kDepthwise3x3: return depthwise3x3(L);
    case LayerType::kMaxPool: return maxpool(L);
    case LayerType::kAdd: return add(L);
  }
}

Program simulate(std::vector<uint8_t>& memory, const uint32_t* words, size_t n) {
  Program p = decode_program(words, n);
  if (memory.size() < p.memory_bytes)
    throw InvalidInput(detail::str_cat("fpga simulate: the stream was built for ", p.memory_bytes,
                                       " bytes of device memory, the image has ", memory.size()));
  for (const LayerDesc& d : p.layers) simulate_layer(memory.data(), p.memory_bytes, d);
  return p;
}

}  // namespace dnnfusion::fpga
