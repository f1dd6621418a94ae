// Convolutions on NCHW[x]c through the bf16x6 GEMM driver: rows are the output positions of all
// the images, so a 7x7 layer at batch 8 still fills whole 32-row blocks. 1x1 stride-1 convs read
// their rows straight from the input; the others gather each row's taps (an implicit GEMM).
#include "kernels/cpu/conv_bf16x6.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "kernels/cpu/gemm_bf16x6_ukernel.h"

namespace dnnfusion::kernels {
namespace {

using bf16x6_detail::ConvTapsView;
using bf16x6_detail::NchwcView;

constexpr int64_t kLanes = 16;  // a tap's channels start on a 16-lane half of a k step

bool pointwise(const Conv2dShape& s) {
  return s.R == 1 && s.S == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
}

int64_t padded_channels(const Conv2dShape& s) { return (s.C + kLanes - 1) / kLanes * kLanes; }

// The GEMM's K: the channels of a pointwise conv, else every tap's channels padded to 16 lanes.
int64_t taps_k(const Conv2dShape& s) { return pointwise(s) ? s.C : s.R * s.S * padded_channels(s); }

// What both kinds of rows share: the output in NCHW[b]c with its epilogue.
struct NchwcOutput : bf16x6_detail::Operands {
  NchwcView y;
  const float* bias;
  const float* residual;
  Activation act;
  ElementHook hook;

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

struct PointwiseOperands final : NchwcOutput {
  NchwcView x;

  bool pack_a(int64_t i0, int rows, int64_t k0, int64_t kc, uint16_t* dst) const override {
    return bf16x6_detail::amx_pack_a_nchwc(x, i0, rows, k0, kc, dst);
  }
  float a(int64_t i, int64_t c) const override {
    return x.data[((i / x.P * x.nb + c / x.b) * x.P + i % x.P) * x.b + c % x.b];
  }
};

struct TapsOperands final : NchwcOutput {
  ConvTapsView x;

  bool pack_a(int64_t i0, int rows, int64_t k0, int64_t kc, uint16_t* dst) const override {
    return bf16x6_detail::amx_pack_a_conv(x, i0, rows, k0, kc, dst);
  }
  float a(int64_t i, int64_t k) const override {
    const int64_t per_image = x.OH * x.OW, n = i / per_image, oh = i % per_image / x.OW, ow = i % x.OW;
    const int64_t tap = k / x.Cp, c = k % x.Cp;
    const int64_t ih = oh * x.stride_h - x.pad_h + tap / x.S * x.dil_h, iw = ow * x.stride_w - x.pad_w + tap % x.S * x.dil_w;
    if (c >= x.channels || ih < 0 || ih >= x.H || iw < 0 || iw >= x.W) return 0.f;
    return x.data[(((n * x.nb + c / x.b) * x.H + ih) * x.W + iw) * x.b + c % x.b];
  }
};

}  // namespace

bool conv_bf16x6_supported(const Conv2dShape& s, int ic_bn, int oc_bn, std::string* why) {
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  if (s.groups != 1) return no("grouped convolution");
  if (ic_bn % 16 != 0 || oc_bn % 16 != 0) return no("channel blocks are not multiples of 16 lanes");
  return true;
}

int64_t conv_bf16x6_packed_weight_floats(const Conv2dShape& s) { return bf16x6_packed_b_floats(taps_k(s), s.K); }

namespace {

// Packs B(tap * Cp + c, k) = weight(k, c, tap) of the implicit GEMM, zero rows for the padded
// channels, from whichever layout the weight is read in.
template <class Weight>
void pack_taps(const Conv2dShape& s, Weight weight, float* out) {
  const int64_t Cp = pointwise(s) ? s.C : padded_channels(s), taps = s.R * s.S;
  std::vector<float> b(static_cast<size_t>(taps * Cp * s.K), 0.f);
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t t = 0; t < taps; ++t) b[(t * Cp + c) * s.K + k] = weight(k, c, t);
  bf16x6_pack_b(taps * Cp, s.K, MatrixView{b.data(), s.K, 1}, out);
}

}  // namespace

void conv_bf16x6_pack_weight(const Conv2dShape& s, const float* w_kcrs, float* out) {
  if (pointwise(s)) {
    // B(c, k) = W[k][c]: the weight read transposed, in place.
    bf16x6_pack_b(s.C, s.K, MatrixView{w_kcrs, 1, s.C}, out);
    return;
  }
  const int64_t taps = s.R * s.S;
  pack_taps(s, [&](int64_t k, int64_t c, int64_t t) { return w_kcrs[(k * s.C + c) * taps + t]; }, out);
}

void conv_bf16x6_repack_weight(const Conv2dShape& s, int ic_bn, int oc_bn, const float* nchwc_packed, float* out) {
  std::string why;
  DNNF_CHECK(conv_bf16x6_supported(s, ic_bn, oc_bn, &why), "conv_bf16x6_repack_weight: ", why);
  // The direct kernel's packing is [Kb][Cb][R][S][ic_bn][oc_bn].
  const int64_t Cb = (s.C + ic_bn - 1) / ic_bn, taps = s.R * s.S;
  pack_taps(s, [&](int64_t k, int64_t c, int64_t t) {
    return nchwc_packed[((((k / oc_bn) * Cb + c / ic_bn) * taps + t) * ic_bn + c % ic_bn) * oc_bn + k % oc_bn];
  }, out);
}

namespace {

void run_on(NchwcOutput& op, const Conv2dShape& s, int oc_bn, float* y, const float* packed_w, const float* bias,
            const float* residual, Activation act, ElementHook epilogue, const Parallel& par) {
  op.M = s.N * s.OH() * s.OW();
  op.N = s.K;
  op.K = taps_k(s);
  op.column_group = oc_bn > 32 ? oc_bn / 32 : 1;
  op.y = NchwcView{y, s.OH() * s.OW(), s.K, oc_bn, (s.K + oc_bn - 1) / oc_bn};
  op.bias = bias;
  op.residual = residual;
  op.act = act;
  op.hook = epilogue;
  bf16x6_detail::run(op, packed_w, par);
}

}  // namespace

void conv2d_bf16x6_nchwc(const Conv2dShape& s, int ic_bn, int oc_bn, const float* x, const float* packed_w,
                         const float* bias, const float* residual, Activation act, float* y, const Parallel& par,
                         ElementHook epilogue) {
  std::string why;
  DNNF_CHECK(conv_bf16x6_supported(s, ic_bn, oc_bn, &why), "conv2d_bf16x6_nchwc: ", why);
  DNNF_CHECK(bf16x6_available(), "conv2d_bf16x6_nchwc: this CPU or OS offers no AMX (or DNNFUSION_AMX=0)");
  DNNF_CHECK(x && packed_w && y, "conv2d_bf16x6_nchwc: x, packed_w and y must not be null");
  const int64_t nb = (s.C + ic_bn - 1) / ic_bn;
  if (pointwise(s)) {
    PointwiseOperands op;
    op.x = NchwcView{x, s.H * s.W, s.C, ic_bn, nb};
    run_on(op, s, oc_bn, y, packed_w, bias, residual, act, epilogue, par);
    return;
  }
  TapsOperands op;
  op.x = ConvTapsView{x, s.H, s.W, s.OH(), s.OW(), s.C, ic_bn, nb, padded_channels(s),
                      s.S, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dil_h, s.dil_w};
  run_on(op, s, oc_bn, y, packed_w, bias, residual, act, epilogue, par);
}

}  // namespace dnnfusion::kernels
