// Scaled-dot-product attention for inference (PyTorch F.scaled_dot_product_attention semantics,
// no dropout): out = softmax(scale * q k^T + mask) v per (batch, head).
// Per task (batch, head, block of 64 query rows, 256 when there are two heads per thread or
// more): scores via sgemm into a per-slot scratch
// block, mask/causal/softmax in place, then P v via sgemm straight into out. Parallel over
// Bt*H*query-blocks; the inner sgemms run serially.
// Preconditions: sizes >= 0 (D, Dv may be 0); q is (Bt,H,Lq,D), k (Bt,H,Lk,D), v (Bt,H,Lk,Dv)
// through their strides (any, including 0); mask (if data != nullptr) is (Bt,H,Lq,Lk) through its
// strides, float (added to the scaled scores) or bool (false = masked out); scratch holds
// sdpa_scratch_bytes(Lq, Lk, par.num_threads()) bytes, 64-byte aligned; out is contiguous
// [Bt][H][Lq][Dv] unless out_strides (nullable) gives the element strides {b, h, i} of a layout
// whose rows of Dv are contiguous (a fused block writes [Bt][Lq][H][Dv] directly: the permute
// after attention costs nothing); lse (nullable) is contiguous [Bt][H][Lq].
// Causal is the top-left aligned mask (key j allowed iff j <= i), combined with any mask.
// Fully masked rows (every score -inf): PyTorch >= 2.5's math path uses _safe_softmax, which gives
// probability 0 there, so such rows of out are 0 (not NaN) and their lse is -inf. NaN scores
// propagate. Lk == 0 gives out = 0 and lse = -inf.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

struct Tensor4 {
  const float* data;
  int64_t s0, s1, s2, s3;
};  // element (b,h,i,d) = data[b*s0+h*s1+i*s2+d*s3]

struct AttnMask {
  const void* data = nullptr;
  bool is_bool = false;
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
};

size_t sdpa_scratch_bytes(int64_t Lq, int64_t Lk, int num_threads);

void sdpa(int64_t Bt, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, Tensor4 q,
          Tensor4 k, Tensor4 v, AttnMask mask, bool causal, float scale, float* out, float* lse,
          void* scratch, const Parallel& par, const int64_t* out_strides = nullptr);

}  // namespace dnnfusion::kernels
