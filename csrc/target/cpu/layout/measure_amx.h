// Whether a layer runs faster on the AMX bf16x6 kernels or on the fp32 ones, decided by timing
// both on the layer's own shape, on this host, at compile time. The shape rules (kBf16x6MinRows,
// amx_conv_pays_off) say where AMX can pay at all; whether it does depends on the host as much as
// on the shape: on a quiet 2-vCPU Xeon guest bert-base's weight GEMMs run 1.45x (batch 1) and
// 1.67x (batch 8) faster on AMX, on the same VM type with a busy host 0.85-0.97x and 0.86-1.07x
// (benchmarks/RESULTS.md), with the weights hot in cache both times: the tile unit itself is
// what a guest gets less of. A fixed rule then costs up to a fifth of a transformer's time.
//
// Timing: random operands of the layer's shape, both weights packed, one warm-up call each, then
// rounds of one call of each kernel in alternating order (so a slow stretch of the host hits both
// alike) until kMaxRounds rounds or, after kMinRounds, kBudgetMs of timing; the medians decide.
// AMX must be faster by kAmxMargin: its packed weights are 1.5x larger, which a model whose
// weights are cold in cache pays and this hot-cache loop does not see.
//
// Precondition: kernels::bf16x6_available(); the shape is one the AMX kernel supports.
// Postcondition: a verdict is measured once per process for each (shape, knobs, threads) and
// kept, so every compile in the process agrees with the first (measured_now says which call
// timed it). Verdicts are not stored across processes: a stored verdict would keep one moment's
// host state for good. Thread-safe.
#pragma once
#include <cstdint>
#include <functional>

#include "compile_options.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::layout {

inline constexpr int kMinRounds = 3;
inline constexpr int kMaxRounds = 9;
inline constexpr double kBudgetMs = 30;
inline constexpr double kAmxMargin = 1.05;

struct AmxVerdict {
  double fp32_us = 0;  // median time of one call of the fp32 kernel
  double amx_us = 0;   // ... of the AMX bf16x6 kernel
  bool amx = false;    // amx_faster(fp32_us, amx_us)
  bool measured_now = false;
};

inline bool amx_faster(double fp32_us, double amx_us) { return amx_us * kAmxMargin < fp32_us; }

// C[M, N] = A[M, K] * B[K, N] + bias: sgemm_packed_b against sgemm_bf16x6_packed_b.
AmxVerdict measure_amx_gemm(int64_t M, int64_t K, int64_t N, const kernels::Parallel& par);

// A groups-1 NCHW[x]c conv: conv2d_nchwc with the `direct` knobs against the same blocks with amx.
AmxVerdict measure_amx_conv(const kernels::Conv2dShape& s, const kernels::ConvNchwcKnobs& direct,
                            const kernels::Parallel& par);

// How a pass decides among the layers the shape rules allow (CompileOptions::amx).
struct AmxChoice {
  CompileOptions::Amx mode = CompileOptions::Amx::Rule;
  const kernels::Parallel* par = nullptr;  // Measure: the pool the model will run on (required)
};

struct AmxChoiceStats {
  int taken = 0;     // layers that run on AMX
  int declined = 0;  // layers the rules allowed and timing gave to the fp32 kernel
  int timed = 0;     // verdicts measured by this pass (the rest were known in this process)
  double ms = 0;     // time spent measuring
};

// Whether an allowed layer runs on AMX: Rule yes, Off no, Measure measure().amx; counts in *st.
bool take_amx(const AmxChoice& c, const std::function<AmxVerdict(const kernels::Parallel&)>& measure,
              AmxChoiceStats* st);

// Forgets every verdict (tests).
void clear_amx_verdicts();

}  // namespace dnnfusion::layout
