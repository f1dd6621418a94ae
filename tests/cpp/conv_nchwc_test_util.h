// Shared by the NCHW[x]c convolution tests (test_conv_nchwc.cc, test_conv_winograd.cc): one conv
// through the blocked path (nchw_to_nchwc, conv_nchwc_pack_weight, conv2d_nchwc with the given
// knobs, nchwc_to_nchw) against the plain NCHW reference, with poisoned padded input lanes, bias,
// residual (also in place), activation and the epilogue hook (every element passed exactly once).
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "kernels/cpu/conv_nchwc.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "kernel_test_util.h"

namespace dnnfusion::conv_test {

using kernels::Activation;
using kernels::Conv2dShape;
using kernels::ConvNchwcKnobs;
using kernels::Isa;
using kernels::Parallel;
using kernels::SerialParallel;
using testing::count_hook;
using testing::HookLog;

inline Conv2dShape shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                  int64_t stride, int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  return {N, C, H, W, K, R, S, stride, stride, pad, pad, dil, dil, groups};
}

inline std::string describe(const Conv2dShape& s, const ConvNchwcKnobs& k) {
  std::ostringstream os;
  os << "N=" << s.N << " C=" << s.C << " H=" << s.H << " W=" << s.W << " K=" << s.K << " R=" << s.R
     << " S=" << s.S << " stride=" << s.stride_h << "x" << s.stride_w << " pad=" << s.pad_h << "x"
     << s.pad_w << " dil=" << s.dil_h << "x" << s.dil_w << " groups=" << s.groups
     << " | ic_bn=" << k.ic_bn << " oc_bn=" << k.oc_bn << " reg_n=" << k.reg_n
     << " unroll=" << k.unroll_ker << " winograd=" << k.winograd << " amx=" << k.amx;
  return os.str();
}

struct Options {
  bool bias = true;
  bool residual = false;
  bool hook = false;
  bool in_place_residual = false;  // residual and y are the same buffer
  Activation act = Activation::None;
};

// Runs one conv through the blocked path and compares with the reference on NCHW data.
inline void check(std::mt19937_64& rng, const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa,
           const Parallel& par, const Options& o) {
  SCOPED_TRACE(describe(s, k) + " isa=" + kernels::isa_name(isa) + " threads=" +
               std::to_string(par.num_threads()) + " bias=" + std::to_string(o.bias) +
               " residual=" + std::to_string(o.residual) + " act=" + std::to_string(int(o.act)) +
               " hook=" + std::to_string(o.hook));
  const int64_t OH = s.OH(), OW = s.OW();
  const auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
  const auto w = testing::random_vec(rng, static_cast<size_t>(s.K * (s.C / s.groups) * s.R * s.S));
  const auto bias = testing::random_vec(rng, static_cast<size_t>(s.K));
  const size_t ysize = static_cast<size_t>(s.N * s.K * OH * OW);
  // Residual large enough that relu6 clips on both sides.
  const auto res = testing::random_vec(rng, ysize, -8.f, 8.f);

  std::vector<float> ref(ysize);
  reference::ref_conv2d_nchw(s, x.data(), w.data(), o.bias ? bias.data() : nullptr, ref.data(),
                             Activation::None);
  for (size_t i = 0; i < ysize; ++i)
    ref[i] = reference::ref_activate(ref[i] + (o.residual ? res[i] : 0.f), o.act);
  if (o.hook)
    for (auto& v : ref) v = 2.f * v + 1.f;

  SerialParallel serial;
  const int x_bn = k.ic_bn;  // depthwise: == oc_bn
  std::vector<float> xb(static_cast<size_t>(kernels::nchwc_floats(s.N, s.C, s.H, s.W, x_bn)));
  kernels::nchw_to_nchwc(x.data(), s.N, s.C, s.H, s.W, x_bn, xb.data(), par);
  // Padded input lanes are never read: poison them (element-wise ops upstream may leave any value).
  const int64_t Cb = (s.C + x_bn - 1) / x_bn;
  for (int64_t i = 0; i < s.N * Cb * s.H * s.W; ++i)
    if ((i / (s.H * s.W)) % Cb == Cb - 1)
      for (int64_t c = s.C - (Cb - 1) * x_bn; c < x_bn; ++c)
        xb[static_cast<size_t>(i * x_bn + c)] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> pw(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(s, k)));
  kernels::conv_nchwc_pack_weight(s, k, w.data(), pw.data());
  const size_t yb_size = static_cast<size_t>(kernels::nchwc_floats(s.N, s.K, OH, OW, k.oc_bn));
  std::vector<float> yb(yb_size, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> resb;
  const float* res_ptr = nullptr;
  if (o.residual) {
    resb.resize(yb_size);
    kernels::nchw_to_nchwc(res.data(), s.N, s.K, OH, OW, k.oc_bn, resb.data(), serial);
    if (o.in_place_residual) {
      yb = resb;
      res_ptr = yb.data();
    } else {
      res_ptr = resb.data();
    }
  }
  HookLog log;
  kernels::ElementHook hook;
  if (o.hook) {
    log.calls.reset(new std::atomic<int>[yb_size]);
    for (size_t i = 0; i < yb_size; ++i) log.calls[i] = 0;
    log.y = yb.data();
    hook.fn = &count_hook;
    hook.ctx = &log;
  }
  kernels::conv2d_nchwc(s, k, xb.data(), pw.data(), o.bias ? bias.data() : nullptr, res_ptr, o.act,
                        yb.data(), par, hook, isa);
  if (o.hook) {
    EXPECT_EQ(log.bad_pointer.load(), 0) << "hook data != y + start";
    size_t wrong = 0;
    for (size_t i = 0; i < yb_size; ++i) wrong += log.calls[i].load() != 1;
    EXPECT_EQ(wrong, 0u) << "elements not passed to the hook exactly once";
  }
  // Padded output channels are 0 (the hook maps 0 to 1).
  const int64_t Kb = (s.K + k.oc_bn - 1) / k.oc_bn;
  const float pad_value = o.hook ? 1.f : 0.f;
  size_t bad_pad = 0;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t p = 0; p < OH * OW; ++p)
      for (int64_t c = s.K; c < Kb * k.oc_bn; ++c)
        bad_pad += yb[((n * Kb + c / k.oc_bn) * OH * OW + p) * k.oc_bn + c % k.oc_bn] != pad_value;
  EXPECT_EQ(bad_pad, 0u) << "padded output channels not " << pad_value;
  std::vector<float> y(ysize, std::numeric_limits<float>::quiet_NaN());
  kernels::nchwc_to_nchw(yb.data(), s.N, s.K, OH, OW, k.oc_bn, y.data(), par);
  EXPECT_TRUE(testing::all_close(y.data(), ref.data(), ysize));
}

}  // namespace dnnfusion::conv_test
