// The device-memory images of ISA v1 (csrc/target/fpga/ISA.md "Memory layouts"): packing int8 KCRS
// weights into the step blocks the datapath reads (3x3: 8 in x 8 out per tap line, 1x1: 32 in x 8
// out, depthwise: 8 channels), the per-output-channel parameter tables (bias + requantization, or
// the requantization pair of a residual add), and NCHW activations into the channel-blocked layout
// [C/8][H][W][8]; and the inverses, for tests and for reading results back.
//
// Precondition: sizes agree (a vector of the wrong length is an InvalidInput naming both lengths),
// channels 1..kMaxChannels, requantization multipliers in [0, 2^31) and shifts in [0, 31].
// Postcondition: every padded position (channels beyond C or K, table entries beyond K, the
// reserved table word) is zero, so the image depends only on the real values; unpack(pack(x)) == x.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/requant.h"
#include "target/fpga/isa/isa.h"

namespace dnnfusion::fpga {

// Little-endian int32 as every table field is stored, whatever the host's byte order.
inline void put_le32(uint8_t* p, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int b = 0; b < 4; ++b) p[b] = static_cast<uint8_t>(u >> (8 * b));
}
inline int32_t get_le32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
}

// Weights of a conv3x3 (K x C x 3 x 3), conv1x1 (K x C x 1 x 1) or depthwise (C x 1 x 3 x 3, pass
// K == C) layer, KCRS order; the result has weight_bytes() of such a layer.
std::vector<uint8_t> pack_weights(LayerType type, int k, int c, const std::vector<int8_t>& kcrs);
std::vector<int8_t> unpack_weights(LayerType type, int k, int c, const std::vector<uint8_t>& packed);

// Conv / depthwise table: entry k = {bias[k], M[k], shift[k], 0}, pad8(K) entries of 16 bytes.
std::vector<uint8_t> pack_params(const std::vector<int32_t>& bias, const std::vector<quant::Requant>& q);
void unpack_params(const std::vector<uint8_t>& table, int k, std::vector<int32_t>* bias,
                   std::vector<quant::Requant>* q);

// Residual add table: entry c = {M_a[c], shift_a[c], M_b[c], shift_b[c]}, pad8(C) entries.
std::vector<uint8_t> pack_add_params(const std::vector<quant::Requant>& qa, const std::vector<quant::Requant>& qb);
void unpack_add_params(const std::vector<uint8_t>& table, int c, std::vector<quant::Requant>* qa,
                       std::vector<quant::Requant>* qb);

// NCHW (batch 1) <-> [pad8(C)/8][H][W][8]; padded lanes are written as 0 and ignored on unpack.
std::vector<uint8_t> pack_activation(const std::vector<int8_t>& chw, int c, int h, int w);
std::vector<int8_t> unpack_activation(const uint8_t* blocked, size_t bytes, int c, int h, int w);

// Byte index of element (channel, y, x) in the blocked layout of a tensor of h rows and w columns.
inline size_t blocked_index(int channel, int y, int x, int h, int w) {
  return ((static_cast<size_t>(channel / 8) * h + y) * w + x) * 8 + channel % 8;
}

}  // namespace dnnfusion::fpga
