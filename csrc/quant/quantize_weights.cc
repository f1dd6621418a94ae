// See quantize_weights.h.
#include "quant/quantize_weights.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/error.h"

namespace dnnfusion::quant {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

void check_shape(int64_t channels, int64_t inner) {
  if (channels < 1 || inner < 1)
    DNNF_THROW_AS(InvalidInput, "weight must have at least one output channel and one element per channel, got ",
                  channels, " x ", inner);
}

void check_positive_scale(double s, const char* what) {
  if (!std::isfinite(s) || !(s > 0)) DNNF_THROW_AS(InvalidInput, what, " must be finite and > 0, got ", num(s));
}

// max|w| over n values; a non-finite weight is refused with its position in the whole tensor.
double max_abs(const float* w, int64_t n, int64_t offset) {
  double m = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (!std::isfinite(w[j]))
      DNNF_THROW_AS(InvalidInput, "weights must be finite; element ", offset + j, " is ", w[j]);
    m = std::max(m, static_cast<double>(std::fabs(w[j])));
  }
  return m;
}

// The scale for a group whose largest magnitude is m. A float underflow of m / 127 (m a denormal)
// becomes the smallest positive float, so the division in quantize_weight_value stays finite.
float scale_for(double m) {
  if (m == 0) return kZeroChannelScale;
  return std::max(static_cast<float>(m / 127.0), std::numeric_limits<float>::denorm_min());
}

void check_scale_count(const std::vector<float>& w_scales, int64_t channels) {
  if (w_scales.size() != static_cast<size_t>(channels) && w_scales.size() != 1)
    DNNF_THROW_AS(InvalidInput, "weight scales must have one entry per output channel (", channels,
                  ") or one for the tensor, got ", w_scales.size());
  for (size_t k = 0; k < w_scales.size(); ++k) check_positive_scale(w_scales[k], "weight scale");
}

}  // namespace

int8_t quantize_weight_value(float x, float scale) {
  const double r = std::round(static_cast<double>(x) / static_cast<double>(scale));  // half away from zero
  return static_cast<int8_t>(std::clamp(r, -127.0, 127.0));
}

QuantizedWeights quantize_weights(const float* w, int64_t channels, int64_t inner, bool per_channel) {
  check_shape(channels, inner);
  QuantizedWeights out;
  out.per_channel = per_channel;
  if (per_channel) {
    out.scales.resize(static_cast<size_t>(channels));
    for (int64_t k = 0; k < channels; ++k) out.scales[k] = scale_for(max_abs(w + k * inner, inner, k * inner));
  } else {
    out.scales.assign(1, scale_for(max_abs(w, channels * inner, 0)));
  }
  out.q.resize(static_cast<size_t>(channels * inner));
  for (int64_t k = 0; k < channels; ++k) {
    const float s = out.scale_of(k);
    for (int64_t j = 0; j < inner; ++j) out.q[k * inner + j] = quantize_weight_value(w[k * inner + j], s);
  }
  return out;
}

QuantizedBias quantize_bias(const float* b, int64_t channels, double in_scale, const std::vector<float>& w_scales) {
  if (channels < 1) DNNF_THROW_AS(InvalidInput, "bias must have at least one channel, got ", channels);
  check_positive_scale(in_scale, "input scale");
  check_scale_count(w_scales, channels);
  QuantizedBias out;
  out.q.resize(static_cast<size_t>(channels));
  for (int64_t k = 0; k < channels; ++k) {
    if (!std::isfinite(b[k])) DNNF_THROW_AS(InvalidInput, "bias must be finite; channel ", k, " is ", b[k]);
    const double ws = w_scales.size() == 1 ? w_scales[0] : w_scales[k];
    const double r = std::round(static_cast<double>(b[k]) / (in_scale * ws));
    if (!(std::fabs(r) <= kBiasMax)) out.saturated.push_back(k);  // also catches an infinite quotient
    out.q[k] = static_cast<int32_t>(std::clamp(r, -double{kBiasMax}, double{kBiasMax}));
  }
  return out;
}

void fold_batch_norm(float* w, float* b, int64_t channels, int64_t inner, const float* gamma, const float* beta,
                     const float* mean, const float* var, double eps) {
  check_shape(channels, inner);
  if (!std::isfinite(eps) || eps < 0) DNNF_THROW_AS(InvalidInput, "batch-norm eps must be finite and >= 0, got ", num(eps));
  // Folded into copies and written back at the end: a bad channel leaves w and b untouched.
  std::vector<float> nw(w, w + channels * inner), nb(b, b + channels);
  for (int64_t k = 0; k < channels; ++k) {
    const double g = gamma[k], be = beta[k], mu = mean[k], v = var[k];
    if (!std::isfinite(g) || !std::isfinite(be) || !std::isfinite(mu) || !std::isfinite(v) || !(v + eps > 0))
      DNNF_THROW_AS(InvalidInput, "batch-norm channel ", k,
                    " needs finite gamma/beta/mean/var with var + eps > 0; got gamma=", num(g), " beta=", num(be),
                    " mean=", num(mu), " var=", num(v), " eps=", num(eps));
    const double a = g / std::sqrt(v + eps);
    for (int64_t j = 0; j < inner; ++j) {
      float& x = nw[k * inner + j];
      x = static_cast<float>(x * a);
      if (!std::isfinite(x))
        DNNF_THROW_AS(InvalidInput, "folding batch-norm channel ", k, " makes weight element ", k * inner + j,
                      " non-finite (", w[k * inner + j], " * ", num(a), ")");
    }
    nb[k] = static_cast<float>((static_cast<double>(b[k]) - mu) * a + be);
    if (!std::isfinite(nb[k]))
      DNNF_THROW_AS(InvalidInput, "folding batch-norm channel ", k, " makes the bias non-finite (bias ", b[k], ")");
  }
  std::copy(nw.begin(), nw.end(), w);
  std::copy(nb.begin(), nb.end(), b);
}

std::vector<Requant> layer_requant(double in_scale, const std::vector<float>& w_scales, double out_scale,
                                   int64_t channels) {
  if (channels < 0) channels = static_cast<int64_t>(w_scales.size());
  if (channels < 1) DNNF_THROW_AS(InvalidInput, "a layer needs at least one output channel (weight scales are empty)");
  check_positive_scale(in_scale, "input scale");
  check_positive_scale(out_scale, "output scale");
  check_scale_count(w_scales, channels);
  std::vector<Requant> r(static_cast<size_t>(channels));
  for (int64_t k = 0; k < channels; ++k) {
    const double ws = w_scales.size() == 1 ? w_scales[0] : w_scales[k];
    r[k] = choose_multiplier(in_scale * ws / out_scale);
  }
  return r;
}

}  // namespace dnnfusion::quant
