// Internal to reductions: the contract between reduction.cc and its AVX-512 column sum
// (reduction_avx512.cc). Declarations only: the ISA file is compiled with -mavx512*, and an inline
// function emitted there could be picked by the linker for baseline callers.
#pragma once
#include <cstdint>

namespace dnnfusion::kernels::reduce_detail {

// The sum behind a float mean over [R][n] rows ld floats apart (a global average pool over a
// channel-blocked [Cb][H][W][b] plane: R = H*W, n = b): acc[i] = sum of x[r*ld + i] over r, as
// float partial sums of 32 rows each, every partial added into the double accumulator in row order.
// The same operations in the same order per lane as reduction.cc's baseline loop, 16 lanes at a
// time, so results are bit-identical to it. Only call when the CPU has AVX-512.
void chunked_col_sum_avx512(const float* x, int64_t R, int64_t n, int64_t ld, int64_t chunk, double* acc);

}  // namespace dnnfusion::kernels::reduce_detail
