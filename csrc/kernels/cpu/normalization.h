// Normalization kernels for inference: layer norm, batch norm (running statistics), group norm.
//
// Preconditions: float32 contiguous buffers of the sizes stated per function; weight/bias/
// mean/rstd may be null where stated; y may equal x (in place); eps >= 0.
// Postconditions: y as in torch (biased variance, rstd = 1/sqrt(var + eps)); statistics are
// computed in double with two passes (mean, then squared deviations), so |x| ~ 100 rows stay
// accurate to ~1e-6 relative; mean/rstd, when non-null, hold the float statistics like
// aten.native_layer_norm / aten.native_group_norm.
#pragma once
#include <cstdint>

#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

// layer norm over the last `cols` elements of each of `rows` rows; weight/bias nullable (length
// cols); mean/rstd nullable outputs (length rows).
// Fusion hooks (optional; nullptr or empty = none), one call per row r with start = r*cols,
// count = cols: the prologue writes row r of the input into a per-thread buffer (x is then never
// read and may be nullptr); the epilogue gets y's row r once it is final. mean/rstd are never
// passed to a hook.
void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t rows, int64_t cols, float* y,
                float* mean, float* rstd, const Parallel& par, const ElementHook* epilogue = nullptr,
                const ElementHook* prologue = nullptr);

// inference batch norm on [N][C][inner]: y = (x - rm[c]) / sqrt(rv[c] + eps) * w[c] + b[c];
// w/b nullable. Folded into y = x * scale[c] + shift[c] like torch's CPU inference path.
void batch_norm_inference(const float* x, const float* running_mean, const float* running_var, const float* weight,
                          const float* bias, float eps, int64_t N, int64_t C, int64_t inner, float* y,
                          const Parallel& par);

// group norm on [N][C][inner] with G groups (C % G == 0); weight/bias nullable (length C);
// mean/rstd nullable outputs [N][G]
void group_norm(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C, int64_t inner,
                int64_t G, float* y, float* mean, float* rstd, const Parallel& par);

}  // namespace dnnfusion::kernels
