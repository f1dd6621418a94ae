// sdpa: per (batch, head, query block) two sgemm calls around an in-place masked softmax (the
// row softmax in AVX-512 or AVX2 when the CPU has it, attention_avx*.cc; else the portable loop here).
// See attention.h for the contract.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"

namespace dnnfusion::kernels {
namespace {

// Query rows per task: with at least two heads per thread a task takes up to kQueryBlockMax
// rows, so K is packed once for a whole head of a 128-256 token sequence; with fewer heads,
// kQueryBlock rows, so the threads still have several tasks each to share.
constexpr int64_t kQueryBlock = 64, kQueryBlockMax = 256;

int64_t query_block(int64_t Bt, int64_t H, int num_threads) {
  return Bt * H >= 2 * std::max(1, num_threads) ? kQueryBlockMax : kQueryBlock;
}

int64_t slot_floats(int64_t Lq, int64_t Lk, int64_t qblock) {
  const int64_t rows = std::min(std::max<int64_t>(Lq, 1), qblock);
  return (rows * std::max<int64_t>(Lk, 1) + 15) / 16 * 16;  // keep every slot 64-byte aligned
}

// exp(x) for x in [-inf, 0] (softmax after max subtraction; never NaN here), Cephes-style
// polynomial, max relative error ~1e-7; exp(x < -87.3) is flushed to 0. Written so the row loop
// vectorises: std::exp would be a libm call per element and dominate attention time, and under
// the default -ftrapping-math GCC will not if-convert float compares or float-to-int conversions,
// so rounding uses the 1.5*2^23 trick and the range tests compare bit patterns (for x <= 0 a
// larger pattern is a more negative x).
inline float exp_nonpositive(float x) {
  uint32_t ux;
  std::memcpy(&ux, &x, sizeof ux);
  const uint32_t uxc = ux > 0xC2B00000u ? 0xC2B00000u : ux;  // clamp to -88
  float xc;
  std::memcpy(&xc, &uxc, sizeof xc);
  const float shifted = xc * 1.44269504088896341f + 12582912.f;  // round(x*log2e) in low bits
  const float fn = shifted - 12582912.f;
  int32_t sbits;
  std::memcpy(&sbits, &shifted, sizeof sbits);
  const int32_t n = sbits - 0x4B400000;
  const float r = xc - fn * 0.693359375f + fn * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.f;
  const int32_t pbits = (n + 127) * (1 << 23);  // 2^n; n >= -127 so the exponent stays >= 0
  float scale;
  std::memcpy(&scale, &pbits, sizeof scale);
  const float v = y * scale;
  uint32_t uv;
  std::memcpy(&uv, &v, sizeof uv);
  uv &= ux > 0xC2AE999Au ? 0u : ~0u;  // x < -87.3 -> +0
  float out;
  std::memcpy(&out, &uv, sizeof out);
  return out;
}

struct Task {
  int64_t Bt, H, Lq, Lk, D, Dv;
  Tensor4 q, k, v;
  AttnMask mask;
  bool causal;
  float scale;
  float* out;
  int64_t os0, os1, os2;  // element strides of out over (b, h, i); rows of Dv contiguous
  float* lse;
};

// Rows [i0, i0+rows) of head (b, h); S is rows x Lk scratch.
void attend_block(const Task& t, int64_t b, int64_t h, int64_t i0, int64_t rows, float* S) {
  const SerialParallel serial;
  const int64_t Lk = t.Lk;
  float* out = t.out + b * t.os0 + h * t.os1 + i0 * t.os2;
  if (Lk > 0) {
    GemmEpilogue ep;
    ep.alpha = t.scale;
    sgemm(rows, Lk, t.D, {t.q.data + b * t.q.s0 + h * t.q.s1 + i0 * t.q.s2, t.q.s2, t.q.s3},
          {t.k.data + b * t.k.s0 + h * t.k.s1, t.k.s3, t.k.s2}, S, Lk, ep, serial);
  }
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const Isa isa = active_isa();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* s = S + r * Lk;
    if (t.mask.data) {
      const int64_t off = b * t.mask.s0 + h * t.mask.s1 + i * t.mask.s2;
      if (t.mask.is_bool) {
        const auto* m = static_cast<const uint8_t*>(t.mask.data) + off;
        for (int64_t j = 0; j < Lk; ++j)
          if (!m[j * t.mask.s3]) s[j] = kNegInf;
      } else {
        const auto* m = static_cast<const float*>(t.mask.data) + off;
        for (int64_t j = 0; j < Lk; ++j) s[j] += m[j * t.mask.s3];
      }
    }
    if (t.causal)
      for (int64_t j = std::max<int64_t>(i + 1, 0); j < Lk; ++j) s[j] = kNegInf;
    if (isa != Isa::Scalar && Lk > 0) {
      const float row_lse = isa == Isa::Avx512 ? attention_detail::softmax_row_avx512(s, Lk, t.lse != nullptr)
                                               : attention_detail::softmax_row_avx2(s, Lk, t.lse != nullptr);
      if (t.lse) t.lse[(b * t.H + h) * t.Lq + i] = row_lse;
      continue;
    }
    // Reductions in 8 explicit lanes: without -ffast-math the compiler may not reassociate a
    // single float accumulator, and a scalar loop here would cost more than both GEMMs.
    float lane_max[8], lane_sum[8];
    int lane_nan[8];
    for (int l = 0; l < 8; ++l) {
      lane_max[l] = kNegInf;
      lane_sum[l] = 0.f;
      lane_nan[l] = 0;
    }
    int64_t j8 = 0;
    for (; j8 + 8 <= Lk; j8 += 8)
      for (int l = 0; l < 8; ++l) {
        const float x = s[j8 + l];
        lane_max[l] = x > lane_max[l] ? x : lane_max[l];
        lane_nan[l] |= x != x;
      }
    for (int64_t j = j8; j < Lk; ++j) {
      lane_max[0] = s[j] > lane_max[0] ? s[j] : lane_max[0];
      lane_nan[0] |= s[j] != s[j];
    }
    float mx = kNegInf;
    bool nan = false;
    for (int l = 0; l < 8; ++l) {
      mx = std::max(mx, lane_max[l]);
      nan |= lane_nan[l] != 0;
    }
    float row_lse;
    if (nan) {
      // PyTorch's softmax turns the whole row NaN.
      for (int64_t j = 0; j < Lk; ++j) s[j] = std::numeric_limits<float>::quiet_NaN();
      row_lse = std::numeric_limits<float>::quiet_NaN();
    } else if (mx == kNegInf) {
      // Every key masked out: _safe_softmax gives probability 0 (see attention.h).
      for (int64_t j = 0; j < Lk; ++j) s[j] = 0.f;
      row_lse = kNegInf;
    } else {
      for (int64_t j = 0; j < Lk; ++j) s[j] = exp_nonpositive(s[j] - mx);
      for (j8 = 0; j8 + 8 <= Lk; j8 += 8)
        for (int l = 0; l < 8; ++l) lane_sum[l] += s[j8 + l];
      for (int64_t j = j8; j < Lk; ++j) lane_sum[0] += s[j];
      float sum = 0.f;
      for (int l = 0; l < 8; ++l) sum += lane_sum[l];
      const float inv = 1.f / sum;
      for (int64_t j = 0; j < Lk; ++j) s[j] *= inv;
      row_lse = mx + std::log(sum);
    }
    if (t.lse) t.lse[(b * t.H + h) * t.Lq + i] = row_lse;
  }
  // out = P v; with Lk == 0 this is the K == 0 GEMM, i.e. zeros.
  sgemm(rows, t.Dv, Lk, {S, Lk, 1}, {t.v.data + b * t.v.s0 + h * t.v.s1, t.v.s2, t.v.s3}, out,
        t.os2, GemmEpilogue{}, serial);
}

}  // namespace

size_t sdpa_scratch_bytes(int64_t Lq, int64_t Lk, int num_threads) {
  // Sized for the larger query block: the head count is not known here.
  return static_cast<size_t>(std::max(1, num_threads)) *
         static_cast<size_t>(slot_floats(Lq, Lk, kQueryBlockMax)) * sizeof(float);
}

void sdpa(int64_t Bt, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, Tensor4 q,
          Tensor4 k, Tensor4 v, AttnMask mask, bool causal, float scale, float* out, float* lse,
          void* scratch, const Parallel& par, const int64_t* out_strides) {
  DNNF_CHECK(Bt >= 0 && H >= 0 && Lq >= 0 && Lk >= 0 && D >= 0 && Dv >= 0,
             "sdpa: negative size (Bt=", Bt, " H=", H, " Lq=", Lq, " Lk=", Lk, " D=", D, " Dv=", Dv,
             ")");
  const int64_t qblock = query_block(Bt, H, par.num_threads());
  const int64_t qblocks = (Lq + qblock - 1) / qblock;
  const int64_t tasks = Bt * H * qblocks;
  if (tasks == 0) return;
  DNNF_CHECK(scratch != nullptr, "sdpa: scratch is null (need sdpa_scratch_bytes bytes)");
  DNNF_CHECK(reinterpret_cast<uintptr_t>(scratch) % 64 == 0, "sdpa: scratch must be 64-byte aligned");
  const int64_t os0 = out_strides ? out_strides[0] : H * Lq * Dv, os1 = out_strides ? out_strides[1] : Lq * Dv,
                os2 = out_strides ? out_strides[2] : Dv;
  DNNF_CHECK(os2 >= Dv || Lq <= 1, "sdpa: output row stride ", os2, " overlaps rows of ", Dv);
  const Task t{Bt, H, Lq, Lk, D, Dv, q, k, v, mask, causal, scale, out, os0, os1, os2, lse};
  const int64_t slot = slot_floats(Lq, Lk, qblock);
  // Exactly one scratch slot per index of this parallel_for: indices are disjoint, and a chunk
  // that holds several runs them one after another, so no slot is used twice at once.
  const int64_t slots = std::min<int64_t>(std::max(1, par.num_threads()), tasks);
  par.parallel_for(slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t sl = s0; sl < s1; ++sl) {
      float* S = static_cast<float*>(scratch) + sl * slot;
      for (int64_t task = sl * tasks / slots; task < (sl + 1) * tasks / slots; ++task) {
        const int64_t qb = task % qblocks, bh = task / qblocks;
        const int64_t i0 = qb * qblock;
        attend_block(t, bh / H, bh % H, i0, std::min(qblock, Lq - i0), S);
      }
    }
  });
}

}  // namespace dnnfusion::kernels
