// Portable half of the bf16x6 GEMM (gemm_bf16x6.h): the AMX check, B's packing, the blocking and
// threading around the AMX block product, the epilogue, and the scalar paths (reference, rows
// with inf or NaN).
#include "kernels/cpu/gemm_bf16x6.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_bf16x6_ukernel.h"

namespace dnnfusion::kernels {
namespace {

using bf16x6_detail::kBlock;
using bf16x6_detail::kStep;
using bf16x6_detail::kStepElems;

constexpr int64_t kHeaderFloats = 16;  // 64 bytes: keeps the blocks 64-byte aligned
constexpr int64_t kPlaneElems = 2 * 16 * kStep;
// Packed A of one group of row blocks stays in L2 beside the B block it meets.
constexpr int64_t kGroupBytes = 1024 * 1024;
constexpr int64_t kPartialBytes = 512 * 1024;  // a group's partial sums when K is chunked
constexpr int64_t kMaxGroup = 32;
// Threads take rows when each gets at least this many row blocks, else they share the columns.
constexpr int64_t kRowSplitBlocks = 4;
constexpr int64_t kChunkSteps = 24;  // k values of A packed at once: up to 768

bool amx_usable() {
  static const bool ok = [] {
    const char* env = std::getenv("DNNFUSION_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    return best_isa() == Isa::Avx512 && cpu_has_amx_bf16() && bf16x6_detail::amx_request_permission();
  }();
  return ok;
}

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Nearest even, as the AMX file's conversion instruction rounds; where that would overflow to
// inf, truncation (the remainder then carries the rest, so the split stays exact).
uint32_t bf16_round(uint32_t u) {
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return (r & 0x7f800000u) == 0x7f800000u ? (u & 0xffff0000u) : r;
}

// Non-finite values keep their bits in the first term (NaN stays NaN); the others are zero.
void split_bits(float x, uint16_t out[3]) {
  if (!std::isfinite(x)) {
    const uint32_t u = bits_of(x);
    out[0] = static_cast<uint16_t>((u >> 16) | (std::isnan(x) ? 0x40u : 0u));
    out[1] = out[2] = 0;
    return;
  }
  const uint32_t h = bf16_round(bits_of(x));
  const float r1 = x - float_of(h);
  const uint32_t m = bf16_round(bits_of(r1));
  const float r2 = r1 - float_of(m);
  out[0] = static_cast<uint16_t>(h >> 16);
  out[1] = static_cast<uint16_t>(m >> 16);
  out[2] = static_cast<uint16_t>(bits_of(r2) >> 16);
}

float widen(uint16_t v) { return float_of(static_cast<uint32_t>(v) << 16); }

int64_t steps_of(int64_t K) { return (K + kStep - 1) / kStep; }

const uint16_t* b_data(const float* packed) { return reinterpret_cast<const uint16_t*>(packed + kHeaderFloats); }

// Offset of B(k, n)'s term in plane 0 of the packed layout (gemm_bf16x6_ukernel.h).
int64_t b_offset(int64_t steps, int64_t k, int64_t n) {
  const int64_t kk = k % kStep;
  return (n / kBlock) * steps * kStepElems + (k / kStep) * kStepElems + ((n % kBlock) / 16) * 16 * kStep +
         (kk / 2) * kStep + (n % 16) * 2 + kk % 2;
}

// The exact fp32 B(k, n) the three planes add up to.
float b_value(const uint16_t* Bp, int64_t steps, int64_t k, int64_t n) {
  const int64_t o = b_offset(steps, k, n);
  return widen(Bp[o]) + widen(Bp[o + kPlaneElems]) + widen(Bp[o + 2 * kPlaneElems]);
}

thread_local AlignedBuffer<uint16_t> tl_pack_a;
thread_local AlignedBuffer<float> tl_partial;
thread_local AlignedBuffer<float> tl_gather;
thread_local AlignedBuffer<uint16_t> tl_shared_a;  // on the calling thread: all of A, read by every worker

// The tile configuration for a run of blocks on this thread, released however the run ends.
struct TileScope {
  TileScope() { bf16x6_detail::amx_configure(); }
  ~TileScope() { bf16x6_detail::amx_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

using bf16x6_detail::Operands;

// Rows the products cannot take (inf or NaN in A or B): plain fp32 from the exact B.
void scalar_block(const Operands& op, const uint16_t* Bp, int64_t steps, int64_t i0, int rows, int64_t j0, int cols,
                  float* acc) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) {
      float s = 0.f;
      for (int64_t k = 0; k < op.K; ++k) s += op.a(i0 + r, k) * b_value(Bp, steps, k, j0 + j);
      acc[r * kBlock + j] = s;
    }
}

// How A is cut: K in chunks of chunk_steps steps (long K: so that groups stay large), rows in
// groups of `group` blocks whose packed chunk stays in L2 while B streams past it.
struct Blocking {
  int64_t steps, chunks, chunk_steps, chunk_elems, group;
};

Blocking blocking(int64_t K, int64_t ncb) {
  Blocking b;
  b.steps = steps_of(K);
  b.chunks = std::max<int64_t>(1, (b.steps + kChunkSteps - 1) / kChunkSteps);
  b.chunk_steps = std::max<int64_t>(1, (b.steps + b.chunks - 1) / b.chunks);
  b.chunk_elems = b.chunk_steps * kStepElems;
  b.group = std::clamp<int64_t>(kGroupBytes / (b.chunk_elems * 2), 1, kMaxGroup);
  if (b.chunks > 1) b.group = std::clamp<int64_t>(kPartialBytes / (ncb * kBlock * kBlock * 4), 1, b.group);
  return b;
}

// All of A packed once for threads that share it (chunk c of row block rb at (c * rblocks + rb)).
struct SharedA {
  const uint16_t* data;
  const char* finite;  // per row block
  int64_t rblocks;
};

// Row blocks [rb0, rb1) x column blocks [cb0, cb1). A is packed a group of row blocks and a chunk
// of k at a time (or taken from `shared`), and each B block meets every row block of the group
// while it is in L1/L2: B streams from memory once per group, not once per row block. Each row
// block of a group brings its share of the next B block into L2 as it goes. With chunked K, a group's
// partial sums wait in a per-thread buffer. Column blocks are finished in ascending order per
// row block.
void run_blocks(const Operands& op, const uint16_t* Bp, const Blocking& bk, bool b_finite, int64_t rb0, int64_t rb1,
                int64_t cb0, int64_t cb1, const SharedA* shared) {
  const int64_t block_elems = bk.steps * kStepElems;
  const int64_t ncb = cb1 - cb0;
  const int64_t group = shared ? std::min<int64_t>(rb1 - rb0, kMaxGroup) : bk.group;
  uint16_t* own = shared ? nullptr : tl_pack_a.get(static_cast<size_t>(group * bk.chunk_elems));
  float* partial = bk.chunks > 1 ? tl_partial.get(static_cast<size_t>(group * ncb * kBlock * kBlock)) : nullptr;
  alignas(64) float local[kBlock * kBlock];
  const TileScope tiles;
  bool finite[kMaxGroup];
  for (int64_t g0 = rb0; g0 < rb1; g0 += group) {
    const int64_t g1 = std::min(rb1, g0 + group);
    for (int64_t rb = g0; rb < g1; ++rb) finite[rb - g0] = b_finite && (!shared || shared->finite[rb]);
    for (int64_t c = 0; c < bk.chunks; ++c) {
      const int64_t s0 = c * bk.chunk_steps, k0 = s0 * kStep;
      const int64_t sc = std::min(bk.chunk_steps, bk.steps - s0), kc = std::min(op.K - k0, sc * kStep);
      const bool last = c == bk.chunks - 1;
      auto a_block = [&](int64_t rb) {
        return shared ? shared->data + (c * shared->rblocks + rb) * bk.chunk_elems : own + (rb - g0) * bk.chunk_elems;
      };
      if (!shared)
        for (int64_t rb = g0; rb < g1; ++rb) {
          const int rows = static_cast<int>(std::min<int64_t>(kBlock, op.M - rb * kBlock));
          if (finite[rb - g0]) finite[rb - g0] = op.pack_a(rb * kBlock, rows, k0, kc, own + (rb - g0) * bk.chunk_elems);
        }
      for (int64_t cb = cb0; cb < cb1; ++cb) {
        const int cols = static_cast<int>(std::min<int64_t>(kBlock, op.N - cb * kBlock));
        const uint16_t* b = Bp + cb * block_elems + s0 * kStepElems;
        for (int64_t rb = g0; rb < g1; ++rb) {
          const int rows = static_cast<int>(std::min<int64_t>(kBlock, op.M - rb * kBlock));
          float* acc = partial ? partial + ((rb - g0) * ncb + (cb - cb0)) * kBlock * kBlock : local;
          // Each row block of the group fetches its share of the next B block's chunk.
          const int64_t lines = cb + 1 < cb1 ? sc * kStepElems * 2 / 64 : 0;
          const int64_t share = (lines + (g1 - g0) - 1) / (g1 - g0), first = std::min(lines, (rb - g0) * share);
          if (finite[rb - g0])
            bf16x6_detail::amx_block(a_block(rb), b, sc, rows, c > 0, acc,
                                     reinterpret_cast<const char*>(b + block_elems) + 64 * first,
                                     std::min(share, lines - first));
          else if (last)
            scalar_block(op, Bp, bk.steps, rb * kBlock, rows, cb * kBlock, cols, acc);
          if (last) op.finish(acc, rb * kBlock, rows, cb * kBlock, cols);
        }
      }
    }
  }
}

// A row-major (any strides) and C row-major with leading dimension ldc: a GEMM.
struct MatrixOperands final : Operands {
  MatrixView A;
  float* C;
  int64_t ldc;
  const GemmEpilogue* ep;
  const ElementHook* hook;

  bool pack_a(int64_t i0, int rows, int64_t k0, int64_t kc, uint16_t* dst) const override {
    const float* src = A.data + i0 * A.rs + k0 * A.cs;
    if (A.cs == 1 || kc <= 1) return bf16x6_detail::amx_pack_a_block(src, A.rs, rows, kc, dst);
    // A strided view (a transposed activation): its rows gathered into contiguous ones first.
    float* rowbuf = tl_gather.get(static_cast<size_t>(rows * kc));
    for (int r = 0; r < rows; ++r)
      for (int64_t k = 0; k < kc; ++k) rowbuf[r * kc + k] = src[r * A.rs + k * A.cs];
    return bf16x6_detail::amx_pack_a_block(rowbuf, kc, rows, kc, dst);
  }
  float a(int64_t i, int64_t k) const override { return A.data[i * A.rs + k * A.cs]; }
  void finish(const float* acc, int64_t i0, int rows, int64_t j0, int cols) const override {
    float* c = C + i0 * ldc + j0;
    bf16x6_detail::amx_finish(acc, rows, cols, ep->alpha, ep->beta,
                              ep->bias_mode == GemmEpilogue::Bias::PerRow ? ep->bias + i0 : nullptr,
                              ep->bias_mode == GemmEpilogue::Bias::PerCol ? ep->bias + j0 : nullptr,
                              static_cast<int>(ep->act), c, ldc);
    if (hook)
      for (int r = 0; r < rows; ++r) (*hook)(c + r * ldc, (i0 + r) * N + j0, cols);
  }
};

}  // namespace

namespace bf16x6_detail {

void run(const Operands& op, const float* Bpacked, const Parallel& par) {
  if (op.M == 0 || op.N == 0) return;
  uint32_t non_finite;
  std::memcpy(&non_finite, Bpacked, sizeof(non_finite));
  const uint16_t* Bp = b_data(Bpacked);
  const int64_t M = op.M, K = op.K, rblocks = (M + kBlock - 1) / kBlock, cblocks = (op.N + kBlock - 1) / kBlock;
  const int64_t threads = par.num_threads();
  if (rblocks >= kRowSplitBlocks * threads || threads == 1) {
    const Blocking bk = blocking(K, cblocks);
    par.parallel_for(rblocks, 1, [&](int64_t b, int64_t e) { run_blocks(op, Bp, bk, !non_finite, b, e, 0, cblocks, nullptr); });
    return;
  }
  // Few rows: the threads share the columns, so that each reads only its part of B (which is
  // what streams from memory), and A is packed once for all of them. Columns go out in groups of
  // op.column_group blocks, which finish() may rely on to see a whole group on one thread.
  const int64_t cg = std::max(1, op.column_group), groups = (cblocks + cg - 1) / cg;
  const Blocking bk = blocking(K, (groups + threads - 1) / threads * cg);
  uint16_t* packed = tl_shared_a.get(static_cast<size_t>(bk.chunks * rblocks * bk.chunk_elems));
  std::vector<char> item_finite(static_cast<size_t>(bk.chunks * rblocks)), finite(static_cast<size_t>(rblocks), 1);
  par.parallel_for(bk.chunks * rblocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = i / rblocks, rb = i % rblocks;
      const int64_t k0 = c * bk.chunk_steps * kStep, kc = std::min(K - k0, bk.chunk_steps * kStep);
      const int rows = static_cast<int>(std::min<int64_t>(kBlock, M - rb * kBlock));
      item_finite[i] = op.pack_a(rb * kBlock, rows, k0, kc, packed + i * bk.chunk_elems);
    }
  });
  for (int64_t i = 0; i < bk.chunks * rblocks; ++i) finite[i % rblocks] &= item_finite[i];
  const SharedA shared{packed, finite.data(), rblocks};
  par.parallel_for(groups, 1, [&](int64_t b, int64_t e) {
    run_blocks(op, Bp, bk, !non_finite, 0, rblocks, b * cg, std::min(cblocks, e * cg), &shared);
  });
}

}  // namespace bf16x6_detail

bool bf16x6_available() { return amx_usable() && active_isa() == Isa::Avx512; }

int64_t bf16x6_packed_b_floats(int64_t K, int64_t N) {
  DNNF_CHECK(K >= 0 && N >= 0, "bf16x6_packed_b_floats: negative size (K=", K, " N=", N, ")");
  return kHeaderFloats + (N + kBlock - 1) / kBlock * steps_of(K) * kStepElems / 2;
}

void bf16x6_pack_b(int64_t K, int64_t N, MatrixView B, float* dst) {
  const int64_t total = bf16x6_packed_b_floats(K, N);
  std::memset(dst, 0, static_cast<size_t>(total) * sizeof(float));
  uint16_t* out = reinterpret_cast<uint16_t*>(dst + kHeaderFloats);
  const int64_t steps = steps_of(K);
  uint32_t non_finite = 0;
  // b_offset(k, n) = b_offset(k, 0) + b_offset(0, n): the two parts once each, not a division
  // chain per value (a bert-base is 85 M of them).
  std::vector<int64_t> col(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) col[n] = b_offset(steps, 0, n);
  for (int64_t k = 0; k < K; ++k) {
    uint16_t* row = out + b_offset(steps, k, 0);
    for (int64_t n = 0; n < N; ++n) {
      const float x = B.data[k * B.rs + n * B.cs];
      non_finite |= !std::isfinite(x);
      uint16_t t[3];
      split_bits(x, t);
      for (int q = 0; q < 3; ++q) row[col[n] + q * kPlaneElems] = t[q];
    }
  }
  std::memcpy(dst, &non_finite, sizeof(non_finite));
}

void sgemm_bf16x6_packed_b(int64_t M, int64_t N, int64_t K, MatrixView A, const float* Bpacked, float* C,
                           int64_t ldc, const GemmEpilogue& ep, const Parallel& par, const ElementHook* epilogue) {
  DNNF_CHECK(bf16x6_available(), "sgemm_bf16x6_packed_b: this CPU or OS offers no AMX (or DNNFUSION_AMX=0)");
  DNNF_CHECK(M >= 0 && N >= 0 && K >= 0, "sgemm_bf16x6_packed_b: negative size");
  DNNF_CHECK(ep.bias_mode == GemmEpilogue::Bias::None || ep.bias != nullptr, "sgemm_bf16x6_packed_b: bias mode without a bias");
  DNNF_CHECK(reinterpret_cast<uintptr_t>(Bpacked) % 64 == 0, "sgemm_bf16x6_packed_b: packed B must be 64-byte aligned");
  MatrixOperands op;
  op.M = M;
  op.N = N;
  op.K = K;
  op.A = A;
  op.C = C;
  op.ldc = ldc;
  op.ep = &ep;
  op.hook = epilogue && *epilogue ? epilogue : nullptr;
  bf16x6_detail::run(op, Bpacked, par);
}

void bf16x6_split(float x, float parts[3]) {
  uint16_t t[3];
  split_bits(x, t);
  for (int q = 0; q < 3; ++q) parts[q] = widen(t[q]);
}

void sgemm_bf16x6_reference(int64_t M, int64_t N, int64_t K, MatrixView A, MatrixView B, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;  // exact sums: what remains is the dropped products' error
      for (int64_t k = 0; k < K; ++k) {
        float a[3], b[3];
        bf16x6_split(A.data[i * A.rs + k * A.cs], a);
        bf16x6_split(B.data[k * B.rs + j * B.cs], b);
        s += static_cast<double>(a[0]) * b[0] + static_cast<double>(a[0]) * b[1] + static_cast<double>(a[0]) * b[2] +
             static_cast<double>(a[1]) * b[1] + static_cast<double>(a[1]) * b[0] + static_cast<double>(a[2]) * b[0];
      }
      C[i * ldc + j] = static_cast<float>(s);
    }
}

}  // namespace dnnfusion::kernels
