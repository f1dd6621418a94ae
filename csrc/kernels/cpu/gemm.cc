// GEMM driver: task split, cache blocking, packing, edge tiles; plus the portable scalar
// micro-kernel. See gemm.h for the contract and gemm_ukernel.h for the micro-kernel interface.
#include "kernels/cpu/gemm.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <new>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/prefetch_share.h"

namespace dnnfusion::kernels {
namespace gemm_detail {
namespace {

// Packing buffers live per thread and only grow: a GEMM per layer must not hit the allocator.
thread_local AlignedBuffer<float> tl_pack_a;
thread_local AlignedBuffer<float> tl_pack_b;

inline float activate(float v, Activation act) {
  // Written so that NaN passes through unchanged, as torch.relu / hardtanh do.
  switch (act) {
    case Activation::None: return v;
    case Activation::Relu: return v < 0.f ? 0.f : v;
    case Activation::Relu6: return v < 0.f ? 0.f : (v > 6.f ? 6.f : v);
  }
  return v;
}

constexpr int kScalarMR = 4, kScalarNR = 8;

// Plain loops over a small accumulator tile; -O3 vectorises it with baseline SSE2.
void ukernel_scalar(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc,
                    const UkArgs& args) {
  float acc[kScalarMR][kScalarNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < kScalarMR; ++i) {
      const float a = Ap[i];
      for (int j = 0; j < kScalarNR; ++j) acc[i][j] += a * Bp[j];
    }
    Ap += kScalarMR;
    Bp += kScalarNR;
  }
  for (int i = 0; i < kScalarMR; ++i) {
    float* c = C + i * ldc;
    for (int j = 0; j < kScalarNR; ++j) {
      float v = acc[i][j];
      if (args.beta != 0.f) v += args.beta * c[j];
      if (args.brow) v += args.brow[i];
      if (args.bcol) v += args.bcol[j];
      c[j] = activate(v, args.act);
    }
  }
}

constexpr UkInfo kScalarInfo{kScalarMR, kScalarNR, &ukernel_scalar, 256, 1024, 128};

const UkInfo& select_ukernel() {
  switch (active_isa()) {
    case Isa::Avx512: return *ukernel_avx512();
    case Isa::Avx2: return *ukernel_avx2();
    case Isa::Scalar: break;
  }
  return kScalarInfo;
}

// dst[k*ld + i] = alpha * src_i[k] for i < 4, k < n, where src_i = src + i*stride: four
// contiguous source lines written as 4-float rows of a panel, through SSE 4x4 transposes
// (baseline x86-64). Packs both A (rows of a row-major A) and a column-major B (K^T in attention)
// where the ISA's micro-kernel brings no wider transpose (UkInfo::transpose_lines).
void transpose_4_lines(const float* src, int64_t stride, int64_t n, float alpha, float* dst, int64_t ld) {
  const float *s0 = src, *s1 = s0 + stride, *s2 = s1 + stride, *s3 = s2 + stride;
  int64_t k = 0;
#if defined(__SSE__)
  const __m128 va = _mm_set1_ps(alpha);
  for (; k + 4 <= n; k += 4) {
    __m128 a0 = _mm_loadu_ps(s0 + k), a1 = _mm_loadu_ps(s1 + k), a2 = _mm_loadu_ps(s2 + k), a3 = _mm_loadu_ps(s3 + k);
    _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
    float* d = dst + k * ld;
    _mm_storeu_ps(d, _mm_mul_ps(a0, va));
    _mm_storeu_ps(d + ld, _mm_mul_ps(a1, va));
    _mm_storeu_ps(d + 2 * ld, _mm_mul_ps(a2, va));
    _mm_storeu_ps(d + 3 * ld, _mm_mul_ps(a3, va));
  }
#endif
  for (; k < n; ++k) {
    float* d = dst + k * ld;
    d[0] = alpha * s0[k];
    d[1] = alpha * s1[k];
    d[2] = alpha * s2[k];
    d[3] = alpha * s3[k];
  }
}

// Packs rows [i0,i0+mc) x cols [k0,k0+kc) of alpha*A into MR-row panels (k-major inside a panel),
// zero rows past the end so the micro-kernel never needs a row count.
void pack_a(MatrixView A, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr, float alpha,
            float* dst) {
  for (int64_t ip = 0; ip < mc; ip += mr) {
    const int rows = static_cast<int>(std::min<int64_t>(mr, mc - ip));
    const float* base = A.data + (i0 + ip) * A.rs + k0 * A.cs;
    if (A.cs == 1 && rows == mr && mr % 4 == 0) {
      // Row-major A, 4 rows at a time: contiguous loads along each row, contiguous stores into
      // the panel (the scalar lockstep walk below ran at ~2 GB/s and cost attention, whose GEMMs
      // pack a fresh A for every head).
      if (const TransposeFn t = select_ukernel().transpose_lines; t && mr <= 16)
        t(base, A.rs, mr, kc, alpha, dst, mr);
      else
        for (int r = 0; r < mr; r += 4) transpose_4_lines(base + r * A.rs, A.rs, kc, alpha, dst + r, mr);
    } else if (A.cs == 1 && rows == mr) {
      // Row-major A: walk the mr rows in lockstep so the panel is written contiguously (a row at a
      // time with strided stores runs several times slower).
      const float* rp[16];
      for (int r = 0; r < mr; ++r) rp[r] = base + r * A.rs;
      for (int64_t k = 0; k < kc; ++k) {
        float* d = dst + k * mr;
        for (int r = 0; r < mr; ++r) d[r] = alpha * rp[r][k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = base + k * A.cs;
        float* d = dst + k * mr;
        int r = 0;
        for (; r < rows; ++r) d[r] = alpha * src[r * A.rs];
        for (; r < mr; ++r) d[r] = 0.f;
      }
    }
    dst += static_cast<int64_t>(mr) * kc;
  }
}

// The B block of a pre-packed B (panels of K x NR) that follows block (pc, ic, jc) in
// compute_block's loop order, fetched into L2 while this one computes: its first panel, K extent
// and panel count (bp == nullptr: none, or too few rows to hide a fetch behind: M <= MR is a pure
// stream the hardware prefetcher handles).
struct NextBlock {
  const float* bp = nullptr;
  int64_t kc = 0, panels = 0;
};

NextBlock next_block(const UkInfo& uk, const float* Bpk, int64_t K, int64_t kc_blk, int64_t mc, int64_t ic,
                     int64_t m1, int64_t pc, int64_t kc, int64_t jc, int64_t n0, int64_t n1) {
  NextBlock next;
  if (mc <= uk.mr) return next;
  const int64_t nc_blk = uk.nc_prepacked ? uk.nc_prepacked : uk.nc;
  int64_t njc = jc + nc_blk, npc = pc;
  if (njc >= n1) {
    njc = n0;
    if (ic + mc >= m1) npc = pc + kc;
  }
  if (npc >= K) return next;
  next.bp = Bpk + (njc / uk.nr) * K * uk.nr + npc * uk.nr;
  next.kc = std::min(kc_blk, K - npc);
  next.panels = (std::min(nc_blk, n1 - njc) + uk.nr - 1) / uk.nr;
  return next;
}

// One task: rows [m0,m1) x cols [n0,n1) of batch entry b, all of K.
void compute_block(const BatchedProblem& p, const GemmEpilogue& ep, const UkInfo& uk, int64_t b,
                   int64_t m0, int64_t m1, int64_t n0, int64_t n1, const ElementHook* hook) {
  const int MR = uk.mr, NR = uk.nr;
  const int64_t K = p.K, ldc = p.ldc;
  const MatrixView A = p.a(b);
  float* C = p.c(b);
  const float* bias = ep.bias_mode == GemmEpilogue::Bias::None ? nullptr : p.bias(b);
  const bool row_bias = ep.bias_mode == GemmEpilogue::Bias::PerRow;
  const bool col_bias = ep.bias_mode == GemmEpilogue::Bias::PerCol;

  // Balanced K blocks: K=576 with KC=384 becomes 2x288 rather than 384+192.
  const float* prepacked = p.packed_b(b);
  const int64_t KC = prepacked && uk.kc_prepacked ? uk.kc_prepacked : uk.kc;
  const int64_t NC = prepacked && uk.nc_prepacked ? uk.nc_prepacked : uk.nc;
  const int64_t nkb = (K + KC - 1) / KC;
  const int64_t kc_blk = ((K + nkb - 1) / nkb + 7) / 8 * 8;

  alignas(64) float tmp[16 * 32];  // edge tiles: MR <= 16, NR <= 32 for every micro-kernel
  DNNF_CHECK(!prepacked || n0 % NR == 0, "sgemm: column block ", n0, " is not on a panel boundary");

  // The tiles of one (column block, row block, K block): Ap packed rows, Bp the block's first
  // panel, panel q at Bp + q * panel_stride.
  auto tiles = [&](int64_t jc, int64_t nc, int64_t ic, int64_t mc, int64_t pc, int64_t kc,
                   const float* Ap, const float* Bp, int64_t panel_stride, const NextBlock& next) {
    const bool first = pc == 0, last = pc + kc == K;
    const int64_t row_tiles = (mc + MR - 1) / MR;
    // Values are final only after the last K block, so that is the only pass that runs the hook.
    const ElementHook* tile_hook = last ? hook : nullptr;
    for (int64_t ir = 0; ir < mc; ir += MR) {
      const int64_t i = ic + ir;
      const int mr_eff = static_cast<int>(std::min<int64_t>(MR, mc - ir));
      const float* ap = Ap + ir * kc;
      for (int64_t jr = 0; jr < nc; jr += NR) {
        const int64_t j = jc + jr;
        const int nr_eff = static_cast<int>(std::min<int64_t>(NR, nc - jr));
        const float* bp = Bp + (jr / NR) * panel_stride;
        UkArgs args{first ? ep.beta : 1.f, (first && row_bias) ? bias + i : nullptr,
                    (first && col_bias) ? bias + j : nullptr,
                    last ? ep.act : Activation::None};
        if (next.bp != nullptr && jr / NR < next.panels) {
          // This tile's share of the next block: 1/row_tiles of the panel it will use in place of bp.
          const PrefetchShare sh =
              prefetch_share(next.bp + (jr / NR) * panel_stride, next.kc * NR * 4, ir / MR, row_tiles);
          args.pf = sh.first;
          args.pf_lines = sh.lines;
        }
        float* c = C + i * ldc + j;
        // Fewer rows than the tile: the kernel for exactly those rows, when the ISA has one.
        const UkFn rows_fn = mr_eff < MR && uk.by_rows ? uk.by_rows[mr_eff] : uk.fn;
        if (nr_eff == NR && (mr_eff == MR || uk.by_rows)) {
          rows_fn(kc, ap, bp, c, ldc, args);
          if (tile_hook) {
            for (int r = 0; r < mr_eff; ++r)
              (*tile_hook)(c + r * ldc, (b * p.M + i + r) * p.N + j, NR);
          }
        } else {
          const UkArgs plain{0.f, nullptr, nullptr, Activation::None};
          rows_fn(kc, ap, bp, tmp, NR, plain);
          for (int r = 0; r < mr_eff; ++r) {
            float* cr = c + r * ldc;
            const float* t = tmp + r * NR;
            for (int q = 0; q < nr_eff; ++q) {
              float v = t[q];
              if (args.beta != 0.f) v += args.beta * cr[q];
              if (args.brow) v += args.brow[r];
              if (args.bcol) v += args.bcol[q];
              cr[q] = activate(v, args.act);
            }
            if (tile_hook) (*tile_hook)(cr, (b * p.M + i + r) * p.N + j, nr_eff);
          }
        }
      }
    }
  };

  if (prepacked) {
    // B needs no packing: pack each block of A once and sweep it across all of this task's
    // columns, rather than packing it again for every column block.
    for (int64_t pc = 0; pc < K; pc += kc_blk) {
      const int64_t kc = std::min(kc_blk, K - pc);
      for (int64_t ic = m0; ic < m1; ic += uk.mc) {
        const int64_t mc = std::min(uk.mc, m1 - ic);
        float* Ap = tl_pack_a.get(static_cast<size_t>((mc + MR - 1) / MR * MR * kc));
        pack_a(A, ic, mc, pc, kc, MR, ep.alpha, Ap);
        for (int64_t jc = n0; jc < n1; jc += NC)
          tiles(jc, std::min(NC, n1 - jc), ic, mc, pc, kc, Ap, prepacked + (jc / NR) * K * NR + pc * NR, K * NR,
                next_block(uk, prepacked, K, kc_blk, mc, ic, m1, pc, kc, jc, n0, n1));
      }
    }
    return;
  }
  for (int64_t jc = n0; jc < n1; jc += uk.nc) {
    const int64_t nc = std::min(uk.nc, n1 - jc);
    const int64_t nc_pad = (nc + NR - 1) / NR * NR;
    for (int64_t pc = 0; pc < K; pc += kc_blk) {
      const int64_t kc = std::min(kc_blk, K - pc);
      float* Bp = tl_pack_b.get(static_cast<size_t>(nc_pad * kc));
      p.pack_b(b, pc, kc, jc, nc, NR, Bp);
      for (int64_t ic = m0; ic < m1; ic += uk.mc) {
        const int64_t mc = std::min(uk.mc, m1 - ic);
        float* Ap = tl_pack_a.get(static_cast<size_t>((mc + MR - 1) / MR * MR * kc));
        pack_a(A, ic, mc, pc, kc, MR, ep.alpha, Ap);
        tiles(jc, nc, ic, mc, pc, kc, Ap, Bp, kc * NR, NextBlock{});
      }
    }
  }
}

// K == 0: no products, only the epilogue.
void epilogue_only(const BatchedProblem& p, const GemmEpilogue& ep, const Parallel& par,
                   const ElementHook* hook) {
  const int64_t rows = p.batch * p.M;
  par.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.N)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) {
                       const int64_t b = r / p.M, i = r % p.M;
                       float* c = p.c(b) + i * p.ldc;
                       const float* bias =
                           ep.bias_mode == GemmEpilogue::Bias::None ? nullptr : p.bias(b);
                       for (int64_t j = 0; j < p.N; ++j) {
                         float v = ep.beta != 0.f ? ep.beta * c[j] : 0.f;
                         if (ep.bias_mode == GemmEpilogue::Bias::PerRow) v += bias[i];
                         if (ep.bias_mode == GemmEpilogue::Bias::PerCol) v += bias[j];
                         c[j] = activate(v, ep.act);
                       }
                       if (hook) (*hook)(c, r * p.N, p.N);
                     }
                   });
}

// Operands given by pointer and strides; B either strided (packed per call) or, when Bpk is set,
// already packed whole by sgemm_pack_b (batch 1).
struct StridedProblem final : BatchedProblem {
  MatrixView A, B;
  const float* Bpk = nullptr;
  int64_t sa = 0, sb = 0, sc = 0;
  float* C = nullptr;
  const float* bias_ptr = nullptr;
  MatrixView a(int64_t b) const override { return {A.data + b * sa, A.rs, A.cs}; }
  void pack_b(int64_t b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr,
              float* dst) const override {
    pack_b_strided({B.data + b * sb, B.rs, B.cs}, k0, kc, j0, nc, nr, dst);
  }
  const float* packed_b(int64_t) const override { return Bpk; }
  float* c(int64_t b) const override { return C + b * sc; }
  const float* bias(int64_t) const override { return bias_ptr; }
};

StridedProblem strided_problem(int64_t batch, int64_t M, int64_t N, int64_t K, MatrixView A,
                               int64_t strideA, MatrixView B, int64_t strideB, float* C,
                               int64_t ldc, int64_t strideC, const GemmEpilogue& ep) {
  DNNF_CHECK(ep.bias_mode == GemmEpilogue::Bias::None || ep.bias != nullptr,
             "sgemm: bias mode set but bias is null");
  StridedProblem p;
  p.batch = batch;
  p.M = M;
  p.N = N;
  p.K = K;
  p.ldc = ldc;
  p.A = A;
  p.B = B;
  p.sa = strideA;
  p.sb = strideB;
  p.sc = strideC;
  p.C = C;
  p.bias_ptr = ep.bias;
  return p;
}

// Row-major B: stream each source row once, left to right, dealing it out to the panels.
// (Panel-by-panel would revisit kc distant rows per panel, defeating the prefetcher.) NR is a
// compile-time constant so full panels copy as straight vector moves.
template <int NR>
void pack_b_rows(MatrixView B, int64_t k0, int64_t kc, int64_t j0, int64_t panels, int last_cols,
                 float* dst) {
  const int64_t full = last_cols == NR ? panels : panels - 1;
  for (int64_t k = 0; k < kc; ++k) {
    const float* src = B.data + (k0 + k) * B.rs + j0;
    float* d = dst + k * NR;
    for (int64_t p = 0; p < full; ++p, src += NR, d += NR * kc) {
      for (int q = 0; q < NR; ++q) d[q] = src[q];
    }
    if (full < panels) {
      int q = 0;
      for (; q < last_cols; ++q) d[q] = src[q];
      for (; q < NR; ++q) d[q] = 0.f;
    }
  }
}

}  // namespace

void pack_b_strided(MatrixView B, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr,
                    float* dst) {
  const int64_t panels = (nc + nr - 1) / nr;
  const int last_cols = static_cast<int>(nc - (panels - 1) * nr);
  if (B.cs == 1) {
    switch (nr) {
      case 8: pack_b_rows<8>(B, k0, kc, j0, panels, last_cols, dst); return;
      case 16: pack_b_rows<16>(B, k0, kc, j0, panels, last_cols, dst); return;
      case 32: pack_b_rows<32>(B, k0, kc, j0, panels, last_cols, dst); return;
      default: break;
    }
  }
  for (int64_t p = 0; p < panels; ++p, dst += static_cast<int64_t>(nr) * kc) {
    const int cols = p + 1 == panels ? last_cols : nr;
    const float* base = B.data + k0 * B.rs + (j0 + p * nr) * B.cs;
    if (B.rs == 1 && cols == nr) {
      // Column-major B (e.g. K^T in attention): walk the nr columns in lockstep so the panel is
      // written contiguously.
      // 4 columns at a time (a per-element gather ran at a few GB/s).
      if (const TransposeFn t = select_ukernel().transpose_lines; t && nr % 16 == 0)
        for (int q = 0; q < nr; q += 16) t(base + q * B.cs, B.cs, 16, kc, 1.f, dst + q, nr);
      else
        for (int q = 0; q < nr; q += 4) transpose_4_lines(base + q * B.cs, B.cs, kc, 1.f, dst + q, nr);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = base + k * B.rs;
      float* d = dst + k * nr;
      int q = 0;
      for (; q < cols; ++q) d[q] = src[q * B.cs];
      for (; q < nr; ++q) d[q] = 0.f;
    }
  }
}

void run(const BatchedProblem& p, const GemmEpilogue& ep, const Parallel& par,
         const ElementHook* epilogue) {
  if (epilogue != nullptr && !*epilogue) epilogue = nullptr;
  DNNF_CHECK(p.batch >= 0 && p.M >= 0 && p.N >= 0 && p.K >= 0, "sgemm: negative size (batch=",
             p.batch, " M=", p.M, " N=", p.N, " K=", p.K, ")");
  DNNF_CHECK(p.ldc >= p.N || p.M <= 1, "sgemm: ldc=", p.ldc, " < N=", p.N);
  if (p.batch == 0 || p.M == 0 || p.N == 0) return;
  if (p.K == 0) {
    epilogue_only(p, ep, par, epilogue);
    return;
  }
  const UkInfo& uk = select_ukernel();

  // Split the larger output dimension so only the smaller operand is packed redundantly.
  const bool split_n = p.N >= p.M;
  const int64_t unit = split_n ? uk.nr : uk.mr;
  const int64_t dim = split_n ? p.N : p.M;
  const int64_t units = (dim + unit - 1) / unit;
  const double flops_per = 2.0 * static_cast<double>(p.M) * p.N * p.K;
  const int threads = std::max(1, par.num_threads());
  int64_t chunks = 1;
  if (threads > 1 && flops_per >= 2e5) {
    // Enough batch entries to balance on their own: don't split; else split each entry T ways
    // so the task count stays a multiple of T.
    if (!(p.batch % threads == 0 || p.batch >= 8 * threads)) chunks = threads;
  }
  chunks = std::min(chunks, units);
  const int64_t tasks = p.batch * chunks;
  const double task_flops = flops_per / static_cast<double>(chunks);
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(2e5 / task_flops));

  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / chunks, c = t % chunks;
      const int64_t lo = std::min(dim, (c * units / chunks) * unit);
      const int64_t hi = std::min(dim, ((c + 1) * units / chunks) * unit);
      if (lo >= hi) continue;
      if (split_n) {
        compute_block(p, ep, uk, b, 0, p.M, lo, hi, epilogue);
      } else {
        compute_block(p, ep, uk, b, lo, hi, 0, p.N, epilogue);
      }
    }
  };
  if (tasks == 1) {
    body(0, 1);
  } else {
    par.parallel_for(tasks, grain, body);
  }
}

}  // namespace gemm_detail

int sgemm_panel_width() { return gemm_detail::select_ukernel().nr; }

int64_t sgemm_packed_b_floats(int64_t K, int64_t N, int nr) {
  DNNF_CHECK(K >= 0 && N >= 0 && nr > 0, "sgemm_packed_b_floats: bad sizes (K=", K, " N=", N, " nr=", nr, ")");
  return (N + nr - 1) / nr * K * nr;
}

void sgemm_pack_b(int64_t K, int64_t N, MatrixView B, int nr, float* dst) {
  DNNF_CHECK(nr == 8 || nr == 16 || nr == 32, "sgemm_pack_b: panel width ", nr, " (allowed: 8, 16, 32)");
  DNNF_CHECK(K >= 0 && N >= 0, "sgemm_pack_b: negative size (K=", K, " N=", N, ")");
  if (K == 0 || N == 0) return;
  // pack_b_strided lays out kc x nr panels; with kc = K that is exactly the whole-K layout.
  gemm_detail::pack_b_strided(B, 0, K, 0, N, nr, dst);
}

void sgemm_packed_b(int64_t M, int64_t N, int64_t K, MatrixView A, const float* Bpacked, int nr,
                    float* C, int64_t ldc, const GemmEpilogue& ep, const Parallel& par,
                    const ElementHook* epilogue) {
  DNNF_CHECK(nr == sgemm_panel_width(), "sgemm_packed_b: B was packed for panel width ", nr,
             " but this CPU's micro-kernel uses ", sgemm_panel_width(), " (pack it again)");
  DNNF_CHECK(K == 0 || N == 0 || (Bpacked != nullptr && reinterpret_cast<uintptr_t>(Bpacked) % 64 == 0),
             "sgemm_packed_b: packed B must be a 64-byte aligned pointer");
  gemm_detail::StridedProblem p =
      gemm_detail::strided_problem(1, M, N, K, A, 0, {nullptr, 0, 0}, 0, C, ldc, 0, ep);
  p.Bpk = Bpacked;
  gemm_detail::run(p, ep, par, epilogue);
}

void sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, MatrixView A, int64_t strideA,
                   MatrixView B, int64_t strideB, float* C, int64_t ldc, int64_t strideC,
                   const GemmEpilogue& ep, const Parallel& par,
                   const ElementHook* epilogue) {
  const gemm_detail::StridedProblem p = gemm_detail::strided_problem(
      batch, M, N, K, A, strideA, B, strideB, C, ldc, strideC, ep);
  gemm_detail::run(p, ep, par, epilogue);
}

void sgemm(int64_t M, int64_t N, int64_t K, MatrixView A, MatrixView B, float* C, int64_t ldc,
           const GemmEpilogue& ep, const Parallel& par, const ElementHook* epilogue) {
  sgemm_batched(1, M, N, K, A, 0, B, 0, C, ldc, 0, ep, par, epilogue);
}

}  // namespace dnnfusion::kernels
