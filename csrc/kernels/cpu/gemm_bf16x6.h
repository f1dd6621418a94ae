// fp32 GEMM with fp32 accuracy on Intel AMX ("bf16x6"): every fp32 value of A and B is split
// exactly into three bf16 terms (x = x0 + x1 + x2, 8 significant bits each), and C accumulates,
// in fp32, the six products x_i * y_j with i + j <= 2. The three dropped products are below
// 2^-23 |a b| together, under one fp32 rounding, so results differ from a plain fp32 GEMM by
// summation order, not by precision. AMX multiplies bf16 pairs 16x faster than AVX-512 FMAs
// multiply fp32, so the six products still run ~2.7x the fp32 peak.
//
// Preconditions: bf16x6_available() before any packed call; B packed by bf16x6_pack_b for the
// same K and N; A any strides (unit column stride is the fast case). Postconditions: every C[i*ldc+j], i<M, j<N, written once with
// act(alpha * A·B + beta*C_old + bias), the epilogue hook called once per element as in sgemm
// (gemm.h); rows of A holding inf or NaN and every row when B does are computed in plain fp32
// from the exact B the planes add up to (the products would turn inf * x into NaN).
#pragma once
#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace dnnfusion::kernels {

// The CPU has AMX-TILE + AMX-BF16 + AVX512-BF16, the OS granted the tile state, and the
// environment does not say DNNFUSION_AMX=0. Read once.
bool bf16x6_available();

// Packed B: a 64-byte header (flags) then ceil(N/32) blocks of ceil(K/32) steps (see
// gemm_bf16x6_ukernel.h), counted in floats so that the packed operand is an fp32 tensor.
int64_t bf16x6_packed_b_floats(int64_t K, int64_t N);
// Portable (runs on any CPU). dst: bf16x6_packed_b_floats(K, N) floats, 64-byte aligned.
void bf16x6_pack_b(int64_t K, int64_t N, MatrixView B, float* dst);

// Throws dnnfusion::Error when !bf16x6_available().
void sgemm_bf16x6_packed_b(int64_t M, int64_t N, int64_t K, MatrixView A, const float* Bpacked, float* C,
                           int64_t ldc, const GemmEpilogue& ep, const Parallel& par,
                           const ElementHook* epilogue = nullptr);

// The same six products, scalar, for tests: C = sum_k sum_{i+j<=2} a_i(k) b_j(k), the sum taken in
// double and rounded once, so that its error is the dropped products' alone. Any CPU.
void sgemm_bf16x6_reference(int64_t M, int64_t N, int64_t K, MatrixView A, MatrixView B, float* C, int64_t ldc);

// The exact three-term split of one float (hi, mid, lo as fp32 values); exposed for tests.
void bf16x6_split(float x, float parts[3]);

namespace bf16x6_detail {

// What one bf16x6 product reads and writes, for kernels that are a GEMM over other layouts (the
// 1x1 convolution over NCHW[x]c, conv_bf16x6.h): A's rows packed on demand, C's 32 x 32 blocks
// finished on demand.
struct Operands {
  int64_t M = 0, N = 0, K = 0;
  // Threads that share the columns get them in groups of this many 32-column blocks.
  int column_group = 1;
  virtual ~Operands() = default;
  // Rows [i0, i0+rows) (rows <= 32) x k [k0, k0+kc) of A into one packed block with
  // amx_pack_a_block's layout (gemm_bf16x6_ukernel.h); false if a value read is inf or NaN.
  virtual bool pack_a(int64_t i0, int rows, int64_t k0, int64_t kc, uint16_t* dst) const = 0;
  // A(i, k), for the plain fp32 path of rows with inf or NaN.
  virtual float a(int64_t i, int64_t k) const = 0;
  // acc (32 x 32, row-major) holds the final sums A·B of rows [i0, i0+rows) x columns
  // [j0, j0+cols); called once per block, column blocks of a row block in ascending order.
  virtual void finish(const float* acc, int64_t i0, int rows, int64_t j0, int cols) const = 0;
};

// The product of op's A and a B packed by bf16x6_pack_b (op.K x op.N). bf16x6_available() must hold.
void run(const Operands& op, const float* Bpacked, const Parallel& par);

}  // namespace bf16x6_detail

}  // namespace dnnfusion::kernels
