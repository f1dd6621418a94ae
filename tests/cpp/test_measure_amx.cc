// measure_amx (csrc/target/cpu/layout): the AMX-or-fp32 verdict per layer shape — the decision
// rule, that a verdict is timed once per process and then read, that it agrees with its own
// medians, and how take_amx counts the three modes; and the operand fill the timings share.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/conv_bf16x6.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "target/cpu/layout/measure_amx.h"
#include "target/cpu/layout/timing_operands.h"

namespace dnnfusion {
namespace {

using layout::AmxVerdict;

TEST(MeasureAmx, AmxMustBeFasterByTheMargin) {
  EXPECT_TRUE(layout::amx_faster(100.0, 100.0 / layout::kAmxMargin - 0.01));
  EXPECT_FALSE(layout::amx_faster(100.0, 100.0 / layout::kAmxMargin + 0.01));
  EXPECT_FALSE(layout::amx_faster(100.0, 100.0));
  EXPECT_FALSE(layout::amx_faster(100.0, 120.0));
}

TEST(MeasureAmx, TakeAmxCountsEachModeAndMeasuresOnlyInMeasureMode) {
  kernels::SerialParallel serial;
  int calls = 0;
  auto fast = [&](const kernels::Parallel&) {
    ++calls;
    return AmxVerdict{100, 50, true, true};
  };
  auto slow = [&](const kernels::Parallel&) {
    ++calls;
    return AmxVerdict{100, 99, false, false};  // known already: not counted as timed
  };
  layout::AmxChoiceStats st;
  EXPECT_TRUE(layout::take_amx({CompileOptions::Amx::Rule, nullptr}, fast, &st));
  EXPECT_FALSE(layout::take_amx({CompileOptions::Amx::Off, nullptr}, fast, &st));
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(layout::take_amx({CompileOptions::Amx::Measure, &serial}, fast, &st));
  EXPECT_FALSE(layout::take_amx({CompileOptions::Amx::Measure, &serial}, slow, &st));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(st.taken, 2);
  EXPECT_EQ(st.declined, 1);
  EXPECT_EQ(st.timed, 1);
  EXPECT_GE(st.ms, 0.0);
  EXPECT_THROW(layout::take_amx({CompileOptions::Amx::Measure, nullptr}, fast, &st), Error);
}

void expect_consistent(const AmxVerdict& v) {
  EXPECT_GT(v.fp32_us, 0.0);
  EXPECT_GT(v.amx_us, 0.0);
  EXPECT_EQ(v.amx, layout::amx_faster(v.fp32_us, v.amx_us));
}

TEST(MeasureAmx, GemmVerdictIsTimedOncePerProcessAndKept) {
  if (!kernels::bf16x6_available()) GTEST_SKIP() << "this CPU or OS offers no AMX-BF16";
  kernels::SerialParallel serial;
  layout::clear_amx_verdicts();
  const AmxVerdict first = layout::measure_amx_gemm(80, 96, 70, serial);
  EXPECT_TRUE(first.measured_now);
  expect_consistent(first);
  const AmxVerdict again = layout::measure_amx_gemm(80, 96, 70, serial);
  EXPECT_FALSE(again.measured_now);
  EXPECT_EQ(again.amx, first.amx);
  EXPECT_EQ(again.fp32_us, first.fp32_us);
  EXPECT_TRUE(layout::measure_amx_gemm(80, 96, 71, serial).measured_now);  // another shape
  layout::clear_amx_verdicts();
  EXPECT_TRUE(layout::measure_amx_gemm(80, 96, 70, serial).measured_now);
}

TEST(MeasureAmx, ConvVerdictComparesTheDirectKernelWithItsAmxVariant) {
  if (!kernels::bf16x6_available()) GTEST_SKIP() << "this CPU or OS offers no AMX-BF16";
  kernels::SerialParallel serial;
  const kernels::Conv2dShape s{1, 64, 16, 16, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  kernels::ConvNchwcKnobs direct = kernels::conv_nchwc_default_knobs(s);
  direct.ic_bn = direct.oc_bn = 16;
  direct.reg_n = std::min(direct.reg_n, kernels::conv_nchwc_max_reg_n(kernels::active_isa(), 16));
  ASSERT_TRUE(kernels::conv_bf16x6_supported(s, 16, 16));
  layout::clear_amx_verdicts();
  const AmxVerdict v = layout::measure_amx_conv(s, direct, serial);
  EXPECT_TRUE(v.measured_now);
  expect_consistent(v);
  EXPECT_FALSE(layout::measure_amx_conv(s, direct, serial).measured_now);
  direct.reg_n = direct.reg_n == 7 ? 8 : 7;  // other knobs: another verdict
  EXPECT_TRUE(layout::measure_amx_conv(s, direct, serial).measured_now);
}

TEST(TimingOperands, RepeatableFiniteValuesInTheUnitInterval) {
  std::vector<float> a(100000), b(100000), c(100000);
  layout::fill_timing_operand(a.data(), static_cast<int64_t>(a.size()), 7);
  layout::fill_timing_operand(b.data(), static_cast<int64_t>(b.size()), 7);
  layout::fill_timing_operand(c.data(), static_cast<int64_t>(c.size()), 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sum = 0;
  int negative = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_GE(v, -1.f);
    ASSERT_LT(v, 1.f);
    sum += v;
    negative += v < 0;
  }
  // Spread over the interval, not stuck: mean near 0, about half negative.
  EXPECT_NEAR(sum / a.size(), 0.0, 0.02);
  EXPECT_NEAR(negative / static_cast<double>(a.size()), 0.5, 0.02);
  layout::fill_timing_operand(nullptr, 0, 1);  // n == 0 touches nothing
}

}  // namespace
}  // namespace dnnfusion
