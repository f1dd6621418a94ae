// Single-precision GEMM with fused epilogue: C[i*ldc+j] = act(alpha * sum_k A(i,k) B(k,j)
//   + beta*C_old + bias). Packs A and B into cache-blocked panels (alpha folded into A) and runs a
// register-blocked micro-kernel chosen at run time (AVX-512 12x32, AVX2 6x16, scalar 4x8).
// Preconditions: M, N, K >= 0; A and B readable at every (i,k)/(k,j) their views name (any
// strides, 0 = broadcast); C rows don't overlap A/B; ldc >= N. beta == 0 means C is never read
// (it may hold NaN). Postconditions: every C[i*ldc+j], i<M, j<N, written exactly once per call;
// nothing else in C touched. K == 0 gives act(beta*C_old + bias). Throws dnnfusion::Error on
// negative sizes or a null bias pointer with a bias mode.
// Fusion epilogue (optional; nullptr or an empty hook = none): called after an element's final
// value (bias, beta*C_old and activation included) is stored, while its tile is still in L1, once
// per tile row (K == 0: per whole row of C): data = &C[i*ldc + j], count = that row's valid
// columns of the tile, start = (b*M + i)*N + j (b = 0 for sgemm). start ignores ldc/strideC: it
// is the row-major linear index of the element in a dense [batch][M][N] output, which is what C
// is when ldc == N and strideC == M*N. Every C element is passed exactly once, from whichever
// worker computed it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

struct MatrixView {
  const float* data;
  int64_t rs;
  int64_t cs;
};  // element (i,j) = data[i*rs + j*cs]

struct GemmEpilogue {
  enum class Bias : int8_t { None, PerRow, PerCol };
  const float* bias = nullptr;
  Bias bias_mode = Bias::None;  // PerRow: bias[i] (length M); PerCol: bias[j] (length N)
  float alpha = 1.f;            // scales A·B
  float beta = 0.f;             // adds beta * C_old; 0 means C is not read
  Activation act = Activation::None;
};

void sgemm(int64_t M, int64_t N, int64_t K, MatrixView A, MatrixView B, float* C, int64_t ldc,
           const GemmEpilogue& ep, const Parallel& par, const ElementHook* epilogue = nullptr);

// batch independent GEMMs: A_b = A.data + b*strideA, B_b likewise, C_b = C + b*strideC. The same
// epilogue (and bias vector) applies to every batch entry.
void sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K, MatrixView A, int64_t strideA,
                   MatrixView B, int64_t strideB, float* C, int64_t ldc, int64_t strideC,
                   const GemmEpilogue& ep, const Parallel& par,
                   const ElementHook* epilogue = nullptr);

// Constant B operands (weights) are packed once, at compile time, into the micro-kernel's panel
// layout so that no call copies them again (at M = 128 the per-call copy of a 768x2304 weight was
// ~18% of the GEMM): ceil(N/nr) panels of K x nr floats, panel p holding columns [p*nr, p*nr+nr)
// row-major, columns >= N zero. nr must be sgemm_panel_width() of the process that runs it.
int sgemm_panel_width();  // NR of the micro-kernel the active ISA runs (32 / 16 / 8)
int64_t sgemm_packed_b_floats(int64_t K, int64_t N, int nr);
// Precondition: dst holds sgemm_packed_b_floats(K, N, nr) floats; nr in {8, 16, 32}.
void sgemm_pack_b(int64_t K, int64_t N, MatrixView B, int nr, float* dst);
// sgemm with B given packed by sgemm_pack_b. Bpacked must be 64-byte aligned (aligned vector
// loads). Throws dnnfusion::Error when nr is not sgemm_panel_width().
void sgemm_packed_b(int64_t M, int64_t N, int64_t K, MatrixView A, const float* Bpacked, int nr,
                    float* C, int64_t ldc, const GemmEpilogue& ep, const Parallel& par,
                    const ElementHook* epilogue = nullptr);

namespace gemm_detail {

// A batch of same-shaped GEMMs whose operands are computed per batch entry; lets conv2d feed the
// driver an implicit im2col B operand (packed straight from the image) and per-group biases.
struct BatchedProblem {
  int64_t batch = 1, M = 0, N = 0, K = 0, ldc = 0;
  virtual ~BatchedProblem() = default;
  virtual MatrixView a(int64_t b) const = 0;
  // Packs B_b rows [k0,k0+kc) x cols [j0,j0+nc) into ceil(nc/nr) panels of kc*nr floats (panel p
  // holds columns j0+p*nr.., row-major within the panel), zero-filling columns >= j0+nc.
  virtual void pack_b(int64_t b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr,
                      float* dst) const = 0;
  // B_b already packed whole (sgemm_pack_b layout, the micro-kernel's nr), or nullptr: then the
  // driver reads its panels in place and never calls pack_b.
  virtual const float* packed_b(int64_t) const { return nullptr; }
  virtual float* c(int64_t b) const = 0;
  // Bias vector for batch entry b (PerRow: M entries, PerCol: N entries); ignored when the
  // epilogue has no bias mode.
  virtual const float* bias(int64_t b) const = 0;
};

// Packs B (any strides) in the layout BatchedProblem::pack_b documents.
void pack_b_strided(MatrixView B, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr,
                    float* dst);

// The epilogue hook gets start = (b*M + i)*N + j as documented above; conv2d relies on that being
// the [N][K][OH][OW] output index (its entry b = n*groups + g owns Kg consecutive output planes).
void run(const BatchedProblem& p, const GemmEpilogue& ep, const Parallel& par,
         const ElementHook* epilogue = nullptr);

}  // namespace gemm_detail
}  // namespace dnnfusion::kernels
