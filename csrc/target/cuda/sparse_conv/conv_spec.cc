// Validation, keys and the tiling heuristic of conv_spec.h.
//
// Precondition: none. Postcondition: validate()/validate_tile() throw InvalidInput naming the bad
// field; default_tile() returns a tile that passes validate_tile() for every valid shape.
#include "target/cuda/sparse_conv/conv_spec.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace dnnfusion::cuda {
namespace {

constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();  // 32-bit indexing in the kernel
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kDefaultSharedBytes = 24 * 1024;
constexpr int64_t kMinBlocks = 264;  // two blocks per SM on a 132-SM part
// FMAs in the code of one channel group (bk*c*r*s*bn*bh*bw) that keep NVRTC near its best rate
// (measured with NVRTC 13.0, one group of 3x3 code, user seconds: 4608 FMAs 0.9-1.2 s, 9216 4.6 s,
// 18432 17 s: much faster than linear growth within one straight-line computation).
constexpr int64_t kGroupFmas = 4608;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int next_pow2(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 20)) p *= 2;
  return p;
}

void require_at_least(const char* field, int64_t value, int64_t low) {
  if (value < low) {
    DNNF_THROW_AS(InvalidInput, "sparse conv: ", field, " = ", value, " is not allowed (must be >= ", low, ")");
  }
}

// a*b*c*d when it stays below 2^31, else -1 (each factor is already known positive and < 2^31).
int64_t product_or_overflow(int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t p = 1;
  for (int64_t f : {a, b, c, d}) {
    if (f > kMaxIndex / p) return -1;
    p *= f;
  }
  return p;
}

}  // namespace

void ConvShape::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"n", n}, {"c", c}, {"h", h}, {"w", w}, {"k", k},
                                                   {"r", r}, {"s", s}, {"stride_h", stride_h},
                                                   {"stride_w", stride_w}, {"dil_h", dil_h},
                                                   {"dil_w", dil_w}};
  for (const auto& [name, v] : sizes) {
    require_at_least(name, v, 1);
    if (v > kMaxIndex) DNNF_THROW_AS(InvalidInput, "sparse conv: ", name, " = ", v, " is not allowed (must be < 2^31)");
  }
  require_at_least("pad_h", pad_h, 0);
  require_at_least("pad_w", pad_w, 0);
  if (pad_h > kMaxIndex || pad_w > kMaxIndex) DNNF_THROW_AS(InvalidInput, "sparse conv: padding must be < 2^31");
  if (out_h() < 1 || out_w() < 1) {
    DNNF_THROW_AS(InvalidInput, "sparse conv: the output is empty (out_h = ", out_h(), ", out_w = ", out_w(),
                  "): the dilated filter (", dil_h * (r - 1) + 1, " x ", dil_w * (s - 1) + 1,
                  ") must fit in the padded input (", h + 2 * pad_h, " x ", w + 2 * pad_w, ")");
  }
  if (product_or_overflow(n, c, h, w) < 0) {
    DNNF_THROW_AS(InvalidInput, "sparse conv: the input (n*c*h*w) must have fewer than 2^31 elements");
  }
  if (product_or_overflow(n, k, out_h(), out_w()) < 0) {
    DNNF_THROW_AS(InvalidInput, "sparse conv: the output (n*k*out_h*out_w) must have fewer than 2^31 elements");
  }
  if (product_or_overflow(k, c, r, s) < 0) {
    DNNF_THROW_AS(InvalidInput, "sparse conv: the weight (k*c*r*s) must have fewer than 2^31 elements");
  }
}

std::string ConvShape::key() const {
  return detail::str_cat("n", n, "c", c, "h", h, "w", w, "_k", k, "r", r, "s", s, "_st", stride_h, "x", stride_w,
                         "_pd", pad_h, "x", pad_w, "_dl", dil_h, "x", dil_w);
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::relu6: return "relu6";
  }
  return "?";
}

std::string Epilogue::key() const {
  return detail::str_cat("b", bias ? 1 : 0, "r", residual ? 1 : 0, activation_name(act));
}

std::string ConvTile::key() const {
  return detail::str_cat("n", bn, "h", bh, "w", bw, "k", bk, "_t", threads_h, "x", threads_w, "_cc", c_chunk);
}

int64_t tile_in_rows(const ConvShape& sh, const ConvTile& t) {
  return (int64_t{t.threads_h} * t.bh - 1) * sh.stride_h + (sh.r - 1) * sh.dil_h + 1;
}

int64_t tile_in_cols(const ConvShape& sh, const ConvTile& t) {
  return (int64_t{t.threads_w} * t.bw - 1) * sh.stride_w + (sh.s - 1) * sh.dil_w + 1;
}

int64_t tile_shared_bytes(const ConvShape& sh, const ConvTile& t) {
  const int64_t chunk = std::min<int64_t>(t.c_chunk, sh.c);
  return 4 * int64_t{t.bn} * chunk * tile_in_rows(sh, t) * tile_in_cols(sh, t);
}

void validate_tile(const ConvShape& shape, const ConvTile& t) {
  shape.validate();
  const std::pair<const char*, int> fields[] = {{"bn", t.bn}, {"bh", t.bh}, {"bw", t.bw}, {"bk", t.bk},
                                                {"threads_h", t.threads_h}, {"threads_w", t.threads_w},
                                                {"c_chunk", t.c_chunk}};
  for (const auto& [name, v] : fields) require_at_least(name, v, 1);
  if (t.threads() > 1024) {
    DNNF_THROW_AS(InvalidInput, "sparse conv tile: threads_h * threads_w = ", t.threads(), " (must be <= 1024)");
  }
  // Row/column extents are bounded before multiplying so no product below can overflow.
  if (int64_t{t.threads_h} * t.bh > 4096 || int64_t{t.threads_w} * t.bw > 4096 || t.bn > 4096 || t.bk > 4096) {
    DNNF_THROW_AS(InvalidInput, "sparse conv tile ", t.key(), ": per-block extents must be <= 4096");
  }
  const int64_t bytes = tile_shared_bytes(shape, t);
  if (bytes > kMaxStaticSharedBytes) {
    DNNF_THROW_AS(InvalidInput, "sparse conv tile ", t.key(), ": its input tile needs ", bytes,
                  " bytes of shared memory (must be <= ", kMaxStaticSharedBytes, "; lower c_chunk or threads)");
  }
  if (ceil_div(shape.k, t.bk) > kMaxGridYZ) {
    DNNF_THROW_AS(InvalidInput, "sparse conv tile: ceil(k / bk) = ", ceil_div(shape.k, t.bk), " channel groups (must be <= 65535)");
  }
  if (ceil_div(shape.n, t.bn) > kMaxGridYZ) {
    DNNF_THROW_AS(InvalidInput, "sparse conv tile: ceil(n / bn) = ", ceil_div(shape.n, t.bn), " batch groups (must be <= 65535)");
  }
}

LaunchDims launch_dims(const ConvShape& shape, const ConvTile& t) {
  LaunchDims d;
  const int64_t tiles_h = ceil_div(shape.out_h(), int64_t{t.threads_h} * t.bh);
  const int64_t tiles_w = ceil_div(shape.out_w(), int64_t{t.threads_w} * t.bw);
  // Every factor is below 2^31 after validate(), and tiles_h * tiles_w <= out_h * out_w < 2^31.
  d.grid[0] = static_cast<uint32_t>(tiles_h * tiles_w);
  d.grid[1] = static_cast<uint32_t>(ceil_div(shape.k, t.bk));
  d.grid[2] = static_cast<uint32_t>(ceil_div(shape.n, t.bn));
  d.block[0] = static_cast<uint32_t>(t.threads_w);
  d.block[1] = static_cast<uint32_t>(t.threads_h);
  d.block[2] = 1;
  d.dynamic_shared_bytes = 0;
  return d;
}

ConvTile default_tile(const ConvShape& shape) {
  ConvTile t;
  t.bn = t.bh = t.bw = 1;
  t.threads_w = std::min(32, next_pow2(shape.out_w()));
  t.threads_h = std::min(next_pow2(shape.out_h()), std::max(1, 128 / t.threads_w));
  // One input channel must fit the 48 KB; large strides or dilations shrink the block.
  while (4 * tile_in_rows(shape, t) * tile_in_cols(shape, t) > kMaxStaticSharedBytes &&
         (t.threads_h > 1 || t.threads_w > 1)) {
    if (t.threads_h >= t.threads_w) t.threads_h /= 2;
    else t.threads_w /= 2;
  }
  const int64_t per_channel_fmas = shape.c * shape.r * shape.s * t.fmas_per_weight();
  t.bk = static_cast<int>(std::clamp<int64_t>(kGroupFmas / per_channel_fmas, 1, std::min<int64_t>(shape.k, 16)));
  auto blocks = [&] {
    const LaunchDims d = launch_dims(shape, t);
    return int64_t{d.grid[0]} * d.grid[1] * d.grid[2];
  };
  while (t.bk > 4 && blocks() < kMinBlocks) t.bk /= 2;
  const int64_t per_channel = 4 * tile_in_rows(shape, t) * tile_in_cols(shape, t);
  t.c_chunk = static_cast<int>(std::clamp<int64_t>(kDefaultSharedBytes / per_channel, 1, shape.c));
  return t;
}

std::optional<ConvTile> smaller(const ConvTile& tile) {
  ConvTile t = tile;
  for (int* f : {&t.bk, &t.bw, &t.bh, &t.bn}) {
    if (*f > 1) {
      *f /= 2;
      return t;
    }
  }
  return std::nullopt;
}

}  // namespace dnnfusion::cuda
