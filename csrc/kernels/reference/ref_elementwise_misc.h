// Naive reference implementations of the elementwise, reduction, softmax, normalization and
// data-movement kernels, for tests only. Every element is computed on its own from first
// principles (multi-index -> offset), in double for floating math and in wrapped int64 for
// integral math, sharing no code with kernels/cpu. Signatures mirror the kernels minus the
// Parallel argument; semantics are the ones documented in the kernel headers.
#pragma once
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/reduction.h"

namespace dnnfusion::reference {

void unary(kernels::UnaryOp op, const kernels::UnaryAttrs& at, const std::vector<int64_t>& shape,
           const kernels::StridedArg& x, void* out, DType out_dtype);
void binary(kernels::BinaryOp op, double alpha, const std::vector<int64_t>& shape, const kernels::StridedArg& a,
            const kernels::StridedArg& b, void* out, DType out_dtype, DType compute_dtype);
void where(const std::vector<int64_t>& shape, const kernels::StridedArg& cond, const kernels::StridedArg& a,
           const kernels::StridedArg& b, void* out, DType out_dtype);

void reduce(kernels::ReduceOp op, const std::vector<int64_t>& shape, const std::vector<int64_t>& dims, const void* x,
            DType in_dtype, void* y, DType out_dtype, double correction);
void cumsum(const std::vector<int64_t>& shape, int64_t dim, const void* x, DType in_dtype, void* y, DType out_dtype);

void softmax(const float* x, float* y, int64_t outer, int64_t dim, int64_t inner, bool log);
void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t rows, int64_t cols, float* y,
                float* mean, float* rstd);
void batch_norm_inference(const float* x, const float* running_mean, const float* running_var, const float* weight,
                          const float* bias, float eps, int64_t N, int64_t C, int64_t inner, float* y);
void group_norm(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C, int64_t inner,
                int64_t G, float* y, float* mean, float* rstd);

void strided_copy(size_t elem_size, const std::vector<int64_t>& shape, const void* src,
                  const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst);
void concat(size_t elem_size, const std::vector<const void*>& srcs, const std::vector<std::vector<int64_t>>& shapes,
            int64_t dim, void* dst);
void index_select(size_t elem_size, const void* src, int64_t outer, int64_t src_dim, int64_t inner, const void* idx,
                  DType idx_dtype, int64_t n_idx, void* dst);
void gather(size_t elem_size, const void* src, const std::vector<int64_t>& src_shape, int64_t dim,
            const int64_t* index, const std::vector<int64_t>& shape, void* dst);
void constant_pad(DType dtype, const void* src, const std::vector<int64_t>& src_shape, const std::vector<int64_t>& pads,
                  double value, void* dst);
void fill(DType dtype, double value, int64_t n, void* dst);
void arange(DType dtype, double start, double step, int64_t n, void* dst);

}  // namespace dnnfusion::reference
