// 1x1 convolutions on NCHW[x]c through the bf16x6 GEMM driver: rows are the positions of all the
// images, so a 7x7 layer at batch 8 still fills whole 32-row blocks.
#include "kernels/cpu/conv_bf16x6.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "kernels/cpu/gemm_bf16x6_ukernel.h"

namespace dnnfusion::kernels {
namespace {

using bf16x6_detail::NchwcView;

bool pointwise(const Conv2dShape& s) {
  return s.R == 1 && s.S == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
}

struct NchwcOperands final : bf16x6_detail::Operands {
  NchwcView x, y;
  const float* bias;
  const float* residual;
  Activation act;
  ElementHook hook;

  bool pack_a(int64_t i0, int rows, int64_t k0, int64_t kc, uint16_t* dst) const override {
    return bf16x6_detail::amx_pack_a_nchwc(x, i0, rows, k0, kc, dst);
  }
  float a(int64_t i, int64_t c) const override {
    return x.data[((i / x.P * x.nb + c / x.b) * x.P + i % x.P) * x.b + c % x.b];
  }
  void finish(const float* acc, int64_t i0, int rows, int64_t j0, int) const override {
    bf16x6_detail::amx_finish_nchwc(acc, rows, i0, j0, bias, residual, static_cast<int>(act), y);
    if (!hook) return;
    // Output blocks this column block completes: those it touches that end inside it, or that no
    // later column block reaches (a 64-lane block's first half waits for its second, which the
    // same thread finishes next: column_group).
    for (int64_t kb = j0 / y.b; kb < y.nb && kb * y.b < j0 + 32; ++kb) {
      if ((kb + 1) * y.b > j0 + 32 && j0 + 32 < N) continue;
      // One run per image the rows cover.
      for (int64_t i = i0; i < i0 + rows;) {
        const int64_t n = i / y.P, p = i % y.P, len = std::min(i0 + rows - i, y.P - p);
        const int64_t at = ((n * y.nb + kb) * y.P + p) * y.b;
        hook(const_cast<float*>(y.data) + at, at, len * y.b);
        i += len;
      }
    }
  }
};

}  // namespace

bool conv_bf16x6_supported(const Conv2dShape& s, int ic_bn, int oc_bn, std::string* why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  if (!pointwise(s)) return no("not a 1x1 stride-1 unpadded convolution");
  if (s.groups != 1) return no("grouped convolution");
  if (ic_bn % 16 != 0 || oc_bn % 16 != 0) return no("channel blocks are not multiples of 16 lanes");
  return true;
}

int64_t conv_bf16x6_packed_weight_floats(const Conv2dShape& s) { return bf16x6_packed_b_floats(s.C, s.K); }

void conv_bf16x6_pack_weight(const Conv2dShape& s, const float* w_kcrs, float* out) {
  // B(c, k) = W[k][c]: the weight read transposed.
  bf16x6_pack_b(s.C, s.K, MatrixView{w_kcrs, 1, s.C}, out);
}

void conv_bf16x6_repack_weight(const Conv2dShape& s, int ic_bn, int oc_bn, const float* nchwc_packed, float* out) {
  std::string why;
  DNNF_CHECK(conv_bf16x6_supported(s, ic_bn, oc_bn, &why), "conv_bf16x6_repack_weight: ", why);
  // The direct kernel's 1x1 packing is [Kb][Cb][ic_bn][oc_bn].
  const int64_t Cb = (s.C + ic_bn - 1) / ic_bn;
  std::vector<float> w(static_cast<size_t>(s.K * s.C));
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t c = 0; c < s.C; ++c)
      w[k * s.C + c] = nchwc_packed[(((k / oc_bn) * Cb + c / ic_bn) * ic_bn + c % ic_bn) * oc_bn + k % oc_bn];
  conv_bf16x6_pack_weight(s, w.data(), out);
}

void conv2d_bf16x6_nchwc(const Conv2dShape& s, int ic_bn, int oc_bn, const float* x, const float* packed_w,
                         const float* bias, const float* residual, Activation act, float* y, const Parallel& par,
                         ElementHook epilogue) {
  std::string why;
  DNNF_CHECK(conv_bf16x6_supported(s, ic_bn, oc_bn, &why), "conv2d_bf16x6_nchwc: ", why);
  DNNF_CHECK(bf16x6_available(), "conv2d_bf16x6_nchwc: this CPU or OS offers no AMX (or DNNFUSION_AMX=0)");
  DNNF_CHECK(x && packed_w && y, "conv2d_bf16x6_nchwc: x, packed_w and y must not be null");
  const int64_t P = s.H * s.W;
  NchwcOperands op;
  op.M = s.N * P;
  op.N = s.K;
  op.K = s.C;
  op.column_group = oc_bn > 32 ? oc_bn / 32 : 1;
  op.x = NchwcView{x, P, s.C, ic_bn, (s.C + ic_bn - 1) / ic_bn};
  op.y = NchwcView{y, P, s.K, oc_bn, (s.K + oc_bn - 1) / oc_bn};
  op.bias = bias;
  op.residual = residual;
  op.act = act;
  op.hook = epilogue;
  bf16x6_detail::run(op, packed_w, par);
}

}  // namespace dnnfusion::kernels
