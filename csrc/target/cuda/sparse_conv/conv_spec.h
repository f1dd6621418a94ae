// The vocabulary of the sparse PTX convolution: a convolution's shape, the fused
// epilogue, the thread/block tiling of the generated kernel and the launch dimensions.
//
// Precondition: none (plain values). Postcondition: a ConvShape that passed validate() and a
// ConvTile that passed validate_tile() describe a kernel that template_source() can generate:
// every size positive, the output non-empty, every tensor addressable with 32-bit indices, the
// block's input tile within the 48 KB of static shared memory, the grid within CUDA's limits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dnnfusion::cuda {

// A dense 2-D convolution, groups = 1: x (n, c, h, w) * weight (k, c, r, s) -> y (n, k, out_h,
// out_w), all NCHW / KCRS contiguous fp32.
struct ConvShape {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t k = 1, r = 1, s = 1;         // output channels, filter height and width
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;        // zero padding on each side
  int64_t dil_h = 1, dil_w = 1;

  int64_t out_h() const { return (h + 2 * pad_h - dil_h * (r - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (w + 2 * pad_w - dil_w * (s - 1) - 1) / stride_w + 1; }
  int64_t weight_count() const { return k * c * r * s; }
  // Throws InvalidInput naming the first bad field and what is allowed.
  void validate() const;
  // "n1c64h56w56_k64r3s3_st1x1_pd1x1_dl1x1": stable, usable in file and kernel names.
  std::string key() const;
};

enum class Activation { none, relu, relu6 };
const char* activation_name(Activation a);

// y = act(conv + bias[k] + residual): bias and residual are present or absent at compile time.
struct Epilogue {
  bool bias = false;
  bool residual = false;
  Activation act = Activation::none;
  std::string key() const;  // "b1r0relu"
};

// How the generated kernel splits the output. A thread computes bn images x bh rows x bw columns
// x bk output channels; a block is threads_h x threads_w threads, all computing the same bk
// channels (so every thread of a block executes the same immediates: no divergence), hence the
// block covers bn x (threads_h*bh) x (threads_w*bw) outputs of bk channels, and the grid has
// ceil(K / bk) channel groups, each with its own code selected on blockIdx.y. A thread's rows are
// ty, ty + threads_h, ...; its columns tx, tx + threads_w, ... (neighbouring threads write
// neighbouring outputs: coalesced stores, conflict-free shared reads at stride 1). The block's
// input tile (halo included, zero padding applied on load) is staged in shared memory c_chunk
// channels at a time.
//
// Code size: every weight appears in fmas_per_weight() = bn*bh*bw FMAs, so the PTX holds
// K*C*R*S*bn*bh*bw FMAs whatever bk is; a channel group's code is bk*C*R*S*bn*bh*bw of them.
struct ConvTile {
  int bn = 1, bh = 1, bw = 1, bk = 8;
  int threads_h = 8, threads_w = 16;
  int c_chunk = 16;

  int64_t threads() const { return int64_t{threads_h} * threads_w; }
  int64_t outputs_per_thread() const { return int64_t{bn} * bh * bw * bk; }
  int64_t fmas_per_weight() const { return int64_t{bn} * bh * bw; }
  std::string key() const;  // "n1h1w1k8_t8x16_cc16"
};

// The shared-memory input tile of one block: rows x cols per image and channel.
int64_t tile_in_rows(const ConvShape& shape, const ConvTile& tile);
int64_t tile_in_cols(const ConvShape& shape, const ConvTile& tile);
// Bytes of static shared memory the kernel declares (bn * c_chunk * rows * cols floats).
int64_t tile_shared_bytes(const ConvShape& shape, const ConvTile& tile);
constexpr int64_t kMaxStaticSharedBytes = 48 * 1024;

// Throws InvalidInput naming the bad field when the tile cannot serve the (valid) shape: a
// non-positive field, more than 1024 threads, shared memory over 48 KB, a grid over CUDA's
// limits (y = channel groups and z = batch groups at most 65535).
void validate_tile(const ConvShape& shape, const ConvTile& tile);

// A tile for the shape: one output per weight and thread (bn = bh = bw = 1, the smallest code),
// up to 16 channels per thread (input reuse from registers) while a channel group's code stays
// near 4608 FMAs (NVRTC slows down sharply on larger straight-line code; at least 1 channel),
// 64-256 threads shaped to the output,
// fewer channels per thread while that leaves the grid too small to fill a GPU, and as many input
// channels per shared-memory stage as fit in 24 KB (two blocks per SM still fit 48 KB parts).
ConvTile default_tile(const ConvShape& shape);
// A tile with fewer live registers per thread (halves bk, then bw, bh, bn), for a caller whose
// ptxas reported spills; c_chunk is kept. nullopt when the tile is already minimal.
std::optional<ConvTile> smaller(const ConvTile& tile);

struct LaunchDims {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  size_t dynamic_shared_bytes = 0;
};
// grid = (spatial tiles, channel groups, batch groups), block = (threads_w, threads_h, 1); the
// shared tile is static, so dynamic_shared_bytes is 0.
LaunchDims launch_dims(const ConvShape& shape, const ConvTile& tile);

}  // namespace dnnfusion::cuda
