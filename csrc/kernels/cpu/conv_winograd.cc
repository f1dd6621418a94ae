// Winograd F(2x2, 3x3) / F(4x4, 3x3) on NCHW[x]c: weight transform and packing, the choice heuristic, the driver
// (chunked or three-phase work split, GEMMs through the direct convolution's 1x1 tiles, epilogue
// hook) and the baseline build of the transforms. See conv_winograd.h for the contract.
#include "kernels/cpu/conv_winograd.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/conv_nchwc_ukernel.h"
#include "kernels/cpu/conv_winograd_transforms.h"
#include "kernels/cpu/prefetch_share.h"

namespace dnnfusion::kernels {

namespace wino_detail {
InputFn input_fn_baseline(int m, int64_t icb) { return pick_input(m, icb); }
OutputFn output_fn_baseline(int m, int64_t ocb) { return pick_output(m, ocb); }
}  // namespace wino_detail

namespace {

using wino_detail::Geom;
using nchwc_detail::NchwcTile;
using nchwc_detail::NchwcTileFn;

constexpr int kMaxRn = 32;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Geom geom(const Conv2dShape& s, const ConvNchwcKnobs& k) {
  Geom g{};
  g.N = s.N;
  g.C = s.C;
  g.H = s.H;
  g.W = s.W;
  g.K = s.K;
  g.OH = s.OH();
  g.OW = s.OW();
  g.m = k.winograd;
  g.TH = ceil_div(g.OH, g.m);
  g.TW = ceil_div(g.OW, g.m);
  g.pad_h = s.pad_h;
  g.pad_w = s.pad_w;
  g.icb = k.ic_bn;
  g.ocb = k.oc_bn;
  g.Cb = ceil_div(s.C, k.ic_bn);
  g.Kb = ceil_div(s.K, k.oc_bn);
  return g;
}

void check_tile(int m) {
  DNNF_CHECK(m == 2 || m == 4, "conv_winograd: output tile size (knob winograd) must be 2 (F(2x2, 3x3)) or 4 "
             "(F(4x4, 3x3)), got ", m);
}

// The (m+2)^2 GEMMs, [tiles x C] x [C x K] per transformed tap, in register tiles of up to rn_max
// tiles x oc_bn channels (balanced sizes).
class Gemms {
 public:
  Gemms(const Geom& g, Isa isa, const float* packed_w) : g_(g), w_(packed_w) {
    rn_max_ = std::min(conv_nchwc_max_reg_n(isa, static_cast<int>(g.ocb)), kMaxRn);
    for (int rn = 1; rn <= rn_max_; ++rn) fns_[rn] = nchwc_detail::pointwise_tile(isa, static_cast<int>(g.ocb), rn);
  }
  // The packed weights of tap xi, output block kb: Cb x ic_bn x oc_bn floats.
  const float* slice(int64_t xi, int64_t kb) const { return w_ + ((xi * g_.Kb + kb) * g_.Cb) * g_.icb * g_.ocb; }
  // m[xi * m_xi + kb * m_kb + (t - tb) * ocb] for tiles [t0, t1) from v laid out as InputFn writes it.
  // next_w: the weight slice this thread multiplies next (or null), fetched into L2 a share per
  // register tile, so a slice streamed from L3 is not waited for at the start of each item.
  void run(int xi, int64_t kb, int64_t t0, int64_t t1, const float* v, int64_t tb, int64_t v_xi, int64_t v_cb,
           float* m, int64_t m_xi, int64_t m_kb, const float* next_w = nullptr) const {
    const int64_t count = t1 - t0, groups = ceil_div(count, rn_max_), base = count / groups, extra = count % groups;
    const int64_t slice_bytes = g_.Cb * g_.icb * g_.ocb * static_cast<int64_t>(sizeof(float));
    NchwcTile t{};
    t.x_cb = v_cb;
    t.x_pos = g_.icb;
    t.w = slice(xi, kb);
    t.w_cb = g_.icb * g_.ocb;
    t.n_cb = g_.Cb;
    t.n_kh = t.n_kw = 1;
    t.ic_bn = g_.icb;
    t.ic_last = g_.C - (g_.Cb - 1) * g_.icb;
    t.oc_bn = static_cast<int>(g_.ocb);
    t.act = Activation::None;
    int64_t p = t0;
    for (int64_t i = 0; i < groups; ++i) {
      const int rn = static_cast<int>(base + (i < extra ? 1 : 0));
      t.x = v + xi * v_xi + (p - tb) * g_.icb;
      t.y = m + xi * m_xi + kb * m_kb + (p - tb) * g_.ocb;
      t.rn = rn;
      if (next_w) {
        const PrefetchShare sh = prefetch_share(next_w, slice_bytes, i, groups);
        t.pf = sh.first;
        t.pf_lines = sh.lines;
      }
      fns_[rn](t);
      p += rn;
    }
  }

 private:
  const Geom& g_;
  const float* w_;
  int rn_max_ = 1;
  NchwcTileFn fns_[kMaxRn + 1] = {};
};

// The epilogue over output block kb's positions of tiles [t0, t1): one call per output row run.
void run_epilogue(const Geom& g, const ElementHook& ep, float* y, int64_t kb, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1;) {
    const int64_t n = t / (g.TH * g.TW), th = t / g.TW % g.TH, tw = t % g.TW;
    const int64_t end = std::min(t1, t - tw + g.TW);  // the end of this tile row within the range
    const int64_t ow_a = g.m * tw, ow_b = std::min(g.m * (tw + end - t), g.OW);
    for (int64_t oh = g.m * th; oh < std::min(g.m * (th + 1), g.OH); ++oh) {
      const int64_t start = (((n * g.Kb + kb) * g.OH + oh) * g.OW + ow_a) * g.ocb;
      ep(y + start, start, (ow_b - ow_a) * g.ocb);
    }
    t = end;
  }
}

// Per-chunk scratch budget (V and M of one chunk, floats) and the packed-weight size up to which
// threads work on whole chunks; both keep a chunk's working set within a core's 2 MiB L2.
constexpr int64_t kChunkFloats = 256 * 1024;
constexpr int64_t kChunkedMaxWeightFloats = 256 * 1024;
// Most scratch the three-phase split holds (32 MiB by default; tests lower it to force groups).
std::atomic<int64_t> g_phase_floats{8 * 1024 * 1024};

}  // namespace

int64_t conv_winograd_phase_budget(int64_t floats) {
  DNNF_CHECK(floats >= 1, "conv_winograd_phase_budget: needs at least 1 float, got ", floats);
  return g_phase_floats.exchange(floats);
}

bool conv_winograd_fits(const Conv2dShape& s) {
  return s.groups == 1 && s.R == 3 && s.S == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dil_h == 1 &&
         s.dil_w == 1;
}

void conv_winograd_require_fits(const Conv2dShape& s, const char* who) {
  if (!conv_winograd_fits(s))
    DNNF_THROW(who, ": winograd needs groups=1, a 3x3 kernel, stride 1 and dilation 1 (got groups=", s.groups, ", ",
               s.R, "x", s.S, ", stride ", s.stride_h, "x", s.stride_w, ", dilation ", s.dil_h, "x", s.dil_w, ")");
}

int conv_winograd_tile(const Conv2dShape& s) {
  // Measured against the direct kernel with the same blocks (2 threads, Xeon, AVX-512; the
  // numbers in benchmarks/results/conv_winograd_*.txt). Below ~8 MFLOP the three passes and their
  // scratch cost more than the multiplies saved (128 -> 32 @ 7x7, 3.6 MFLOP: F2 0.88x; 32 @ 4x4:
  // 0.59x), and a narrow input (the RGB image) has too few channels to amortize its transform.
  if (!conv_winograd_fits(s) || s.C < 16 || s.K < 16) return 0;
  const double flops = 2.0 * s.N * s.K * s.C * 9 * s.OH() * s.OW();
  if (flops < 8e6) return 0;
  // F(4x4) does 1.78x fewer multiplies than F(2x2) but needs 2.25x the transformed weights and
  // 4x fewer, larger tiles: it wins once there are enough tiles to amortize the weights (ResNet
  // 128 @ 28x28 b1, 49 tiles: direct 920 us, F2 560, F4 418; 512 @ 7x7 b8, 32 tiles: 6613 / 4757 /
  // 3667) and loses below (256 @ 14x14 b1, 16 tiles: 732 / 435 / 449; 512 @ 7x7 b1, 4 tiles:
  // 828 / 773 / 844).
  const int64_t tiles4 = s.N * ((s.OH() + 3) / 4) * ((s.OW() + 3) / 4);
  return tiles4 >= 32 ? 4 : 2;
}

int64_t conv_winograd_packed_weight_floats(const Conv2dShape& s, const ConvNchwcKnobs& k) {
  const int64_t a = k.winograd + 2;
  return a * a * ceil_div(s.K, k.oc_bn) * ceil_div(s.C, k.ic_bn) * k.ic_bn * k.oc_bn;
}

void conv_winograd_pack_weight(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* w_kcrs, float* out) {
  conv_winograd_require_fits(s, "conv_winograd_pack_weight");
  DNNF_CHECK(k.ic_bn >= 1 && k.oc_bn >= 1, "conv_winograd_pack_weight: blocks must be positive (ic_bn=", k.ic_bn,
             " oc_bn=", k.oc_bn, ")");
  DNNF_CHECK(w_kcrs != nullptr && out != nullptr, "conv_winograd_pack_weight: null pointer");
  check_tile(k.winograd);
  const int64_t icb = k.ic_bn, ocb = k.oc_bn, Cb = ceil_div(s.C, icb), Kb = ceil_div(s.K, ocb);
  std::fill(out, out + conv_winograd_packed_weight_floats(s, k), 0.f);
  // u = G g G^T with Lavin & Gray's G for each tile size.
  static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  static const double G4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  const int A = k.winograd + 2;
  const double(*G)[3] = A == 4 ? G2 : G4;
  for (int64_t kk = 0; kk < s.K; ++kk)
    for (int64_t c = 0; c < s.C; ++c) {
      const float* g = w_kcrs + (kk * s.C + c) * 9;
      double tmp[6][3];
      for (int i = 0; i < A; ++i)
        for (int j = 0; j < 3; ++j) tmp[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
      for (int i = 0; i < A; ++i)
        for (int j = 0; j < A; ++j) {
          const double u = tmp[i][0] * G[j][0] + tmp[i][1] * G[j][1] + tmp[i][2] * G[j][2];
          const int64_t xi = A * i + j;
          out[(((xi * Kb + kk / ocb) * Cb + c / icb) * icb + c % icb) * ocb + kk % ocb] = static_cast<float>(u);
        }
    }
}

void conv2d_winograd_nchwc(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x, const float* packed_w,
                           const float* bias, const float* residual, Activation act, float* y, const Parallel& par,
                           ElementHook epilogue, Isa isa) {
  conv_winograd_require_fits(s, "conv2d_winograd_nchwc");
  check_tile(k.winograd);
  ConvNchwcKnobs direct = k;
  direct.winograd = 0;
  direct.reg_n = 1;
  conv_nchwc_check(s, direct, isa);
  DNNF_CHECK(x && packed_w && y, "conv2d_winograd_nchwc: null pointer");
  const Geom g = geom(s, k);
  const int64_t T = g.N * g.TH * g.TW;
  if (T == 0 || g.Kb == 0) return;
  wino_detail::InputFn in_fn;
  wino_detail::OutputFn out_fn;
  switch (isa) {
    case Isa::Avx512:
      in_fn = wino_detail::input_fn_avx512(g.m, g.icb);
      out_fn = wino_detail::output_fn_avx512(g.m, g.ocb);
      break;
    case Isa::Avx2:
      in_fn = wino_detail::input_fn_avx2(g.m, g.icb);
      out_fn = wino_detail::output_fn_avx2(g.m, g.ocb);
      break;
    default:
      in_fn = wino_detail::input_fn_baseline(g.m, g.icb);
      out_fn = wino_detail::output_fn_baseline(g.m, g.ocb);
  }
  const Gemms gemms(g, isa, packed_w);
  // Bias padded to whole blocks, so the last block's padded lanes add 0.
  std::vector<float> bias_pad;
  if (bias) {
    bias_pad.assign(static_cast<size_t>(g.Kb * g.ocb), 0.f);
    std::copy(bias, bias + s.K, bias_pad.begin());
  }
  const int64_t cfl = g.Cb * g.icb, kfl = g.Kb * g.ocb;
  auto out_block = [&](const float* m, int64_t tb, int64_t m_xi, int64_t kb, int64_t t0, int64_t t1) {
    out_fn(g, m, tb, m_xi, kb, t0, t1, bias ? bias_pad.data() + kb * g.ocb : nullptr, residual, act,
           std::min(g.ocb, g.K - kb * g.ocb), y);
    if (epilogue) run_epilogue(g, epilogue, y, kb, t0, t1);
  };
  const int threads = std::max(1, par.num_threads());
  const int64_t kTaps = (g.m + 2) * (g.m + 2);
  if (kTaps * cfl * kfl <= kChunkedMaxWeightFloats) {
    // Chunks of tiles, each transformed, multiplied and inverse-transformed by one thread in its
    // own scratch: V [taps][Cb][tc][icb], then per output block M [taps][tc][ocb].
    int64_t tc = std::max<int64_t>(8, kChunkFloats / (kTaps * (cfl + g.ocb)));
    tc = std::min(tc, ceil_div(T, 2 * threads));  // at least two chunks per thread to balance
    tc = std::max<int64_t>(tc, 1);
    const int64_t chunks = ceil_div(T, tc);
    par.parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      thread_local AlignedBuffer<float> scratch;  // aligned: tiles and products move as whole vectors
      float* v = scratch.get(static_cast<size_t>(kTaps * tc * (cfl + g.ocb)));
      float* m = v + kTaps * tc * cfl;
      const int64_t v_xi = g.Cb * tc * g.icb, m_xi = tc * g.ocb;
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t t0 = c * tc, t1 = std::min(T, t0 + tc);
        in_fn(g, x, t0, t1, v, t0, v_xi, tc * g.icb);
        for (int64_t kb = 0; kb < g.Kb; ++kb) {
          for (int xi = 0; xi < static_cast<int>(kTaps); ++xi) gemms.run(xi, kb, t0, t1, v, t0, v_xi, tc * g.icb, m, m_xi, 0);
          out_block(m, t0, m_xi, kb, t0, t1);
        }
      }
    });
    return;
  }
  // Three phases over groups of tiles (the whole layer unless that would take more than
  // conv_winograd_phase_budget of scratch: a large batch re-streams the weights per group instead of holding
  // hundreds of MB); V [taps][Cb][tg][icb] and M [taps][Kb][tg][ocb] in the caller's scratch.
  const int64_t tg = std::max<int64_t>(1, std::min(T, g_phase_floats.load() / (kTaps * (cfl + kfl))));
  thread_local AlignedBuffer<float> scratch;
  float* v = scratch.get(static_cast<size_t>(kTaps * tg * (cfl + kfl)));
  float* m = v + kTaps * tg * cfl;
  const int64_t v_xi = g.Cb * tg * g.icb, v_cb = tg * g.icb, m_xi = g.Kb * tg * g.ocb, m_kb = tg * g.ocb;
  for (int64_t tb = 0; tb < T; tb += tg) {
    const int64_t te = std::min(T, tb + tg), n = te - tb;
    par.parallel_for(n, std::max<int64_t>(1, 16 / g.Cb), [&](int64_t t0, int64_t t1) {
      in_fn(g, x, tb + t0, tb + t1, v, tb, v_xi, v_cb);
    });
    // (xi, kb) items, xi-major: a thread's contiguous share covers whole taps, so it streams only
    // those taps' weights. A single tile run per item keeps one weight slice hot across all tiles.
    par.parallel_for(kTaps * g.Kb, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        gemms.run(static_cast<int>(i / g.Kb), i % g.Kb, tb, te, v, tb, v_xi, v_cb, m, m_xi, m_kb,
                  i + 1 < i1 ? gemms.slice((i + 1) / g.Kb, (i + 1) % g.Kb) : nullptr);
    });
    // (output block, run of tiles within one tile row) items.
    const int64_t row0 = tb / g.TW, rows = (te - 1) / g.TW - row0 + 1;
    par.parallel_for(g.Kb * rows, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t kb = i / rows, r = row0 + i % rows;
        const int64_t t0 = std::max(tb, r * g.TW), t1 = std::min(te, (r + 1) * g.TW);
        out_block(m + kb * m_kb, tb, m_xi, kb, t0, t1);
      }
    });
  }
}

}  // namespace dnnfusion::kernels
