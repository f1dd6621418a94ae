// Activation calibration for per-tensor symmetric int8 (AukC §2.2.3): a histogram
// of |x| collected over any number of calibration batches, and the clipping threshold T chosen
// from it by KL divergence (TensorRT's entropy calibration), by the maximum, or by a percentile.
// The activation scale is then T / 127: real value = scale * int8 value, zero point 0.
//
// Histogram. `bins` equal bins over [0, range) (the last bin also takes |x| == range). The range is
// fixed by the first batch with a nonzero value (its max |x|), unless the constructor was given one.
// A later batch with max |x| > range grows the range by the smallest integer factor f that covers
// it, and old bins k*f .. k*f+f-1 merge into new bin k: every old bin lies inside one new bin, so no
// interpolation is needed and the counts equal those of binning with the grown range from the start
// (up to the rounding of |x| * bins / range at a bin edge). The final range depends on the batch
// order (the first max and the factors), never on timing or threads. Growth costs resolution: the
// data may end up filling only about half the bins. A caller that wants TensorRT's two-pass
// histogram passes the global max |x| of a first pass as `initial_range`, and no growth happens.
// Zeros that arrive before any range exists are counted and put into bin 0 when the range is fixed.
//
// Precondition: data is finite (NaN or Inf is an InvalidInput naming the element). Postcondition
// of every threshold function: a finite threshold > 0 and scale = threshold / 127 > 0. An empty
// histogram (nothing added) is an InvalidInput. All-zero data has no range to calibrate: threshold
// kZeroDataThreshold (1.0, scale 1/127), since any positive scale represents zeros exactly and 1.0
// keeps the requantization multipliers of neighbouring layers in their ordinary range.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dnnfusion::quant {

constexpr int kHistogramBins = 2048;
constexpr int kQuantLevels = 128;  // 0..127: the magnitudes a symmetric int8 value can take
constexpr double kZeroDataThreshold = 1.0;
constexpr double kDefaultPercentile = 99.99;

class Histogram {
 public:
  // `initial_range` 0 lets the first nonzero batch set the range; a positive one fixes it up front.
  explicit Histogram(int bins = kHistogramBins, double initial_range = 0.0);
  // A histogram of given counts over [0, range): for tests and for histograms computed elsewhere.
  // Counts must be finite and >= 0; max_abs defaults to range (the largest |x| is not known).
  static Histogram from_counts(std::vector<double> counts, double range, double max_abs = -1.0);

  // One calibration batch of n values (|x| is binned; the sign does not matter).
  void add(const float* data, int64_t n);

  int bins() const { return static_cast<int>(counts_.size()); }
  // Upper edge of the last bin; 0 while only zeros (or nothing) have been added.
  double range() const { return range_; }
  double bin_width() const { return range_ / bins(); }
  // Largest |x| added (for from_counts: the value given).
  double max_abs() const { return max_abs_; }
  // Number of values added (sum of the counts, zeros waiting for a range included).
  double total() const { return total_; }
  bool empty() const { return total_ == 0; }
  // Per-bin counts; pending zeros are reported in bin 0.
  std::vector<double> counts() const;
  // How many of the values added were exactly 0 (all in bin 0; from_counts: 0, not known).
  double zeros() const { return zeros_; }

 private:
  void set_range(double r);
  void grow_to(double m);

  std::vector<double> counts_;
  double range_ = 0;
  double max_abs_ = 0;
  double total_ = 0;
  double pending_zeros_ = 0;
  double at_range_ = 0;  // values with |x| == range_ (in the last bin)
  double zeros_ = 0;
};

enum class CalibMethod { kl, minmax, percentile };

// "kl", "minmax", "percentile"; anything else is an InvalidInput listing these.
CalibMethod parse_calib_method(const std::string& name);
const char* calib_method_name(CalibMethod m);

struct Threshold {
  double threshold = 0;  // clipping value T in real units: |x| > T saturates to ±127
  double scale = 0;      // T / 127
};

// TensorRT's entropy calibration, on the histogram without its exact zeros: every scale represents
// 0 exactly, so zeros say nothing about where to clip, and a ReLU output's zero spike in bin 0 would
// otherwise decide the search (every candidate i >= 256 merges bin 0 with bin 1 in Q's first group
// and pays for spreading the spike, so i = 255 wins for nearly every ReLU output: a threshold of an
// eighth of the range, which cost a trained CNN 76 accuracy points). For each candidate i in [128, bins]:
//   P = counts[0..i), with the mass of bins >= i added to P[i-1] (clipped values saturate there);
//   Q = counts[0..i) (without the outliers, as TensorRT and MXNet do) merged into 128 groups, group
//       j = bins [floor(j*i/128), floor((j+1)*i/128)), each group's total spread uniformly over the
//       group's bins where P is nonzero (bins where P is 0 get Q = 0);
//   P and Q normalized to sum 1; KL(P||Q) = sum over P > 0 of P * ln(P / Q), where Q == 0 (only
//       possible in bin i-1, when it holds nothing but outliers) counts as Q = kKlEpsilon: a large
//       finite penalty instead of an infinity, so candidates stay comparable.
// The candidate with the smallest KL wins (the smallest i on exact ties). Threshold convention
// (TensorRT's): T = (i + 0.5) * bin_width, capped at max_abs() (a threshold beyond the largest
// value seen can only waste resolution).
constexpr double kKlEpsilon = 1e-10;
Threshold kl_threshold(const Histogram& h);
// KL(P||Q) for every candidate i = 128 .. bins (element i - 128): the curve kl_threshold minimizes.
std::vector<double> kl_divergences(const Histogram& h);

// T = max |x|.
Threshold minmax_threshold(const Histogram& h);
// T = upper edge of the first bin where the cumulative count reaches p% of the total, capped at
// max_abs(); p in (0, 100].
Threshold percentile_threshold(const Histogram& h, double percentile = kDefaultPercentile);

// Dispatch by method (`percentile` is used by CalibMethod::percentile only).
Threshold compute_threshold(const Histogram& h, CalibMethod m, double percentile = kDefaultPercentile);

}  // namespace dnnfusion::quant
