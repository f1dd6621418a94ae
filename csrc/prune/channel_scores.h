// Channel scores for structured pruning (AukC §2.2.1): per-filter orthogonality
// (RePr), filter norms, a tie-aware rank transform, the combined score
//   S_i = ω(λ·rank(−O_i) + (1−λ)·rank(‖K_i‖₂)) + (1−ω)·rank(‖A_i‖₁)
// and the selection of the channels to keep (count rounded to a multiple, deterministic ties).
// Plain functions over contiguous float arrays: they know nothing of graphs or torch.
// Precondition of every function: pointers reference arrays of the stated sizes; bad sizes or
// parameters throw dnnfusion::Error naming the problem. Postcondition: outputs fully written.
#pragma once
#include <cstdint>
#include <vector>

namespace dnnfusion::prune {

// O_i = (1/rows)·Σ_j |ŵ_i·ŵ_j − δ_ij| over the L2-normalized rows ŵ of a rows×cols matrix
// (one row per output channel's flattened filter). A zero row stays zero after normalization
// (its O_i is then 1/rows from the diagonal term). High O_i = redundant filter.
void orthogonality_scores(const float* w, int64_t rows, int64_t cols, float* out);

// ‖w_i‖₂ and ‖w_i‖₁ of each row of a rows×cols matrix.
void row_l2_norms(const float* w, int64_t rows, int64_t cols, float* out);
void row_l1_norms(const float* w, int64_t rows, int64_t cols, float* out);

// Σ |x[o, c, i]| over o and i for each channel c of an outer×channels×inner array, added to acc.
void accumulate_channel_abs_sum(const float* x, int64_t outer, int64_t channels, int64_t inner, double* acc);

// Position of each value in ascending order, scaled to [0, 1] (n == 1 gives 0.5): the largest
// value gets 1. Equal values share the mean of their positions, so the result does not depend on
// the order of tied elements. Non-finite values are an error.
void rank_transform(const float* v, int64_t n, float* out);

// The AukC combined score from the raw criteria (orthogonality O, filter L2 norm, activation L1):
// higher = more important. omega and lam must lie in [0, 1].
void combined_score(const float* orth, const float* l2, const float* act_l1, int64_t n, double omega,
                    double lam, float* out);

// How many of n channels remain when `ratio` ∈ [0, 1) of them are removed: n − floor(n·ratio),
// rounded up to a multiple of `multiple_of` (≥ 1), at least multiple_of, at most n.
int64_t keep_count(int64_t n, double ratio, int64_t multiple_of);

// The indices (ascending) of the `keep` highest-scoring entries. Ties: the lower index is kept,
// so the choice never depends on anything but the scores. Non-finite scores are an error.
std::vector<int64_t> select_keep(const float* scores, int64_t n, int64_t keep);

}  // namespace dnnfusion::prune
