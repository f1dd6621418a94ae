// ATen attribute readers every target's kernel bindings share: what a node's attributes mean is a
// fact about the op, not about the kernel that runs it.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/conv_geometry.h"
#include "common/dtype.h"
#include "ecg/graph.h"
#include "kernels/cpu/conv2d.h"

namespace dnnfusion::runtime {

// Every dtype a type-generic kernel binding accepts.
constexpr std::initializer_list<DType> kAllTypes = {DType::Float32, DType::Float64, DType::Int64, DType::Int32,
                                                    DType::Bool,    DType::UInt8,   DType::Int8};

// ATen int[] attribute elements (common/conv_geometry.h).
using dnnfusion::at_or;

// ATen's cat skips legacy empty operands (1-D of size 0) whatever the output's rank.
bool cat_skips_operand(const std::vector<int64_t>& operand, const std::vector<int64_t>& out);

// aten.convolution (1-D or 2-D, NCHW) as the kernels' problem shape; a 1-D conv is a 2-D conv of
// height 1.
kernels::Conv2dShape conv2d_shape(const ecg::Graph& g, const ecg::Node& n);

// aten._scaled_dot_product_flash_attention_for_cpu (query, key, value[, attn_mask]) ->
// (output [B, H, Lq, Dv], logsumexp [B, H, Lq] or empty) as every target's kernel implements it:
// "" or what a node asks for that no kernel does (dropout, grouped-query heads, shapes that do not
// line up, a mask that does not broadcast to [B, H, Lq, Lk]).
std::string sdpa_unsupported(const ecg::Graph& g, const ecg::Node& n);

}  // namespace dnnfusion::runtime
