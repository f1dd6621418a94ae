// Generates the dense template (conv_template.h), compiles it with NVRTC and caches its PTX.
//
// The generated kernel, per block: stage c_chunk input channels of the block's input tile (halo
// included, zeros outside the input) in shared memory; every thread then runs the fully unrolled
// (c, r, s) loop of that chunk for its outputs, one FMA per (weight, output) with the weight
// written as a hex-float literal (a `constexpr` weight array would land in local memory and carry
// no immediates) through __fmaf_rn from an accumulator starting at 0 (an FMA head, never a mul);
// after the last chunk each output goes through the epilogue and is stored. Blocks of different
// channel groups (blockIdx.y) need different literals, so each group's code is one case of a
// switch on blockIdx.y.
//
// Compile time is the cost of the method. NVRTC 13.0 (this machine, user seconds) spends about
// 0.2-0.3 ms per FMA while a program stays near 10k FMAs and a channel group near 5k, and grows
// much faster than linearly beyond (one group of 18k FMAs: 17 s; one program of 32 groups of 2.3k:
// 74 s). Hence default_tile's cap on a group's size, kPartFmas per program, programs compiled in
// parallel and merged (merge_parts), and `if (opaque_false()) return;` splits of the straight-line
// code. Measured end to end: 64->64 3x3 on 56x56 (36,864 FMAs, 4 programs) 9 s on 2 busy cores.
//
// Precondition: see the header. Postcondition: the text is deterministic in its inputs; the merged
// PTX is one entry with the kernel ABI.
#include "target/cuda/sparse_conv/conv_template.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <exception>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/hash.h"
#include "target/cuda/sparse_conv/nvrtc_compiler.h"

namespace dnnfusion::cuda {
namespace {

// Part of every cache key and entry name: bump it whenever the generated text changes meaning.
constexpr const char* kTemplateVersion = "sparse-conv-template-v1";
constexpr const char* kCacheTrailer = "// dnnfusion-sparse-conv-cache v1 ";
// FMAs per basic block of the generated code (see emit_opaque_false); measured, not critical.
constexpr int64_t kFmasPerBlock = 256;
// FMAs per NVRTC program. NVRTC's time grows much faster than linearly with the size of one
// program (a 64->64 3x3 layer in 16 channel groups of 2304 FMAs, measured in user seconds: 2
// groups 0.95, 4: 2.0, 8: 5.6, 16: 14, 32: 74; the same in 32 separate kernels of one program: 70),
// so the groups are compiled as several programs of about this size (0.2-0.3 ms per FMA) whose
// PTX is merged into the one entry (merge_parts).
constexpr long long kPartFmas = 9216;
constexpr size_t kMaxCompileThreads = 8;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A C++17 hex-float literal that denotes exactly the (normal) float `bits`.
std::string float_literal(uint32_t bits) {
  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
  const uint32_t mantissa = bits & 0x7fffffu;
  char b[32];
  std::snprintf(b, sizeof b, "%s0x1.%06xp%+df", (bits >> 31) ? "-" : "", mantissa << 1, exponent);
  return b;
}

// The integer constants the generated text is written in terms of.
// long long, not int64_t: they are printed with %lld.
using ll = long long;
struct Geometry {
  ll n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, oh, ow;
  ll bn, bh, bw, bk, th, tw, nt, cch, rows, cols, tiles_w, groups;
};

Geometry geometry(const ConvShape& s, const ConvTile& t) {
  Geometry g{};
  g.n = s.n, g.c = s.c, g.h = s.h, g.w = s.w, g.k = s.k, g.r = s.r, g.s = s.s;
  g.sh = s.stride_h, g.sw = s.stride_w, g.ph = s.pad_h, g.pw = s.pad_w, g.dh = s.dil_h, g.dw = s.dil_w;
  g.oh = s.out_h(), g.ow = s.out_w();
  g.bn = t.bn, g.bh = t.bh, g.bw = t.bw, g.bk = t.bk, g.th = t.threads_h, g.tw = t.threads_w;
  g.nt = t.threads();
  g.cch = std::min<ll>(t.c_chunk, s.c);
  g.rows = tile_in_rows(s, t), g.cols = tile_in_cols(s, t);
  g.tiles_w = (g.ow + g.tw * g.bw - 1) / (g.tw * g.bw);
  g.groups = (g.k + g.bk - 1) / g.bk;
  return g;
}

// Appends printf-style text (the generator's only formatting tool, so the output stays compact);
// the attribute lets the compiler check every format against its arguments.
__attribute__((format(printf, 2, 3))) void put(std::string& out, const char* fmt, ...) {
  char b[512];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(b, sizeof b, fmt, args);
  va_end(args);
  if (n < 0 || n >= static_cast<int>(sizeof b)) DNNF_THROW("sparse conv template: generated line too long");
  out.append(b, static_cast<size_t>(n));
}

void emit_header(std::string& o, const ConvTile& t, const Epilogue& e, const Geometry& g) {
  o += "// dnnfusion sparse convolution template. Generated; do not edit.\n";
  put(o, "// x (%lld,%lld,%lld,%lld) * w (%lld,%lld,%lld,%lld) -> y (%lld,%lld,%lld,%lld)\n", g.n,
      g.c, g.h, g.w, g.k, g.c, g.r,
      g.s, g.n, g.k, g.oh, g.ow);
  put(o, "// stride %lldx%lld, padding %lldx%lld, dilation %lldx%lld\n", g.sh, g.sw,
      g.ph, g.pw, g.dh, g.dw);
  put(o, "// epilogue: y = %s(conv%s%s)\n", activation_name(e.act), e.bias ? " + bias" : "",
      e.residual ? " + residual" : "");
  put(o, "// tile %s: a thread computes %d image(s) x %d row(s) x %d column(s) x %d channel(s);\n",
      t.key().c_str(), t.bn, t.bh, t.bw, t.bk);
  put(o, "// a block is %d x %d threads; %lld channel group(s) on blockIdx.y, each with its own code.\n",
      t.threads_h, t.threads_w, g.groups);
  o += "// Every weight is a distinct template literal in its own FMA: the PTX rewriter identifies a\n"
       "// weight by its bit pattern and substitutes the real value, or deletes the FMA for a zero.\n\n";
}

void emit_stage_function(std::string& o, const Geometry& g) {
  o += "// Stages input channels [c0, c0 + cn) of the block's images into shared memory, halo included.\n"
       "// Positions outside the input (zero padding, rows, columns or images past the end) read as 0.\n"
       "static __device__ __forceinline__ void stage_input(const float* __restrict__ x, float* tile, int n0,\n"
       "                                                   int c0, int cn, int ih0, int iw0, int tid) {\n";
  put(o, "  const int count = %lld * cn * %lld;\n", g.bn, (g.rows * g.cols));
  o += "#pragma unroll 1\n";
  put(o, "  for (int e = tid; e < count; e += %lld) {\n", g.nt);
  put(o, "    const int col = e %% %lld, row = (e / %lld) %% %lld;\n", g.cols, g.cols,
      g.rows);
  put(o, "    const int cl = (e / %lld) %% cn, ni = e / (%lld * cn);\n", (g.rows * g.cols),
      (g.rows * g.cols));
  o += "    const int n = n0 + ni, ih = ih0 + row, iw = iw0 + col;\n"
       "    float v = 0.0f;\n";
  put(o, "    if (n < %lld && ih >= 0 && ih < %lld && iw >= 0 && iw < %lld)\n", g.n, g.h, g.w);
  put(o, "      v = x[((n * %lld + c0 + cl) * %lld + ih) * %lld + iw];\n", g.c, g.h, g.w);
  put(o, "    tile[((ni * %lld + cl) * %lld + row) * %lld + col] = v;\n", g.cch, g.rows, g.cols);
  o += "  }\n}\n\n";
}

void emit_opaque_false(std::string& o) {
  o += "// An opaque false: NVVM cannot see through the asm, so each `if (opaque_false()) return;` below\n"
       "// ends a basic block. That bounds NVVM's per-block work on the long straight-line FMA code (a\n"
       "// large share of the compile time); ptxas folds the constant and drops the branch.\n"
       "static __device__ __forceinline__ bool opaque_false() {\n"
       "  unsigned z;\n"
       "  asm volatile(\"mov.u32 %0, 0;\" : \"=r\"(z));\n"
       "  return z != 0;\n"
       "}\n\n";
}

void emit_finish_function(std::string& o, const Epilogue& e) {
  put(o, "// The epilogue of one output: y = %s(conv%s%s).", activation_name(e.act), e.bias ? " + bias[k]" : "",
      e.residual ? " + residual[o]" : "");
  o += e.act == Activation::none ? "\n" : " The comparisons keep a NaN, as torch does.\n";
  o += "static __device__ __forceinline__ float finish(float v, const float* __restrict__ bias,\n"
       "                                               const float* __restrict__ residual, int k, int o) {\n";
  o += e.bias ? "  v = v + bias[k];\n" : "  (void)bias; (void)k;\n";
  o += e.residual ? "  v = v + residual[o];\n" : "  (void)residual; (void)o;\n";
  if (e.act == Activation::relu) o += "  v = v < 0.0f ? 0.0f : v;\n";
  if (e.act == Activation::relu6) o += "  v = v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);\n";
  o += "  return v;\n}\n\n";
}

// Accumulator number of output (image ni, row i, column j, channel kk) of a thread.
ll acc_id(const Geometry& g, ll kn, ll ni, ll i, ll j, ll kk) {
  return ((ni * g.bh + i) * g.bw + j) * kn + kk;
}

// One (c, r, s) step of a group: per output position, one shared-memory read and kn FMAs.
void emit_step(std::string& o, const Geometry& g, const TemplateWeights& tw, ll k0, ll kn, ll c, ll cl, ll r,
               ll s) {
  put(o, "      // c=%lld r=%lld s=%lld\n", c, r, s);
  for (ll ni = 0; ni < g.bn; ++ni) {
    for (ll i = 0; i < g.bh; ++i) {
      for (ll j = 0; j < g.bw; ++j) {
        const ll off = ((ni * g.cch + cl) * g.rows + i * g.th * g.sh + r * g.dh) * g.cols + j * g.tw * g.sw + s * g.dw;
        put(o, "      v = sx[%lld];", off);
        for (ll kk = 0; kk < kn; ++kk) {
          const ll wi = (((k0 + kk) * g.c + c) * g.r + r) * g.s + s;
          const ll a = acc_id(g, kn, ni, i, j, kk);
          put(o, " a%lld = __fmaf_rn(v, %s, a%lld);", a, float_literal(tw.bits[wi]).c_str(), a);
        }
        o += "\n";
      }
    }
  }
}

void emit_stores(std::string& o, const Geometry& g, ll k0, ll kn) {
  o += "      // Epilogue and stores; threads past the output's edge only helped stage the input.\n";
  for (ll ni = 0; ni < g.bn; ++ni) {
    for (ll i = 0; i < g.bh; ++i) {
      for (ll j = 0; j < g.bw; ++j) {
        std::string cond;
        if (g.n % g.bn) cond += detail::str_cat(" && n0 + ", ni, " < ", g.n);
        if (g.oh % (g.th * g.bh)) cond += detail::str_cat(" && oh0 + ", i * g.th, " < ", g.oh);
        if (g.ow % (g.tw * g.bw)) cond += detail::str_cat(" && ow0 + ", j * g.tw, " < ", g.ow);
        if (cond.empty()) o += "      {\n";
        else put(o, "      if (%s) {\n", cond.c_str() + 4);  // past the leading " && "
        put(o, "        const int o = (((n0 + %lld) * %lld + %lld) * %lld + oh0 + %lld) * %lld + ow0 + %lld;\n",
            ni, g.k, k0, g.oh, i * g.th, g.ow, j * g.tw);
        for (ll kk = 0; kk < kn; ++kk) {
          const ll step = kk * g.oh * g.ow;
          put(o, "        y[o + %lld] = finish(a%lld, bias, residual, %lld, o + %lld);\n", step,
              acc_id(g, kn, ni, i, j, kk), k0 + kk, step);
        }
        o += "      }\n";
      }
    }
  }
}

// The code of channel group `grp`: output channels [k0, k0 + kn).
void emit_group(std::string& o, const Geometry& g, const TemplateWeights& tw, ll grp) {
  const ll k0 = grp * g.bk, kn = std::min(g.bk, g.k - k0);
  put(o, "    case %lld: {  // output channels [%lld, %lld)\n", grp, k0, k0 + kn);
  const ll accs = g.bn * g.bh * g.bw * kn;
  o += "      float v";
  for (ll a = 0; a < accs; ++a) put(o, ", a%lld = 0.0f", a);
  o += ";\n";
  ll since_split = 0;
  for (ll c0 = 0; c0 < g.c; c0 += g.cch) {
    const ll cn = std::min(g.cch, g.c - c0);
    put(o, "      // Input channels [%lld, %lld): stage them, then multiply.\n", c0, c0 + cn);
    if (c0 > 0) o += "      __syncthreads();  // every thread is done with the previous stage\n";
    put(o, "      stage_input(x, tile, n0, %lld, %lld, ih0, iw0, tid);\n", c0, cn);
    o += "      __syncthreads();\n";
    for (ll c = c0; c < c0 + cn; ++c) {
      for (ll r = 0; r < g.r; ++r) {
        if (since_split >= kFmasPerBlock) {  // see emit_opaque_false
          o += "      if (opaque_false()) return;\n";
          since_split = 0;
        }
        for (ll s = 0; s < g.s; ++s) emit_step(o, g, tw, k0, kn, c, c - c0, r, s);
        since_split += g.s * kn * g.bn * g.bh * g.bw;
      }
    }
  }
  emit_stores(o, g, k0, kn);
  o += "      break;\n    }\n";
}

// The kernel computing channel groups [g0, g1) (all of them: the template; a range: one part).
void emit_kernel(std::string& o, const std::string& entry, const Geometry& g, const TemplateWeights& tw, ll g0,
                 ll g1) {
  put(o, "extern \"C\" __global__ void __launch_bounds__(%lld) %s(\n", g.nt, entry.c_str());
  o += "    const float* __restrict__ x, const float* __restrict__ bias, const float* __restrict__ residual,\n"
       "    float* __restrict__ y) {\n";
  put(o, "  __shared__ float tile[%lld];  // [image][channel of the stage][row][column]\n",
      g.bn * g.cch * g.rows * g.cols);
  put(o, "  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * %lld + tx;\n", g.tw);
  o += "  // This thread's outputs: images n0 + ni, rows oh0 + i*threads_h, columns ow0 + j*threads_w.\n";
  put(o, "  const int n0 = blockIdx.z * %lld;\n", g.bn);
  put(o, "  const int oh0 = (blockIdx.x / %lld) * %lld + ty, ow0 = (blockIdx.x %% %lld) * %lld + tx;\n",
      g.tiles_w, g.th * g.bh, g.tiles_w, g.tw * g.bw);
  o += "  // Input origin of the block's tile (negative inside the padding).\n";
  put(o, "  const int ih0 = (oh0 - ty) * %lld - %lld, iw0 = (ow0 - tx) * %lld - %lld;\n", g.sh, g.ph, g.sw,
      g.pw);
  o += "  // This thread's first input in the tile; all others are at compile-time offsets from it.\n";
  put(o, "  const float* sx = tile + ty * %lld + tx * %lld;\n", (g.sh * g.cols), g.sw);
  o += "  switch (blockIdx.y) {\n";
  for (ll grp = g0; grp < g1; ++grp) emit_group(o, g, tw, grp);
  o += "    default:\n      break;\n  }\n}\n";
}

// A freshly compiled template must carry every literal and no local memory.
void check_template_ptx(const TemplateKernel& t) {
  if (t.ptx.find(".local") != std::string::npos) {
    DNNF_THROW("sparse conv template ", t.entry, ": the PTX uses local memory (weights or accumulators spilled "
               "before ptxas; use a smaller tile)");
  }
  if (t.ptx.find(".entry " + t.entry + "(") == std::string::npos) {
    DNNF_THROW("sparse conv template: the PTX lacks the entry ", t.entry);
  }
  std::vector<char> seen(t.weights.bits.size(), 0);
  for_each_f32_immediate(t.ptx, [&](uint32_t bits) {
    auto it = t.weights.index.find(bits);
    if (it != t.weights.index.end()) seen[static_cast<size_t>(it->second)] = 1;
  });
  const auto missing = std::count(seen.begin(), seen.end(), 0);
  if (missing) {
    DNNF_THROW("sparse conv template ", t.entry, ": ", missing, " of ", seen.size(),
               " template weights have no immediate in the PTX (the compiler folded them)");
  }
}

std::string cache_trailer(const std::string& ptx) {
  return detail::str_cat(kCacheTrailer, "size=", ptx.size(), " fnv=", hex64(fnv1a(ptx)), "\n");
}

// The PTX of a cache file, or "" when the file is absent, short or corrupt.
std::string read_cached(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t at = text.rfind(kCacheTrailer);
  if (at == std::string::npos) return "";
  std::string ptx = text.substr(0, at);
  return cache_trailer(ptx) == text.substr(at) ? ptx : "";
}

void make_dirs(const std::string& dir) {
  for (size_t p = 1; p <= dir.size(); ++p) {
    if (p != dir.size() && dir[p] != '/') continue;
    const std::string part = dir.substr(0, p);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      DNNF_THROW("sparse conv template cache: cannot create ", part, ": ", std::strerror(errno));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    DNNF_THROW("sparse conv template cache: ", dir, " is not a directory");
  }
}

// Publishes the file by rename, so readers see the old file or the whole new one.
void write_cached(const std::string& path, const std::string& ptx) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = detail::str_cat(path, ".tmp.", ::getpid(), ".", counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << ptx << cache_trailer(ptx);
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      DNNF_THROW("sparse conv template cache: cannot write ", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    DNNF_THROW("sparse conv template cache: cannot rename ", tmp, " to ", path, ": ", std::strerror(e));
  }
}

}  // namespace

bool is_template_literal(uint32_t bits) {
  const uint32_t exponent = (bits >> 23) & 0xffu;
  return exponent != 0 && exponent != 0xffu && (bits & 1u);
}

TemplateWeights template_weights(const ConvShape& shape) {
  shape.validate();
  const int64_t count = shape.weight_count();
  TemplateWeights tw;
  tw.bits.reserve(static_cast<size_t>(count));
  tw.index.reserve(static_cast<size_t>(count));
  std::mt19937_64 rng(fnv1a(shape.key(), fnv1a(kTemplateVersion)));
  while (static_cast<int64_t>(tw.bits.size()) < count) {
    const uint64_t draw = rng();
    // Magnitudes in [1/8, 16): ordinary weights, far from denormals and overflow.
    const uint32_t exponent = 124u + static_cast<uint32_t>(draw % 7);
    const uint32_t mantissa = static_cast<uint32_t>(draw >> 8) & 0x7fffffu;
    const uint32_t bits = (static_cast<uint32_t>(draw >> 40) & 1u) << 31 | exponent << 23 | mantissa | 1u;
    if (tw.index.emplace(bits, static_cast<int64_t>(tw.bits.size())).second) tw.bits.push_back(bits);
  }
  return tw;
}

std::string template_entry_name(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue) {
  return "dnnf_sparse_conv_" + hex64(fnv1a(shape.key() + "|" + tile.key() + "|" + epilogue.key() + "|" + kTemplateVersion));
}

namespace {

// The CUDA C of a kernel `entry` over channel groups [g0, g1).
std::string source_for_groups(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue,
                              const TemplateWeights& tw, const std::string& entry, ll g0, ll g1) {
  const Geometry g = geometry(shape, tile);
  std::string kernel;
  kernel.reserve(static_cast<size_t>((g1 - g0) * g.bk * g.c * g.r * g.s * tile.fmas_per_weight() * 40 + 8192));
  emit_kernel(kernel, entry, g, tw, g0, g1);
  std::string o;
  emit_header(o, tile, epilogue, g);
  emit_stage_function(o, g);
  if (kernel.find("opaque_false()") != std::string::npos) emit_opaque_false(o);  // NVRTC warns when unused
  emit_finish_function(o, epilogue);
  return o + kernel;
}

// FMAs in the code of channel group `grp`.
ll group_fmas(const Geometry& g, ll grp) {
  return std::min(g.bk, g.k - grp * g.bk) * g.c * g.r * g.s * g.bn * g.bh * g.bw;
}

// Consecutive channel groups in parts of at most kPartFmas FMAs (a larger group is a part alone).
std::vector<std::pair<ll, ll>> part_ranges(const Geometry& g) {
  std::vector<std::pair<ll, ll>> parts;
  ll begin = 0, fmas = 0;
  for (ll grp = 0; grp < g.groups; ++grp) {
    if (grp > begin && fmas + group_fmas(g, grp) > kPartFmas) {
      parts.emplace_back(begin, grp);
      begin = grp, fmas = 0;
    }
    fmas += group_fmas(g, grp);
  }
  parts.emplace_back(begin, g.groups);
  return parts;
}

}  // namespace

std::string template_source(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue,
                            TemplateWeights* weights) {
  validate_tile(shape, tile);
  TemplateWeights tw = template_weights(shape);
  const Geometry g = geometry(shape, tile);
  std::string o = source_for_groups(shape, tile, epilogue, tw, template_entry_name(shape, tile, epilogue), 0, g.groups);
  if (weights) *weights = std::move(tw);
  return o;
}

std::vector<std::string> template_compile_options() {
  // -fmad=false: the epilogue's adds stay adds, so the only FMAs are the template's own.
  return {"--gpu-architecture=compute_80", "-std=c++17", "--fmad=false"};
}

namespace {

// ---- Merging the PTX of several programs into one entry ----------------------------------
//
// Each part is a complete kernel over a range of channel groups, with the ABI's four parameters.
// Its body moves into the final entry under a label; a dispatch on %ctaid.y at the top jumps to
// the part owning the block's group. What two parts could both name is renamed per part: the
// registers they declare (%r12 -> %q3_r12), their labels ($L__BB0_2 -> $L__q3_BB0_2), their
// parameter names (the final entry's) and their one shared array (one dnnf_tile, as large as the
// largest). Any other module-level or function-level declaration is refused.

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool starts_with(const std::string& s, const char* p) { return s.compare(0, std::strlen(p), p) == 0; }

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

struct PartPtx {
  std::string header;      // .version, .target, .address_size
  std::string directives;  // between the parameter list and the body (.maxntid, ...)
  std::string decls;       // its .reg declarations, renamed
  std::string body;        // its instructions and labels, renamed
  long long shared_bytes = 0, shared_align = 4;
};

// Registers a .reg line declares: "%r<45>" gives the prefix "r", "%f1" the name "f1".
void declared_registers(const std::string& line, std::set<std::string>* prefixes, std::set<std::string>* names) {
  for (size_t p = line.find('%'); p != std::string::npos; p = line.find('%', p + 1)) {
    size_t q = p + 1;
    while (q < line.size() && ident_char(line[q])) ++q;
    const std::string id = line.substr(p + 1, q - p - 1);
    if (q < line.size() && line[q] == '<') prefixes->insert(id);
    else names->insert(id);
  }
}

// Renames the part's registers and labels in one line.
std::string rename_line(const std::string& line, const std::string& tag, const std::set<std::string>& prefixes,
                        const std::set<std::string>& names) {
  std::string out;
  out.reserve(line.size() + 16);
  for (size_t p = 0; p < line.size();) {
    const char c = line[p];
    if (c != '%' && c != '$') {
      out += line[p++];
      continue;
    }
    size_t q = p + 1;
    while (q < line.size() && ident_char(line[q])) ++q;
    const std::string id = line.substr(p + 1, q - p - 1);
    size_t digits = id.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(id[digits - 1]))) --digits;
    if (c == '$') {
      if (!starts_with(id, "L__")) DNNF_THROW("sparse conv template: unexpected PTX label $", id);
      out += "$L__" + tag + id.substr(3);
    } else if (names.count(id) || prefixes.count(id.substr(0, digits))) {
      out += "%" + tag + id;
    } else {
      out += line.substr(p, q - p);  // a special register (%tid.x, ...)
    }
    p = q;
  }
  return out;
}

// Parses `.shared .align A .b8 NAME[BYTES];` into the part; returns NAME.
std::string take_shared(const std::string& line, PartPtx* part) {
  char name[256];
  long long align = 0, bytes = 0;
  if (std::sscanf(line.c_str(), ".shared .align %lld .b8 %255[A-Za-z0-9_$][%lld];", &align, name, &bytes) != 3) {
    DNNF_THROW("sparse conv template: unexpected shared declaration in the PTX: ", line);
  }
  part->shared_align = std::max(part->shared_align, align);
  part->shared_bytes = std::max(part->shared_bytes, bytes);
  return name;
}

// Splits one part's PTX (entry `part_entry`) into its pieces, renamed with tag "q<index>_".
PartPtx split_part(const std::string& ptx, const std::string& part_entry, const std::string& entry, size_t index) {
  const std::vector<std::string> lines = split_lines(ptx);
  PartPtx part;
  size_t i = 0;
  for (; i < lines.size() && !starts_with(trimmed(lines[i]), ".visible .entry "); ++i) {
    const std::string t = trimmed(lines[i]);
    if (starts_with(t, ".version") || starts_with(t, ".target") || starts_with(t, ".address_size")) part.header += t + "\n";
    else if (!t.empty() && !starts_with(t, "//")) DNNF_THROW("sparse conv template: unexpected PTX declaration: ", t);
  }
  if (i == lines.size() || trimmed(lines[i]) != ".visible .entry " + part_entry + "(") {
    DNNF_THROW("sparse conv template: the PTX of part ", index, " lacks its entry ", part_entry);
  }
  while (i < lines.size() && trimmed(lines[i]) != ")") ++i;
  for (++i; i < lines.size() && trimmed(lines[i]) != "{"; ++i) part.directives += trimmed(lines[i]) + "\n";
  size_t end = lines.size();
  while (end > i && trimmed(lines[end - 1]).empty()) --end;
  if (i >= end || trimmed(lines[end - 1]) != "}") DNNF_THROW("sparse conv template: malformed PTX of part ", index);
  std::set<std::string> prefixes, names;
  std::string shared_name;
  std::vector<std::string> body;
  for (size_t k = i + 1; k + 1 < end; ++k) {
    std::string line = lines[k];
    const std::string t = trimmed(line);
    if (starts_with(t, ".reg ")) declared_registers(t, &prefixes, &names);
    else if (starts_with(t, ".shared ")) { shared_name = take_shared(t, &part); continue; }
    else if (starts_with(t, ".") && !starts_with(t, ".pragma")) DNNF_THROW("sparse conv template: unexpected PTX: ", t);
    replace_all(line, part_entry + "_param_", entry + "_param_");
    if (!shared_name.empty()) replace_all(line, shared_name, "dnnf_tile");
    body.push_back(line);
  }
  const std::string tag = "q" + std::to_string(index) + "_";
  for (const auto& line : body) {
    (starts_with(trimmed(line), ".reg ") ? part.decls : part.body) += rename_line(line, tag, prefixes, names) + "\n";
  }
  return part;
}

// One entry over all parts; part p owns channel groups [first[p], first[p + 1]).
std::string merge_parts(const std::vector<PartPtx>& parts, const std::vector<long long>& first, const std::string& entry) {
  long long shared = 0, align = 4;
  for (const auto& p : parts) {
    if (p.header != parts[0].header || p.directives != parts[0].directives) {
      DNNF_THROW("sparse conv template: the parts' PTX headers differ");
    }
    shared = std::max(shared, p.shared_bytes), align = std::max(align, p.shared_align);
  }
  std::string o = parts[0].header + "\n.visible .entry " + entry + "(\n";
  for (int i = 0; i < 4; ++i) o += detail::str_cat("\t.param .u64 ", entry, "_param_", i, i < 3 ? ",\n" : "\n");
  o += ")\n" + parts[0].directives + "{\n\t.reg .pred \t%dnnf_p;\n\t.reg .b32 \t%dnnf_gy;\n";
  if (shared) o += detail::str_cat("\t.shared .align ", align, " .b8 dnnf_tile[", shared, "];\n");
  for (const auto& p : parts) o += p.decls;
  o += "\t// Dispatch: the part that owns this block's channel group (blockIdx.y).\n";
  o += "\tmov.u32 \t%dnnf_gy, %ctaid.y;\n";
  for (size_t p = 0; p + 1 < parts.size(); ++p) {
    o += detail::str_cat("\tsetp.lt.u32 \t%dnnf_p, %dnnf_gy, ", first[p + 1], ";\n\t@%dnnf_p bra \t$dnnf_part", p, ";\n");
  }
  o += detail::str_cat("\tbra.uni \t$dnnf_part", parts.size() - 1, ";\n");
  for (size_t p = 0; p < parts.size(); ++p) {
    o += detail::str_cat("$dnnf_part", p, ":\n") + parts[p].body + "\tret;\n";
  }
  return o + "}\n";
}

// NVRTC on every part, in parallel (NVRTC compiles separate programs concurrently); at most
// kMaxCompileThreads at once, as each program holds a few hundred MB while it compiles.
std::vector<std::string> compile_parts(const std::vector<std::string>& sources, const std::vector<std::string>& names) {
  std::vector<std::string> ptx(sources.size());
  std::vector<std::exception_ptr> errors(sources.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < sources.size();) {
      try {
        ptx[i] = compile_cuda_to_ptx(sources[i], names[i] + ".cu", template_compile_options()).ptx;
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>({sources.size(), kMaxCompileThreads,
                                           std::max<size_t>(1, std::thread::hardware_concurrency())});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return ptx;
}

// The NVRTC programs of a template: one when it is small, else one per part (channel groups
// [first[p], first[p + 1])), each a kernel named names[p].
struct Programs {
  std::vector<std::string> sources, names;
  std::vector<long long> first;
};

Programs programs(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue, const TemplateWeights& tw,
                  const std::string& entry) {
  const auto ranges = part_ranges(geometry(shape, tile));
  Programs p;
  for (size_t i = 0; i < ranges.size(); ++i) {
    p.names.push_back(ranges.size() == 1 ? entry : entry + "_part" + std::to_string(i));
    p.sources.push_back(source_for_groups(shape, tile, epilogue, tw, p.names.back(), ranges[i].first, ranges[i].second));
    p.first.push_back(ranges[i].first);
  }
  return p;
}

// What the cached PTX depends on: every program's text, the options and the merge.
std::string cache_key(const Programs& p) {
  uint64_t h = fnv1a(kTemplateVersion);
  for (const auto& s : p.sources) h = fnv1a(s, h);
  for (const auto& opt : template_compile_options()) h = fnv1a(opt, h);
  return hex64(h);
}

std::string compile_template(const Programs& p, const std::string& entry) {
  const std::vector<std::string> ptx = compile_parts(p.sources, p.names);
  if (ptx.size() == 1) return ptx[0];
  std::vector<PartPtx> parts;
  for (size_t i = 0; i < ptx.size(); ++i) parts.push_back(split_part(ptx[i], p.names[i], entry, i));
  return merge_parts(parts, p.first, entry);
}

}  // namespace

TemplateKernel make_template(const ConvShape& shape, const ConvTile& tile, const Epilogue& epilogue,
                             const std::string& cache_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  validate_tile(shape, tile);
  const int64_t fmas = shape.weight_count() * tile.fmas_per_weight();
  if (fmas > kMaxTemplateFmas) {
    DNNF_THROW_AS(UnsupportedOp, "sparse conv: the template of ", shape.key(), " with tile ", tile.key(), " needs ",
                  fmas, " FMAs (k*c*r*s*bn*bh*bw); at most ", kMaxTemplateFmas,
                  " are generated (NVRTC time grows with it)");
  }
  TemplateKernel t;
  t.shape = shape, t.tile = tile, t.epilogue = epilogue;
  t.weights = template_weights(shape);
  t.entry = template_entry_name(shape, tile, epilogue);
  t.launch = launch_dims(shape, tile);
  t.outputs_per_thread = tile.outputs_per_thread();
  t.fmas_per_weight = tile.fmas_per_weight();
  const Programs progs = programs(shape, tile, epilogue, t.weights, t.entry);
  t.nvrtc_programs = static_cast<int>(progs.sources.size());
  if (!cache_dir.empty()) {
    make_dirs(cache_dir);
    t.cache_path = cache_dir + "/" + t.entry + "_" + cache_key(progs) + ".ptx";
    t.ptx = read_cached(t.cache_path);
    t.cache_hit = !t.ptx.empty();
  }
  if (!t.cache_hit) {
    const auto c0 = std::chrono::steady_clock::now();
    t.ptx = compile_template(progs, t.entry);
    t.nvrtc_seconds = seconds_since(c0);
    check_template_ptx(t);
    if (!t.cache_path.empty()) write_cached(t.cache_path, t.ptx);
  }
  t.seconds = seconds_since(t0);
  return t;
}

}  // namespace dnnfusion::cuda
