// Data movement kernels: strided copy (permute/transpose/expand/slice/select/clone), concat,
// index_select (embedding), gather, constant pad, fill, arange.
//
// Preconditions: element sizes in bytes (any positive size; 1/2/4/8 get typed fast loops);
// shapes non-negative; dst contiguous row-major, not overlapping any source; strides in
// ELEMENTS (may be 0 or negative). Where a DType is taken, Float32, Float64, Int64, Int32,
// Bool, UInt8, Int8 are supported (Float16/BFloat16 throw).
// Postconditions: dst fully written; on an Error (bad index, bad argument) dst may be partially
// written.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

// dst (contiguous, `shape`)[i...] = src[src_offset + sum_d i_d * src_strides[d]].
void strided_copy(size_t elem_size, const std::vector<int64_t>& shape, const void* src,
                  const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst, const Parallel& par);

// Concatenates contiguous inputs along dim (negative wraps); inputs share all other dims.
// Empty inputs are allowed, including torch's legacy 1-D shape [0] of any rank mismatch.
void concat(size_t elem_size, const std::vector<const void*>& srcs, const std::vector<std::vector<int64_t>>& shapes,
            int64_t dim, void* dst, const Parallel& par);

// dst[o][j][i] = src[o][idx[j]][i] for src [outer][src_dim][inner]; idx Int64 or Int32;
// negative indices wrap; out-of-range -> Error naming the index and the size.
void index_select(size_t elem_size, const void* src, int64_t outer, int64_t src_dim, int64_t inner, const void* idx,
                  DType idx_dtype, int64_t n_idx, void* dst, const Parallel& par);

// torch.gather: out/index shape `shape`, src contiguous `src_shape` (same rank), along dim
// (negative wraps); index contiguous int64, negative values wrap; index.size(d) <= src.size(d)
// for d != dim.
void gather(size_t elem_size, const void* src, const std::vector<int64_t>& src_shape, int64_t dim,
            const int64_t* index, const std::vector<int64_t>& shape, void* dst, const Parallel& par);

// constant_pad_nd: pads[2k], pads[2k+1] = (before, after) for the LAST dims, last dim first
// (torch order); negative pads crop; value converted to dtype (integral dtypes need a finite
// in-range value).
void constant_pad(DType dtype, const void* src, const std::vector<int64_t>& src_shape, const std::vector<int64_t>& pads,
                  double value, void* dst, const Parallel& par);

// dst[0..n) = value converted to dtype.
void fill(DType dtype, double value, int64_t n, void* dst, const Parallel& par);

// dst[i] = start + i * step, computed in double (int64 for integral dtypes) then converted.
void arange(DType dtype, double start, double step, int64_t n, void* dst);

}  // namespace dnnfusion::kernels
