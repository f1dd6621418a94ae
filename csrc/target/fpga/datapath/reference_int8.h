// The naive int8 oracle of the fpga datapath: each ISA v1 layer type written straight from the
// integer math of csrc/target/fpga/ISA.md "Layer semantics", on plain NCHW (batch 1) tensors with
// unpacked KCRS weights — no blocking, no padding lanes, no device memory — so that a layout or
// tiling mistake in the simulator cannot be repeated here.
//
// Precondition: vector sizes match the shapes (InvalidInput otherwise), requantizations are in
// requant.h's ranges, lo <= hi within [-128, 127]. Postcondition: the result is the exact output
// tensor, K x Ho x Wo (C x Ho x Wo for depthwise, pool and add).
#pragma once
#include <cstdint>
#include <vector>

#include "quant/requant.h"

namespace dnnfusion::fpga::ref {

struct Shape {
  int c = 0, h = 0, w = 0;
};

// Conv with an r x r kernel (r = 3 or 1): y[k] = requant(wrap32(bias[k] + sum w*x), q[k], lo, hi),
// zero padding.
std::vector<int8_t> conv2d(const std::vector<int8_t>& x, Shape s, const std::vector<int8_t>& kcrs, int k, int r,
                           int stride, int pad, const std::vector<int32_t>& bias,
                           const std::vector<quant::Requant>& q, int lo, int hi);

// Depthwise 3x3: weights C x 1 x 3 x 3.
std::vector<int8_t> depthwise3x3(const std::vector<int8_t>& x, Shape s, const std::vector<int8_t>& weights,
                                 int stride, int pad, const std::vector<int32_t>& bias,
                                 const std::vector<quant::Requant>& q, int lo, int hi);

// Max over the window's positions inside the input, then clamp.
std::vector<int8_t> maxpool(const std::vector<int8_t>& x, Shape s, int kernel, int stride, int pad, int lo, int hi);

// y = clamp(sat32(requant(a, qa)) + sat32(requant(b, qb)), lo, hi), per channel.
std::vector<int8_t> add(const std::vector<int8_t>& a, const std::vector<int8_t>& b, Shape s,
                        const std::vector<quant::Requant>& qa, const std::vector<quant::Requant>& qb, int lo, int hi);

}  // namespace dnnfusion::fpga::ref
