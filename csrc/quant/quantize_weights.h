// Symmetric int8 weights for the accelerator (AukC §2.2.3/§2.2.6): per output channel
// (default) or per tensor, int32 biases in the accumulator's units, batch-norm folding in float
// before quantization, and the per-output-channel requantization parameters of a layer.
//
// Layout: a weight is an array of `channels` x `inner` floats, dimension 0 the output channel
// (Conv2d [K, C/groups, R, S], Linear [out, in]; a transposed convolution must be permuted first).
//
// Rules.
//   scale_k = max_j |w_kj| / 127 (float), over channel k (per channel) or the whole tensor;
//             a channel (or tensor) that is all zero gets scale kZeroChannelScale = 1.0 and q = 0:
//             any positive scale represents it exactly, and 1.0 keeps its bias and requantization
//             scale in the ordinary range.
//   q_kj    = clamp(round_half_away_from_zero(w_kj / scale_k), -127, 127), computed in double;
//             -128 is never produced, so negation stays in range and the grid is symmetric.
//   bias_k  = round_half_away_from_zero(b_k / (in_scale * scale_k)) as int32, SATURATED to
//             [-(2^31 - 1), 2^31 - 1]; the channels that saturated are reported in the result so a
//             caller can warn or refuse (a saturated bias is a degenerate layer: weights near zero
//             next to a large bias, typically after folding a batch norm with gamma ~ 0).
//   BN fold: with a_k = gamma_k / sqrt(var_k + eps):  w'_kj = w_kj * a_k,
//            b'_k = (b_k - mean_k) * a_k + beta_k     (b_k = 0 for a convolution without bias),
//            computed in double, stored as float: eval-mode BN(conv(x)) == conv'(x).
//   requant: s_k = in_scale * scale_k / out_scale, through choose_multiplier (requant.h).
// Precondition: pointers reference arrays of the stated sizes. Every bad value (non-finite weight,
// non-positive scale, var + eps <= 0, mismatched sizes) throws InvalidInput naming it.
// Postcondition: outputs fully written; no NaN or Inf is ever produced.
#pragma once
#include <cstdint>
#include <vector>

#include "quant/requant.h"

namespace dnnfusion::quant {

constexpr float kZeroChannelScale = 1.0f;
constexpr int32_t kBiasMax = 2147483647;  // bias saturates to [-kBiasMax, kBiasMax]

struct QuantizedWeights {
  std::vector<int8_t> q;      // channels x inner, same layout as the input
  std::vector<float> scales;  // `channels` entries per channel, 1 entry per tensor
  bool per_channel = true;
  // The scale of channel k whichever granularity was used.
  float scale_of(int64_t k) const { return per_channel ? scales.at(static_cast<size_t>(k)) : scales.at(0); }
};

QuantizedWeights quantize_weights(const float* w, int64_t channels, int64_t inner, bool per_channel = true);

// round_half_away_from_zero(x / scale) clamped to [-127, 127]: the weight rounding rule.
int8_t quantize_weight_value(float x, float scale);

struct QuantizedBias {
  std::vector<int32_t> q;          // one per output channel
  std::vector<int64_t> saturated;  // channels whose bias did not fit and was saturated
};

// `w_scales` holds `channels` entries, or 1 (a per-tensor weight scale).
QuantizedBias quantize_bias(const float* b, int64_t channels, double in_scale, const std::vector<float>& w_scales);

// Folds an eval-mode batch norm into the preceding convolution, in place: w is channels x inner,
// b has `channels` entries (pass zeros for a convolution without bias). eps >= 0.
void fold_batch_norm(float* w, float* b, int64_t channels, int64_t inner, const float* gamma, const float* beta,
                     const float* mean, const float* var, double eps);

// One Requant per output channel: choose_multiplier(in_scale * w_scales[k] / out_scale). `channels`
// -1 means w_scales.size(); otherwise w_scales has `channels` entries or 1 (shared by every channel).
std::vector<Requant> layer_requant(double in_scale, const std::vector<float>& w_scales, double out_scale,
                                   int64_t channels = -1);

}  // namespace dnnfusion::quant
