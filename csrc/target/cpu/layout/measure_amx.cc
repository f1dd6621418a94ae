#include "target/cpu/layout/measure_amx.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "target/cpu/layout/timing_operands.h"

namespace dnnfusion::layout {

namespace {

using Clock = std::chrono::steady_clock;

std::mutex& verdicts_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, AmxVerdict>& verdicts() {
  static std::map<std::string, AmxVerdict> v;
  return v;
}

float* random_floats(kernels::AlignedBuffer<float>& buf, int64_t n, uint32_t seed) {
  float* p = buf.get(static_cast<size_t>(std::max<int64_t>(n, 1)));
  fill_timing_operand(p, n, seed);
  return p;
}

double us_of(const std::function<void()>& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Both kernels warmed once, then timed in alternating order, round by round.
AmxVerdict time_pair(const std::function<void()>& fp32, const std::function<void()>& amx) {
  fp32();
  amx();
  std::vector<double> tf, ta;
  const auto start = Clock::now();
  for (int r = 0; r < kMaxRounds; ++r) {
    if (r % 2 == 0) {
      tf.push_back(us_of(fp32));
      ta.push_back(us_of(amx));
    } else {
      ta.push_back(us_of(amx));
      tf.push_back(us_of(fp32));
    }
    if (r + 1 >= kMinRounds && Clock::now() - start > std::chrono::duration<double, std::milli>(kBudgetMs)) break;
  }
  AmxVerdict v;
  v.fp32_us = median(tf);
  v.amx_us = median(ta);
  v.amx = amx_faster(v.fp32_us, v.amx_us);
  v.measured_now = true;
  return v;
}

// The cached verdict for `key`, measured by `measure` the first time. The lock is held while
// measuring: two compiles timing at once would slow each other's measurements down.
AmxVerdict verdict(const std::string& key, const std::function<AmxVerdict()>& measure) {
  std::lock_guard<std::mutex> lock(verdicts_mutex());
  auto it = verdicts().find(key);
  if (it != verdicts().end()) {
    AmxVerdict v = it->second;
    v.measured_now = false;
    return v;
  }
  const AmxVerdict v = measure();
  verdicts()[key] = v;
  return v;
}

}  // namespace

AmxVerdict measure_amx_gemm(int64_t M, int64_t K, int64_t N, const kernels::Parallel& par) {
  std::ostringstream key;
  key << "gemm " << M << "x" << K << "x" << N << " threads " << par.num_threads();
  return verdict(key.str(), [&] {
    kernels::AlignedBuffer<float> a, b, bias, c, pf, pa;
    const float* A = random_floats(a, M * K, 1);
    const float* B = random_floats(b, K * N, 2);
    kernels::GemmEpilogue ep;
    ep.bias = random_floats(bias, N, 3);
    ep.bias_mode = kernels::GemmEpilogue::Bias::PerCol;
    float* C = c.get(static_cast<size_t>(M * N));
    const int nr = kernels::sgemm_panel_width();
    float* Pf = pf.get(static_cast<size_t>(kernels::sgemm_packed_b_floats(K, N, nr)));
    float* Pa = pa.get(static_cast<size_t>(kernels::bf16x6_packed_b_floats(K, N)));
    kernels::sgemm_pack_b(K, N, {B, N, 1}, nr, Pf);
    kernels::bf16x6_pack_b(K, N, {B, N, 1}, Pa);
    return time_pair([&] { kernels::sgemm_packed_b(M, N, K, {A, K, 1}, Pf, nr, C, N, ep, par); },
                     [&] { kernels::sgemm_bf16x6_packed_b(M, N, K, {A, K, 1}, Pa, C, N, ep, par); });
  });
}

AmxVerdict measure_amx_conv(const kernels::Conv2dShape& s, const kernels::ConvNchwcKnobs& direct,
                            const kernels::Parallel& par) {
  std::ostringstream key;
  key << "conv " << s.N << "," << s.C << "," << s.H << "," << s.W << "," << s.K << "," << s.R << "," << s.S << ","
      << s.stride_h << "," << s.stride_w << "," << s.pad_h << "," << s.pad_w << "," << s.dil_h << "," << s.dil_w
      << " blocks " << direct.ic_bn << "x" << direct.oc_bn << " reg_n " << direct.reg_n << " unroll "
      << direct.unroll_ker << " threads " << par.num_threads();
  return verdict(key.str(), [&] {
    kernels::ConvNchwcKnobs amx = direct;
    amx.amx = true;
    amx.winograd = 0;
    kernels::AlignedBuffer<float> x, w, bias, y, pf, pa;
    const float* X = random_floats(x, kernels::nchwc_floats(s.N, s.C, s.H, s.W, direct.ic_bn), 1);
    const float* Wt = random_floats(w, s.K * s.C * s.R * s.S, 2);
    const float* Bias = random_floats(bias, s.K, 3);
    float* Y = y.get(static_cast<size_t>(kernels::nchwc_floats(s.N, s.K, s.OH(), s.OW(), direct.oc_bn)));
    float* Pf = pf.get(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(s, direct)));
    float* Pa = pa.get(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(s, amx)));
    kernels::conv_nchwc_pack_weight(s, direct, Wt, Pf);
    kernels::conv_nchwc_pack_weight(s, amx, Wt, Pa);
    const auto act = kernels::Activation::None;
    return time_pair([&] { kernels::conv2d_nchwc(s, direct, X, Pf, Bias, nullptr, act, Y, par); },
                     [&] { kernels::conv2d_nchwc(s, amx, X, Pa, Bias, nullptr, act, Y, par); });
  });
}

bool take_amx(const AmxChoice& c, const std::function<AmxVerdict(const kernels::Parallel&)>& measure,
              AmxChoiceStats* st) {
  bool amx = c.mode == CompileOptions::Amx::Rule;
  if (c.mode == CompileOptions::Amx::Measure) {
    DNNF_CHECK(c.par != nullptr, "take_amx: measuring needs the thread pool the model runs on");
    const auto t0 = Clock::now();
    const AmxVerdict v = measure(*c.par);
    if (st && v.measured_now) {
      ++st->timed;
      st->ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    amx = v.amx;
    if (st && !amx) ++st->declined;
  }
  if (st && amx) ++st->taken;
  return amx;
}

void clear_amx_verdicts() {
  std::lock_guard<std::mutex> lock(verdicts_mutex());
  verdicts().clear();
}

}  // namespace dnnfusion::layout
