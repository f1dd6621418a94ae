// See calibration.h.
#include "quant/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/error.h"

namespace dnnfusion::quant {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

void check_bins(int bins) {
  if (bins < 1 || bins > (1 << 24))
    DNNF_THROW_AS(InvalidInput, "histogram bin count must be in [1, 2^24], got ", bins);
}

void check_range(double r, const char* what) {
  if (!std::isfinite(r) || r < 0) DNNF_THROW_AS(InvalidInput, what, " must be finite and >= 0, got ", num(r));
}

// The value every threshold function returns: T itself, or the documented fallback when the data
// has no magnitude to calibrate.
Threshold make_threshold(double t) {
  if (!(t > 0) || !std::isfinite(t)) t = kZeroDataThreshold;
  return Threshold{t, t / 127.0};
}

void require_data(const Histogram& h, const char* method) {
  if (h.empty())
    DNNF_THROW_AS(InvalidInput, method, " calibration: the histogram is empty (no calibration data was added)");
}

// KL(P||Q) of one candidate: `i` kept bins of `raw`, `outliers` the mass of bins >= i.
double candidate_kl(const std::vector<double>& raw, int i, double outliers, std::vector<double>& p,
                    std::vector<double>& q) {
  p.assign(raw.begin(), raw.begin() + i);
  p[i - 1] += outliers;
  q.assign(i, 0.0);
  for (int j = 0; j < kQuantLevels; ++j) {
    const int start = static_cast<int>(int64_t{j} * i / kQuantLevels);
    const int stop = static_cast<int>(int64_t{j + 1} * i / kQuantLevels);
    double total = 0;
    int nonzero = 0;
    for (int k = start; k < stop; ++k) {
      total += raw[k];
      nonzero += p[k] != 0;
    }
    if (nonzero == 0) continue;
    const double share = total / nonzero;
    for (int k = start; k < stop; ++k)
      if (p[k] != 0) q[k] = share;
  }
  double sum_p = 0, sum_q = 0;
  for (int k = 0; k < i; ++k) sum_p += p[k], sum_q += q[k];
  double kl = 0;
  for (int k = 0; k < i; ++k) {
    if (p[k] == 0) continue;
    const double pk = p[k] / sum_p;
    const double qk = q[k] > 0 && sum_q > 0 ? q[k] / sum_q : kKlEpsilon;
    kl += pk * std::log(pk / qk);
  }
  return kl;
}

}  // namespace

Histogram::Histogram(int bins, double initial_range) {
  check_bins(bins);
  check_range(initial_range, "histogram initial range");
  counts_.assign(bins, 0.0);
  if (initial_range > 0) range_ = initial_range;
}

Histogram Histogram::from_counts(std::vector<double> counts, double range, double max_abs) {
  check_bins(static_cast<int>(std::min<size_t>(counts.size(), size_t{1} << 30)));
  if (!std::isfinite(range) || !(range > 0))
    DNNF_THROW_AS(InvalidInput, "histogram range must be finite and > 0, got ", num(range));
  if (max_abs < 0) max_abs = range;
  if (!std::isfinite(max_abs) || max_abs > range)
    DNNF_THROW_AS(InvalidInput, "histogram max_abs must be in [0, range] (range ", num(range), "), got ",
                  num(max_abs));
  Histogram h(static_cast<int>(counts.size()), range);
  for (size_t k = 0; k < counts.size(); ++k) {
    if (!std::isfinite(counts[k]) || counts[k] < 0)
      DNNF_THROW_AS(InvalidInput, "histogram counts must be finite and >= 0; bin ", k, " is ", num(counts[k]));
    h.total_ += counts[k];
  }
  h.counts_ = std::move(counts);
  h.max_abs_ = max_abs;
  return h;
}

void Histogram::set_range(double r) {
  range_ = r;
  counts_[0] += pending_zeros_;
  pending_zeros_ = 0;
}

// Smallest integer factor f with f * range >= m; old bin k lands in new bin floor(k / f). Values
// equal to the old range sit in the (closed) last bin but belong to new bin floor(bins / f): moving
// them keeps the merge equal to binning with the new range from the start.
void Histogram::grow_to(double m) {
  double f = std::ceil(m / range_);
  while (f * range_ < m) f += 1;
  std::vector<double> merged(counts_.size(), 0.0);
  counts_.back() -= at_range_;
  for (size_t k = 0; k < counts_.size(); ++k) merged[static_cast<size_t>(std::floor(k / f))] += counts_[k];
  merged[static_cast<size_t>(std::floor(counts_.size() / f))] += at_range_;
  at_range_ = 0;
  counts_ = std::move(merged);
  range_ *= f;
}

void Histogram::add(const float* data, int64_t n) {
  if (n < 0) DNNF_THROW_AS(InvalidInput, "histogram batch size must be >= 0, got ", n);
  if (n > 0 && data == nullptr) DNNF_THROW_AS(InvalidInput, "histogram batch of ", n, " values has no data");
  // Validate and find the batch max first, so a bad batch leaves the histogram unchanged.
  double m = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (!std::isfinite(data[k]))
      DNNF_THROW_AS(InvalidInput, "calibration data must be finite; element ", k, " of the batch is ", data[k]);
    m = std::max(m, static_cast<double>(std::fabs(data[k])));
  }
  if (m > 0 && range_ == 0) set_range(m);
  if (m > range_) grow_to(m);
  max_abs_ = std::max(max_abs_, m);
  total_ += static_cast<double>(n);
  if (range_ == 0) {
    pending_zeros_ += static_cast<double>(n);
    zeros_ += static_cast<double>(n);
    return;
  }
  const double per_unit = bins() / range_;
  const int64_t last = bins() - 1;
  for (int64_t k = 0; k < n; ++k) {
    const double a = std::fabs(static_cast<double>(data[k]));
    if (a == range_) at_range_ += 1;
    if (a == 0) zeros_ += 1;
    counts_[static_cast<size_t>(std::min(static_cast<int64_t>(a * per_unit), last))] += 1;
  }
}

std::vector<double> Histogram::counts() const {
  std::vector<double> c = counts_;
  c[0] += pending_zeros_;
  return c;
}

CalibMethod parse_calib_method(const std::string& name) {
  if (name == "kl") return CalibMethod::kl;
  if (name == "minmax") return CalibMethod::minmax;
  if (name == "percentile") return CalibMethod::percentile;
  DNNF_THROW_AS(InvalidInput, "unknown calibration method '", name, "'; allowed: 'kl', 'minmax', 'percentile'");
}

const char* calib_method_name(CalibMethod m) {
  switch (m) {
    case CalibMethod::kl: return "kl";
    case CalibMethod::minmax: return "minmax";
    case CalibMethod::percentile: return "percentile";
  }
  return "?";
}

std::vector<double> kl_divergences(const Histogram& h) {
  require_data(h, "KL");
  if (h.bins() < kQuantLevels)
    DNNF_THROW_AS(InvalidInput, "KL calibration needs a histogram of at least ", kQuantLevels, " bins, got ",
                  h.bins());
  std::vector<double> raw = h.counts();
  raw[0] = std::max(0.0, raw[0] - h.zeros());
  // outliers of candidate i = mass of bins [i, bins): a suffix sum, accumulated from the top.
  std::vector<double> suffix(raw.size() + 1, 0.0);
  for (size_t k = raw.size(); k-- > 0;) suffix[k] = suffix[k + 1] + raw[k];
  std::vector<double> kl, p, q;
  kl.reserve(raw.size() - kQuantLevels + 1);
  for (int i = kQuantLevels; i <= h.bins(); ++i) kl.push_back(candidate_kl(raw, i, suffix[i], p, q));
  return kl;
}

Threshold kl_threshold(const Histogram& h) {
  const std::vector<double> kl = kl_divergences(h);
  if (h.max_abs() == 0) return make_threshold(0);
  size_t best = 0;
  for (size_t k = 1; k < kl.size(); ++k)
    if (kl[k] < kl[best]) best = k;
  const double i = static_cast<double>(best + kQuantLevels);
  return make_threshold(std::min((i + 0.5) * h.bin_width(), h.max_abs()));
}

Threshold minmax_threshold(const Histogram& h) {
  require_data(h, "minmax");
  return make_threshold(h.max_abs());
}

Threshold percentile_threshold(const Histogram& h, double percentile) {
  if (!std::isfinite(percentile) || !(percentile > 0) || percentile > 100)
    DNNF_THROW_AS(InvalidInput, "percentile must be in (0, 100], got ", num(percentile));
  require_data(h, "percentile");
  if (h.max_abs() == 0) return make_threshold(0);
  const std::vector<double> c = h.counts();
  const double target = percentile / 100.0 * h.total();
  double cum = 0, t = h.range();
  for (size_t k = 0; k < c.size(); ++k) {
    cum += c[k];
    if (cum >= target) {
      t = static_cast<double>(k + 1) * h.bin_width();
      break;
    }
  }
  return make_threshold(std::min(t, h.max_abs()));
}

Threshold compute_threshold(const Histogram& h, CalibMethod m, double percentile) {
  switch (m) {
    case CalibMethod::kl: return kl_threshold(h);
    case CalibMethod::minmax: return minmax_threshold(h);
    case CalibMethod::percentile: return percentile_threshold(h, percentile);
  }
  DNNF_THROW_AS(InvalidInput, "unknown calibration method; allowed: 'kl', 'minmax', 'percentile'");
}

}  // namespace dnnfusion::quant
