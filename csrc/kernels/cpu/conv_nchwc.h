// NCHW[x]c direct convolution (NeoCPU): float 2-D convolution with PyTorch conv2d
// semantics (stride, zero padding, dilation, optional bias) on channel-blocked activations, with
// bias, residual add and activation applied to the accumulators in registers before one store.
//
// Layouts (b = block size, Cb = ceil(C/b) blocks; channel c lives in block c/b, lane c%b):
//   activations NCHW[b]c: [N][Cb][H][W][b]. Channels >= C (the padding of the last block) hold 0
//     in every tensor this family writes (before the epilogue hook); the convolutions never read
//     them from their input, so an input's padded lanes may hold anything (NaN included).
//   packed weights (conv_nchwc_pack_weight): KCRS[ic_bn]c[oc_bn]k =
//     [Kb][Cb][R][S][ic_bn][oc_bn], zero at padded channels; depthwise [Kb][R][S][oc_bn]; grouped
//     [Kb][span/ic_bn][R][S][ic_bn][oc_bn] over the input channels of block kb's groups.
// Kernel: for each (n, oc block, output row) the row is cut into tiles of at most reg_n positions
// (balanced sizes); a tile keeps reg_n x oc_bn accumulators in registers and, per input channel,
// loads one oc_bn-wide weight vector and broadcast-FMAs it with reg_n inputs. Loop order: oc block,
// oh, ow tile, ic block, kh, kw, ic, ow (unrolled), oc lanes (vector). Tiles never bounds-check:
// taps above/below the image are dropped per row; in width, a tile whose taps reach into the padding
// reads a zero-padded staging copy of its input window, unless the whole input was first copied
// with its padding made explicit (broadcast convs where that copy is smaller than the staging of
// every output block's edge tiles: many output blocks, few rows), or (depthwise) each edge
// position is a one-position tile over only the taps inside the image.
// Variants: general (groups == 1: any kernel, stride, padding, dilation); 1x1 (no tap loops; with
// stride 1 and no padding the whole output plane is one run of positions, so tiles span rows);
// depthwise (groups == C == K: ic_bn == oc_bn, one vector FMA per tap and position); grouped (any
// other groups: each output block is a general conv over its groups' input blocks, with weights
// zero across groups; see conv_nchwc_group_blocks_fit).
// ISA: AVX-512 (oc_bn 8/16/32/64), AVX2+FMA (oc_bn 8/16) or scalar (oc_bn 1..64), chosen at run time
// from cpu_features (active_isa(), which tests and DNNFUSION_ISA can force). Knobs are ISA-specific
// (register budget); packed weights depend only on the knobs.
// Threads: Parallel::parallel_for over (n, oc block, output row or run segment).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

// ic_bn: input channel block (the x layout's b); oc_bn: output channel block (the y layout's b,
// one or two vectors); reg_n: most output positions per register tile; unroll_ker: unroll the
// kernel-width loop; winograd: 0 runs the direct algorithm, 2 or 4 the Winograd F(2x2, 3x3) or
// F(4x4, 3x3) one (conv_winograd.h; 3x3 stride-1 convs only; the packed weights differ,
// reg_n/unroll_ker unused).
// amx: a groups-1 conv runs as the fp32-accurate bf16x6 GEMM on AMX (conv_bf16x6.h: 1x1 stride-1
// rows in place, other kernels and strides as implicit GEMMs; the packed weights differ,
// reg_n/unroll_ker unused).
struct ConvNchwcKnobs {
  int ic_bn = 16, oc_bn = 16, reg_n = 14;
  bool unroll_ker = true;
  int winograd = 0;
  bool amx = false;
  bool operator==(const ConvNchwcKnobs& o) const {
    return ic_bn == o.ic_bn && oc_bn == o.oc_bn && reg_n == o.reg_n && unroll_ker == o.unroll_ker &&
           winograd == o.winograd && amx == o.amx;
  }
};

// True for plain and depthwise convs, and for grouped ones where one of the ISA's output blocks
// lies inside a group or holds whole groups (conv_nchwc_group_blocks_fit; the scalar path's 1..64
// lanes always do); otherwise false with the reason in *why. Throws dnnfusion::Error if s is not
// a valid convolution at all.
bool conv_nchwc_supported(const Conv2dShape& s, std::string* why = nullptr, Isa isa = active_isa());

// Whether the channel blocks suit the conv's groups. Always for groups == 1; depthwise needs
// ic_bn == oc_bn. A grouped conv (Cg = C/groups input and Kg = K/groups output channels per group)
// runs each output block as a plain conv over only the input blocks of its groups, so either an
// output block lies inside one group (oc_bn divides Kg) and ic_bn divides Cg, or it holds whole
// groups (Kg divides oc_bn) and ic_bn divides the oc_bn/Kg*Cg input channels they read. The packed
// weights are zero across groups, so a block of whole groups computes oc_bn/Kg times the FMAs
// it needs (conv_nchwc_group_waste): 4-channel groups in 16-lane blocks run at a quarter of the
// direct kernel's useful rate, still several times the NCHW fallback's (benchmarks/RESULTS.md).
bool conv_nchwc_group_blocks_fit(const Conv2dShape& s, int ic_bn, int oc_bn);
// FMAs computed per FMA needed for a grouped conv with output block oc_bn (1 otherwise).
double conv_nchwc_group_waste(const Conv2dShape& s, int oc_bn);

// Largest reg_n the ISA's tiles have for this oc_bn (0: oc_bn not available on that ISA).
int conv_nchwc_max_reg_n(Isa isa, int oc_bn);

// Throws dnnfusion::Error naming the problem unless s is supported and the knobs are valid for it
// on `isa` (oc_bn available on the ISA, 1 <= reg_n <= conv_nchwc_max_reg_n, 1 <= ic_bn <= 256,
// ic_bn == oc_bn for depthwise).
void conv_nchwc_check(const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa);

// The AVX-512 register tile a conv with a multiple of 64 output channels (not depthwise) takes by
// default: four zmm x 7 positions (a broadcast feeds four FMAs) or two zmm x 14 positions (half the
// weight bytes per FMA). Which one is faster was measured to differ between microarchitectures
// (see conv_nchwc_tile_family() in conv_nchwc.cc); the rest of the heuristic is the same.
enum class ConvTileFamily : int8_t { Oc64x7, Oc32x14 };
// This CPU's (cpuid), unless DNNFUSION_CONV_TILES=64x7|32x14 overrides it (read once).
ConvTileFamily conv_nchwc_tile_family();

// The register tile width (reg_n) the heuristics give a conv that runs with output block oc_bn on
// isa (any oc_bn the ISA has; no timing). The AVX-512 32-lane block takes 7 positions (two zmm x 7:
// 7 divides the 56/28/14/7 widths of 3x3 layers) except in a depthwise or flat 1x1 conv, which
// takes 14: neither has tap loops whose input window the wider tile would grow, and each weight
// vector then feeds 14 FMAs.
int conv_nchwc_tile_reg_n(const Conv2dShape& s, Isa isa, int oc_bn);

// Deterministic heuristic knobs (no timing). s must be supported.
ConvNchwcKnobs conv_nchwc_default_knobs(const Conv2dShape& s, Isa isa, ConvTileFamily tiles);
inline ConvNchwcKnobs conv_nchwc_default_knobs(const Conv2dShape& s, Isa isa = active_isa()) {
  return conv_nchwc_default_knobs(s, isa, conv_nchwc_tile_family());
}

// The tuning space: ic_bn from the powers of two up to 64 dividing C (and C itself when C <= 64),
// oc_bn from the ISA's blocks, reg_n from {max, 28, 16, 14, 8, 7, 4, 2} within the register budget
// (plus OW itself when it fits), unroll_ker both ways (not for 1x1); the default comes first, no
// duplicates, every entry valid for s on isa.
std::vector<ConvNchwcKnobs> conv_nchwc_candidate_knobs(const Conv2dShape& s, Isa isa = active_isa());

// Whether a channel block of b lanes suits C channels: b divides C, or the last block pads C by at
// most half (24 channels in one 32-lane block run at full vector width; 10 in a 16-lane block
// would waste more than they gain). The layout search offers only such blocks, and the default
// knobs only pick such blocks.
bool nchwc_block_fits(int64_t C, int b);

int64_t conv_nchwc_packed_weight_floats(const Conv2dShape& s, const ConvNchwcKnobs& k);
// w_kcrs: PyTorch weight [K][C/groups][R][S]. out: conv_nchwc_packed_weight_floats floats.
void conv_nchwc_pack_weight(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* w_kcrs,
                            float* out);

// Floats of an NCHW[c_bn]c tensor: N * ceil(C/c_bn) * c_bn * H * W.
int64_t nchwc_floats(int64_t N, int64_t C, int64_t H, int64_t W, int c_bn);
// Whether conv2d_nchwc orders its work items position-major (image, output row or 1x1 segment,
// then output block) rather than block-major (image, output block, then row). The thread pool
// gives each thread the same contiguous share of every kernel's items, so position-major has a
// thread read the rows it wrote one layer earlier from its own core's L2, where block-major has
// it read the whole input, half of it written on the other core. True for depthwise convs and
// while the packed weights (which every thread then streams whole) stay under 1 MiB.
bool conv_nchwc_spatial_split(const Conv2dShape& s, const ConvNchwcKnobs& k);
// Whether conv2d_nchwc runs two whole output rows per register tile: a plain (not depthwise,
// grouped or flat 1x1) conv with at least two output rows of at most reg_n / 2 positions (7x7
// outputs with 14-position tiles) on an ISA with such a tile. A one-row tile there holds only OW
// positions, so each weight vector brought from L2 feeds OW FMAs per channel; two rows double
// that. Both rows read every tap, so a padded conv first copies its input with the padding made
// explicit.
bool conv_nchwc_two_row_tiles(const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa = active_isa());
// NCHW -> NCHW[c_bn]c (padded channels written as 0).
void nchw_to_nchwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int c_bn, float* y,
                   const Parallel& par);
// NCHW[c_bn]c -> NCHW (padded channels dropped).
void nchwc_to_nchw(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int c_bn, float* y,
                   const Parallel& par);
// NCHW[c_in]c -> NCHW[c_out]c, for re-blocking between layers with different blocks.
void nchwc_to_nchwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int c_in,
                    int c_out, float* y, const Parallel& par);

// y = act(conv(x, w) + bias + residual), all in NCHW[b]c: x with b = ic_bn, y and residual with
// b = oc_bn. packed_w from conv_nchwc_pack_weight with the same shape and knobs. bias: [K] or
// nullptr. residual: nullptr or the y-shaped tensor added before the activation (may alias y: each
// element is read before its own store). y must not overlap x or packed_w. Postcondition: every
// element of y written, padded channels 0 (before the epilogue runs).
// Epilogue (optional): called once per contiguous run of one oc block's output positions (an
// output row, two for two-row tiles; for 1x1 stride-1 unpadded convs a segment of the flattened
// plane), after the run is stored, on any worker: data = &y[start], count = positions * oc_bn,
// start = the linear index in the blocked [N][Kb][OH][OW][oc_bn] layout. Padded lanes are
// included; every y element is passed exactly once.
// Work split: see conv_nchwc_spatial_split.
// Throws dnnfusion::Error (conv_nchwc_check) on unsupported shapes or invalid knobs for isa.
void conv2d_nchwc(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x,
                  const float* packed_w, const float* bias, const float* residual, Activation act,
                  float* y, const Parallel& par, ElementHook epilogue = {},
                  Isa isa = active_isa());

// conv2d_nchwc of (x * in_scale) without materializing the product: per scale, the packed
// weights' input-channel rows are scaled (conv(x * s, w) = conv(x, w * s) per input channel, zero
// padding included) into a scratch copy per image (one when a single scale serves them all), then
// the direct conv runs once over the batch, image n on its own copy. Pays
// when the weights are smaller than the activation (a squeeze-and-excitation gate feeding the
// projection conv: K x C weights against H x W x C activations). in_scale: NCHW[ic_bn]c-blocked
// [N or 1][ceil(C/ic_bn)][1][1][ic_bn] (scale_batch: 1 when one scale serves every image, else N);
// padded lanes are never read. groups == 1 only (throws otherwise). The epilogue sees the same
// start indices as conv2d_nchwc's (into the whole N-image y).
void conv2d_nchwc_scaled_input(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x,
                               const float* packed_w, const float* in_scale, int64_t scale_batch,
                               const float* bias, const float* residual, Activation act, float* y,
                               const Parallel& par, ElementHook epilogue = {},
                               Isa isa = active_isa());

}  // namespace dnnfusion::kernels
