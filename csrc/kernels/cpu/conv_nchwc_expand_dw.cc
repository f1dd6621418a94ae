// The fused expand + activation + depthwise kernel: checks, the band split, the per-thread row
// window and the activation dispatch. The rows themselves run through conv2d_nchwc's ConvRows.
#include "kernels/cpu/conv_nchwc_expand_dw.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/conv_nchwc_rows.h"
#include "kernels/cpu/elementwise.h"  // exp_f32

namespace dnnfusion::kernels {

namespace {

// The window of expanded rows one thread keeps; rows of 112 x 32 lanes (14 KB) give 8 rows.
constexpr int64_t kWindowBytes = 128 * 1024;
// With the projection fused: every channel block's window and depthwise rows, per thread.
constexpr int64_t kBlockBytes = 384 * 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Hardswish and SiLU over a window chunk (the tiles applied relu/relu6 already). Baseline code
// vectorizes these loops with SSE at best and calls exp_f32 per float for SiLU (4x slower than the
// whole expand_dw kernel otherwise is), so AVX2 and AVX-512 have their own (conv_nchwc_avx*.cc).
void activate(float* p, int64_t n, ExpandAct act, Isa isa) {
  if (act != ExpandAct::Hardswish && act != ExpandAct::Silu) return;
  if (isa == Isa::Avx512) {
    nchwc_detail::activate_inplace_avx512(p, n, act == ExpandAct::Hardswish ? 0 : 1);
  } else if (isa == Isa::Avx2) {
    nchwc_detail::activate_inplace_avx2(p, n, act == ExpandAct::Hardswish ? 0 : 1);
  } else if (act == ExpandAct::Hardswish) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = p[i] + 3.f;
      p[i] = p[i] * (v < 0.f ? 0.f : (v > 6.f ? 6.f : v)) * (1.f / 6.f);  // NaN falls through
    }
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] / (1.f + exp_f32(-p[i]));
  }
}

// sums[l] += the row's sum over its `positions` of lane l. A row's own sum first, so a long
// image adds rows of similar size instead of single values to a growing total.
void add_row_sums(const float* row, int64_t positions, int64_t b, float* sums, Isa isa) {
  if (isa == Isa::Avx512 && b % 16 == 0) return nchwc_detail::row_channel_sums_avx512(row, positions, b, sums);
  if (isa != Isa::Scalar && b % 8 == 0) return nchwc_detail::row_channel_sums_avx2(row, positions, b, sums);
  float acc[64] = {};
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t l = 0; l < b; ++l) acc[l] += row[p * b + l];
  for (int64_t l = 0; l < b; ++l) sums[l] += acc[l];
}

Activation tile_activation(ExpandAct a) {
  return a == ExpandAct::Relu ? Activation::Relu : a == ExpandAct::Relu6 ? Activation::Relu6 : Activation::None;
}

}  // namespace

const char* expand_act_name(ExpandAct a) {
  switch (a) {
    case ExpandAct::None: return "none";
    case ExpandAct::Relu: return "relu";
    case ExpandAct::Relu6: return "relu6";
    case ExpandAct::Hardswish: return "hardswish";
    case ExpandAct::Silu: return "silu";
  }
  return "?";
}

ExpandAct expand_act_from_name(const std::string& name) {
  for (ExpandAct a : {ExpandAct::None, ExpandAct::Relu, ExpandAct::Relu6, ExpandAct::Hardswish, ExpandAct::Silu})
    if (name == expand_act_name(a)) return a;
  DNNF_THROW("conv2d_nchwc_expand_dw: activation '", name, "' is not one of none, relu, relu6, hardswish, silu");
}

void conv_nchwc_expand_dw_check(const Conv2dShape& e, const ConvNchwcKnobs& ke, const Conv2dShape& d,
                                const ConvNchwcKnobs& kd, Isa isa) {
  conv_nchwc_check(e, ke, isa);
  conv_nchwc_check(d, kd, isa);
  if (e.groups != 1)
    DNNF_THROW("conv2d_nchwc_expand_dw: the first conv must have groups 1 (got ", e.groups, ")");
  if (!(d.groups == d.C && d.C == d.K && d.groups > 1))
    DNNF_THROW("conv2d_nchwc_expand_dw: the second conv must be depthwise (groups == C == K; got groups=", d.groups,
               ", C=", d.C, ", K=", d.K, ")");
  if (d.C != e.K || d.N != e.N || d.H != e.OH() || d.W != e.OW())
    DNNF_THROW("conv2d_nchwc_expand_dw: the depthwise conv's input (", d.N, "x", d.C, "x", d.H, "x", d.W,
               ") is not the first conv's output (", e.N, "x", e.K, "x", e.OH(), "x", e.OW(), ")");
  if (ke.oc_bn != kd.oc_bn)
    DNNF_THROW("conv2d_nchwc_expand_dw: the expand output block (oc_bn=", ke.oc_bn,
               ") must be the depthwise block (", kd.oc_bn, ")");
}

namespace {

// What both entry points derive from the two convs: H x W is the first conv's output, the plane
// a window holds rows of. With pad_rows, window rows carry the depthwise conv's width padding as
// zero positions on each side, so its rows run as interior tiles only; unpadded, each edge
// position of a row is a tile of its own (two per side for 5x5). Kernels alone, 2 threads, Zen 4:
// expand + dw 5x5 at 28x28 (40 -> 240) 192 -> 181 us, at 14x14 (112 -> 672) 228 -> 213 us; for
// 3x3 it was level (56x56 to 7x7) or 2% slower (stride 2 at 112x112), so only pads of 2 or more
// use it (padded_rows()).
struct Geometry {
  int64_t N, H, W, b, Mb, OH, OW, sh, taps_h, pad, row_floats, x_img;
  bool flat;  // a 1x1 stride-1 unpadded first conv computes a run of rows as one run of positions
  Geometry(const Conv2dShape& e, const ConvNchwcKnobs& ke, const Conv2dShape& d, const ConvNchwcKnobs& kd,
           bool pad_rows)
      : N(e.N), H(e.OH()), W(e.OW()), b(kd.oc_bn), Mb(ceil_div(e.K, kd.oc_bn)), OH(d.OH()), OW(d.OW()),
        sh(d.stride_h), taps_h((d.R - 1) * d.dil_h + 1), pad(pad_rows ? d.pad_w : 0),
        row_floats((e.OW() + 2 * pad) * kd.oc_bn), x_img(nchwc_floats(1, e.C, e.H, e.W, ke.ic_bn)),
        flat(e.R == 1 && e.S == 1 && e.stride_h == 1 && e.stride_w == 1 && e.pad_h == 0 && e.pad_w == 0) {}
  static bool padded_rows(const Conv2dShape& d) { return d.pad_w >= 2; }
  // The depthwise conv as it reads the window: over rows widened by the padding, without it.
  Conv2dShape dw_over_window(const Conv2dShape& d) const {
    Conv2dShape w = d;
    w.W = d.W + 2 * pad;
    w.pad_w = d.pad_w - pad;
    return w;
  }
  // Output rows per chunk whose window of expanded rows fits `bytes` (at least one row).
  int64_t chunk_rows(int64_t bytes) const {
    return std::max<int64_t>(1, (std::max<int64_t>(taps_h, bytes / (row_floats * 4)) - taps_h) / sh + 1);
  }
  int64_t window_rows(int64_t chunk) const { return (chunk - 1) * sh + taps_h; }
};

// Bands of output rows for `blocks_per_image` items per image band: the fewest that keep every
// thread busy, counting the expand rows a band's top edge recomputes against the idle time of an
// uneven last round.
int64_t choose_bands(const Geometry& g, int64_t blocks_per_image, int64_t T) {
  int64_t nb = 1;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t cand = 1; cand <= std::min<int64_t>(g.OH, 16); ++cand) {
    const int64_t band = ceil_div(g.OH, cand);
    const double rows = static_cast<double>(std::min(g.H, band * g.sh + std::max<int64_t>(0, g.taps_h - g.sh)) + band);
    const double cost = static_cast<double>(ceil_div(g.N * blocks_per_image * cand, T)) * rows;
    if (cost < best * 0.97) best = cost, nb = cand;  // a near tie goes to fewer bands
  }
  return nb;
}

// One channel block's window of expanded rows [lo, hi) (image rows of the first conv's output),
// kept across the chunks of a band so rows shared with the next chunk are moved, not recomputed.
struct RowWindow {
  float* rows;
  int64_t lo = 0, hi = 0;
};

// Makes w hold the activated expanded rows [need_lo, need_hi) of block kb of image xn.
// continuing: w holds rows of the same band's previous chunk.
void fill_window(const Geometry& g, const nchwc_detail::ConvRows& expand_rows, ExpandAct act, Isa isa, int64_t kb,
                 const float* xn, int64_t need_lo, int64_t need_hi, bool continuing, RowWindow& w,
                 std::vector<float>& stage) {
  int64_t from = need_lo;
  if (continuing && need_lo < w.hi) {
    std::memmove(w.rows, w.rows + (need_lo - w.lo) * g.row_floats, static_cast<size_t>((w.hi - need_lo) * g.row_floats) * 4);
    from = w.hi;
  }
  w.lo = need_lo;
  if (need_hi > from) {
    float* dst = w.rows + (from - w.lo) * g.row_floats;
    if (g.flat && g.pad == 0) {
      expand_rows.run(kb, 0, from * g.W, need_hi * g.W, xn, 0, dst, nullptr, nullptr, stage);
    } else {
      const int64_t edge = g.pad * g.b;
      for (int64_t r = from; r < need_hi; ++r) {
        float* row = dst + (r - from) * g.row_floats;
        std::fill(row, row + edge, 0.f);
        std::fill(row + g.row_floats - edge, row + g.row_floats, 0.f);
        if (g.flat)  // row r of the plane: positions [r * W, (r + 1) * W) of the one flat run
          expand_rows.run(kb, 0, r * g.W, (r + 1) * g.W, xn, 0, row + edge, nullptr, nullptr, stage);
        else
          expand_rows.run(kb, r, 0, g.W, xn, 0, row + edge, nullptr, nullptr, stage);
      }
    }
    activate(dst, (need_hi - from) * g.row_floats, act, isa);  // act(0) = 0 for each: the padding stays 0
  }
  w.hi = std::max(need_hi, from);
}

// The expanded rows output rows [o0, o1) of the depthwise conv read.
std::pair<int64_t, int64_t> rows_needed(const Geometry& g, const Conv2dShape& d, int64_t o0, int64_t o1) {
  const int64_t lo = std::clamp<int64_t>(o0 * g.sh - d.pad_h, 0, g.H);
  return {lo, std::clamp<int64_t>((o1 - 1) * g.sh - d.pad_h + g.taps_h, lo, g.H)};
}

}  // namespace

void conv2d_nchwc_expand_dw(const Conv2dShape& e, const ConvNchwcKnobs& ke, const Conv2dShape& d,
                            const ConvNchwcKnobs& kd, const float* x, const float* w_expand, const float* b_expand,
                            ExpandAct act, const float* w_dw, const float* b_dw, ExpandAct out_act, float* y,
                            float* y_mean, const Parallel& par, ElementHook epilogue, Isa isa) {
  conv_nchwc_expand_dw_check(e, ke, d, kd, isa);
  if (!isa_supported(isa)) DNNF_THROW("conv2d_nchwc_expand_dw: this CPU cannot run ", isa_name(isa), " kernels");
  DNNF_CHECK(x != nullptr && w_expand != nullptr && w_dw != nullptr && y != nullptr,
             "conv2d_nchwc_expand_dw: x, the weights and y must not be null");
  DNNF_CHECK(y_mean == nullptr || kd.oc_bn <= 64, "conv2d_nchwc_expand_dw: the channel mean needs oc_bn <= 64");
  const nchwc_detail::ConvRows expand_rows(e, ke, isa, w_expand, b_expand, tile_activation(act));
  const Geometry g(e, ke, d, kd, Geometry::padded_rows(d));
  const nchwc_detail::ConvRows dw_rows(g.dw_over_window(d), kd, isa, w_dw, b_dw, tile_activation(out_act));
  const int64_t N = g.N, b = g.b, Mb = g.Mb, OH = g.OH, OW = g.OW;
  const int64_t y_img = nchwc_floats(1, e.K, OH, OW, b), y_bytes = N * y_img * static_cast<int64_t>(sizeof(float));
  const int64_t chunk = g.chunk_rows(kWindowBytes), win_rows = g.window_rows(chunk);

  const int64_t T = std::max(1, par.num_threads());
  int64_t nb = choose_bands(g, Mb, T);
  // At least 4 items per thread while bands keep 8 output rows: right after an idle gap one vCPU
  // can run slow for milliseconds, and only spare items let the other take up its share.
  while (N * Mb * nb < 4 * T && ceil_div(OH, nb + 1) >= 8 && nb < 16) ++nb;
  // Whole bands per thread (while bands keep 8 rows): with items band-major, thread t's share of
  // the items is then a band of rows of every channel block, the rows the spatially split 1x1
  // conv before it wrote on the same core (see conv_nchwc_spatial_split); measured 1-4% on
  // mobilenet_v2/v3 at batch 1.
  if (N < T && nb % T != 0 && ceil_div(OH, ceil_div(nb, T) * T) >= 8) nb = ceil_div(nb, T) * T;

  // y_mean: each item sums its rows into its own slot; the slots are added per image afterwards.
  std::vector<float> item_sums(y_mean ? static_cast<size_t>(N * Mb * nb * b) : 0, 0.f);

  // The pool gives each thread a contiguous share of the items and lets a thread that finished
  // take the rest of a slower one's from the back.
  par.parallel_for(N * Mb * nb, 1, [&](int64_t ib, int64_t ie) {
    thread_local AlignedBuffer<float> window;  // 64-byte aligned: every row is read and written in whole vectors
    float* const window_rows = window.get(static_cast<size_t>(win_rows * g.row_floats));
    std::vector<float> stage;
    for (int64_t it = ib; it < ie; ++it) {
      const int64_t kb = it % Mb, band = (it / Mb) % nb, n = it / (nb * Mb);
      const int64_t o_begin = band * OH / nb, o_end = (band + 1) * OH / nb;
      RowWindow w{window_rows};
      for (int64_t o0 = o_begin; o0 < o_end; o0 += chunk) {
        const int64_t o1 = std::min(o_end, o0 + chunk);
        const auto [need_lo, need_hi] = rows_needed(g, d, o0, o1);
        fill_window(g, expand_rows, act, isa, kb, x + n * g.x_img, need_lo, need_hi, o0 > o_begin, w, stage);
        for (int64_t oh = o0; oh < o1; ++oh) {
          float* y_run = y + n * y_img + (kb * OH + oh) * OW * b;
          const nchwc_detail::RunStreams streams = nchwc_detail::run_streams(nullptr, epilogue, y, y_run - y, y_bytes);
          dw_rows.run(kb, oh, 0, OW, w.rows, w.lo, y_run, nullptr, nullptr, stage, nullptr, &streams);
          activate(y_run, OW * b, out_act, isa);  // padded lanes stay 0: hardswish(0) = silu(0) = 0
          if (y_mean) add_row_sums(y_run, OW, b, item_sums.data() + it * b, isa);
          if (epilogue) epilogue(y_run, y_run - y, OW * b);
        }
      }
    }
  });
  if (!y_mean) return;
  // Items are ordered (image, band, block): an image's bands of block kb are Mb items apart.
  const float inv = 1.f / static_cast<float>(OH * OW);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t kb = 0; kb < Mb; ++kb)
      for (int64_t l = 0; l < b; ++l) {
        float sum = 0.f;
        for (int64_t band = 0; band < nb; ++band) sum += item_sums[static_cast<size_t>(((n * nb + band) * Mb + kb) * b + l)];
        y_mean[(n * Mb + kb) * b + l] = sum * inv;
      }
}

void conv_nchwc_expand_dw_project_check(const Conv2dShape& e, const ConvNchwcKnobs& ke, const Conv2dShape& d,
                                        const ConvNchwcKnobs& kd, const Conv2dShape& p, const ConvNchwcKnobs& kp,
                                        Isa isa, bool add_expand) {
  conv_nchwc_expand_dw_check(e, ke, d, kd, isa);
  conv_nchwc_check(p, kp, isa);
  if (!(p.R == 1 && p.S == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0 && p.groups == 1))
    DNNF_THROW("conv2d_nchwc_expand_dw_project: the third conv must be 1x1, stride 1, unpadded, groups 1 (got ", p.R,
               "x", p.S, " stride ", p.stride_h, " padding ", p.pad_h, " groups ", p.groups, ")");
  if (p.C != d.K || p.N != d.N || p.H != d.OH() || p.W != d.OW())
    DNNF_THROW("conv2d_nchwc_expand_dw_project: the third conv's input (", p.N, "x", p.C, "x", p.H, "x", p.W,
               ") is not the depthwise conv's output (", d.N, "x", d.K, "x", d.OH(), "x", d.OW(), ")");
  if (kp.ic_bn != kd.oc_bn)
    DNNF_THROW("conv2d_nchwc_expand_dw_project: the third conv's input block (ic_bn=", kp.ic_bn,
               ") must be the depthwise block (", kd.oc_bn, ")");
  if (add_expand && (p.K != e.K || p.OH() != e.OH() || p.OW() != e.OW() || kp.oc_bn != ke.oc_bn))
    DNNF_THROW("conv2d_nchwc_expand_dw_project: adding the first conv's output needs the projection's output (",
               p.K, "x", p.OH(), "x", p.OW(), ", block ", kp.oc_bn, ") to be shaped like it (", e.K, "x", e.OH(), "x",
               e.OW(), ", block ", ke.oc_bn, ")");
}

void conv2d_nchwc_expand_dw_project(const Conv2dShape& e, const ConvNchwcKnobs& ke, const Conv2dShape& d,
                                    const ConvNchwcKnobs& kd, const Conv2dShape& p, const ConvNchwcKnobs& kp,
                                    const float* x, const float* w_expand, const float* b_expand, ExpandAct act,
                                    const float* w_dw, const float* b_dw, ExpandAct dw_act, const float* w_project,
                                    const float* b_project, bool add_expand, float* y, const Parallel& par,
                                    ElementHook epilogue, Isa isa) {
  conv_nchwc_expand_dw_project_check(e, ke, d, kd, p, kp, isa, add_expand);
  if (!isa_supported(isa))
    DNNF_THROW("conv2d_nchwc_expand_dw_project: this CPU cannot run ", isa_name(isa), " kernels");
  DNNF_CHECK(x != nullptr && w_expand != nullptr && w_dw != nullptr && w_project != nullptr && y != nullptr,
             "conv2d_nchwc_expand_dw_project: x, the weights and y must not be null");
  // add_expand reads the skip connection as runs of whole unpadded rows of the window.
  const Geometry g(e, ke, d, kd, !add_expand && Geometry::padded_rows(d));
  const int64_t N = g.N, b = g.b, Mb = g.Mb, OH = g.OH, OW = g.OW, bo = kp.oc_bn, Kb = ceil_div(p.K, bo);
  // Per thread: a window per channel block and the chunk's depthwise rows of every block, within
  // kBlockBytes (the rows the projection reads stay in L2; its weights stream past them).
  int64_t chunk = 1;
  while (chunk < OH && Mb * (g.window_rows(chunk + 1) * g.row_floats + (chunk + 1) * OW * b) * 4 <= kBlockBytes) ++chunk;
  const int64_t win_rows = g.window_rows(chunk), mid_block = chunk * OW * b;
  const nchwc_detail::ConvRows expand_rows(e, ke, isa, w_expand, b_expand, tile_activation(act));
  const nchwc_detail::ConvRows dw_rows(g.dw_over_window(d), kd, isa, w_dw, b_dw, tile_activation(dw_act));
  // The projection over one chunk: an image of `chunk` rows whose channel blocks are mid_block apart.
  Conv2dShape pc = p;
  pc.N = 1, pc.H = chunk;
  const nchwc_detail::ConvRows project_rows(pc, kp, isa, w_project, b_project, Activation::None);
  const int64_t y_img = nchwc_floats(1, p.K, OH, OW, bo), y_bytes = g.N * y_img * static_cast<int64_t>(sizeof(float));
  const int64_t T = std::max(1, par.num_threads());
  const int64_t nb = choose_bands(g, 1, T);

  par.parallel_for(N * nb, 1, [&](int64_t ib, int64_t ie) {
    thread_local AlignedBuffer<float> scratch;  // 64-byte aligned, as the windows and rows it holds must be
    float* const base = scratch.get(static_cast<size_t>(Mb * (win_rows * g.row_floats + mid_block)));
    float* mid = base + Mb * win_rows * g.row_floats;
    std::vector<float> stage;
    std::vector<RowWindow> wins(static_cast<size_t>(Mb), RowWindow{nullptr});
    for (int64_t it = ib; it < ie; ++it) {
      const int64_t band = it % nb, n = it / nb;
      const int64_t o_begin = band * OH / nb, o_end = (band + 1) * OH / nb;
      const float* xn = x + n * g.x_img;
      for (int64_t kb = 0; kb < Mb; ++kb) wins[kb] = RowWindow{base + kb * win_rows * g.row_floats};
      for (int64_t o0 = o_begin; o0 < o_end; o0 += chunk) {
        const int64_t o1 = std::min(o_end, o0 + chunk);
        const auto [need_lo, need_hi] = rows_needed(g, d, o0, o1);
        for (int64_t kb = 0; kb < Mb; ++kb) {
          fill_window(g, expand_rows, act, isa, kb, xn, need_lo, need_hi, o0 > o_begin, wins[kb], stage);
          for (int64_t oh = o0; oh < o1; ++oh) {
            float* m_run = mid + kb * mid_block + (oh - o0) * OW * b;
            dw_rows.run(kb, oh, 0, OW, wins[kb].rows, wins[kb].lo, m_run, nullptr, nullptr, stage);
            activate(m_run, OW * b, dw_act, isa);
          }
        }
        for (int64_t kb = 0; kb < Kb; ++kb) {
          float* y_run = y + n * y_img + (kb * OH + o0) * OW * bo;
          // The skip connection: rows [o0, o1) of block kb's window (the depthwise conv keeps the
          // plane's size, so its taps needed them; same block and width, so one contiguous run).
          const float* res_run = add_expand ? wins[kb].rows + (o0 - wins[kb].lo) * g.row_floats : nullptr;
          const nchwc_detail::RunStreams streams = nchwc_detail::run_streams(nullptr, epilogue, y, y_run - y, y_bytes);
          project_rows.run(kb, 0, 0, (o1 - o0) * OW, mid, 0, y_run, res_run, nullptr, stage, nullptr, &streams);
          if (epilogue) epilogue(y_run, y_run - y, (o1 - o0) * OW * bo);
        }
      }
    }
  });
}

}  // namespace dnnfusion::kernels
