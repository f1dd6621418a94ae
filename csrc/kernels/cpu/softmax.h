// Softmax / log-softmax over the middle axis of a contiguous float32 [outer][dim][inner] tensor.
//
// Preconditions: x and y hold outer*dim*inner floats; y may equal x (in place) but must not
// partially overlap it; outer, dim, inner >= 0.
// Postconditions: y = exp(x - max) / sum(exp(x - max)) along dim (log: x - max - log(sum)),
// computed with the max subtracted so large inputs do not overflow; a slice containing NaN gives
// NaN; a slice of all -inf gives NaN like torch.
#pragma once
#include <cstdint>

#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

void softmax(const float* x, float* y, int64_t outer, int64_t dim, int64_t inner, bool log, const Parallel& par);

}  // namespace dnnfusion::kernels
