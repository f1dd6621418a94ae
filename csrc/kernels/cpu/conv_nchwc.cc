// NCHW[x]c direct convolution: checks, knob heuristics and tuning space, weight packing, layout
// transforms, the portable driver (work split, tile sizing, border staging, epilogue hook) and the
// scalar tiles. The vector tiles live in conv_nchwc_avx2.cc / conv_nchwc_avx512.cc. See
// conv_nchwc.h for the contract.
#include "kernels/cpu/conv_nchwc.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/conv_bf16x6.h"
#include "kernels/cpu/conv_nchwc_rows.h"
#include "kernels/cpu/conv_winograd.h"
#include "kernels/cpu/gemm_bf16x6.h"

namespace dnnfusion::kernels {

using nchwc_detail::NchwcTile;
using nchwc_detail::NchwcTileFn;

namespace {

constexpr int kScalarMaxBlock = 64;
constexpr int kScalarMaxRegN = 32;
constexpr int kMaxIcBn = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t padded(int64_t C, int64_t b) { return ceil_div(C, b) * b; }

bool is_depthwise(const Conv2dShape& s) { return s.groups > 1 && s.groups == s.C && s.K == s.C; }

bool is_grouped(const Conv2dShape& s) { return s.groups > 1 && !is_depthwise(s); }

// A grouped conv's output block kb reads the input channels of the groups its lanes belong to:
// [group_in_lo, group_in_lo + group_span) clipped to C, whole input blocks when
// conv_nchwc_group_blocks_fit holds.
int64_t group_span(const Conv2dShape& s, int64_t oc_bn) {
  const int64_t Cg = s.C / s.groups, Kg = s.K / s.groups;
  return Kg % oc_bn == 0 ? Cg : oc_bn / Kg * Cg;
}
int64_t group_in_lo(const Conv2dShape& s, int64_t oc_bn, int64_t kb) {
  return kb * oc_bn / (s.K / s.groups) * (s.C / s.groups);
}

// 1x1 without padding: every tap is inside the image, so there are no tap loops and no borders.
bool is_pointwise(const Conv2dShape& s) { return s.R == 1 && s.S == 1 && s.pad_h == 0 && s.pad_w == 0; }

// Pointwise with stride 1: input position p feeds output position p, so the whole plane is one
// run and tiles may span output rows.
bool is_flat(const Conv2dShape& s) {
  return !is_depthwise(s) && is_pointwise(s) && s.stride_h == 1 && s.stride_w == 1;
}

inline float act_scalar(float v, Activation act) {
  if (act == Activation::None) return v;
  v = v < 0.f ? 0.f : v;  // NaN stays NaN
  if (act == Activation::Relu6) v = v > 6.f ? 6.f : v;
  return v;
}

void scalar_store(const NchwcTile& t, const float* acc) {
  const int ocb = t.oc_bn;
  for (int j = 0; j < t.rn; ++j)
    for (int o = 0; o < ocb; ++o) {
      float v = acc[j * ocb + o];
      if (t.bias) v += t.bias[o];
      if (t.res) v += t.res[j * ocb + o];
      t.y[j * ocb + o] = act_scalar(v, t.act);
    }
}

// Portable tiles: same loop order and contract as the vector ones, run-time rn and oc_bn.
void scalar_conv_tile(const NchwcTile& t) {
  float acc[kScalarMaxRegN * kScalarMaxBlock];
  const int ocb = t.oc_bn, rn = t.rn;
  std::fill(acc, acc + rn * ocb, 0.f);
  for (int64_t cb = 0; cb < t.n_cb; ++cb)
    for (int64_t kh = 0; kh < t.n_kh; ++kh)
      for (int64_t kw = 0; kw < t.n_kw; ++kw) {
        const float* xk = t.x + cb * t.x_cb + kh * t.x_kh + kw * t.x_kw;
        const float* wk = t.w + cb * t.w_cb + kh * t.w_kh + kw * t.ic_bn * ocb;
        const int64_t icn = cb + 1 == t.n_cb ? t.ic_last : t.ic_bn;
        for (int64_t ic = 0; ic < icn; ++ic) {
          const float* wv = wk + ic * ocb;
          for (int j = 0; j < rn; ++j) {
            const float xs = t.row_len && j >= t.row_len ? xk[t.x_row + (j - t.row_len) * t.x_pos + ic]
                                                         : xk[j * t.x_pos + ic];
            float* a = acc + j * ocb;
            for (int o = 0; o < ocb; ++o) a[o] += xs * wv[o];
          }
        }
      }
  scalar_store(t, acc);
}

void scalar_dw_tile(const NchwcTile& t) {
  float acc[kScalarMaxRegN * kScalarMaxBlock];
  const int ocb = t.oc_bn, rn = t.rn;
  std::fill(acc, acc + rn * ocb, 0.f);
  for (int64_t kh = 0; kh < t.n_kh; ++kh)
    for (int64_t kw = 0; kw < t.n_kw; ++kw) {
      const float* xk = t.x + kh * t.x_kh + kw * t.x_kw;
      const float* wv = t.w + kh * t.w_kh + kw * ocb;
      for (int j = 0; j < rn; ++j) {
        const float* xv = xk + j * t.x_pos;
        float* a = acc + j * ocb;
        for (int o = 0; o < ocb; ++o) a[o] += xv[o] * wv[o];
      }
    }
  scalar_store(t, acc);
}

NchwcTileFn tile_fn(Isa isa, bool depthwise, int oc_bn, int rn, bool k1, bool unroll) {
  switch (isa) {
    case Isa::Avx512:
      return depthwise ? nchwc_detail::dw_tile_avx512(oc_bn, rn)
                       : nchwc_detail::conv_tile_avx512(oc_bn, rn, k1, unroll);
    case Isa::Avx2:
      return depthwise ? nchwc_detail::dw_tile_avx2(oc_bn, rn)
                       : nchwc_detail::conv_tile_avx2(oc_bn, rn, k1, unroll);
    case Isa::Scalar: break;
  }
  return depthwise ? &scalar_dw_tile : &scalar_conv_tile;
}

}  // namespace

NchwcTileFn nchwc_detail::pointwise_tile(Isa isa, int oc_bn, int rn) { return tile_fn(isa, false, oc_bn, rn, true, false); }

namespace {

NchwcTileFn tile_fn_rows2(Isa isa, int oc_bn, int64_t h) {
  if (h < 1 || h > kScalarMaxRegN) return nullptr;
  switch (isa) {
    case Isa::Avx512: return nchwc_detail::conv_tile_rows2_avx512(oc_bn, static_cast<int>(h));
    case Isa::Avx2: return nchwc_detail::conv_tile_rows2_avx2(oc_bn, static_cast<int>(h));
    case Isa::Scalar: break;
  }
  return 2 * h <= kScalarMaxRegN ? &scalar_conv_tile : nullptr;
}

}  // namespace

bool conv_nchwc_two_row_tiles(const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa) {
  if (is_depthwise(s) || is_grouped(s) || is_flat(s) || k.winograd) return false;
  const int64_t OW = s.OW();
  if (s.OH() < 2 || 2 * OW > k.reg_n) return false;
  const bool merged_kw_stem = ceil_div(s.C, k.ic_bn) == 1 && k.ic_bn == s.C && s.dil_w == 1 && s.S > 1;
  return !merged_kw_stem && tile_fn_rows2(isa, k.oc_bn, OW) != nullptr;
}

namespace {

// Floats of the input copy with its padding made explicit (pad_nchwc).
int64_t padded_copy_floats(const Conv2dShape& s, const ConvNchwcKnobs& k) {
  return s.N * ceil_div(s.C, k.ic_bn) * (s.H + 2 * s.pad_h) * (s.W + 2 * s.pad_w) * k.ic_bn;
}

// Floats of the zero-padded input copy conv2d_nchwc makes for a padded broadcast conv over a
// batch, or 0 when staging the edge tiles costs less. Per output block, each row stages the
// windows of its tiles that reach into the width padding (Cb x R x window columns x ic_bn floats
// each); the padded copy writes the input once, and tile-free rows above and below need no copy.
int64_t prepad_floats(const Conv2dShape& s, const ConvNchwcKnobs& k) {
  // One image: the copy is an extra pass and barrier in a short layer, and staging won. Measured
  // in-process, batch 1, 2 threads: resnet18 12.19 -> 11.94 and 11.97 -> 11.70 ms, resnet50
  // 30.29 -> 30.00 and 30.49 -> 30.32 ms; single convs 256x14x14 3x3 733-747 -> 710-716 us,
  // 512x7x7 838-849 -> 791-805 us. At batch 8 the two were within noise either way.
  if (s.N < 2) return 0;
  if (is_depthwise(s) || (s.pad_h == 0 && s.pad_w == 0) || is_flat(s)) return 0;
  const int64_t OW = s.OW(), rn = std::min<int64_t>(k.reg_n, OW), Cb = ceil_div(s.C, k.ic_bn);
  const int64_t Kb = ceil_div(s.K, k.oc_bn), cols = (rn - 1) * s.stride_w + (s.S - 1) * s.dil_w + 1;
  const int64_t edge_tiles = s.pad_w == 0 ? 0 : std::min<int64_t>(2, ceil_div(OW, rn));
  const int64_t staged = s.N * Kb * s.OH() * edge_tiles * Cb * s.R * cols * k.ic_bn;
  const int64_t copy = padded_copy_floats(s, k);
  return 2 * copy < staged ? copy : 0;
}

// x (NCHW[ic_bn]c, s.H x s.W) -> y with pad_h zero rows above and below and pad_w zero columns
// left and right.
void pad_nchwc(const float* x, const Conv2dShape& s, int64_t icb, float* y, const Parallel& par) {
  const int64_t Cb = ceil_div(s.C, icb), Hp = s.H + 2 * s.pad_h, Wp = s.W + 2 * s.pad_w;
  // Rows go out position-major (image, padded row, channel block), like conv2d_nchwc's
  // position-major items: a thread pads the rows it wrote one layer earlier and then convolves.
  par.parallel_for(s.N * Cb * Hp, std::max<int64_t>(1, 2048 / (Wp * icb)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t cb = i % Cb, hp = (i / Cb) % Hp, n = i / (Cb * Hp);
      const int64_t t = (n * Cb + cb) * Hp + hp;  // the row's index in y
      const int64_t h = hp - s.pad_h, img = n * Cb + cb;
      float* d = y + t * Wp * icb;
      if (h < 0 || h >= s.H) {
        std::fill(d, d + Wp * icb, 0.f);
        continue;
      }
      std::fill(d, d + s.pad_w * icb, 0.f);
      std::memcpy(d + s.pad_w * icb, x + (img * s.H + h) * s.W * icb, s.W * icb * sizeof(float));
      std::fill(d + (s.pad_w + s.W) * icb, d + Wp * icb, 0.f);
    }
  });
}

}  // namespace

namespace {
std::vector<int> isa_blocks(Isa isa) {
  if (isa == Isa::Avx512) return {8, 16, 32, 64};
  if (isa == Isa::Avx2) return {8, 16};
  std::vector<int> all;
  for (int b = 1; b <= kScalarMaxBlock; ++b) all.push_back(b);
  return all;
}
}  // namespace

bool conv_nchwc_supported(const Conv2dShape& s, std::string* why, Isa isa) {
  conv2d_check_shape(s);
  if (!is_grouped(s)) return true;
  // ic_bn = 1 always divides what it must, so the output block decides.
  for (int b : isa_blocks(isa))
    if (conv_nchwc_group_blocks_fit(s, 1, b)) return true;
  if (why)
    *why = detail::str_cat("conv_nchwc: grouped conv with groups=", s.groups, " (", s.C / s.groups, " input, ",
                           s.K / s.groups, " output channels per group): no ", isa_name(isa),
                           " output block (8, 16, 32 or 64 lanes) lies inside one group or holds whole groups"
                           "; use conv2d_nchw");
  return false;
}

bool conv_nchwc_group_blocks_fit(const Conv2dShape& s, int ic_bn, int oc_bn) {
  if (ic_bn < 1 || oc_bn < 1) return false;
  if (s.groups == 1) return true;
  if (is_depthwise(s)) return ic_bn == oc_bn;
  const int64_t Cg = s.C / s.groups, Kg = s.K / s.groups;
  if (Kg % oc_bn == 0) return Cg % ic_bn == 0;               // a block inside one group
  if (oc_bn % Kg == 0) return (oc_bn / Kg * Cg) % ic_bn == 0;  // whole groups per block
  return false;
}

double conv_nchwc_group_waste(const Conv2dShape& s, int oc_bn) {
  if (!is_grouped(s)) return 1.0;
  const int64_t Kg = s.K / s.groups;
  return Kg % oc_bn == 0 ? 1.0 : static_cast<double>(oc_bn) / static_cast<double>(Kg);
}

int conv_nchwc_max_reg_n(Isa isa, int oc_bn) {
  switch (isa) {
    case Isa::Avx512:
      // 32 vector registers: accumulators + weight vector(s); broadcasts are memory operands.
      if (oc_bn == 8 || oc_bn == 16) return 28;
      if (oc_bn == 32) return 14;
      if (oc_bn == 64) return 7;  // 28 accumulators + 4 weight vectors
      return 0;
    case Isa::Avx2:
      // 16 ymm: accumulators + weight vector(s) + one broadcast register.
      if (oc_bn == 8) return 12;
      if (oc_bn == 16) return 6;
      return 0;
    case Isa::Scalar:
      return oc_bn >= 1 && oc_bn <= kScalarMaxBlock ? kScalarMaxRegN : 0;
  }
  return 0;
}

void conv_nchwc_check(const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa) {
  std::string why;
  if (!conv_nchwc_supported(s, &why, isa)) DNNF_THROW(why);
  const char* allowed = isa == Isa::Avx512 ? "8, 16, 32 or 64"
                        : isa == Isa::Avx2 ? "8 or 16"
                                           : "1..64";
  const int max_rn = conv_nchwc_max_reg_n(isa, k.oc_bn);
  if (max_rn == 0)
    DNNF_THROW("conv_nchwc: oc_bn=", k.oc_bn, " is not available on ", isa_name(isa),
               " (allowed: ", allowed, ")");
  if (k.reg_n < 1 || k.reg_n > max_rn)
    DNNF_THROW("conv_nchwc: reg_n=", k.reg_n, " must be in [1, ", max_rn, "] for oc_bn=", k.oc_bn,
               " on ", isa_name(isa), " (register budget)");
  if (k.ic_bn < 1 || k.ic_bn > kMaxIcBn)
    DNNF_THROW("conv_nchwc: ic_bn=", k.ic_bn, " must be in [1, ", kMaxIcBn, "]");
  if (k.winograd != 0 && k.winograd != 2 && k.winograd != 4)
    DNNF_THROW("conv_nchwc: winograd=", k.winograd, " must be 0 (direct), 2 (F(2x2, 3x3)) or 4 (F(4x4, 3x3))");
  if (k.winograd) conv_winograd_require_fits(s, "conv_nchwc");
  if (k.amx) {
    if (k.winograd) DNNF_THROW("conv_nchwc: amx and winograd exclude each other");
    if (!conv_bf16x6_supported(s, k.ic_bn, k.oc_bn, &why)) DNNF_THROW("conv_nchwc: amx: ", why);
    if (isa != Isa::Avx512 || !bf16x6_available())
      DNNF_THROW("conv_nchwc: amx needs AMX-BF16 on this CPU and OS (and AVX-512 active, DNNFUSION_AMX not 0)");
  }
  if (is_depthwise(s) && k.ic_bn != k.oc_bn)
    DNNF_THROW("conv_nchwc: depthwise conv needs ic_bn == oc_bn (got ic_bn=", k.ic_bn,
               ", oc_bn=", k.oc_bn, ")");
  if (!conv_nchwc_group_blocks_fit(s, k.ic_bn, k.oc_bn))
    DNNF_THROW("conv_nchwc: grouped conv (groups=", s.groups, ", ", s.C / s.groups, " input and ", s.K / s.groups,
               " output channels per group) needs oc_bn to divide the output channels per group with ic_bn dividing "
               "the input channels per group, or oc_bn a multiple of the output channels per group with ic_bn "
               "dividing the input channels of the groups one output block spans (got ic_bn=",
               k.ic_bn, ", oc_bn=", k.oc_bn, ")");
}

ConvTileFamily conv_nchwc_tile_family() {
  static const ConvTileFamily family = [] {
    if (const char* env = std::getenv("DNNFUSION_CONV_TILES")) {
      const std::string v(env);
      if (v == "64x7") return ConvTileFamily::Oc64x7;
      if (v == "32x14") return ConvTileFamily::Oc32x14;
      DNNF_THROW("DNNFUSION_CONV_TILES=", v, " (allowed: 64x7, 32x14)");
    }
    // AMD Zen 5 (family 1Ah): 32 x 14 measured faster on ResNet-50's layers (dnnfusion_conv_bench
    // tuned it on 20 of 23) and in the model (same process, interleaved, 2 threads): resnet50
    // 3.4-1.0% faster at batch 1, 5.5% at batch 8; resnet18 and the mobile networks within noise.
    // On Xeons 64 x 7 is the faster one (the measurements at its branch below), and on Zen 4
    // (family 19h, 256-bit FMA data paths) too: ResNet-50's 23 layers summed, as a fraction of the
    // same run's conv2d_nchw time (this guest's speed moved by 20% between runs), 0.645-0.663 with
    // 64 x 7 against 0.665-0.690 with 32 x 14 in alternating dnnfusion_conv_bench runs. Other CPUs
    // keep 64 x 7 until measured.
    const CpuId& id = cpu_id();
    return id.amd && id.family >= 0x1A ? ConvTileFamily::Oc32x14 : ConvTileFamily::Oc64x7;
  }();
  return family;
}

int conv_nchwc_tile_reg_n(const Conv2dShape& s, Isa isa, int oc_bn) {
  int rn = 14;
  if (isa == Isa::Scalar) {
    rn = 8;
  } else if (isa == Isa::Avx2) {
    rn = oc_bn == 16 ? 6 : 12;
  } else if (oc_bn >= 32) {
    // 14 positions over 32 lanes, against 7, measured interleaved (2 threads, Zen 5): flat 1x1
    // convs 1.00-1.06x (672->112 at 14x14 0.558 -> 0.525 ms at batch 8; on a Xeon earlier
    // 384->64 at 14x14 1.2-1.3x, 1024->256 1.14-1.19x, C <= 256 within noise), depthwise 3x3 and
    // 5x5 1.00-1.25x (96 channels at 112x112 stride 2, batch 8: 1.40 -> 1.12 ms); inside
    // conv2d_nchwc_expand_dw both together 1.02-1.10x at batch 8. Convs over an RGB image (at most
    // 4 input channels per group) too: their tap loop is short, so the tile's stores and setup
    // weigh more; 3x3 stride 2 3 -> 32 at 224x224 0.58 -> 0.50 ms at batch 8, 7x7 3 -> 64 1.03x.
    rn = oc_bn == 32 && (is_depthwise(s) || is_flat(s) || s.C / s.groups <= 4) ? 14 : 7;
  }
  return std::min(rn, conv_nchwc_max_reg_n(isa, oc_bn));
}

ConvNchwcKnobs conv_nchwc_default_knobs(const Conv2dShape& s, Isa isa, ConvTileFamily tiles) {
  std::string why;
  if (!conv_nchwc_supported(s, &why, isa)) DNNF_THROW(why);
  ConvNchwcKnobs k;
  const bool dw = is_depthwise(s);
  if (is_grouped(s)) {
    // ic_bn == oc_bn (the neighbours' block, no re-blocking) where the groups allow it. Cost per
    // useful FMA: the lanes wasted on other groups' channels (conv_nchwc_group_waste) and on
    // padding, doubled for half-width 8-lane blocks on AVX-512; ties go to the wider block (more
    // FMAs per broadcast).
    const std::vector<int> blocks = isa_blocks(isa);
    double best = 0;
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      const int b = *it;
      if (!conv_nchwc_group_blocks_fit(s, 1, b)) continue;
      int ic = b;  // else the widest smaller input block that fits (1 always does)
      while (!conv_nchwc_group_blocks_fit(s, ic, b)) ic /= 2;
      const double cost = conv_nchwc_group_waste(s, b) * (isa == Isa::Avx512 && b == 8 ? 2.0 : 1.0) *
                          static_cast<double>(padded(s.K, b)) / static_cast<double>(s.K);
      if (best == 0 || cost < best - 1e-9) best = cost, k.ic_bn = ic, k.oc_bn = b;
    }
    DNNF_CHECK(best > 0, "conv_nchwc_default_knobs: no block for groups=", s.groups);  // supported() said one fits
    k.reg_n = conv_nchwc_tile_reg_n(s, isa, k.oc_bn);
    k.unroll_ker = true;
    return k;
  }
  // The knobs of a two-row 32-lane tile, with the ic_bn chosen below for a 32-lane block.
  const ConvNchwcKnobs two_rows{s.C < 32 ? static_cast<int>(s.C) : 32, 32, static_cast<int>(2 * s.OW()), true};
  if (isa == Isa::Avx2 && s.K > 8) {
    // Two ymm per position x 6 positions (12 accumulators): one broadcast per two FMAs; one ymm x
    // 12 positions needs a broadcast per FMA and measured ~35% slower on ResNet-50.
    k.oc_bn = 16;
    k.reg_n = 6;
  } else if (isa == Isa::Avx512 && s.R * s.S > 1 && s.K > 16 && nchwc_block_fits(s.K, 32) &&
             conv_nchwc_two_row_tiles(s, two_rows, isa)) {
    // Output rows of at most 7 positions (ResNet's last stage): two rows per tile, two zmm x
    // 2 * OW positions (whatever the predicate accepts), so each weight vector fetched from
    // L2 feeds twice the FMAs of a one-row 64 x 7 tile. Measured on a Xeon, 2 threads: with
    // weights hot, 512 -> 512 3x3 at 7x7 63.5 -> 69.4% of the FMA peak, the stride-2 one from
    // 14x14 47.5 -> 55.4%; whole models interleaved in one process, resnet50 29.0 -> 28.4 ms
    // (batch 1) and 188.8 -> 185.2 ms (batch 8), resnet18 10.48 -> 10.27 ms, outputs identical.
    k.oc_bn = 32;
    k.reg_n = two_rows.reg_n;
  } else if (isa == Isa::Avx512 && s.K % 64 == 0 && !dw && tiles == ConvTileFamily::Oc32x14) {
    k.oc_bn = 32;
    k.reg_n = 14;
  } else if (isa == Isa::Avx512 && s.K % 64 == 0 && (!is_flat(s) || s.C <= 512)) {
    // Four zmm per position x 7 positions (28 accumulators + 4 weight vectors): a broadcast feeds
    // four FMAs instead of two. Measured interleaved against 32 x 7 (2 threads, Xeon, AVX-512):
    // ResNet-50's 3x3 layers 1.04-1.37x (stride 2 included), its 7x7 stem 1.12x, VGG's 3x3 at
    // 56x56 1.24x, 1x1 convs with C <= 512 1.05-1.13x, depthwise 3x3 1.13-1.55x. A 1x1 conv over
    // more input channels streams a larger weight slice per tile (1024 -> 256: 0.88x): 32 x 14
    // below halves that traffic.
    k.oc_bn = 64;
    k.reg_n = 7;
  } else if (isa == Isa::Avx512 && !dw && s.K > 16 && nchwc_block_fits(s.K, 32) &&
             (padded(s.K, 32) <= padded(s.K, 16) || is_pointwise(s))) {
    // Measured on ResNet-50 (Zen 4, benchmarks/results/conv_kernels_*.txt): two zmm per position
    // x 7 positions beats one zmm x 14..28 on every 3x3 layer (halves the broadcasts per FMA and
    // keeps the input window small), and 7 divides the 56/28/14/7 widths. Taken while it pads no
    // more channels than a 16-block would: 24 -> 32 beats three half-width 8-blocks (even on Zen
    // 4, whose ymm FMAs run at the zmm rate: 1x1 144 -> 24 at 56x56, 2 threads, 174 against 252
    // us; 240 -> 40 at 28x28 in 16-blocks 101 against 116-128 us in 8-blocks), but 40 runs
    // in three 16-blocks (48) rather than two 32-blocks (64). A 1x1 conv takes it even when it
    // pads more: two FMAs per broadcast outweigh up to a third more lanes (measured on a Xeon,
    // 2 threads: 672 -> 112 at 14x14 143 -> 95 us, 480 -> 112 98 -> 67 us, 40 -> 240 at 28x28
    // 82 -> 63 us, 24 -> 144 at 56x56 125 -> 104 us; mobilenet_v3_large 1.06x end to end).
    k.oc_bn = 32;
    // A flat 1x1 conv's tiles span rows, so 7 | width buys nothing there; 14 positions halve the
    // weight traffic per FMA (see conv_nchwc_tile_reg_n).
    k.reg_n = conv_nchwc_tile_reg_n(s, isa, k.oc_bn);
  } else if (isa == Isa::Avx512 && s.K > 8 && nchwc_block_fits(s.K, 16)) {
    // One zmm per position; an 8-block would use half-width ymm FMAs (half the FLOP/cycle), so
    // padding up to half the channels (12, 24 (depthwise), 40, 72) still pays.
    k.oc_bn = 16;
    k.reg_n = 14;
  } else {
    // Narrow layers: a wide block would be mostly padding.
    k.oc_bn = s.K <= 8 ? 8 : 16;
    k.reg_n = isa == Isa::Scalar ? 8 : conv_nchwc_max_reg_n(isa, k.oc_bn) >= 14 ? 14 : 12;
  }
  if (dw) {
    k.ic_bn = k.oc_bn;
  } else {
    // Matching the producer's block (the default oc_bn) avoids re-blocking between layers; a
    // narrow input (the RGB image) is one block of exactly C channels, with no padding FMAs.
    k.ic_bn = s.C < k.oc_bn ? static_cast<int>(s.C) : k.oc_bn;
  }
  k.unroll_ker = true;
  return k;
}

std::vector<ConvNchwcKnobs> conv_nchwc_candidate_knobs(const Conv2dShape& s, Isa isa) {
  const ConvNchwcKnobs def = conv_nchwc_default_knobs(s, isa);
  std::vector<ConvNchwcKnobs> out{def};
  auto add = [&](const ConvNchwcKnobs& k) {
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  };
  std::vector<int> oc_bns;
  if (isa == Isa::Avx512) oc_bns = {8, 16, 32, 64};
  else if (isa == Isa::Avx2) oc_bns = {8, 16};
  else oc_bns = {4, 8, 16, 32};
  std::vector<int> ic_all;
  for (int b : {4, 8, 16, 32, 64})
    if (s.C % b == 0) ic_all.push_back(b);
  if (s.C <= 64) ic_all.push_back(static_cast<int>(s.C));
  const int64_t OW = is_flat(s) ? s.OH() * s.OW() : s.OW();
  for (int ocb : oc_bns) {
    const int max_rn = conv_nchwc_max_reg_n(isa, ocb);
    std::vector<int> rns{max_rn};
    for (int r : {28, 16, 14, 8, 7, 4, 2})
      if (r <= max_rn) rns.push_back(r);
    if (OW <= max_rn) rns.push_back(static_cast<int>(OW));
    std::vector<int> ics = is_depthwise(s) ? std::vector<int>{ocb} : ic_all;
    for (int icb : ics) {
      if (!conv_nchwc_group_blocks_fit(s, icb, ocb)) continue;
      for (int rn : rns)
        for (bool unroll : {true, false}) {
          if (is_pointwise(s) && !unroll) continue;  // no kw loop to unroll
          add({icb, ocb, rn, unroll});
        }
    }
  }
  return out;
}

bool nchwc_block_fits(int64_t C, int b) {
  if (b <= 0 || C <= 0) return false;
  return padded(C, b) == C || 2 * padded(C, b) <= 3 * C;
}

int64_t conv_nchwc_packed_weight_floats(const Conv2dShape& s, const ConvNchwcKnobs& k) {
  if (k.winograd) return conv_winograd_packed_weight_floats(s, k);
  if (k.amx) return conv_bf16x6_packed_weight_floats(s);
  const int64_t Kb = ceil_div(s.K, k.oc_bn);
  if (is_depthwise(s)) return Kb * s.R * s.S * k.oc_bn;
  if (is_grouped(s)) return Kb * (group_span(s, k.oc_bn) / k.ic_bn) * s.R * s.S * k.ic_bn * k.oc_bn;
  return Kb * ceil_div(s.C, k.ic_bn) * s.R * s.S * k.ic_bn * k.oc_bn;
}

void conv_nchwc_pack_weight(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* w_kcrs,
                            float* out) {
  std::string why;
  if (!conv_nchwc_supported(s, &why, Isa::Scalar)) DNNF_THROW(why);  // packing fits any ISA's blocks
  DNNF_CHECK(k.ic_bn >= 1 && k.oc_bn >= 1, "conv_nchwc_pack_weight: blocks must be positive (ic_bn=",
             k.ic_bn, " oc_bn=", k.oc_bn, ")");
  DNNF_CHECK(w_kcrs != nullptr && out != nullptr, "conv_nchwc_pack_weight: null pointer");
  if (k.winograd) return conv_winograd_pack_weight(s, k, w_kcrs, out);
  if (k.amx) return conv_bf16x6_pack_weight(s, w_kcrs, out);
  const int64_t ocb = k.oc_bn, icb = k.ic_bn, RS = s.R * s.S;
  std::fill(out, out + conv_nchwc_packed_weight_floats(s, k), 0.f);
  if (is_depthwise(s)) {
    for (int64_t kk = 0; kk < s.K; ++kk)
      for (int64_t rs = 0; rs < RS; ++rs)
        out[((kk / ocb) * RS + rs) * ocb + kk % ocb] = w_kcrs[kk * RS + rs];
    return;
  }
  if (is_grouped(s)) {
    DNNF_CHECK(conv_nchwc_group_blocks_fit(s, k.ic_bn, k.oc_bn), "conv_nchwc_pack_weight: blocks ic_bn=", k.ic_bn,
               " oc_bn=", k.oc_bn, " do not fit groups=", s.groups);
    // Per output block, the input channels of its groups; entries across groups stay zero.
    const int64_t Cg = s.C / s.groups, Kg = s.K / s.groups, nspan = group_span(s, ocb) / icb;
    for (int64_t kk = 0; kk < s.K; ++kk) {
      const int64_t kb = kk / ocb, base = kk / Kg * Cg - group_in_lo(s, ocb, kb);  // kk's group, in kb's span
      for (int64_t cg = 0; cg < Cg; ++cg) {
        const int64_t c = base + cg;
        for (int64_t rs = 0; rs < RS; ++rs)
          out[(((kb * nspan + c / icb) * RS + rs) * icb + c % icb) * ocb + kk % ocb] = w_kcrs[(kk * Cg + cg) * RS + rs];
      }
    }
    return;
  }
  const int64_t Cb = ceil_div(s.C, icb);
  for (int64_t kk = 0; kk < s.K; ++kk)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t rs = 0; rs < RS; ++rs)
        out[((((kk / ocb) * Cb + c / icb) * RS + rs) * icb + c % icb) * ocb + kk % ocb] =
            w_kcrs[(kk * s.C + c) * RS + rs];
}

bool conv_nchwc_spatial_split(const Conv2dShape& s, const ConvNchwcKnobs& k) {
  // Every thread streams all of the weights when split by position: past about half an L2 that
  // costs more than the locality saves (ResNet-50's 3x3 layers at 14x14 and 7x7, 2.4-9.4 MB).
  // Measured at batch 1, 2 threads, against block-major everywhere (with the pool's fixed
  // shares): ResNet-50 31.9 -> 30.2 ms, DenseNet-121 27.1 -> 24.3 ms, MobileNet-V3 3.65 -> 3.46 ms;
  // position-major everywhere: ResNet-50 37.8 ms.
  // A full 1 MiB is already past it: ResNet-50's 256 -> 1024 1x1 convs at 14x14 (1 MiB of
  // weights) measured 0.43 ms position-major, 0.37 ms block-major in the model.
  constexpr int64_t kMaxWeightBytes = 1 << 20;
  return is_depthwise(s) || conv_nchwc_packed_weight_floats(s, k) * 4 < kMaxWeightBytes;
}

int64_t nchwc_floats(int64_t N, int64_t C, int64_t H, int64_t W, int c_bn) {
  DNNF_CHECK(c_bn >= 1, "nchwc: block size c_bn=", c_bn, " must be >= 1");
  return N * ceil_div(C, c_bn) * c_bn * H * W;
}

namespace {
void check_layout_args(const char* what, const float* x, int64_t N, int64_t C, int64_t H,
                       int64_t W, int c_bn, const float* y) {
  DNNF_CHECK(N >= 0 && C >= 0 && H >= 0 && W >= 0, what, ": negative size (N=", N, " C=", C,
             " H=", H, " W=", W, ")");
  DNNF_CHECK(c_bn >= 1, what, ": block size ", c_bn, " must be >= 1");
  DNNF_CHECK(N * C * H * W == 0 || (x != nullptr && y != nullptr), what, ": null pointer");
}
}  // namespace

void nchw_to_nchwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int c_bn, float* y,
                   const Parallel& par) {
  check_layout_args("nchw_to_nchwc", x, N, C, H, W, c_bn, y);
  const int64_t Cb = ceil_div(C, c_bn), HW = H * W;
  // One task per (n, channel block, row): reads c_bn input rows, writes one blocked row.
  par.parallel_for(N * Cb * H, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, W * c_bn)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t t = b; t < e; ++t) {
                       const int64_t h = t % H, cb = (t / H) % Cb, n = t / (H * Cb);
                       float* dst = y + (t * W) * c_bn;
                       for (int64_t c = 0; c < c_bn; ++c) {
                         const int64_t ch = cb * c_bn + c;
                         if (ch < C) {
                           const float* src = x + (n * C + ch) * HW + h * W;
                           for (int64_t w = 0; w < W; ++w) dst[w * c_bn + c] = src[w];
                         } else {
                           for (int64_t w = 0; w < W; ++w) dst[w * c_bn + c] = 0.f;
                         }
                       }
                     }
                   });
}

void nchwc_to_nchw(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int c_bn, float* y,
                   const Parallel& par) {
  check_layout_args("nchwc_to_nchw", x, N, C, H, W, c_bn, y);
  const int64_t Cb = ceil_div(C, c_bn), HW = H * W;
  par.parallel_for(N * Cb * H, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, W * c_bn)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t t = b; t < e; ++t) {
                       const int64_t h = t % H, cb = (t / H) % Cb, n = t / (H * Cb);
                       const float* src = x + (t * W) * c_bn;
                       const int64_t cend = std::min<int64_t>(c_bn, C - cb * c_bn);
                       for (int64_t c = 0; c < cend; ++c) {
                         float* dst = y + (n * C + cb * c_bn + c) * HW + h * W;
                         for (int64_t w = 0; w < W; ++w) dst[w] = src[w * c_bn + c];
                       }
                     }
                   });
}

void nchwc_to_nchwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, int c_in,
                    int c_out, float* y, const Parallel& par) {
  check_layout_args("nchwc_to_nchwc", x, N, C, H, W, c_in, y);
  DNNF_CHECK(c_out >= 1, "nchwc_to_nchwc: output block size ", c_out, " must be >= 1");
  const int64_t Cbi = ceil_div(C, c_in), Cbo = ceil_div(C, c_out), HW = H * W;
  par.parallel_for(N * Cbo * H, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, W * c_out)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t t = b; t < e; ++t) {
                       const int64_t h = t % H, cbo = (t / H) % Cbo, n = t / (H * Cbo);
                       float* dst = y + (t * W) * c_out;
                       // Per position, the output block is a few runs of channels that are
                       // contiguous in one input block: copy run by run (channel by channel
                       // with strided stores ran 3x slower than the generated re-block loop).
                       for (int64_t c = 0; c < c_out;) {
                         const int64_t ch = cbo * c_out + c;
                         if (ch >= C) {
                           for (int64_t w = 0; w < W; ++w)
                             for (int64_t q = c; q < c_out; ++q) dst[w * c_out + q] = 0.f;
                           break;
                         }
                         const int64_t off = ch % c_in;
                         const int64_t run = std::min({int64_t{c_in} - off, int64_t{c_out} - c, C - ch});
                         const float* src = x + ((n * Cbi + ch / c_in) * HW + h * W) * c_in + off;
                         for (int64_t w = 0; w < W; ++w) {
                           const float* sp = src + w * c_in;
                           float* dp = dst + w * c_out + c;
                           for (int64_t q = 0; q < run; ++q) dp[q] = sp[q];
                         }
                         c += run;
                       }
                     }
                   });
}

namespace nchwc_detail {

namespace {
// Zeroes lanes [from, ocb) of `positions` consecutive ocb-lane positions. A plain loop: GCC turns
// a per-position std::fill into a memset call for a few floats each (8 per position for 72 or
// 120 channels in 16-lane blocks), ~1% of mobilenet_v3_large's call in calls alone (perf).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
void zero_padded_lanes(float* y, int64_t positions, int64_t ocb, int64_t from) {
  for (int64_t p = 0; p < positions; ++p, y += ocb)
    for (int64_t c = from; c < ocb; ++c) y[c] = 0.f;
}
}  // namespace

static_assert(kScalarMaxRegN <= 32, "ConvRows::fns_ holds reg_n up to 32");

ConvRows::ConvRows(const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa, const float* packed_w,
                   const float* bias, Activation act)
    : s_(s), dw_(is_depthwise(s)), flat_(is_flat(s)), icb_(k.ic_bn), ocb_(k.oc_bn), rn_max_(k.reg_n),
      packed_w_(packed_w), act_(act) {
  const int64_t W = s.W, S = s.S;
  Cb_ = dw_ ? ceil_div(s.C, ocb_) : ceil_div(s.C, icb_);
  if (is_grouped(s)) {
    // A grouped conv is a plain one per output block over only its groups' input blocks.
    group_span_ = group_span(s, k.oc_bn);
    Cb_ = group_span_ / icb_;
  }
  Kb_ = ceil_div(s.K, ocb_);
  xb_ = dw_ ? ocb_ : icb_;
  w_blk_ = dw_ ? s.R * S * ocb_ : Cb_ * s.R * S * icb_ * ocb_;
  k_tail_ = s.K % ocb_;
  for (int rn = 1; rn <= rn_max_; ++rn) {
    fns_[rn] = tile_fn(isa, dw_, k.oc_bn, rn, is_pointwise(s), k.unroll_ker);
    DNNF_CHECK(fns_[rn] != nullptr, "conv2d_nchwc: no ", isa_name(isa), " tile for oc_bn=", ocb_, " reg_n=", rn);
  }
  // The last block of a 32-lane conv that uses at most 16 of its lanes (K = 72, 80, 112, 144, ...)
  // runs tiles over those 16 only: a sixth to an eighth of such a conv's FMAs were on padding.
  if (isa == Isa::Avx512 && ocb_ == 32 && k_tail_ != 0 && k_tail_ <= 16 && !group_span_) {
    for (int rn = 1; rn <= rn_max_; ++rn)
      half_fns_[rn] = dw_ ? dw_tile_half_avx512(rn) : conv_tile_half_avx512(rn, is_pointwise(s), k.unroll_ker);
    half_tail_ = true;
  }
  if (bias) {
    bias_pad_.assign(static_cast<size_t>(Kb_ * ocb_), 0.f);
    std::copy(bias, bias + s.K, bias_pad_.begin());
  }
  const int64_t cols_max = (rn_max_ - 1) * s.stride_w + (S - 1) * s.dil_w + 1;
  edge_lo_ = ceil_div(s.pad_w, s.stride_w);
  const int64_t last_in = W - 1 + s.pad_w - (S - 1) * s.dil_w;  // last tap start that stays inside
  edge_hi_ = last_in < 0 ? 0 : last_in / s.stride_w + 1;
  stage_floats_ = (dw_ ? 1 : Cb_) * s.R * cols_max * xb_;
  // One input block of exactly C channels (an RGB stem): a kernel row's taps read S*C
  // consecutive floats, in the weights' order too, so the kw and ic loops run as one loop of S*C
  // steps instead of S loops of C (cache-hot, 2 threads: 3 -> 16 3x3/2 at 224 55 -> 49 us,
  // 3 -> 64 3x3 at 224 584 -> 560 us, the 7x7/2 ResNet stem within noise).
  merge_kw_ = !dw_ && !group_span_ && !flat_ && Cb_ == 1 && icb_ == s.C && s.dil_w == 1 && S > 1;
  if (s.pad_h == 0 && s.pad_w == 0 && conv_nchwc_two_row_tiles(s, k, isa))
    fn_rows2_ = tile_fn_rows2(isa, k.oc_bn, s.OW());
}

RunStreams run_streams(const float* residual, const ElementHook& epilogue, float* y, int64_t offset, int64_t y_bytes) {
  RunStreams r;
  int n = 0;
  for (const float* p : {residual, epilogue.same_index[0], epilogue.same_index[1]})
    if (p != nullptr && n < 2) r.run[n++] = p + offset;
  if (y_bytes > kPrefetchOutputBytes) r.out = y + offset;
  return r;
}

namespace {
// The whole lines holding positions [from, to) of a run whose position 0 is at `run` (oc_bn
// floats per position).
PrefetchShare run_lines(const float* run, int64_t from, int64_t to, int64_t ocb) {
  if (run == nullptr || to <= from) return {};
  const auto lo = reinterpret_cast<uintptr_t>(run + from * ocb) & ~uintptr_t{63};
  const auto hi = reinterpret_cast<uintptr_t>(run + to * ocb);
  return {reinterpret_cast<const char*>(lo), static_cast<int64_t>((hi - lo + 63) / 64)};
}

// NchwcTile::res_pf and y_pf: positions [from, to) of each stream.
void set_stream_prefetch(NchwcTile& t, const RunStreams& streams, int64_t from, int64_t to, int64_t ocb) {
  for (int k = 0; k < 2; ++k) {
    const PrefetchShare l = run_lines(streams.run[k], from, to, ocb);
    t.res_pf[k] = l.first;
    t.res_pf_lines[k] = l.lines;
  }
  const PrefetchShare l = run_lines(streams.out, from, to, ocb);
  t.y_pf = l.first;
  t.y_pf_lines = l.lines;
}
}  // namespace

void ConvRows::run_pair(int64_t kb, int64_t row, const float* xn, float* y_pair, const float* res_pair,
                        const PrefetchShare* item, const float* w, const RunStreams* streams) const {
  const Conv2dShape& s = s_;
  const int64_t icb = icb_, ocb = ocb_, OW = s.OW();
  DNNF_CHECK(fn_rows2_ != nullptr, "conv2d_nchwc: no two-row tile for this conv");
  NchwcTile t{};
  t.x = xn + row * s.stride_h * s.W * icb;
  t.x_cb = s.H * s.W * icb;
  t.x_kh = s.dil_h * s.W * icb;
  t.x_kw = s.dil_w * icb;
  t.x_pos = s.stride_w * icb;
  t.x_row = s.stride_h * s.W * icb;
  t.w = (w ? w : packed_w_) + kb * w_blk_;
  t.w_cb = s.R * s.S * icb * ocb;
  t.w_kh = s.S * icb * ocb;
  t.n_cb = Cb_;
  t.n_kh = s.R;
  t.n_kw = s.S;
  t.ic_bn = icb;
  t.ic_last = s.C - (Cb_ - 1) * icb;
  t.bias = bias_pad_.empty() ? nullptr : bias_pad_.data() + kb * ocb;
  t.res = res_pair;
  set_stream_prefetch(t, streams ? *streams : RunStreams{}, 0, 2 * OW, ocb);
  t.y = y_pair;
  t.rn = static_cast<int>(2 * OW);
  t.row_len = static_cast<int>(OW);
  t.oc_bn = static_cast<int>(ocb);
  t.act = act_;
  if (item) {
    t.pf = item->first;
    t.pf_lines = item->lines;
  }
  fn_rows2_(t);
  if (k_tail_ != 0 && kb == Kb_ - 1)
    zero_padded_lanes(y_pair, 2 * OW, ocb, k_tail_);
}

void ConvRows::run_images(int64_t kb, int64_t n0, int64_t n1, const float* x, int64_t x_img, float* y_tmp,
                          const float* res_tmp) const {
  DNNF_CHECK(flat_ && s_.H * s_.W == 1 && n1 - n0 >= 1 && n1 - n0 <= rn_max_ && !group_span_,
             "conv2d_nchwc: images as tile positions need a 1x1 conv over 1x1 planes and at most reg_n images");
  NchwcTile t{};
  t.x = x + n0 * x_img;
  t.x_cb = icb_;  // a 1x1 plane: an image's channel blocks are consecutive
  t.x_pos = x_img;
  t.w = packed_w_ + kb * w_blk_;
  t.w_cb = icb_ * ocb_;
  t.n_cb = Cb_;
  t.n_kh = t.n_kw = 1;
  t.ic_bn = icb_;
  t.ic_last = s_.C - (Cb_ - 1) * icb_;
  t.bias = bias_pad_.empty() ? nullptr : bias_pad_.data() + kb * ocb_;
  t.res = res_tmp;
  t.y = y_tmp;
  t.rn = static_cast<int>(n1 - n0);
  t.oc_bn = static_cast<int>(ocb_);
  t.act = act_;
  (half_tail_ && kb == Kb_ - 1 ? half_fns_ : fns_)[t.rn](t);
  if (k_tail_ != 0 && kb == Kb_ - 1) zero_padded_lanes(y_tmp, n1 - n0, ocb_, k_tail_);
}

void ConvRows::run(int64_t kb, int64_t row, int64_t p_begin, int64_t p_end, const float* xn, int64_t x_row0,
                   float* y_run, const float* res_run, const PrefetchShare* item, std::vector<float>& stage,
                   const float* w, const RunStreams* streams) const {
  const Conv2dShape& s = s_;
  const int64_t H = s.H, W = s.W, R = s.R, S = s.S, icb = icb_, ocb = ocb_, xb = xb_, rn_max = rn_max_;
  const bool dw = dw_, flat = flat_;
  // Taps that fall above or below the image are dropped for the whole row.
  const int64_t ih0 = row * s.stride_h - s.pad_h;
  int64_t kh_lo = 0, kh_hi = R;
  if (!flat) {
    if (ih0 < 0) kh_lo = ceil_div(-ih0, s.dil_h);
    kh_hi = H - 1 - ih0 < 0 ? 0 : std::min(R, (H - 1 - ih0) / s.dil_h + 1);
  }
  const int64_t n_kh = std::max<int64_t>(0, kh_hi - kh_lo);
  const int64_t x_cb = H * W * xb;  // a broadcast conv's input channel blocks are whole planes

  NchwcTile t{};
  const float* w_row = (w ? w : packed_w_) + kb * w_blk_ + kh_lo * S * (dw ? ocb : icb * ocb);
  t.w = w_row;
  t.w_cb = R * S * icb * ocb;
  t.w_kh = S * (dw ? ocb : icb * ocb);
  // merge_kw_: one loop of S*C channel steps per kernel row instead of S loops of C.
  const int64_t n_kw = merge_kw_ ? 1 : S;
  int64_t ic_last = merge_kw_ ? S * icb : dw ? icb : s.C - (Cb_ - 1) * icb;
  t.n_cb = dw ? 1 : Cb_;
  if (group_span_) {
    // Only this block's groups: their input blocks, the last one clipped at C.
    const int64_t lo = group_in_lo(s, ocb, kb);
    const int64_t n_in = std::min(group_span_, s.C - lo);
    t.n_cb = ceil_div(n_in, icb);
    ic_last = n_in - (t.n_cb - 1) * icb;
    xn += (lo / icb) * x_cb;
  }
  t.n_kh = n_kh;
  t.n_kw = n_kw;
  t.ic_bn = icb;
  t.ic_last = ic_last;
  t.x_pos = s.stride_w * xb;
  t.x_kw = s.dil_w * xb;
  t.bias = bias_pad_.empty() ? nullptr : bias_pad_.data() + kb * ocb;
  t.oc_bn = static_cast<int>(ocb);
  t.act = act_;

  const int64_t cnt = p_end - p_begin;
  const RunStreams pf_streams = streams ? *streams : RunStreams{};
  // Depthwise rows are cut into edge positions (one per tile, only the taps inside the image)
  // and an interior read in place: staging the edge tiles' windows took ~30% of a depthwise
  // conv's time (dw 3x3 on 144x56x56: 133 -> 116 us). Broadcast convs keep one staged tile per
  // edge: their single-position tiles are load-bound and lost more than the copies cost.
  const bool split_edges = dw;
  int64_t cuts[4] = {p_begin, p_begin, p_end, p_end};
  if (split_edges) {
    cuts[1] = std::min(p_end, std::max(p_begin, edge_lo_));
    cuts[2] = std::min(p_end, std::max(cuts[1], edge_hi_));
  }
  int64_t seg_tiles[3], nt = 0;
  for (int i = 0; i < 3; ++i)  // edge positions: one per tile, each with its own tap range
    nt += seg_tiles[i] = i != 1 && split_edges ? cuts[i + 1] - cuts[i] : ceil_div(cuts[i + 1] - cuts[i], rn_max);
  int64_t p0 = p_begin;
  for (int64_t ti = 0, sg = 0, in_seg = 0; ti < nt; ++ti, ++in_seg) {
    while (in_seg == seg_tiles[sg]) ++sg, in_seg = 0;
    const int64_t sc = cuts[sg + 1] - cuts[sg], snt = seg_tiles[sg];
    const int64_t rn = sc / snt + (in_seg < sc % snt ? 1 : 0);  // balanced tile sizes
    const int64_t off = (p0 - p_begin) * ocb;
    if (item) {  // this tile's part of the item's prefetch share
      const PrefetchShare sh = prefetch_share(item->first, item->lines * 64, ti, nt);
      t.pf = sh.first;
      t.pf_lines = sh.lines;
    }
    t.rn = static_cast<int>(rn);
    t.y = y_run + off;
    t.res = res_run ? res_run + off : nullptr;
    // The first tile of a run fetches its own residual too; the others only the next tile's.
    set_stream_prefetch(t, pf_streams, p0 - p_begin + (ti == 0 ? 0 : rn),
                          std::min(p_end, p0 + rn + rn_max) - p_begin, ocb);

    if (flat) {
      t.x = xn + p0 * xb;
      t.x_cb = x_cb;
      t.x_kh = 0;
    } else {
      const int64_t iw_first = p0 * s.stride_w - s.pad_w;
      const int64_t iw_last = (p0 + rn - 1) * s.stride_w - s.pad_w + (S - 1) * s.dil_w;
      const int64_t ih_first = ih0 + kh_lo * s.dil_h;
      const int64_t xr = ih_first - x_row0;  // the first tap row's row in xn
      if (n_kh == 0) {
        t.x = xn;  // no tap inside the image: the tile only adds bias/residual
      } else if (split_edges && sg != 1) {
        // One edge position: only the taps inside the image width, read in place.
        const int64_t kw_lo = iw_first >= 0 ? 0 : ceil_div(-iw_first, s.dil_w);
        const int64_t kw_hi = W - 1 - iw_first < 0 ? 0 : std::min(S, (W - 1 - iw_first) / s.dil_w + 1);
        t.n_kw = std::max<int64_t>(0, kw_hi - kw_lo);
        t.x = t.n_kw ? xn + (xr * W + iw_first + kw_lo * s.dil_w) * xb : xn;
        t.x_cb = x_cb;
        t.x_kh = s.dil_h * W * xb;
        t.w = w_row + kw_lo * (dw ? ocb : icb * ocb);
      } else if (iw_first >= 0 && iw_last < W) {
        t.x = xn + (xr * W + iw_first) * xb;
        t.x_cb = x_cb;
        t.x_kh = s.dil_h * W * xb;
      } else {
        // The tile's input window with the width padding made explicit.
        const int64_t cols = iw_last - iw_first + 1;
        const int64_t lo = std::min(cols, std::max<int64_t>(0, -iw_first));  // all-padding windows too
        const int64_t hi = std::max<int64_t>(lo, std::min(cols, W - iw_first));
        if (stage.empty()) stage.resize(static_cast<size_t>(stage_floats_));
        float* st = stage.data();
        for (int64_t cb = 0; cb < t.n_cb; ++cb)
          for (int64_t kh = 0; kh < n_kh; ++kh) {
            float* d = st + (cb * n_kh + kh) * cols * xb;
            std::fill(d, d + lo * xb, 0.f);
            if (hi > lo) {
              const float* src = xn + cb * x_cb + ((xr + kh * s.dil_h) * W + iw_first + lo) * xb;
              std::memcpy(d + lo * xb, src, (hi - lo) * xb * sizeof(float));
            }
            std::fill(d + hi * xb, d + cols * xb, 0.f);
          }
        t.x = st;
        t.x_cb = n_kh * cols * xb;
        t.x_kh = cols * xb;
      }
    }
    (half_tail_ && kb == Kb_ - 1 ? half_fns_ : fns_)[rn](t);
    t.n_kw = n_kw;
    t.w = w_row;
    p0 += rn;
  }
  if (k_tail_ != 0 && kb == Kb_ - 1)
    zero_padded_lanes(y_run, cnt, ocb, k_tail_);
}

}  // namespace nchwc_detail

namespace {
// Segments per plane of a flat 1x1 conv (P positions over OH rows): each at least 4 tiles long
// and no more than the rows, then raised (while every segment still holds a whole tile) until the
// work items (`blocks` output blocks x segments) split evenly over the threads. Why: at 7x7 a
// plane is one segment, and 5 or 15 output blocks on 2 threads left one thread a block behind;
// even counts measured 0.69-0.71 -> 0.61-0.65 ms in mobilenet_v3_large's 7x7 steps and
// 1.64-1.75 -> 1.51-1.58 ms in efficientnet_b0's (batch 1, 2 threads, step profile).
int64_t balanced_segments(int64_t blocks, int64_t P, int64_t OH, int reg_n, int threads) {
  const int64_t first = std::max<int64_t>(1, std::min<int64_t>(OH, P / (4 * reg_n)));
  if (threads <= 1 || (blocks * first) % threads == 0) return first;
  for (int64_t n = first + 1; n <= first * threads && P / n >= reg_n; ++n)
    if ((blocks * n) % threads == 0) return n;
  return first;
}

// A 1x1 conv over 1x1 planes at batch N (a squeeze-excitation gate's convs): the images are the
// tiles' positions, so each weight vector is loaded once per reg_n images instead of once per
// image. The weights of such a conv (up to 1 MB: 960 x 240 in mobilenet_v3_large) stream from
// L3 on every call; one tile per image re-read them N times (0.063 ms per conv at batch 8).
// Outputs go through a small per-thread buffer, as the tile's positions are oc_bn floats apart.
void run_images_as_positions(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x, const float* packed_w,
                             const float* bias, const float* residual, Activation act, float* y, const Parallel& par,
                             ElementHook epilogue, Isa isa) {
  const nchwc_detail::ConvRows rows_of(s, k, isa, packed_w, bias, act);
  const int64_t ocb = k.oc_bn, Kb = ceil_div(s.K, ocb), rn = k.reg_n;
  const int64_t x_img = nchwc_floats(1, s.C, 1, 1, k.ic_bn), y_img = Kb * ocb, chunks = ceil_div(s.N, rn);
  par.parallel_for(Kb * chunks, 1, [&](int64_t ib, int64_t ie) {
    std::vector<float> buf(static_cast<size_t>(2 * rn * ocb));
    float *y_tmp = buf.data(), *res_tmp = y_tmp + rn * ocb;
    for (int64_t it = ib; it < ie; ++it) {
      const int64_t kb = it / chunks, n0 = it % chunks * rn, n1 = std::min(s.N, n0 + rn);
      if (residual)
        for (int64_t n = n0; n < n1; ++n)
          std::memcpy(res_tmp + (n - n0) * ocb, residual + n * y_img + kb * ocb, static_cast<size_t>(ocb) * 4);
      rows_of.run_images(kb, n0, n1, x, x_img, y_tmp, residual ? res_tmp : nullptr);
      for (int64_t n = n0; n < n1; ++n) {
        float* yn = y + n * y_img + kb * ocb;
        std::memcpy(yn, y_tmp + (n - n0) * ocb, static_cast<size_t>(ocb) * 4);
        if (epilogue) epilogue(yn, yn - y, ocb);
      }
    }
  });
}

// The direct algorithm over all N images; image n uses the weights at packed_w + n * w_img
// (w_img == 0: one set for all). One pass over every image's work items, so that a batch keeps
// both threads busy even where one image alone has few output blocks and rows.
void run_direct(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x, const float* packed_w,
                int64_t w_img, const float* bias, const float* residual, Activation act, float* y,
                const Parallel& par, ElementHook epilogue, Isa isa) {
  // Two-row tiles read every tap of both rows, so a padded conv runs them on a padded copy.
  const bool rows2 = conv_nchwc_two_row_tiles(s, k, isa), padded_conv = s.pad_h > 0 || s.pad_w > 0;
  if (const int64_t floats = rows2 && padded_conv ? padded_copy_floats(s, k) : prepad_floats(s, k); floats > 0) {
    // Cheaper to pad the whole input once than to stage every edge tile's window for each of
    // the Kb output blocks (ResNet-50's 3x3 layers at 28x28, 14x14 and 7x7: 1-3% faster).
    thread_local AlignedBuffer<float> padded;  // 64-byte aligned, like every NCHW[x]c tensor the tiles read
    float* const xpad = padded.get(static_cast<size_t>(floats));
    Conv2dShape ps = s;
    ps.H = s.H + 2 * s.pad_h;
    ps.W = s.W + 2 * s.pad_w;
    ps.pad_h = ps.pad_w = 0;
    pad_nchwc(x, s, k.ic_bn, xpad, par);
    run_direct(ps, k, xpad, packed_w, w_img, bias, residual, act, y, par, epilogue, isa);
    return;
  }
  const bool dw = is_depthwise(s), flat = is_flat(s);
  if (flat && s.H * s.W == 1 && s.N > 1 && w_img == 0 && !dw && !is_grouped(s))
    return run_images_as_positions(s, k, x, packed_w, bias, residual, act, y, par, epilogue, isa);
  const nchwc_detail::ConvRows rows_of(s, k, isa, packed_w, bias, act);
  const int64_t icb = k.ic_bn, ocb = k.oc_bn, OH = s.OH(), OW = s.OW();
  const int64_t Kb = ceil_div(s.K, ocb);
  const int64_t x_img = nchwc_floats(1, s.C, s.H, s.W, dw ? ocb : icb), y_img = nchwc_floats(1, s.K, OH, OW, ocb);
  const int64_t w_blk = rows_of.weight_block_floats();

  // Work items: (n, oc block, row, segment). A row is an output row, except for flat 1x1 convs
  // whose single "row" is the whole plane, cut into segments so that small-K layers still give
  // every thread work. Consecutive items share the oc block, so its weights stay in L2.
  // Two-row tiles: a "row" item is a pair of output rows (the last one alone when OH is odd).
  const int64_t rows = flat ? 1 : rows2 ? ceil_div(OH, 2) : OH, P = flat ? OH * OW : OW;
  const int64_t nseg = flat ? balanced_segments(s.N * Kb, P, OH, k.reg_n, par.num_threads()) : 1;
  const int64_t items = s.N * Kb * rows * nseg;
  const bool spatial = conv_nchwc_spatial_split(s, k);
  par.parallel_for(items, 1, [&](int64_t ib, int64_t ie) {
    std::vector<float> stage;
    for (int64_t it = ib; it < ie; ++it) {
      int64_t seg, row, kb;
      if (spatial) {
        kb = it % Kb;
        seg = (it / Kb) % nseg;
        row = (it / (Kb * nseg)) % rows;
      } else {
        seg = it % nseg;
        row = (it / nseg) % rows;
        kb = (it / (nseg * rows)) % Kb;
      }
      const int64_t n = it / (nseg * rows * Kb);
      const int64_t p_begin = seg * P / nseg, p_end = (seg + 1) * P / nseg;
      const bool pair = rows2 && 2 * row + 1 < OH;
      if (rows2) row *= 2;
      const float* xn = x + n * x_img + (dw ? kb * s.H * s.W * ocb : 0);
      float* y_run = y + n * y_img + ((kb * OH + row) * OW + p_begin) * ocb;
      // This item's share of the next oc block's weights (items of one block run back to back,
      // mostly on one thread), fetched while this block computes: without it the first tile of
      // each block waits on memory for the whole weight slice.
      const float* wn = packed_w + n * w_img;
      const bool prefetch = !dw && kb + 1 < Kb;
      const PrefetchShare item = prefetch ? prefetch_share(wn + (kb + 1) * w_blk, w_blk * 4,
                                                           (rows2 ? row / 2 : row) * nseg + seg, rows * nseg)
                                          : PrefetchShare{};
      const float* res_run = residual ? residual + (y_run - y) : nullptr;
      const nchwc_detail::RunStreams streams =
          nchwc_detail::run_streams(residual, epilogue, y, y_run - y, s.N * y_img * static_cast<int64_t>(sizeof(float)));
      if (pair)
        rows_of.run_pair(kb, row, xn, y_run, res_run, prefetch ? &item : nullptr, wn, &streams);
      else
        rows_of.run(kb, row, p_begin, p_end, xn, 0, y_run, res_run, prefetch ? &item : nullptr, stage, wn, &streams);
      if (epilogue) epilogue(y_run, y_run - y, (pair ? 2 * OW : p_end - p_begin) * ocb);
    }
  });
}

void check_direct_args(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x, const float* packed_w,
                       float* y, Isa isa) {
  conv_nchwc_check(s, k, isa);
  if (!isa_supported(isa))
    DNNF_THROW("conv2d_nchwc: this CPU cannot run ", isa_name(isa), " kernels");
  DNNF_CHECK(x != nullptr && packed_w != nullptr && y != nullptr,
             "conv2d_nchwc: x, packed_w and y must not be null");
}
}  // namespace

void conv2d_nchwc(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x,
                  const float* packed_w, const float* bias, const float* residual, Activation act,
                  float* y, const Parallel& par, ElementHook epilogue, Isa isa) {
  check_direct_args(s, k, x, packed_w, y, isa);
  if (k.winograd) return conv2d_winograd_nchwc(s, k, x, packed_w, bias, residual, act, y, par, epilogue, isa);
  if (k.amx) return conv2d_bf16x6_nchwc(s, k.ic_bn, k.oc_bn, x, packed_w, bias, residual, act, y, par, epilogue);
  run_direct(s, k, x, packed_w, 0, bias, residual, act, y, par, epilogue, isa);
}

void conv2d_nchwc_scaled_input(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x,
                               const float* packed_w, const float* in_scale, int64_t scale_batch,
                               const float* bias, const float* residual, Activation act, float* y,
                               const Parallel& par, ElementHook epilogue, Isa isa) {
  check_direct_args(s, k, x, packed_w, y, isa);
  DNNF_CHECK(s.groups == 1, "conv2d_nchwc_scaled_input: groups must be 1 (got ", s.groups, ")");
  DNNF_CHECK(!k.winograd && !k.amx, "conv2d_nchwc_scaled_input: needs the direct algorithm (winograd=false, amx=false)");
  DNNF_CHECK(in_scale != nullptr, "conv2d_nchwc_scaled_input: in_scale must not be null");
  DNNF_CHECK(scale_batch == 1 || scale_batch == s.N, "conv2d_nchwc_scaled_input: scale_batch must be 1 or N=", s.N,
             " (got ", scale_batch, ")");
  const int64_t icb = k.ic_bn, ocb = k.oc_bn, Cb = ceil_div(s.C, icb), Kb = ceil_div(s.K, ocb);
  const int64_t rows = Kb * Cb * s.R * s.S;  // weight rows of ic_bn x oc_bn floats, per set
  const int64_t wn = conv_nchwc_packed_weight_floats(s, k);
  // One scaled copy of the weights per scale (per image, or one for all), then a single pass over
  // the whole batch: one conv call per image left a 14x14 projection conv's few work items per
  // image unevenly split over the threads (mobilenet_v3_large at batch 8: 1.30 -> 1.16 ms). The
  // copies together are about the size of x at most: the fold is planned where K*R*S <= H*W.
  // 64-byte aligned, as packed weights are: the tiles load them as whole vectors (from a
  // std::vector, 16 bytes off, every load split across two cache lines).
  thread_local AlignedBuffer<float> scaled;
  float* dst = scaled.get(static_cast<size_t>(wn * scale_batch));
  par.parallel_for(rows * scale_batch, std::max<int64_t>(1, 4096 / (icb * ocb)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t img = r / rows, wr = r % rows, cb = (wr / (s.R * s.S)) % Cb;
      const float* sc = in_scale + img * Cb * icb;
      const float* src = packed_w + wr * icb * ocb;
      float* d = dst + img * wn + wr * icb * ocb;
      for (int64_t ic = 0; ic < icb; ++ic) {
        const float f = cb * icb + ic < s.C ? sc[cb * icb + ic] : 0.f;  // padded lanes: unread
        for (int64_t o = 0; o < ocb; ++o) d[ic * ocb + o] = src[ic * ocb + o] * f;
      }
    }
  });
  run_direct(s, k, x, dst, scale_batch > 1 ? wn : 0, bias, residual, act, y, par, epilogue, isa);
}

}  // namespace dnnfusion::kernels
