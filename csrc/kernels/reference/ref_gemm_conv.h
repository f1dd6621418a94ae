// Plain-loop reference implementations of the CPU kernels, for tests only: obviously correct,
// double accumulation, no blocking, no threads. Semantics mirror PyTorch's CPU kernels (see the
// optimised versions in kernels/cpu for the exact contracts).
#pragma once
#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/pooling.h"

namespace dnnfusion::reference {

using kernels::Activation;
using kernels::AttnMask;
using kernels::Conv2dShape;
using kernels::GemmEpilogue;
using kernels::MatrixView;
using kernels::Pool2dShape;
using kernels::Tensor4;

float ref_activate(float v, Activation act);

void ref_sgemm(int64_t M, int64_t N, int64_t K, MatrixView A, MatrixView B, float* C, int64_t ldc,
               const GemmEpilogue& ep);

void ref_conv2d_nchw(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                     float* y, Activation act);

void ref_max_pool2d(const Pool2dShape& s, const float* x, float* y, int64_t* indices);
void ref_avg_pool2d(const Pool2dShape& s, const float* x, float* y, bool count_include_pad,
                    int64_t divisor_override);
void ref_adaptive_avg_pool2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                             const float* x, float* y);

// Same contract as kernels::sdpa (out contiguous [Bt][H][Lq][Dv], lse nullable [Bt][H][Lq]).
void ref_sdpa(int64_t Bt, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, Tensor4 q,
              Tensor4 k, Tensor4 v, AttnMask mask, bool causal, float scale, float* out,
              float* lse);

}  // namespace dnnfusion::reference
