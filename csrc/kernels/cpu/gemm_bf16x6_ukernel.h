// Internal to the bf16x6 GEMM family: the contract between the portable driver (gemm_bf16x6.cc)
// and the AMX file (gemm_bf16x6_amx.cc). Free of inline functions and std templates for the same
// reason as gemm_ukernel.h: the AMX file is compiled with -mamx-*/-mavx512*, and an inline
// function it emitted could be picked by the linker for baseline callers.
//
// Tile layouts (bf16 as uint16_t). A k step is 32 values of k; K is padded with zeros to whole
// steps (Kp = ceil(K/32)*32).
//  - packed B, one 32-column block: Kp/32 steps, each 3 planes x 2 column tiles x (16 rows of
//    32 bf16): row r of column tile t holds, for n < 16, B(32s+2r, 32b+16t+n) and
//    B(32s+2r+1, 32b+16t+n) side by side (AMX's pair-interleaved B operand). 6 KiB per step.
//  - packed A, one 32-row block: Kp/32 steps, each 3 planes x 2 row tiles x (16 rows of 32 bf16):
//    row r of row tile t holds A(32b+16t+r, 32s..32s+31). Rows >= M and k >= K are zero.
#pragma once
#include <cstdint>

namespace dnnfusion::kernels::bf16x6_detail {

constexpr int kBlock = 32;          // rows of A / columns of B per block
constexpr int kStep = 32;           // k values per step
constexpr int64_t kStepElems = 3 * 2 * 16 * 32;  // bf16 per step of one packed block

// Splits rows [0, rows) x k [0, K) of A (rows rs apart, unit column stride) into the packed
// A layout of one block (rows < 32; the rest zero). Returns false if any value read is not
// finite (inf or NaN), or so large that its first term rounds to inf: the six products cannot
// reproduce inf * x, so the caller must not use the block.
bool amx_pack_a_block(const float* A, int64_t rs, int rows, int64_t K, uint16_t* dst);

// Loads the tile configuration amx_block uses; amx_release() frees the tile state again. Both on
// the calling thread, around a run of amx_block calls.
void amx_configure();
void amx_release();

// acc (32 x 32 floats, row-major, 64-byte aligned) = (accumulate ? acc : 0) + the six products of
// one packed A block and one packed B block over `steps` k steps; rows <= 16 leaves acc's lower
// half untouched. prefetch_lines 64-byte lines from prefetch (0: none) are brought into L2, spread
// over the steps: the caller's share of the next B block.
void amx_block(const uint16_t* Ap, const uint16_t* Bp, int64_t steps, int rows, bool accumulate, float* acc,
               const char* prefetch, int64_t prefetch_lines);

// C rows [0, rows) x columns [0, cols) (rows ldc apart) = act(alpha * acc + beta * C + bias), with
// bias = row_bias[r] or col_bias[j] (either may be null; both null: no bias); act 0 none,
// 1 relu, 2 relu6 (NaN passes through, as in PyTorch).
void amx_finish(const float* acc, int rows, int cols, float alpha, float beta, const float* row_bias,
                const float* col_bias, int act, float* C, int64_t ldc);

// NCHW[b]c activations (conv_bf16x6.h): "row" i of the GEMM is position p = i % P of image
// n = i / P, "column" c a channel; blocks of b lanes (b a multiple of 16), nb blocks per image.
struct NchwcView {
  const float* data;
  int64_t P, channels;  // positions per image, real channels (lanes >= channels are padding)
  int64_t b, nb;
};

// amx_pack_a_block for rows [i0, i0+rows) x channels [c0, c0+kc) of an NCHW[b]c input; padded
// lanes read as 0 (they may hold anything). False if a real value is inf or NaN.
bool amx_pack_a_nchwc(const NchwcView& x, int64_t i0, int rows, int64_t c0, int64_t kc, uint16_t* dst);

// The implicit-GEMM view of a convolution over an NCHW[b]c input (conv_bf16x6.h): row i is the
// output position (n, oh, ow) of image n = i / (OH*OW); column k = tap * Cp + c, tap = r * S + s,
// Cp = channels rounded up to 16 lanes, reads input (n, c, oh*sh - ph + r*dh, ow*sw - pw + s*dw),
// 0 outside the image and for c >= channels.
struct ConvTapsView {
  const float* data;
  int64_t H, W, OH, OW;  // input and output planes
  int64_t channels, b, nb, Cp;
  int64_t S, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

// amx_pack_a_block for rows [i0, i0+rows) x k [k0, k0+kc) of a ConvTapsView (k0 a multiple of 32);
// padded lanes and taps outside the image read as 0. False if a real value is inf or NaN.
bool amx_pack_a_conv(const ConvTapsView& x, int64_t i0, int rows, int64_t k0, int64_t kc, uint16_t* dst);

// y (NCHW[b]c, channels K) at rows [i0, i0+rows) x channels [j0, j0+32) = act(acc + bias + residual)
// for the real channels, 0 for padded lanes (the last column block zeroes those past it too);
// blocks past y's last are skipped. bias ([K]) and
// residual (y's layout, may alias y) may be null.
void amx_finish_nchwc(const float* acc, int rows, int64_t i0, int64_t j0, const float* bias, const float* residual,
                      int act, const NchwcView& y);

// Requests the XTILEDATA state from the OS (Linux arch_prctl); true if granted.
bool amx_request_permission();

}  // namespace dnnfusion::kernels::bf16x6_detail
