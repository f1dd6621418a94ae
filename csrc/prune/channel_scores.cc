// Channel scores for structured pruning; see channel_scores.h for the contract of each function.
#include "prune/channel_scores.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::prune {

namespace {

void check_matrix(const char* fn, const float* w, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1)
    DNNF_THROW("prune::", fn, ": need rows >= 1 and cols >= 1, got ", rows, "x", cols);
  if (!w) DNNF_THROW("prune::", fn, ": null weight pointer");
}

void check_finite(const char* fn, const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) DNNF_THROW("prune::", fn, ": value ", i, " is not finite (", v[i], ")");
}

}  // namespace

void orthogonality_scores(const float* w, int64_t rows, int64_t cols, float* out) {
  check_matrix("orthogonality_scores", w, rows, cols);
  check_finite("orthogonality_scores", w, rows * cols);
  // The O(rows²·cols) Gram products dominate (420 GFLOP for VGG's 4096×25088 classifier), so they
  // run on the core's packed GEMM, a block of rows at a time to bound the scratch to block×rows.
  std::vector<float> wn(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const float* r = w + i * cols;
    double ss = 0;
    for (int64_t k = 0; k < cols; ++k) ss += static_cast<double>(r[k]) * r[k];
    const float inv = ss > 0 ? static_cast<float>(1.0 / std::sqrt(ss)) : 0.f;
    for (int64_t k = 0; k < cols; ++k) wn[i * cols + k] = r[k] * inv;
  }
  // P is symmetric: each block of rows is multiplied only with itself and the rows after it, and
  // an entry left of the diagonal block is credited to both of its rows.
  const int64_t block = std::min<int64_t>(rows, 512);
  std::vector<float> gram(static_cast<size_t>(block * rows));
  std::vector<double> acc(static_cast<size_t>(rows), 0.0);
  const kernels::SerialParallel serial;
  for (int64_t i0 = 0; i0 < rows; i0 += block) {
    const int64_t mb = std::min(block, rows - i0), nb = rows - i0;
    kernels::sgemm(mb, nb, cols, kernels::MatrixView{wn.data() + i0 * cols, cols, 1},
                   kernels::MatrixView{wn.data() + i0 * cols, 1, cols}, gram.data(), nb, kernels::GemmEpilogue{},
                   serial);
    for (int64_t i = 0; i < mb; ++i) {
      const float* g = gram.data() + i * nb;
      double s = 0;
      for (int64_t j = 0; j < nb; ++j) {
        const double p = std::fabs(static_cast<double>(g[j]) - (i == j ? 1.0 : 0.0));
        s += p;
        if (j >= mb) acc[i0 + j] += p;
      }
      acc[i0 + i] += s;
    }
  }
  for (int64_t i = 0; i < rows; ++i) out[i] = static_cast<float>(acc[i] / static_cast<double>(rows));
}

void row_l2_norms(const float* w, int64_t rows, int64_t cols, float* out) {
  check_matrix("row_l2_norms", w, rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t k = 0; k < cols; ++k) ss += static_cast<double>(w[i * cols + k]) * w[i * cols + k];
    out[i] = static_cast<float>(std::sqrt(ss));
  }
}

void row_l1_norms(const float* w, int64_t rows, int64_t cols, float* out) {
  check_matrix("row_l1_norms", w, rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0;
    for (int64_t k = 0; k < cols; ++k) s += std::fabs(static_cast<double>(w[i * cols + k]));
    out[i] = static_cast<float>(s);
  }
}

void accumulate_channel_abs_sum(const float* x, int64_t outer, int64_t channels, int64_t inner, double* acc) {
  if (outer < 0 || channels < 1 || inner < 0)
    DNNF_THROW("prune::accumulate_channel_abs_sum: need outer >= 0, channels >= 1, inner >= 0, got ", outer, ", ",
               channels, ", ", inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c) {
      const float* p = x + (o * channels + c) * inner;
      double s = 0;
      for (int64_t i = 0; i < inner; ++i) s += std::fabs(static_cast<double>(p[i]));
      acc[c] += s;
    }
}

void rank_transform(const float* v, int64_t n, float* out) {
  if (n < 1) DNNF_THROW("prune::rank_transform: need n >= 1, got ", n);
  check_finite("rank_transform", v, n);
  if (n == 1) {
    out[0] = 0.5f;
    return;
  }
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] < v[b]; });
  for (int64_t s = 0; s < n;) {
    int64_t e = s;
    while (e + 1 < n && v[idx[e + 1]] == v[idx[s]]) ++e;
    const double mean_pos = 0.5 * static_cast<double>(s + e);
    for (int64_t k = s; k <= e; ++k) out[idx[k]] = static_cast<float>(mean_pos / static_cast<double>(n - 1));
    s = e + 1;
  }
}

void combined_score(const float* orth, const float* l2, const float* act_l1, int64_t n, double omega, double lam,
                    float* out) {
  if (!(omega >= 0.0 && omega <= 1.0)) DNNF_THROW("prune::combined_score: omega must lie in [0, 1], got ", omega);
  if (!(lam >= 0.0 && lam <= 1.0)) DNNF_THROW("prune::combined_score: lam must lie in [0, 1], got ", lam);
  if (n < 1) DNNF_THROW("prune::combined_score: need n >= 1, got ", n);
  std::vector<float> neg_orth(static_cast<size_t>(n)), r_orth(n), r_l2(n), r_act(n);
  // High orthogonality score means redundant, so it is ranked reversed.
  for (int64_t i = 0; i < n; ++i) neg_orth[i] = -orth[i];
  rank_transform(neg_orth.data(), n, r_orth.data());
  rank_transform(l2, n, r_l2.data());
  rank_transform(act_l1, n, r_act.data());
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(omega * (lam * r_orth[i] + (1.0 - lam) * r_l2[i]) + (1.0 - omega) * r_act[i]);
}

int64_t keep_count(int64_t n, double ratio, int64_t multiple_of) {
  if (n < 1) DNNF_THROW("prune::keep_count: need n >= 1, got ", n);
  if (!(ratio >= 0.0 && ratio < 1.0)) DNNF_THROW("prune::keep_count: ratio must lie in [0, 1), got ", ratio);
  if (multiple_of < 1) DNNF_THROW("prune::keep_count: multiple_of must be >= 1, got ", multiple_of);
  // The epsilon keeps e.g. 10·0.3 from flooring to 2 through its binary representation.
  int64_t keep = n - static_cast<int64_t>(std::floor(static_cast<double>(n) * ratio + 1e-9));
  keep = (keep + multiple_of - 1) / multiple_of * multiple_of;
  return std::min(n, std::max(keep, multiple_of));
}

std::vector<int64_t> select_keep(const float* scores, int64_t n, int64_t keep) {
  if (n < 1) DNNF_THROW("prune::select_keep: need n >= 1, got ", n);
  if (keep < 0 || keep > n) DNNF_THROW("prune::select_keep: keep must lie in [0, ", n, "], got ", keep);
  check_finite("select_keep", scores, n);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  idx.resize(static_cast<size_t>(keep));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace dnnfusion::prune
