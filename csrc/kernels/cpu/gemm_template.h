// Single-precision GEMM as a template over its fused element-wise epilogue, for generated code:
// the library sgemm (gemm.h) can only call an epilogue through a function pointer after the tile
// is stored, which reloads it; instantiated here, the epilogue is inlined into the micro-kernel
// and runs on the accumulator tile before the one store to C.
// Not compiled into the library: codegen/kernel_templates.h embeds this file's text, and a
// generated translation unit pastes it after the generated prelude, which declares
// `struct dnnf_parallel` (runtime/program.h). Hence it includes no project header, uses include
// guards (#pragma once warns in a main file), and keeps everything in an unnamed namespace so
// each shared object has its own copy and exports nothing. The micro-kernel is picked at compile
// time from the ISA macros (generated code is built with -march=native for the machine that runs
// it): AVX-512 12x32, AVX2+FMA 6x16, else a portable 4x8; define DNNF_GEMM_ISA (2/1/0) before
// the text to force one (tests).
//
// gemm(): for b < batch, i < M, j < N, with A_b = A.data + b*strideA, B_b = B.data + b*strideB,
// C_b = C + b*strideC:
//   acc = alpha * sum_k A_b(i,k) B_b(k,j) + (beta != 0 ? beta * C_b[i*ldc+j] : 0)
//         + (bias_mode == kBiasPerRow ? bias[i] : bias_mode == kBiasPerCol ? bias[j] : 0)
// then epi(v, start, count) transforms in place the values of one tile row (count <= the
// micro-kernel's NR) held in a local array, start = (b*M + i)*N + j being the row-major index of
// the first of them in a dense [batch][M][N] output; then they are stored to C.
// Preconditions: sizes >= 0 (batch, M or N == 0 does nothing); A/B readable wherever their views
// point (any strides, 0 = broadcast); C rows of one call don't overlap each other or A/B; bias
// non-null when bias_mode != kNoBias; epi must not call gemm (the packing scratch is per thread)
// and must only touch its `count` values (it may read anything else). No alignment needed on C.
// Postconditions: every C_b[i*ldc+j] went through epi exactly once and was written; nothing else
// in C is touched; beta == 0 means C is never read (it may hold NaN). When K exceeds one cache
// block of K, the partial sums of the earlier blocks pass through C (as in the library GEMM); epi
// still sees only final values. K == 0 gives epi(beta*C_old + bias).
// par == nullptr runs on the calling thread; otherwise tasks go to par->parallel_for. Concurrent
// calls are safe: packing scratch is per thread (grows to <= 3.1 MB per thread and module with
// AVX-512, kept for the next call, freed at thread exit).
#ifndef DNNF_GEMM_TEMPLATE_H_
#define DNNF_GEMM_TEMPLATE_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <thread>
#include <type_traits>

#ifndef DNNF_GEMM_ISA
#if defined(__AVX512F__)
#define DNNF_GEMM_ISA 2
#elif defined(__AVX2__) && defined(__FMA__)
#define DNNF_GEMM_ISA 1
#else
#define DNNF_GEMM_ISA 0
#endif
#endif
#if (DNNF_GEMM_ISA == 2 && !defined(__AVX512F__)) || (DNNF_GEMM_ISA == 1 && !(defined(__AVX2__) && defined(__FMA__)))
#error "DNNF_GEMM_ISA names an instruction set the compiler was not told to target"
#endif

namespace dnnf_gemm {
namespace {

struct Mat {
  const float* data;
  int64_t rs, cs;
};  // element (i,j) = data[i*rs + j*cs]

enum BiasMode : int { kNoBias = 0, kBiasPerRow = 1, kBiasPerCol = 2 };

struct Identity {
  void operator()(float*, int64_t, int) const {}
};

namespace detail {

// How one tile's products combine with what is already there, before anything else sees them.
struct Pass {
  bool first;          // first K block: add beta*C_old (beta != 0) and the biases
  bool last;           // last K block: values are final, run epi; otherwise add to C's partials
  float beta;
  const float* brow;   // the tile's MR row biases, or nullptr
  const float* bcol;   // the tile's NR column biases, or nullptr
  // Optional: pf_lines 64-byte lines from pf to bring into L2 while the tile computes, one every
  // few k steps (the next B block of a pre-packed B, which would otherwise come from memory at
  // full latency; a burst would fill the line-fill buffers the tile's own loads need).
  const char* pf = nullptr;
  int64_t pf_lines = 0;
};

// The micro-kernels below are not inlined: every epilogue instantiation in a translation unit
// shares one copy of each unrolled FMA loop, which keeps the compile time of an instantiation low;
// one call per tile costs nothing next to its kc x MR x NR FMAs. They are templates over R, the
// rows computed (R <= MR; packed A keeps MR floats per k step), instantiated for a few buckets
// (kRowBuckets) so that M < MR (GEMV at batch 1, 8 rows at batch 8) does not pay for MR rows.
// tile_kernel<R>(kc, Ap, Bp, ps, Cin, ldci, out, ldo): out = products of the packed micro-panels
// (kc steps of MR floats of A, of NR floats of B, both 64-byte aligned) combined as `ps` says
// (!first: + Cin; first: + beta*Cin if beta != 0, + biases); Cin is read only when needed.
#define DNNF_GEMM_KERNEL __attribute__((noinline)) void

#if DNNF_GEMM_ISA == 2
// 24 zmm accumulators; per k step two 16-wide loads of packed B and 12 broadcasts of packed A.
// B block (kc x nc = 384 x 480 floats, 720 KB) stays in L2 while each 12-row A micro-panel
// (18 KB) sits in L1 and is reused across the whole block. A B packed at compile time (a weight)
// uses 768 x 96 (288 KB), as the library kernel does (gemm_avx512.cc says why and what it was
// measured against): the block, the next one prefetched beside it and the packed A rows fit L2
// together, and a transformer's K = 768 is one block.
constexpr int kMR = 12, kNR = 32;
constexpr int64_t kKC = 384, kMC = 1536, kNC = 480;
constexpr int64_t kKCPacked = 768, kNCPacked = 96;
constexpr int kRowBuckets[] = {1, 4, 8, 12};
using Vec = __m512;
constexpr int kW = 16;
inline Vec v_load(const float* p) { return _mm512_load_ps(p); }
inline Vec v_loadu(const float* p) { return _mm512_loadu_ps(p); }
inline void v_storeu(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec v_fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec v_add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec v_set1(float x) { return _mm512_set1_ps(x); }
inline Vec v_zero() { return _mm512_setzero_ps(); }
#elif DNNF_GEMM_ISA == 1
// 12 ymm accumulators; per k step two 8-wide loads of packed B and 6 broadcasts of packed A.
// kc x nc = 256 x 240 floats (240 KB) of B fits a 256 KB+ L2; the 6-row A micro-panel (6 KB) L1.
constexpr int kMR = 6, kNR = 16;
constexpr int64_t kKC = 256, kMC = 1536, kNC = 240;
constexpr int64_t kKCPacked = kKC, kNCPacked = kNC;
constexpr int kRowBuckets[] = {1, 4, 6};
using Vec = __m256;
constexpr int kW = 8;
inline Vec v_load(const float* p) { return _mm256_load_ps(p); }
inline Vec v_loadu(const float* p) { return _mm256_loadu_ps(p); }
inline void v_storeu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec v_fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec v_add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec v_set1(float x) { return _mm256_set1_ps(x); }
inline Vec v_zero() { return _mm256_setzero_ps(); }
#endif

#if DNNF_GEMM_ISA >= 1
// Fewer rows than FMA latency x ports would leave the FMA units waiting on the accumulator
// chains, so small R keeps U independent partial sums over consecutive k and adds them at the end.
template <int R>
DNNF_GEMM_KERNEL tile_kernel(int64_t kc, const float* Ap, const float* Bp, const Pass& ps,
                             const float* Cin, int64_t ldci, float* out, int64_t ldo) {
  constexpr int U = R >= 4 ? 1 : 4 / R;
  Vec c0[U][R], c1[U][R];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) c0[u][i] = c1[u][i] = v_zero();
  auto step = [&]() __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const Vec b0 = v_load(Bp + u * kNR);
      const Vec b1 = v_load(Bp + u * kNR + kW);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const Vec a = v_set1(Ap[u * kMR + i]);
        c0[u][i] = v_fmadd(a, b0, c0[u][i]);
        c1[u][i] = v_fmadd(a, b1, c1[u][i]);
      }
    }
    Ap += U * kMR;
    Bp += U * kNR;
  };
  int64_t k = 0;
  if (ps.pf_lines > 0) {
    const int64_t every = std::max<int64_t>(1, kc / ps.pf_lines / U) * U;
    const char* pf = ps.pf;
    for (int64_t l = 0; l < ps.pf_lines && k + every <= kc; ++l, pf += 64) {
      _mm_prefetch(pf, _MM_HINT_T1);
      for (int64_t e = 0; e < every; e += U) step();
      k += every;
    }
  }
  for (; k + U <= kc; k += U) step();
  for (; k < kc; ++k) {
    const Vec b0 = v_load(Bp);
    const Vec b1 = v_load(Bp + kW);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const Vec a = v_set1(Ap[i]);
      c0[0][i] = v_fmadd(a, b0, c0[0][i]);
      c1[0][i] = v_fmadd(a, b1, c1[0][i]);
    }
    Ap += kMR;
    Bp += kNR;
  }
#pragma GCC unroll 4
  for (int u = 1; u < U; ++u)
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      c0[0][i] = v_add(c0[0][i], c0[u][i]);
      c1[0][i] = v_add(c1[0][i], c1[u][i]);
    }
  if (ps.first) {
    if (ps.beta != 0.f) {
      const Vec beta = v_set1(ps.beta);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        c0[0][i] = v_fmadd(beta, v_loadu(Cin + i * ldci), c0[0][i]);
        c1[0][i] = v_fmadd(beta, v_loadu(Cin + i * ldci + kW), c1[0][i]);
      }
    }
    if (ps.brow) {
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const Vec br = v_set1(ps.brow[i]);
        c0[0][i] = v_add(c0[0][i], br);
        c1[0][i] = v_add(c1[0][i], br);
      }
    }
    if (ps.bcol) {
      const Vec bc0 = v_loadu(ps.bcol), bc1 = v_loadu(ps.bcol + kW);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        c0[0][i] = v_add(c0[0][i], bc0);
        c1[0][i] = v_add(c1[0][i], bc1);
      }
    }
  } else {
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      c0[0][i] = v_add(c0[0][i], v_loadu(Cin + i * ldci));
      c1[0][i] = v_add(c1[0][i], v_loadu(Cin + i * ldci + kW));
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    v_storeu(out + i * ldo, c0[0][i]);
    v_storeu(out + i * ldo + kW, c1[0][i]);
  }
}

#else
// Plain loops over a small tile; -O3 vectorizes them for whatever the target has.
constexpr int kMR = 4, kNR = 8;
constexpr int64_t kKC = 256, kMC = 1024, kNC = 128;
constexpr int64_t kKCPacked = kKC, kNCPacked = kNC;
constexpr int kRowBuckets[] = {1, 4};

template <int R>
DNNF_GEMM_KERNEL tile_kernel(int64_t kc, const float* Ap, const float* Bp, const Pass& ps,
                             const float* Cin, int64_t ldci, float* out, int64_t ldo) {
  float acc[R][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < R; ++i) {
      const float a = Ap[i];
      for (int j = 0; j < kNR; ++j) acc[i][j] += a * Bp[j];
    }
    Ap += kMR;
    Bp += kNR;
  }
  for (int i = 0; i < R; ++i) {
    const float* c = Cin + i * ldci;
    for (int j = 0; j < kNR; ++j) {
      float v = acc[i][j];
      if (!ps.first) {
        v += c[j];
      } else {
        if (ps.beta != 0.f) v += ps.beta * c[j];
        if (ps.brow) v += ps.brow[i];
        if (ps.bcol) v += ps.bcol[j];
      }
      out[i * ldo + j] = v;
    }
  }
}
#endif

#undef DNNF_GEMM_KERNEL

// Calls f(std::integral_constant<int, R>{}) for the smallest row bucket R >= mr (mr <= MR).
template <size_t I = 0, class F>
inline void with_row_bucket(int mr, const F& f) {
  constexpr size_t n = sizeof(kRowBuckets) / sizeof(kRowBuckets[0]);
  static_assert(kRowBuckets[n - 1] == kMR, "the last bucket is the full tile");
  if constexpr (I + 1 == n) {
    f(std::integral_constant<int, kRowBuckets[I]>{});
  } else {
    if (mr <= kRowBuckets[I]) {
      f(std::integral_constant<int, kRowBuckets[I]>{});
    } else {
      with_row_bucket<I + 1>(mr, f);
    }
  }
}

// R full rows of NR columns: straight to C unless the epilogue must see them first in a local tile.
template <int R, class Epi>
inline void tile_full(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc,
                      const Pass& ps, const Epi& epi, int64_t start, int64_t N) {
  if (!ps.last || std::is_same<Epi, Identity>::value) {
    tile_kernel<R>(kc, Ap, Bp, ps, C, ldc, C, ldc);
    return;
  }
  alignas(64) float tile[R * kNR];
  tile_kernel<R>(kc, Ap, Bp, ps, C, ldc, tile, kNR);
  for (int r = 0; r < R; ++r) {
    float* t = tile + r * kNR;
    epi(t, start + r * N, kNR);
    float* c = C + r * ldc;
    for (int q = 0; q < kNR; ++q) c[q] = t[q];
  }
}

// An edge tile: the bare products of R >= mr rows of the zero-padded panels into a local tile,
// then only its valid mr x nr corner is combined with C / beta / biases, passed to epi (last
// pass) and stored.
template <int R, class Epi>
inline void tile_edge(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc, int mr,
                      int nr, const Pass& ps, const Epi& epi, int64_t start, int64_t N) {
  alignas(64) float tile[R * kNR];
  const Pass bare{true, false, 0.f, nullptr, nullptr, ps.pf, ps.pf_lines};
  tile_kernel<R>(kc, Ap, Bp, bare, nullptr, 0, tile, kNR);
  for (int r = 0; r < mr; ++r) {
    float* t = tile + r * kNR;
    float* c = C + r * ldc;
    if (ps.first) {
      if (ps.beta != 0.f)
        for (int q = 0; q < nr; ++q) t[q] += ps.beta * c[q];
      if (ps.brow) {
        const float br = ps.brow[r];
        for (int q = 0; q < nr; ++q) t[q] += br;
      }
      if (ps.bcol)
        for (int q = 0; q < nr; ++q) t[q] += ps.bcol[q];
    } else {
      for (int q = 0; q < nr; ++q) t[q] += c[q];
    }
    if (ps.last) epi(t, start + r * N, nr);
    for (int q = 0; q < nr; ++q) c[q] = t[q];
  }
}

// One tile of mr x nr (<= MR x NR) valid elements: the kernel for the smallest row bucket that
// covers mr, straight to C when that bucket is exactly mr and the columns are full.
template <class Epi>
inline void tile_any(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc, int mr,
                     int nr, const Pass& ps, const Epi& epi, int64_t start, int64_t N) {
  with_row_bucket(mr, [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    if (R == mr && nr == kNR) {
      tile_full<R>(kc, Ap, Bp, C, ldc, ps, epi, start, N);
    } else {
      tile_edge<R>(kc, Ap, Bp, C, ldc, mr, nr, ps, epi, start, N);
    }
  });
}

// Packing buffers live per thread and only grow: a GEMM per layer must not hit the allocator.
struct Scratch {
  float* ptr = nullptr;
  size_t cap = 0;  // floats
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(ptr); }
  float* get(size_t n) {
    if (n > cap) {
      std::free(ptr);
      ptr = nullptr;
      cap = 0;
      const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      ptr = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (ptr == nullptr) throw std::bad_alloc();
      cap = bytes / sizeof(float);
    }
    return ptr;
  }
};

inline float* scratch_a(size_t n) {
  static thread_local Scratch s;
  return s.get(n);
}
inline float* scratch_b(size_t n) {
  static thread_local Scratch s;
  return s.get(n);
}

// Rows [i0,i0+mc) x cols [k0,k0+kc) of alpha*A into kMR-row panels (k-major inside a panel),
// zero rows past the end so the micro-kernel never needs a row count.
inline void pack_a(Mat A, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float alpha, float* dst) {
  for (int64_t ip = 0; ip < mc; ip += kMR) {
    const int rows = static_cast<int>(std::min<int64_t>(kMR, mc - ip));
    const float* base = A.data + (i0 + ip) * A.rs + k0 * A.cs;
    if (A.cs == 1 && rows == kMR) {
      // Row-major A: walk the rows in lockstep so the panel is written contiguously.
      const float* rp[kMR];
      for (int r = 0; r < kMR; ++r) rp[r] = base + r * A.rs;
      for (int64_t k = 0; k < kc; ++k) {
        float* d = dst + k * kMR;
#pragma GCC unroll 16
        for (int r = 0; r < kMR; ++r) d[r] = alpha * rp[r][k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = base + k * A.cs;
        float* d = dst + k * kMR;
        int r = 0;
        for (; r < rows; ++r) d[r] = alpha * src[r * A.rs];
        for (; r < kMR; ++r) d[r] = 0.f;
      }
    }
    dst += static_cast<int64_t>(kMR) * kc;
  }
}

// Rows [k0,k0+kc) x cols [j0,j0+nc) of B into ceil(nc/kNR) panels of kc*kNR floats (row-major
// inside a panel), zero columns past the end.
inline void pack_b(Mat B, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  const int64_t panels = (nc + kNR - 1) / kNR;
  const int last_cols = static_cast<int>(nc - (panels - 1) * kNR);
  if (B.cs == 1) {
    // Row-major B: stream each source row once, dealing it out to the panels (panel by panel
    // would revisit kc distant rows per panel and defeat the prefetcher).
    const int64_t full = last_cols == kNR ? panels : panels - 1;
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B.data + (k0 + k) * B.rs + j0;
      float* d = dst + k * kNR;
      for (int64_t p = 0; p < full; ++p, src += kNR, d += kNR * kc) {
        for (int q = 0; q < kNR; ++q) d[q] = src[q];
      }
      if (full < panels) {
        int q = 0;
        for (; q < last_cols; ++q) d[q] = src[q];
        for (; q < kNR; ++q) d[q] = 0.f;
      }
    }
    return;
  }
  for (int64_t p = 0; p < panels; ++p, dst += static_cast<int64_t>(kNR) * kc) {
    const int cols = p + 1 == panels ? last_cols : kNR;
    const float* base = B.data + k0 * B.rs + (j0 + p * kNR) * B.cs;
    if (B.rs == 1 && cols == kNR) {
      // Column-major B (e.g. K^T in attention): walk the columns in lockstep.
      const float* cp[kNR];
      for (int q = 0; q < kNR; ++q) cp[q] = base + q * B.cs;
      for (int64_t k = 0; k < kc; ++k) {
        float* d = dst + k * kNR;
        for (int q = 0; q < kNR; ++q) d[q] = cp[q][k];
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = base + k * B.rs;
      float* d = dst + k * kNR;
      int q = 0;
      for (; q < cols; ++q) d[q] = src[q * B.cs];
      for (; q < kNR; ++q) d[q] = 0.f;
    }
  }
}

struct Problem {
  int64_t M, N, K;
  Mat A, B;
  int64_t sA, sB;
  float* C;
  int64_t ldc, sC;
  const float* brow;  // bias per row or nullptr
  const float* bcol;  // bias per column or nullptr
  float alpha, beta;
  const float* Bpk;   // B packed whole (kernels::sgemm_pack_b layout, kNR) or nullptr: B is read
};

// The B block of a pre-packed B (panels of K x kNR) that follows block (pc, ic, jc) in
// compute_block's loop order: its first panel, K extent and panel count (bp == nullptr: none, or
// too few rows to hide a fetch behind: M <= MR is a pure stream the hardware prefetcher handles).
struct NextBlock {
  const float* bp = nullptr;
  int64_t kc = 0, panels = 0;
};

inline NextBlock next_block(const float* Bpk, int64_t K, int64_t kc_blk, int64_t mc, int64_t ic, int64_t m1,
                            int64_t pc, int64_t kc, int64_t jc, int64_t n0, int64_t n1) {
  NextBlock next;
  if (mc <= kMR) return next;
  int64_t njc = jc + kNCPacked, npc = pc;
  if (njc >= n1) {
    njc = n0;
    if (ic + mc >= m1) npc = pc + kc;
  }
  if (npc >= K) return next;
  next.bp = Bpk + (njc / kNR) * K * kNR + npc * kNR;
  next.kc = std::min(kc_blk, K - npc);
  next.panels = (std::min(kNCPacked, n1 - njc) + kNR - 1) / kNR;
  return next;
}

// One task: rows [m0,m1) x cols [n0,n1) of batch entry b, all of K.
template <class Epi>
void compute_block(const Problem& p, int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                   const Epi& epi) {
  const int64_t K = p.K, N = p.N, ldc = p.ldc;
  const Mat A{p.A.data + b * p.sA, p.A.rs, p.A.cs};
  const Mat B{p.B.data + b * p.sB, p.B.rs, p.B.cs};
  float* C = p.C + b * p.sC;
  // Balanced K blocks: K=576 with KC=384 becomes 2x288 rather than 384+192.
  const int64_t KC = p.Bpk ? kKCPacked : kKC;
  const int64_t nkb = (K + KC - 1) / KC;
  const int64_t kc_blk = ((K + nkb - 1) / nkb + 7) / 8 * 8;

  // The tiles of one (column block, row block, K block): Ap packed rows, Bp the block's first
  // panel, panel q at Bp + q * panel_stride.
  auto tiles = [&](int64_t jc, int64_t nc, int64_t ic, int64_t mc, int64_t pc, int64_t kc,
                   const float* Ap, const float* Bp, int64_t panel_stride, const NextBlock& next) {
    const bool first = pc == 0, last = pc + kc == K;
    const int64_t row_tiles = (mc + kMR - 1) / kMR;
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      const int64_t i = ic + ir;
      const int mr = static_cast<int>(std::min<int64_t>(kMR, mc - ir));
      const float* ap = Ap + ir * kc;
      for (int64_t jr = 0; jr < nc; jr += kNR) {
        const int64_t j = jc + jr;
        const int nr = static_cast<int>(std::min<int64_t>(kNR, nc - jr));
        const float* bp = Bp + (jr / kNR) * panel_stride;
        Pass ps{first, last, p.beta, p.brow ? p.brow + i : nullptr, p.bcol ? p.bcol + j : nullptr};
        if (next.bp != nullptr && jr / kNR < next.panels) {
          // This tile's share of the next block: 1/row_tiles of the panel it will use in place of bp.
          const char* slice = reinterpret_cast<const char*>(next.bp + (jr / kNR) * panel_stride);
          const int64_t bytes = next.kc * kNR * 4, t = ir / kMR;
          const int64_t lo = bytes * t / row_tiles / 64 * 64, hi = bytes * (t + 1) / row_tiles / 64 * 64;
          ps.pf = slice + lo;
          ps.pf_lines = (hi - lo) / 64;
        }
        float* c = C + i * ldc + j;
        const int64_t start = (b * p.M + i) * N + j;
        if (mr == kMR && nr == kNR) {
          tile_full<kMR>(kc, ap, bp, c, ldc, ps, epi, start, N);
        } else {
          tile_any(kc, ap, bp, c, ldc, mr, nr, ps, epi, start, N);
        }
      }
    }
  };
  if (p.Bpk) {
    // B needs no packing: pack each block of A once and sweep it across all of this task's
    // columns, rather than packing it again for every column block.
    for (int64_t pc = 0; pc < K; pc += kc_blk) {
      const int64_t kc = std::min(kc_blk, K - pc);
      for (int64_t ic = m0; ic < m1; ic += kMC) {
        const int64_t mc = std::min(kMC, m1 - ic);
        float* Ap = scratch_a(static_cast<size_t>((mc + kMR - 1) / kMR * kMR * kc));
        pack_a(A, ic, mc, pc, kc, p.alpha, Ap);
        for (int64_t jc = n0; jc < n1; jc += kNCPacked)
          tiles(jc, std::min(kNCPacked, n1 - jc), ic, mc, pc, kc, Ap, p.Bpk + (jc / kNR) * K * kNR + pc * kNR, K * kNR,
                next_block(p.Bpk, K, kc_blk, mc, ic, m1, pc, kc, jc, n0, n1));
      }
    }
    return;
  }
  for (int64_t jc = n0; jc < n1; jc += kNC) {
    const int64_t nc = std::min(kNC, n1 - jc);
    const int64_t nc_pad = (nc + kNR - 1) / kNR * kNR;
    for (int64_t pc = 0; pc < K; pc += kc_blk) {
      const int64_t kc = std::min(kc_blk, K - pc);
      float* Bp = scratch_b(static_cast<size_t>(nc_pad * kc));
      pack_b(B, pc, kc, jc, nc, Bp);
      for (int64_t ic = m0; ic < m1; ic += kMC) {
        const int64_t mc = std::min(kMC, m1 - ic);
        float* Ap = scratch_a(static_cast<size_t>((mc + kMR - 1) / kMR * kMR * kc));
        pack_a(A, ic, mc, pc, kc, p.alpha, Ap);
        tiles(jc, nc, ic, mc, pc, kc, Ap, Bp, kc * kNR, NextBlock{});
      }
    }
  }
}

template <class F>
void trampoline(const void* ctx, int64_t begin, int64_t end) {
  (*static_cast<const F*>(ctx))(begin, end);
}

template <class F>
void parallel_run(const dnnf_parallel* par, int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  if (par == nullptr || par->parallel_for == nullptr || n == 1) {
    f(int64_t{0}, n);
    return;
  }
  par->parallel_for(par->pool, n, grain, &trampoline<F>, &f);
}

// The ABI gives no thread count; assume the pool spans the machine. A smaller pool only means
// some redundant packing, never a wrong result.
inline int assumed_threads() {
  static const int n = [] {
    const unsigned h = std::thread::hardware_concurrency();
    return h == 0 ? 1 : static_cast<int>(h);
  }();
  return n;
}

// K == 0: no products, only beta*C_old + bias and the epilogue, kNR columns at a time.
template <class Epi>
void epilogue_only(const Problem& p, int64_t batch, const Epi& epi, const dnnf_parallel* par) {
  const int64_t M = p.M, N = p.N;
  auto body = [&](int64_t r0, int64_t r1) {
    alignas(64) float t[kNR];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / M, i = r % M;
      float* c = p.C + b * p.sC + i * p.ldc;
      for (int64_t j0 = 0; j0 < N; j0 += kNR) {
        const int n = static_cast<int>(std::min<int64_t>(kNR, N - j0));
        for (int q = 0; q < n; ++q) {
          float v = p.beta != 0.f ? p.beta * c[j0 + q] : 0.f;
          if (p.brow) v += p.brow[i];
          if (p.bcol) v += p.bcol[j0 + q];
          t[q] = v;
        }
        epi(t, r * N + j0, n);
        for (int q = 0; q < n; ++q) c[j0 + q] = t[q];
      }
    }
  };
  parallel_run(par, batch * M, std::max<int64_t>(1, 16384 / N), body);
}

template <class Epi>
void run(const Problem& p, int64_t batch, const Epi& epi, const dnnf_parallel* par);

}  // namespace detail

template <class Epi>
void gemm(int64_t batch, int64_t M, int64_t N, int64_t K, Mat A, int64_t strideA, Mat B,
          int64_t strideB, float* C, int64_t ldc, int64_t strideC, const float* bias,
          int bias_mode, float alpha, float beta, const Epi& epi, const dnnf_parallel* par) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  const detail::Problem p{M, N, K, A, B, strideA, strideB, C, ldc, strideC,
                          bias_mode == kBiasPerRow ? bias : nullptr,
                          bias_mode == kBiasPerCol ? bias : nullptr, alpha, beta, nullptr};
  detail::run(p, batch, epi, par);
}

// gemm() for one entry with B given packed whole by kernels::sgemm_pack_b with panel width kNR
// (64-byte aligned); the generated code forces DNNF_GEMM_ISA to the ISA whose width it packed for.
template <class Epi>
void gemm_packed_b(int64_t M, int64_t N, int64_t K, Mat A, const float* Bpacked, float* C,
                   int64_t ldc, const float* bias, int bias_mode, float alpha, const Epi& epi,
                   const dnnf_parallel* par) {
  if (M <= 0 || N <= 0) return;
  const detail::Problem p{M, N, K, A, Mat{nullptr, 0, 0}, 0, 0, C, ldc, 0,
                          bias_mode == kBiasPerRow ? bias : nullptr,
                          bias_mode == kBiasPerCol ? bias : nullptr, alpha, 0.f, Bpacked};
  detail::run(p, 1, epi, par);
}

namespace detail {

template <class Epi>
void run(const Problem& p, int64_t batch, const Epi& epi, const dnnf_parallel* par) {
  const int64_t M = p.M, N = p.N, K = p.K;
  if (K <= 0) {
    epilogue_only(p, batch, epi, par);
    return;
  }
  // Split the larger output dimension so only the smaller operand is packed redundantly; batch
  // entries alone balance when there are enough of them. When the larger dimension has fewer
  // micro-tile columns/rows than threads, split the other one too.
  const int threads = par == nullptr ? 1 : assumed_threads();
  const bool split_n = N >= M;
  const int64_t units_major = split_n ? (N + kNR - 1) / kNR : (M + kMR - 1) / kMR;
  const int64_t units_minor = split_n ? (M + kMR - 1) / kMR : (N + kNR - 1) / kNR;
  const double flops = 2.0 * static_cast<double>(M) * N * K;
  int64_t ch_major = 1, ch_minor = 1;
  if (threads > 1 && flops >= 2e5 && !(batch % threads == 0 || batch >= 8 * threads)) {
    ch_major = std::min<int64_t>(threads, units_major);
    if (ch_major < threads) ch_minor = std::min<int64_t>(threads / ch_major, units_minor);
  }
  const int64_t chunks = ch_major * ch_minor;
  const int64_t tasks = batch * chunks;
  const double task_flops = flops / static_cast<double>(chunks);
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(2e5 / task_flops));
  auto range = [](int64_t c, int64_t n, int64_t units, int64_t unit, int64_t dim, int64_t* lo,
                  int64_t* hi) {
    *lo = std::min(dim, (c * units / n) * unit);
    *hi = std::min(dim, ((c + 1) * units / n) * unit);
  };
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / chunks, c = t % chunks;
      const int64_t cmaj = c % ch_major, cmin = c / ch_major;
      int64_t n_lo, n_hi, m_lo, m_hi;
      if (split_n) {
        range(cmaj, ch_major, units_major, kNR, N, &n_lo, &n_hi);
        range(cmin, ch_minor, units_minor, kMR, M, &m_lo, &m_hi);
      } else {
        range(cmaj, ch_major, units_major, kMR, M, &m_lo, &m_hi);
        range(cmin, ch_minor, units_minor, kNR, N, &n_lo, &n_hi);
      }
      if (m_lo < m_hi && n_lo < n_hi) compute_block(p, b, m_lo, m_hi, n_lo, n_hi, epi);
    }
  };
  parallel_run(par, tasks, grain, body);
}

}  // namespace detail
}  // namespace
}  // namespace dnnf_gemm

#endif  // DNNF_GEMM_TEMPLATE_H_
