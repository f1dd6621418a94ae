// conv2d_nchwc_expand_dw (1x1 expand or any groups-1 conv + activation + depthwise, fused in row
// windows) against
//  (a) the plain NCHW reference convolutions with the activation in between, and
//  (b) the unfused blocked path (conv2d_nchwc, activation, conv2d_nchwc) with the same knobs,
//      which it must equal exactly for none/relu/relu6;
// on every ISA the CPU has, every block size the ISA offers, serial and two threads. Shapes cover
// stride 1/2, 3x3/5x5, dilation, padding wider than the taps, channels that pad the last block,
// rows wide enough that a window holds one row (the moved-overlap path), tiny images and
// batches, and first convs with their own kernel size, stride, padding and dilation (a stem over
// 3 image channels); padded input lanes hold NaN; the epilogue sees every output element once;
// the per-channel means (y_mean) match the reference's before the epilogue. The same with the
// 1x1 projection fused (conv2d_nchwc_expand_dw_project).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "common/error.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/conv_nchwc_expand_dw.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using kernels::Activation;
using kernels::Conv2dShape;
using kernels::ConvNchwcKnobs;
using kernels::ExpandAct;
using kernels::Isa;

struct Case {
  const char* name;
  int64_t N, C, H, W, M, R, stride, pad, dil;
  int64_t eR = 1, e_stride = 1, e_pad = 0, e_dil = 1;  // the first conv (1x1 expand unless given)
};

const Case kCases[] = {
    {"3x3 s1", 1, 16, 14, 15, 48, 3, 1, 1, 1},
    {"3x3 s2 odd sizes", 2, 12, 17, 13, 40, 3, 2, 1, 1},
    {"5x5 s2 p2", 1, 24, 19, 21, 72, 5, 2, 2, 1},
    {"5x5 s1 p2 batch", 3, 8, 9, 10, 24, 5, 1, 2, 1},
    {"3x3 dil2 p2", 1, 16, 12, 11, 32, 3, 1, 2, 2},
    {"3x3 p3 wider than the taps", 1, 8, 5, 6, 16, 3, 1, 3, 1},
    {"wide rows: one-row windows, moved overlap", 1, 16, 9, 300, 64, 3, 1, 1, 1},
    {"wide rows s2", 1, 8, 11, 290, 64, 3, 2, 1, 1},
    {"single pixel", 2, 5, 1, 1, 20, 3, 1, 1, 1},
    {"tall narrow", 1, 16, 40, 3, 16, 3, 1, 1, 1},
    {"stem 3x3 s2 from 3 channels", 2, 3, 23, 20, 32, 3, 1, 1, 1, 3, 2, 1, 1},
    {"3x3 s1 first, dw s2", 1, 8, 13, 12, 24, 3, 2, 1, 1, 3, 1, 1, 1},
    {"5x5 s2 p1 first, dw 5x5", 1, 5, 21, 18, 16, 5, 1, 2, 1, 5, 2, 1, 1},
    {"3x3 dil2 unpadded first", 2, 4, 12, 11, 20, 3, 1, 1, 1, 3, 1, 0, 2},
    {"1x1 s2 first", 1, 8, 15, 16, 16, 3, 1, 1, 1, 1, 2, 0, 1},
    {"stem, wide rows", 1, 3, 9, 600, 32, 3, 1, 1, 1, 3, 2, 1, 1},
};

Conv2dShape expand_shape(const Case& c) {
  return {c.N, c.C, c.H, c.W, c.M, c.eR, c.eR, c.e_stride, c.e_stride, c.e_pad, c.e_pad, c.e_dil, c.e_dil, 1};
}
Conv2dShape dw_shape(const Case& c) {
  const Conv2dShape e = expand_shape(c);
  return {c.N, c.M, e.OH(), e.OW(), c.M, c.R, c.R, c.stride, c.stride, c.pad, c.pad, c.dil, c.dil, c.M};
}

float ref_act(float v, ExpandAct a) {
  switch (a) {
    case ExpandAct::None: return v;
    case ExpandAct::Relu: return reference::ref_activate(v, Activation::Relu);
    case ExpandAct::Relu6: return reference::ref_activate(v, Activation::Relu6);
    case ExpandAct::Hardswish: return v * std::min(std::max(v + 3.f, 0.f), 6.f) / 6.f;
    case ExpandAct::Silu: return v / (1.f + std::exp(-v));
  }
  return v;
}

using testing::count_hook;
using testing::HookLog;

std::vector<int> blocks_of(Isa isa) {
  if (isa == Isa::Avx512) return {8, 16, 32, 64};
  if (isa == Isa::Avx2) return {8, 16};
  return {4, 16};
}

void check(std::mt19937_64& rng, const Case& c, int b, ExpandAct act, ExpandAct out_act, Isa isa,
           const kernels::Parallel& par, bool hook) {
  const Conv2dShape e = expand_shape(c), d = dw_shape(c);
  ConvNchwcKnobs kd = kernels::conv_nchwc_default_knobs(d, isa);
  kd.ic_bn = kd.oc_bn = b;
  kd.reg_n = std::min(kd.reg_n, kernels::conv_nchwc_max_reg_n(isa, b));
  ConvNchwcKnobs ke = kernels::conv_nchwc_default_knobs(e, isa);
  ke.oc_bn = b;
  ke.reg_n = std::min(ke.reg_n, kernels::conv_nchwc_max_reg_n(isa, b));
  SCOPED_TRACE(std::string(c.name) + " b=" + std::to_string(b) + " ic_bn=" + std::to_string(ke.ic_bn) +
               " act=" + kernels::expand_act_name(act) + " out_act=" + kernels::expand_act_name(out_act) +
               " isa=" + kernels::isa_name(isa) +
               " threads=" + std::to_string(par.num_threads()) + " hook=" + std::to_string(hook));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t HW = c.H * c.W, MHW = d.H * d.W, OH = d.OH(), OW = d.OW();
  const auto x = testing::random_vec(rng, static_cast<size_t>(c.N * c.C * HW));
  const auto w1 = testing::random_vec(rng, static_cast<size_t>(c.M * c.C * c.eR * c.eR), -0.5f, 0.5f);
  const auto b1 = testing::random_vec(rng, static_cast<size_t>(c.M), -4.f, 4.f);  // relu6 clips both sides
  const auto w2 = testing::random_vec(rng, static_cast<size_t>(c.M * c.R * c.R));
  const auto b2 = testing::random_vec(rng, static_cast<size_t>(c.M));

  // (a) the NCHW reference.
  std::vector<float> mid(static_cast<size_t>(c.N * c.M * MHW)), ref(static_cast<size_t>(c.N * c.M * OH * OW));
  reference::ref_conv2d_nchw(e, x.data(), w1.data(), b1.data(), mid.data(), Activation::None);
  for (auto& v : mid) v = ref_act(v, act);
  reference::ref_conv2d_nchw(d, mid.data(), w2.data(), b2.data(), ref.data(), Activation::None);
  for (auto& v : ref) v = ref_act(v, out_act);
  std::vector<double> ref_mean(static_cast<size_t>(c.N * c.M), 0.0);  // before the epilogue
  for (size_t i = 0; i < ref.size(); ++i) ref_mean[i / static_cast<size_t>(OH * OW)] += ref[i];
  for (auto& m : ref_mean) m /= static_cast<double>(OH * OW);
  if (hook)
    for (auto& v : ref) v = 2.f * v + 1.f;

  std::vector<float> xb(static_cast<size_t>(kernels::nchwc_floats(c.N, c.C, c.H, c.W, ke.ic_bn)));
  kernels::nchw_to_nchwc(x.data(), c.N, c.C, c.H, c.W, ke.ic_bn, xb.data(), testing::kSerial);
  const int64_t Cb = (c.C + ke.ic_bn - 1) / ke.ic_bn;
  for (size_t i = 0; i < xb.size(); ++i)  // padded input lanes are never read
    if (static_cast<int64_t>(i / (HW * ke.ic_bn)) % Cb == Cb - 1 &&
        static_cast<int64_t>(i % ke.ic_bn) >= c.C - (Cb - 1) * ke.ic_bn)
      xb[i] = nan;
  std::vector<float> p1(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(e, ke)));
  std::vector<float> p2(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(d, kd)));
  kernels::conv_nchwc_pack_weight(e, ke, w1.data(), p1.data());
  kernels::conv_nchwc_pack_weight(d, kd, w2.data(), p2.data());
  const size_t yb_size = static_cast<size_t>(kernels::nchwc_floats(c.N, c.M, OH, OW, b));
  std::vector<float> yb(yb_size, nan);
  HookLog log;
  kernels::ElementHook h;
  if (hook) {
    log.calls.reset(new std::atomic<int>[yb_size]);
    for (size_t i = 0; i < yb_size; ++i) log.calls[i] = 0;
    log.y = yb.data();
    h = {&count_hook, &log};
  }
  const int64_t Mb = (c.M + b - 1) / b;
  std::vector<float> ym(static_cast<size_t>(c.N * Mb * b), nan);
  kernels::conv2d_nchwc_expand_dw(e, ke, d, kd, xb.data(), p1.data(), b1.data(), act, p2.data(), b2.data(), out_act,
                                  yb.data(), ym.data(), par, h, isa);
  size_t bad_mean = 0;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t ch = 0; ch < Mb * b; ++ch) {
      const float got = ym[static_cast<size_t>(n * Mb * b + ch)];
      if (ch >= c.M) bad_mean += got != 0.f;
      else bad_mean += !testing::values_close(got, static_cast<float>(ref_mean[static_cast<size_t>(n * c.M + ch)]), 1e-4, 1e-5);
    }
  EXPECT_EQ(bad_mean, 0u) << "channel means (y_mean) differ from the reference's, or padded lanes are not 0";
  if (hook) {
    EXPECT_EQ(log.bad_pointer.load(), 0) << "hook data != y + start";
    size_t wrong = 0;
    for (size_t i = 0; i < yb_size; ++i) wrong += log.calls[i].load() != 1;
    EXPECT_EQ(wrong, 0u) << "elements not passed to the hook exactly once";
  }
  size_t bad_pad = 0;
  for (size_t i = 0; i < yb_size; ++i)
    if (static_cast<int64_t>(i / (OH * OW * b)) % Mb == Mb - 1 && static_cast<int64_t>(i % b) >= c.M - (Mb - 1) * b)
      bad_pad += yb[i] != (hook ? 1.f : 0.f);
  EXPECT_EQ(bad_pad, 0u) << "padded output lanes not 0 before the epilogue";
  std::vector<float> y(ref.size());
  kernels::nchwc_to_nchw(yb.data(), c.N, c.M, OH, OW, b, y.data(), testing::kSerial);
  EXPECT_TRUE(testing::all_close(y.data(), ref.data(), ref.size()));

  // (b) the unfused blocked path, exactly, where the activations run in the tiles either way.
  auto tile_act = [](ExpandAct a, Activation* out) {
    *out = a == ExpandAct::Relu ? Activation::Relu : a == ExpandAct::Relu6 ? Activation::Relu6 : Activation::None;
    return a == ExpandAct::None || a == ExpandAct::Relu || a == ExpandAct::Relu6;
  };
  Activation ta, tb;
  if (!hook && tile_act(act, &ta) && tile_act(out_act, &tb)) {
    std::vector<float> mb(static_cast<size_t>(kernels::nchwc_floats(c.N, c.M, d.H, d.W, b)));
    std::vector<float> yu(yb_size);
    kernels::conv2d_nchwc(e, ke, xb.data(), p1.data(), b1.data(), nullptr, ta, mb.data(), testing::kSerial, {}, isa);
    kernels::conv2d_nchwc(d, kd, mb.data(), p2.data(), b2.data(), nullptr, tb, yu.data(), testing::kSerial, {}, isa);
    size_t differ = 0;
    for (size_t i = 0; i < yb_size; ++i) differ += std::memcmp(&yu[i], &yb[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "fused result differs from conv2d_nchwc, act, conv2d_nchwc";
  }
}

TEST(ConvNchwcExpandDw, MatchesReferenceAndUnfusedPath) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 811);
  const ExpandAct acts[] = {ExpandAct::None, ExpandAct::Relu, ExpandAct::Relu6, ExpandAct::Hardswish,
                            ExpandAct::Silu};
  int n = 0;
  for (Isa isa : testing::isas_to_test())
    for (const Case& c : kCases)
      for (int b : blocks_of(isa)) {
        const ExpandAct act = acts[n % 5], out_act = acts[(n * 3 + 1) % 5];
        ++n;
        check(rng, c, b, act, out_act, isa, testing::kTwo, false);
        if (n % 3 == 0) check(rng, c, b, act, out_act, isa, testing::kSerial, true);
      }
  for (ExpandAct act : acts)  // every activation in both places on every ISA, with the hook
    for (Isa isa : testing::isas_to_test()) {
      check(rng, kCases[1], blocks_of(isa)[1], act, ExpandAct::None, isa, testing::kTwo, true);
      check(rng, kCases[2], blocks_of(isa)[1], ExpandAct::None, act, isa, testing::kTwo, true);
    }
}

TEST(ConvNchwcExpandDw, ActivationsKeepNaNAndInfinities) {
  // One input channel, unit weights: the expanded value is x itself.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // -87.5 and -86.5 sit either side of the point where exp(-x) overflows and SiLU flushes to -0.
  const float xs[] = {nan, inf, -inf, -200.f, 200.f, -3.5f, 2.f, -87.5f, -86.5f};
  constexpr int P = sizeof xs / sizeof xs[0];
  const Case c{"1x1 dw", 1, 1, 1, P, 16, 1, 1, 0, 1};
  const Conv2dShape e = expand_shape(c), d = dw_shape(c);
  for (Isa isa : testing::isas_to_test()) {
    const int b = 16;
    ConvNchwcKnobs ke{1, b, std::min(P, kernels::conv_nchwc_max_reg_n(isa, b)), true};
    ConvNchwcKnobs kd{b, b, ke.reg_n, true};
    std::vector<float> w1(16, 1.f), w2(16, 1.f);
    std::vector<float> p1(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(e, ke)));
    std::vector<float> p2(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(d, kd)));
    kernels::conv_nchwc_pack_weight(e, ke, w1.data(), p1.data());
    kernels::conv_nchwc_pack_weight(d, kd, w2.data(), p2.data());
    for (ExpandAct act : {ExpandAct::Hardswish, ExpandAct::Silu}) {
      std::vector<float> y(P * 16);
      kernels::conv2d_nchwc_expand_dw(e, ke, d, kd, xs, p1.data(), nullptr, act, p2.data(), nullptr, ExpandAct::None,
                                      y.data(), nullptr, testing::kSerial, {}, isa);
      for (int p = 0; p < P; ++p) {
        SCOPED_TRACE(std::string(kernels::expand_act_name(act)) + " isa=" + kernels::isa_name(isa) +
                     " x=" + std::to_string(xs[p]));
        const float want = ref_act(xs[p], act);
        EXPECT_TRUE(testing::values_close(y[p * 16], want, 1e-5, 1e-30)) << y[p * 16] << " vs " << want;
      }
    }
  }
}

TEST(ConvNchwcExpandDw, InvalidShapesThrow) {
  const Case c{"ok", 1, 8, 6, 6, 16, 3, 1, 1, 1};
  const Conv2dShape e = expand_shape(c), d = dw_shape(c);
  const ConvNchwcKnobs ke{8, 16, 7, true}, kd{16, 16, 7, true};
  const Isa isa = Isa::Scalar;
  EXPECT_NO_THROW(kernels::conv_nchwc_expand_dw_check(e, ke, d, kd, isa));
  Conv2dShape e3 = e;
  e3.R = e3.S = 3;
  e3.pad_h = e3.pad_w = 1;
  EXPECT_NO_THROW(kernels::conv_nchwc_expand_dw_check(e3, ke, d, kd, isa));  // 3x3 "same": 6x6 out
  e3.stride_h = e3.stride_w = 2;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_check(e3, ke, d, kd, isa), Error);  // 3x3 out, dw reads 6x6
  Conv2dShape eg = e;
  eg.groups = 2;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_check(eg, ke, d, kd, isa), Error);  // grouped first conv
  Conv2dShape dg = d;
  dg.groups = 1;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_check(e, ke, dg, kd, isa), Error);  // not depthwise
  Conv2dShape dh = d;
  dh.H = 7;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_check(e, ke, dh, kd, isa), Error);  // other input
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_check(e, {8, 8, 7, true}, d, kd, isa), Error);  // blocks differ
  EXPECT_THROW(kernels::expand_act_from_name("gelu"), Error);
  EXPECT_EQ(kernels::expand_act_from_name("silu"), ExpandAct::Silu);
}

// conv2d_nchwc_expand_dw_project: against the NCHW reference of all three convs and, exactly,
// against conv2d_nchwc_expand_dw followed by conv2d_nchwc with the same knobs; K output channels
// in blocks of bo (padding the last one); the epilogue sees every output element once.
// add_expand: K and bo are the first conv's (c.M, b), and the reference adds its activated output;
// the unfused path passes it to conv2d_nchwc as the residual (compared exactly where the tiles
// apply the activation: none, relu, relu6).
void check_project(std::mt19937_64& rng, const Case& c, int b, int64_t K, int bo, ExpandAct act, ExpandAct dw_act,
                   Isa isa, const kernels::Parallel& par, bool hook, bool add_expand = false) {
  if (add_expand) K = c.M, bo = b;
  const Conv2dShape e = expand_shape(c), d = dw_shape(c);
  const int64_t OH = d.OH(), OW = d.OW();
  const Conv2dShape p{c.N, c.M, OH, OW, K, 1, 1, 1, 1, 0, 0, 1, 1, 1};
  ConvNchwcKnobs ke = kernels::conv_nchwc_default_knobs(e, isa), kd{b, b, 0, true}, kp{b, bo, 0, true};
  ke.oc_bn = b;
  ke.reg_n = std::min(ke.reg_n, kernels::conv_nchwc_max_reg_n(isa, b));
  kd.reg_n = kernels::conv_nchwc_tile_reg_n(d, isa, b);
  kp.reg_n = kernels::conv_nchwc_tile_reg_n(p, isa, bo);
  SCOPED_TRACE(std::string(c.name) + " b=" + std::to_string(b) + " K=" + std::to_string(K) + " bo=" +
               std::to_string(bo) + " act=" + kernels::expand_act_name(act) + " dw_act=" +
               kernels::expand_act_name(dw_act) + " isa=" + kernels::isa_name(isa) +
               " threads=" + std::to_string(par.num_threads()) + " hook=" + std::to_string(hook) +
               " add_expand=" + std::to_string(add_expand));
  const auto x = testing::random_vec(rng, static_cast<size_t>(c.N * c.C * c.H * c.W));
  const auto w1 = testing::random_vec(rng, static_cast<size_t>(c.M * c.C * c.eR * c.eR), -0.5f, 0.5f);
  const auto b1 = testing::random_vec(rng, static_cast<size_t>(c.M), -4.f, 4.f);
  const auto w2 = testing::random_vec(rng, static_cast<size_t>(c.M * c.R * c.R));
  const auto b2 = testing::random_vec(rng, static_cast<size_t>(c.M));
  const auto w3 = testing::random_vec(rng, static_cast<size_t>(K * c.M), -0.5f, 0.5f);
  const auto b3 = testing::random_vec(rng, static_cast<size_t>(K));

  std::vector<float> mid(static_cast<size_t>(c.N * c.M * d.H * d.W)), dwo(static_cast<size_t>(c.N * c.M * OH * OW));
  std::vector<float> ref(static_cast<size_t>(c.N * K * OH * OW));
  reference::ref_conv2d_nchw(e, x.data(), w1.data(), b1.data(), mid.data(), Activation::None);
  for (auto& v : mid) v = ref_act(v, act);
  reference::ref_conv2d_nchw(d, mid.data(), w2.data(), b2.data(), dwo.data(), Activation::None);
  for (auto& v : dwo) v = ref_act(v, dw_act);
  reference::ref_conv2d_nchw(p, dwo.data(), w3.data(), b3.data(), ref.data(), Activation::None);
  if (add_expand)
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += mid[i];
  if (hook)
    for (auto& v : ref) v = 2.f * v + 1.f;

  std::vector<float> xb(static_cast<size_t>(kernels::nchwc_floats(c.N, c.C, c.H, c.W, ke.ic_bn)));
  kernels::nchw_to_nchwc(x.data(), c.N, c.C, c.H, c.W, ke.ic_bn, xb.data(), testing::kSerial);
  std::vector<float> p1(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(e, ke)));
  std::vector<float> p2(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(d, kd)));
  std::vector<float> p3(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(p, kp)));
  kernels::conv_nchwc_pack_weight(e, ke, w1.data(), p1.data());
  kernels::conv_nchwc_pack_weight(d, kd, w2.data(), p2.data());
  kernels::conv_nchwc_pack_weight(p, kp, w3.data(), p3.data());
  const size_t y_size = static_cast<size_t>(kernels::nchwc_floats(c.N, K, OH, OW, bo));
  std::vector<float> yb(y_size, std::numeric_limits<float>::quiet_NaN());
  HookLog log;
  kernels::ElementHook h;
  if (hook) {
    log.calls.reset(new std::atomic<int>[y_size]);
    for (size_t i = 0; i < y_size; ++i) log.calls[i] = 0;
    log.y = yb.data();
    h = {&count_hook, &log};
  }
  kernels::conv2d_nchwc_expand_dw_project(e, ke, d, kd, p, kp, xb.data(), p1.data(), b1.data(), act, p2.data(),
                                          b2.data(), dw_act, p3.data(), b3.data(), add_expand, yb.data(), par, h, isa);
  if (hook) {
    EXPECT_EQ(log.bad_pointer.load(), 0) << "hook data != y + start";
    size_t wrong = 0;
    for (size_t i = 0; i < y_size; ++i) wrong += log.calls[i].load() != 1;
    EXPECT_EQ(wrong, 0u) << "elements not passed to the hook exactly once";
  }
  std::vector<float> y(ref.size());
  kernels::nchwc_to_nchw(yb.data(), c.N, K, OH, OW, bo, y.data(), testing::kSerial);
  EXPECT_TRUE(testing::all_close(y.data(), ref.data(), ref.size(), 1e-4, 1e-4));
  if (hook) return;
  std::vector<float> db(static_cast<size_t>(kernels::nchwc_floats(c.N, c.M, OH, OW, b))), yu(y_size);
  kernels::conv2d_nchwc_expand_dw(e, ke, d, kd, xb.data(), p1.data(), b1.data(), act, p2.data(), b2.data(), dw_act,
                                  db.data(), nullptr, testing::kSerial, {}, isa);
  std::vector<float> eb;
  if (add_expand) {
    if (act == ExpandAct::Hardswish || act == ExpandAct::Silu) return;
    eb.resize(static_cast<size_t>(kernels::nchwc_floats(c.N, c.M, e.OH(), e.OW(), b)));
    kernels::conv2d_nchwc(e, ke, xb.data(), p1.data(), b1.data(), nullptr,
                          act == ExpandAct::Relu ? Activation::Relu : act == ExpandAct::Relu6 ? Activation::Relu6
                                                                                              : Activation::None,
                          eb.data(), testing::kSerial, {}, isa);
  }
  kernels::conv2d_nchwc(p, kp, db.data(), p3.data(), b3.data(), add_expand ? eb.data() : nullptr, Activation::None,
                        yu.data(), testing::kSerial, {}, isa);
  size_t differ = 0;
  for (size_t i = 0; i < y_size; ++i) differ += std::memcmp(&yu[i], &yb[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "fused result differs from conv2d_nchwc_expand_dw, then conv2d_nchwc";
}

TEST(ConvNchwcExpandDwProject, MatchesReferenceAndUnfusedPath) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 877);
  const ExpandAct acts[] = {ExpandAct::None, ExpandAct::Relu, ExpandAct::Relu6, ExpandAct::Hardswish,
                            ExpandAct::Silu};
  const int64_t Ks[] = {20, 16, 7, 40};
  int n = 0;
  for (Isa isa : testing::isas_to_test())
    for (const Case& c : kCases)
      for (int b : blocks_of(isa)) {
        const auto bos = blocks_of(isa);
        const int bo = bos[static_cast<size_t>(n) % bos.size()];
        const ExpandAct act = acts[n % 5], dw_act = acts[(n * 3 + 1) % 5];
        const int64_t K = Ks[n % 4];
        ++n;
        check_project(rng, c, b, K, bo, act, dw_act, isa, n % 2 ? static_cast<const kernels::Parallel&>(testing::kTwo) : testing::kSerial, false);
        if (n % 4 == 0) check_project(rng, c, b, K, bo, act, dw_act, isa, testing::kTwo, true);
      }
}

// The skip connection from the first conv's output (MobileNet-V3's first block): every case whose
// depthwise conv keeps the plane's size, every activation, serial and two threads, the hook.
TEST(ConvNchwcExpandDwProject, AddsTheFirstConvsOutput) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 878);
  const ExpandAct acts[] = {ExpandAct::None, ExpandAct::Relu, ExpandAct::Relu6, ExpandAct::Hardswish,
                            ExpandAct::Silu};
  int n = 0;
  for (Isa isa : testing::isas_to_test())
    for (const Case& c : kCases) {
      const Conv2dShape d = dw_shape(c);
      if (d.OH() != d.H || d.OW() != d.W) continue;
      for (int b : blocks_of(isa)) {
        const ExpandAct act = acts[n % 5], dw_act = acts[(n * 3 + 1) % 5];
        ++n;
        const kernels::Parallel& par = n % 2 ? static_cast<const kernels::Parallel&>(testing::kTwo) : testing::kSerial;
        check_project(rng, c, b, 0, 0, act, dw_act, isa, par, false, true);
        check_project(rng, c, b, 0, 0, act == ExpandAct::Hardswish ? ExpandAct::Relu : act, dw_act, isa, par, false, true);
        if (n % 3 == 0) check_project(rng, c, b, 0, 0, act, dw_act, isa, testing::kTwo, true, true);
      }
    }
}

TEST(ConvNchwcExpandDwProject, InvalidShapesThrow) {
  const Case c{"ok", 1, 8, 6, 6, 16, 3, 1, 1, 1};
  const Conv2dShape e = expand_shape(c), d = dw_shape(c);
  const Conv2dShape p{1, 16, 6, 6, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1};
  const ConvNchwcKnobs ke{8, 16, 7, true}, kd{16, 16, 7, true}, kp{16, 8, 7, true};
  const Isa isa = Isa::Scalar;
  EXPECT_NO_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, p, kp, isa));
  Conv2dShape p3 = p;
  p3.R = p3.S = 3;
  p3.pad_h = p3.pad_w = 1;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, p3, kp, isa), Error);  // not 1x1
  Conv2dShape ps = p;
  ps.stride_h = ps.stride_w = 2;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, ps, kp, isa), Error);  // strided
  Conv2dShape pc = p;
  pc.C = 8;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, pc, kp, isa), Error);  // other input
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, p, {8, 8, 7, true}, isa), Error);  // blocks
  Conv2dShape dg = d;
  dg.groups = 1;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, dg, kd, p, kp, isa), Error);  // front checked too
  // Adding the first conv's output: only onto a projection shaped and blocked like it.
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, p, kp, isa, true), Error);  // K 24 != 16
  Conv2dShape p16 = p;
  p16.K = 16;
  EXPECT_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, p16, kp, isa, true), Error);  // block 8
  EXPECT_NO_THROW(kernels::conv_nchwc_expand_dw_project_check(e, ke, d, kd, p16, {16, 16, 7, true}, isa, true));
}

}  // namespace
}  // namespace dnnfusion
