// The dense direct-convolution template of the sparse PTX method (the ICT paper
// §2.1): CUDA C in which every weight is a distinct template literal inside its own FMA, compiled
// once per (shape, tile, epilogue) to PTX, so each f32 immediate of the PTX names one weight
// (k, c, r, s). ptx_rewrite.h then turns that PTX into the kernel of a real weight set.
//
// Kernel ABI (fixed): extern "C" __global__ void <entry>(const float* __restrict__ x,
// const float* __restrict__ bias, const float* __restrict__ residual, float* __restrict__ y);
// x NCHW (n, c, h, w), y and residual NCHW (n, k, out_h, out_w), bias (k); an absent bias or
// residual is never read (pass 0). Launch with launch_dims(): static shared memory only.
//
// Precondition: a shape that passes ConvShape::validate() and a tile that passes validate_tile()
// (both are checked: InvalidInput otherwise). Postconditions of make_template: the PTX targets
// compute_80, declares no .local memory, and holds every template literal (checked after each
// compile: a compiler that folded or spilled them is an Error, never a silently wrong template);
// every weight is in outputs_per_thread / bk = fmas_per_weight FMAs of its channel group's code;
// the same inputs give the same source, literals and entry name in every process (the literals come
// from a seed derived from the shape), so the on-disk cache is stable.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "target/cuda/sparse_conv/conv_spec.h"

namespace dnnfusion::cuda {

// The template literal of every weight. Each is a normal, finite, non-zero float whose lowest
// mantissa bit is set, so none equals another or any other constant of the kernel (0, 6, which
// have short mantissas).
struct TemplateWeights {
  std::vector<uint32_t> bits;                   // bits[i]: literal of weight i = k*C*R*S + c*R*S + r*S + s
  std::unordered_map<uint32_t, int64_t> index;  // bit pattern -> weight index
};

// The literals of a shape's weights: deterministic in the shape (not the tile or epilogue).
TemplateWeights template_weights(const ConvShape& shape);

// Whether a bit pattern could be a template literal (the structural property above).
bool is_template_literal(uint32_t bits);

// Calls f(bits) for every f32 immediate token (0fXXXXXXXX or 0FXXXXXXXX, 8 hex digits, not part
// of a longer identifier) of PTX text.
template <typename F>
void for_each_f32_immediate(std::string_view text, F&& f);

// The entry name of the kernel for (shape, tile, epilogue): "dnnf_sparse_conv_<16 hex>".
std::string template_entry_name(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue);

// The CUDA C text of the template (all channel groups in one kernel; make_template may compile it
// in parts); fills *weights (when non-null) with the literals it uses.
std::string template_source(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue,
                            TemplateWeights* weights);

struct TemplateKernel {
  ConvShape shape;
  ConvTile tile;
  Epilogue epilogue;
  std::string ptx;
  std::string entry;
  LaunchDims launch;
  TemplateWeights weights;
  int64_t outputs_per_thread = 0;  // bn*bh*bw*bk: accumulators of one thread
  int64_t fmas_per_weight = 0;     // bn*bh*bw: FMAs each weight appears in (a thread's outputs per channel)
  double seconds = 0;              // wall time of make_template (source, NVRTC or cache read, checks)
  double nvrtc_seconds = 0;        // of that, NVRTC's compile and the merge of its parts (0 on a cache hit)
  int nvrtc_programs = 0;          // NVRTC programs the template is compiled as (see make_template)
  bool cache_hit = false;
  std::string cache_path;          // "" when no cache directory was given
};

// The options NVRTC compiles the template with (part of the cache key).
std::vector<std::string> template_compile_options();

// Builds the template's PTX, or reads it from `cache_dir` (created if missing, mode 0700; ""
// disables the cache). NVRTC's time grows much faster than linearly with a program's size, so a
// large template is compiled as several programs (consecutive channel groups, each a kernel of its
// own, compiled in parallel on up to 8 threads) whose PTX is merged into the one entry: each
// part's body under a label, its registers, labels and shared array renamed, a dispatch on
// %ctaid.y in front; template_source() is the same code as one program. Cached files are written
// atomically (temporary file + rename) and end with a line holding their length and checksum; a
// file that fails that check is compiled again and replaced.
// Throws TargetUnavailable without NVRTC, UnsupportedOp when the template would exceed
// kMaxTemplateFmas FMAs (NVRTC would take too long; see the report in conv_template.cc).
TemplateKernel make_template(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue,
                             const std::string& cache_dir);

// K*C*R*S * fmas_per_weight beyond which make_template refuses the layer: compile time is about
// linear in it (measured for 256->256 3x3, 589,824 FMAs: NVRTC 300 s on 2 busy cores, the PTX
// 74 MB, ptxas on its dense form 245 s), so this bounds a layer to roughly ten CPU-minutes.
constexpr int64_t kMaxTemplateFmas = int64_t{1} << 20;

namespace ptx_detail {
inline int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
inline bool ptx_ident_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
         c == '%';
}
}  // namespace ptx_detail

template <typename F>
void for_each_f32_immediate(std::string_view text, F&& f) {
  for (size_t p = text.find('0'); p != std::string_view::npos; p = text.find('0', p + 1)) {
    if (p + 10 > text.size()) return;
    if ((text[p + 1] != 'f' && text[p + 1] != 'F') || (p > 0 && ptx_detail::ptx_ident_char(text[p - 1]))) continue;
    uint32_t bits = 0;
    size_t q = p + 2;
    for (int d; q < p + 10 && (d = ptx_detail::hex_digit(text[q])) >= 0; ++q) bits = bits << 4 | static_cast<uint32_t>(d);
    if (q != p + 10 || (q < text.size() && ptx_detail::ptx_ident_char(text[q]))) continue;
    f(bits);
  }
}

}  // namespace dnnfusion::cuda
