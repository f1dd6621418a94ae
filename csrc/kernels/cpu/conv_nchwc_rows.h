// Internal to the NCHW[x]c convolution family (baseline code only, never an ISA file): the body of
// conv2d_nchwc's work loop, one run of output positions of one output row, shared with the fused
// expand + depthwise kernel (conv_nchwc_expand_dw.cc), which runs it over a window of rows it
// keeps in scratch instead of over a whole input tensor.
// Precondition: s and k passed conv_nchwc_check for an ISA the CPU supports.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/conv_nchwc_ukernel.h"
#include "kernels/cpu/prefetch_share.h"

namespace dnnfusion::kernels::nchwc_detail {

// Operands read at the run's own positions (run[k] holds position p_begin, oc_bn floats per
// position): the residual and an epilogue's same-index operands (ElementHook::same_index), at
// most two; and the run's output `out` where it should be prefetched for writing (else null).
// Each tile brings the next tile's lines of them into L1 (NchwcTile::res_pf, y_pf).
struct RunStreams {
  const float* run[2] = {nullptr, nullptr};
  const float* out = nullptr;
};
// The streams of a run whose output starts `offset` floats into the kernel's output y, of
// y_bytes in all: its output is prefetched for writing when y_bytes is over
// kPrefetchOutputBytes (smaller outputs stay in cache, where the prefetches only cost issue
// slots: mobilenet_v3_large 1-2% slower with them everywhere).
constexpr int64_t kPrefetchOutputBytes = int64_t{4} << 20;
RunStreams run_streams(const float* residual, const ElementHook& epilogue, float* y, int64_t offset, int64_t y_bytes);

class ConvRows {
 public:
  ConvRows(const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa, const float* packed_w, const float* bias,
           Activation act);
  // Computes output positions [p_begin, p_end) of output row `row` of output block kb (flat 1x1
  // convs: positions of the whole plane, row 0) into y_run (which holds position p_begin), then
  // zeroes the padded lanes of the last block. No epilogue: the caller runs it.
  // xn: this image's input (depthwise: block kb's channel plane; grouped: the whole image, run
  // moves to block kb's groups) with image row x_row0 at xn; a
  // broadcast conv's channel blocks are H*W positions apart. Only the rows the taps of `row` reach
  // inside the image are read. res_run: the residual at y_run's positions, or null. item: this
  // run's share of weights to prefetch into L2 while it computes, or null. stage: per-thread
  // scratch for edge windows (grown on first use).
  // w: the weights to use, packed_w unless the caller runs a different set per image (null:
  // packed_w). streams: what the tiles prefetch (res_run included, when it should be), or null:
  // nothing.
  void run(int64_t kb, int64_t row, int64_t p_begin, int64_t p_end, const float* xn, int64_t x_row0,
           float* y_run, const float* res_run, const PrefetchShare* item, std::vector<float>& stage,
           const float* w = nullptr, const RunStreams* streams = nullptr) const;
  // Two whole output rows, row and row + 1, of output block kb into y_pair (2 * OW positions),
  // with one two-row tile. Only for convs without padding that conv_nchwc_two_row_tiles accepts.
  void run_pair(int64_t kb, int64_t row, const float* xn, float* y_pair, const float* res_pair,
                const PrefetchShare* item, const float* w = nullptr, const RunStreams* streams = nullptr) const;
  // A 1x1 conv over 1x1 planes: images [n0, n1) (at most reg_n) as one tile's positions, image n
  // at x + n * x_img; writes their outputs of block kb at y_tmp (oc_bn floats per image,
  // contiguous), adding res_tmp (same layout) unless null, then zeroes the padded lanes.
  void run_images(int64_t kb, int64_t n0, int64_t n1, const float* x, int64_t x_img, float* y_tmp,
                  const float* res_tmp) const;
  int64_t weight_block_floats() const { return w_blk_; }

 private:
  static constexpr int kMaxRn = 32;
  Conv2dShape s_;
  bool dw_, flat_, merge_kw_ = false;
  int64_t icb_, ocb_, rn_max_, Cb_ = 0, Kb_ = 0, xb_ = 0, w_blk_ = 0, k_tail_ = 0;
  int64_t edge_lo_ = 0, edge_hi_ = 0, stage_floats_ = 0;
  int64_t group_span_ = 0;  // grouped (not depthwise) convs: input channels per output block
  const float* packed_w_;
  Activation act_;
  std::vector<float> bias_pad_;
  NchwcTileFn fns_[kMaxRn + 1] = {};
  NchwcTileFn half_fns_[kMaxRn + 1] = {};  // the last block's, when half_tail_
  bool half_tail_ = false;
  NchwcTileFn fn_rows2_ = nullptr;  // the two-row tile, when the conv runs them
};

}  // namespace dnnfusion::kernels::nchwc_detail
