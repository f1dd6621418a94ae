// Internal to NCHW[x]c pooling: the contract between pooling_nchwc.cc (checks, work split, the
// SSE and scalar rows) and its AVX-512 row (pooling_nchwc_avx512.cc). Declarations only, like
// conv_nchwc_ukernel.h: the ISA file is compiled with -mavx512*, and an inline function emitted
// there could be picked by the linker for baseline callers.
#pragma once
#include <cstdint>

#include "kernels/cpu/pooling.h"

namespace dnnfusion::kernels::pool_detail {

// The taps [lo, hi) of a window that fall inside the image along one axis.
struct TapRange {
  int64_t lo, hi;
};

// One output row `oh` of max pooling over a [H][W][b] plane with b a multiple of 16: all b lanes of
// a position in one pass (up to four zmm at a time), NaN sticking as in PyTorch (NaN lanes come out
// as an all-ones NaN). rows: the row's taps inside the image in height; cols[ow]: position ow's in
// width (computed once by the caller). pf_lines 64-byte lines from pf (the input rows the next
// output row adds) are prefetched spread over the row's positions. Only call when the CPU has
// AVX-512.
void max_row_avx512(const Pool2dShape& s, const float* plane, int64_t oh, TapRange rows, const TapRange* cols,
                    float* out, int64_t b, const char* pf, int64_t pf_lines);

}  // namespace dnnfusion::kernels::pool_detail
