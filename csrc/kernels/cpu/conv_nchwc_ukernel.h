// Internal to the NCHW[x]c convolution family: the contract between the portable driver
// (conv_nchwc.cc: checks, packing, work split, border staging, scalar tiles) and the ISA-specific
// register-blocked tiles (conv_nchwc_avx2.cc, conv_nchwc_avx512.cc, built from conv_nchwc_tile.h).
// Like gemm_ukernel.h it holds only plain structs and declarations: the ISA files are compiled
// with -mavx2/-mavx512*, and an inline function they emitted could be picked by the linker for
// baseline callers (ODR), which would crash on older CPUs.
#pragma once
#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_ukernel.h"  // Activation

namespace dnnfusion::kernels::nchwc_detail {

// One tile: `rn` consecutive output positions of one output-channel block (oc_bn lanes), all
// accumulated in registers, then y = act(acc + bias + res) stored once.
// Input addressing (element offsets, all relative to x): channel chunk cb, kernel tap (kh, kw),
// channel ic of the chunk and tile position j read x[cb*x_cb + kh*x_kh + kw*x_kw + j*x_pos + ic]
// (broadcast convs) or the oc_bn-vector at x[kh*x_kh + kw*x_kw + j*x_pos] (depthwise).
// Weights: w[cb*w_cb + kh*w_kh + kw*ic_bn*oc_bn + ic*oc_bn + lane] (broadcast convs) or
// w[kh*w_kh + kw*oc_bn + lane] (depthwise). The driver has already dropped taps that fall outside
// the image in height (n_kh, x and w start at the first valid row) and, in width, either proved
// every tap inside the image or pointed x at a zero-padded staging copy, so tiles never bounds-check.
struct NchwcTile {
  const float* x;
  int64_t x_cb, x_kh, x_kw, x_pos;
  const float* w;
  int64_t w_cb, w_kh;
  int64_t n_cb, n_kh, n_kw, ic_bn;
  // Channels the last chunk reads (ic_bn unless C is not a multiple of ic_bn): the padded lanes of
  // a blocked input are never read, so whatever an upstream op left there cannot leak in.
  int64_t ic_last;
  const float* bias;  // oc_bn floats or nullptr
  const float* res;   // rn x oc_bn floats (position stride oc_bn) or nullptr
  float* y;           // rn x oc_bn floats (position stride oc_bn)
  int rn, oc_bn;      // the scalar tile reads these; vector tiles are specialised on them
  Activation act;
  // Optional (broadcast convs): pf_lines 64-byte lines from pf to bring into L2 while the tile
  // computes, spread evenly over its input-channel steps (the next oc block's weights, which
  // would otherwise stream from memory at the start of that block).
  const char* pf = nullptr;
  int64_t pf_lines = 0;
  // Optional: res_pf_lines[k] 64-byte lines from res_pf[k] to bring into L1 at the tile's start
  // (what the next tile's residual, or an epilogue's same-index operand, reads). Without it those
  // loads wait on memory after all the FMAs: a 1x1 64 -> 256 conv at 56x56 with a residual,
  // batch 8, ran 55% slower than without; with it 10-20%.
  const char* res_pf[2] = {nullptr, nullptr};
  int64_t res_pf_lines[2] = {0, 0};
  // Optional: y_pf_lines lines from y_pf (the output the next tile stores) prefetched for writing,
  // so that the stores' read-for-ownership does not wait on memory when the output is far larger
  // than the caches (1x1 64 -> 256 at 56x56, batch 8: 10% faster; ResNet-50's 7x7 stem 10%).
  const char* y_pf = nullptr;
  int64_t y_pf_lines = 0;
  // Two-row tiles (row_len > 0, rn == 2 * row_len): positions j >= row_len are the next output
  // row's and read x[... + x_row + (j - row_len)*x_pos + ...] instead, so one weight vector feeds
  // twice the positions of a narrow row (7x7 outputs) and streams from L2 half as often.
  int row_len = 0;
  int64_t x_row = 0;
};

using NchwcTileFn = void (*)(const NchwcTile& t);

// Tile for (oc_bn, rn); nullptr when the ISA has no such tile (the driver validates knobs first).
// k1: the kernel is 1x1 (n_kh == n_kw == 1, the tap loops vanish); unroll: unroll the kw loop.
// Only call when the CPU supports the ISA.
NchwcTileFn conv_tile_avx512(int oc_bn, int rn, bool k1, bool unroll);
NchwcTileFn dw_tile_avx512(int c_bn, int rn);
// Tiles over the first 16 lanes of a 32-lane block (weights, outputs and residual at a 32-lane
// position stride): the last output block of a conv whose channels leave at most 16 of its 32
// lanes in use (K = 72, 80, 112, 144, 240 ...) computes only those; the caller zeroes the rest.
NchwcTileFn conv_tile_half_avx512(int rn, bool k1, bool unroll);
NchwcTileFn dw_tile_half_avx512(int rn);
NchwcTileFn conv_tile_avx2(int oc_bn, int rn, bool k1, bool unroll);
// Two-row tiles (not 1x1-flat, kw unrolled): 2 * h positions; nullptr when 2 * h exceeds the
// ISA's reg_n for oc_bn.
NchwcTileFn conv_tile_rows2_avx512(int oc_bn, int h);
NchwcTileFn conv_tile_rows2_avx2(int oc_bn, int h);
NchwcTileFn dw_tile_avx2(int c_bn, int rn);
// The 1x1 tile (k1, no kw unroll) for (isa, oc_bn, rn) of any ISA, scalar included; defined in the
// baseline file conv_nchwc.cc. The Winograd convolution runs its GEMMs with these.
NchwcTileFn pointwise_tile(Isa isa, int oc_bn, int rn);
// In place over n floats, mode 0 hardswish, 1 silu (the formulas of the generated code's prelude:
// x * clamp(x + 3, 0, 6) / 6 and x / (1 + exp(-x)); NaN propagates).
void activate_inplace_avx512(float* p, int64_t n, int mode);
void activate_inplace_avx2(float* p, int64_t n, int mode);
// sums[l] += sum over the row's `positions` of lane l, for a 16-, 32- or 64-lane block b (the
// squeeze-excitation mean of conv2d_nchwc_expand_dw); four positions in flight per 16 lanes.
void row_channel_sums_avx512(const float* row, int64_t positions, int64_t b, float* sums);
// The same for an 8- or 16-lane block, eight lanes at a time.
void row_channel_sums_avx2(const float* row, int64_t positions, int64_t b, float* sums);

}  // namespace dnnfusion::kernels::nchwc_detail
