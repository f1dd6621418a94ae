// The sparse PTX convolution's template and rewrite (csrc/target/cuda/sparse_conv: conv_spec,
// conv_template, nvrtc_compiler, ptx_rewrite): shape and tile validation, the template's PTX
// structure (one distinct immediate per weight, every weight present, no local memory, FMA count
// = weights x outputs per weight) over 1x1/3x3/5x5, strides, dilations, paddings, ragged channel
// counts and several channel groups, the rewrite at sparsities 0..1 (FMA count = nonzeros x
// outputs per weight, no template literal left, ptxas assembles it), its refusals, the on-disk
// cache (hit, corrupt file regenerated) and a missing NVRTC.
//
// Needs NVRTC (DNNFUSION_NVRTC=<path of libnvrtc.so.13>, or one the loader finds): without it the
// tests that compile skip, saying why. ptxas: $DNNFUSION_PTXAS or /usr/local/bin/ptxas; the
// assembling tests skip without it. Numerical correctness of the kernels is checked elsewhere (the
// PTX interpreter tests): here the PTX is checked structurally.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "kernel_test_util.h"
#include "target/cuda/sparse_conv/conv_spec.h"
#include "target/cuda/sparse_conv/conv_template.h"
#include "target/cuda/sparse_conv/nvrtc_compiler.h"
#include "target/cuda/sparse_conv/ptx_rewrite.h"
#include "test_env_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using dnnfusion::Error;
using dnnfusion::InvalidInput;
using dnnfusion::TargetUnavailable;
using dnnfusion::UnsupportedOp;
using dnnfusion::testing::seed_note;
using dnnfusion::testing::test_seed;
using dnnfusion::test_util::outcome_of;
using namespace dnnfusion::cuda;

ConvShape shape_of(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s, int64_t stride,
                   int64_t pad, int64_t dil) {
  ConvShape sh;
  sh.n = n, sh.c = c, sh.h = h, sh.w = w, sh.k = k, sh.r = r, sh.s = s;
  sh.stride_h = sh.stride_w = stride;
  sh.pad_h = sh.pad_w = pad;
  sh.dil_h = sh.dil_w = dil;
  return sh;
}

// This file's temporary directories: /tmp/dnnf_sparse_conv_test_XXXXXX.
struct TempDir : dnnfusion::test_util::TempDir {
  TempDir() : dnnfusion::test_util::TempDir("/tmp/dnnf_sparse_conv_test_") {}
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// "" when NVRTC loads, else why not (the test then skips with it).
const std::string& nvrtc_missing() {
  static const std::string why = [] {
    try {
      nvrtc_info();
      return std::string();
    } catch (const TargetUnavailable& e) {
      return std::string("NVRTC not available (set DNNFUSION_NVRTC): ") + e.what();
    }
  }();
  return why;
}

#define REQUIRE_NVRTC()                                           \
  do {                                                            \
    if (!nvrtc_missing().empty()) GTEST_SKIP() << nvrtc_missing(); \
  } while (0)

// Templates compiled once per process (NVRTC is the slow step), keyed by shape, tile, epilogue.
const TemplateKernel& template_for(const ConvShape& s, const ConvTile& t, const Epilogue& e) {
  static std::map<std::string, TemplateKernel> memo;
  const std::string key = s.key() + "|" + t.key() + "|" + e.key();
  auto it = memo.find(key);
  if (it == memo.end()) it = memo.emplace(key, make_template(s, t, e, "")).first;
  return it->second;
}

// --- PTX inspection -------------------------------------------------------------------------

struct PtxCounts {
  int64_t fma = 0;                          // fma.rn.f32 instructions
  std::map<uint32_t, int64_t> literal_uses;  // template literal -> occurrences
  std::set<uint32_t> immediates;             // every f32 immediate
};

PtxCounts count_ptx(const std::string& ptx, const TemplateWeights& tw) {
  PtxCounts c;
  std::istringstream in(ptx);
  for (std::string line; std::getline(in, line);) {
    const size_t p = line.find_first_not_of(" \t");
    if (p != std::string::npos && line.compare(p, 11, "fma.rn.f32 ") == 0) ++c.fma;
    for_each_f32_immediate(line, [&](uint32_t bits) {
      c.immediates.insert(bits);
      if (tw.index.count(bits)) ++c.literal_uses[bits];
    });
  }
  return c;
}

// A bit pattern as a PTX f32 immediate.
std::string hex_bits(uint32_t b) {
  char s[16];
  std::snprintf(s, sizeof s, "0f%08X", b);
  return s;
}

// ptxas to use, "" if none.
std::string ptxas_path() {
  const char* env = std::getenv("DNNFUSION_PTXAS");
  const std::string p = env && *env ? env : "/usr/local/bin/ptxas";
  return ::access(p.c_str(), X_OK) == 0 ? p : "";
}

// Runs argv (argv[0] looked up on PATH) with stdout and stderr into `log`; the exit status.
int run(const std::vector<std::string>& argv, const std::string& log, char** envp = environ) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ptxas -arch=sm_80 on the text: success, or its output.
::testing::AssertionResult assembles(const std::string& ptx) {
  TempDir dir;
  const std::string src = (dir.path() / "k.ptx").string(), log = (dir.path() / "log").string();
  std::ofstream(src, std::ios::binary) << ptx;
  const int rc = run({ptxas_path(), "-arch=sm_80", src, "-o", (dir.path() / "k.cubin").string()}, log);
  if (rc == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "ptxas exit " << rc << ":\n" << slurp(log).substr(0, 2000);
}

// Weights with exactly round(sparsity * count) zeros at random places, the rest uniform in
// [-1, -0.05] u [0.05, 1] with the lowest mantissa bit clear, so that no real weight equals a
// template literal (whose lowest bit is set) and any literal left in the PTX is a leftover.
std::vector<float> sparse_weights(std::mt19937_64& rng, int64_t count, double sparsity) {
  std::vector<float> w(static_cast<size_t>(count));
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  for (auto& x : w) {
    float v = (rng() & 1 ? 1.0f : -1.0f) * u(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits &= ~1u;
    std::memcpy(&x, &bits, 4);
  }
  std::vector<size_t> order(w.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const auto zeros = static_cast<size_t>(std::llround(sparsity * static_cast<double>(count)));
  for (size_t i = 0; i < zeros; ++i) w[order[i]] = 0.0f;
  return w;
}

// --- the cases ------------------------------------------------------------------------------

struct Case {
  const char* name;
  ConvShape shape;
  ConvTile tile;
  Epilogue epi;
};

ConvTile tile_of(const ConvShape& s, int bn, int bh, int bw, int bk, int th, int tw, int cc) {
  ConvTile t = default_tile(s);
  t.bn = bn, t.bh = bh, t.bw = bw, t.bk = bk, t.threads_h = th, t.threads_w = tw, t.c_chunk = cc;
  return t;
}

Epilogue epi_of(bool bias, bool residual, Activation act) {
  Epilogue e;
  e.bias = bias, e.residual = residual, e.act = act;
  return e;
}

std::vector<Case> structure_cases() {
  std::vector<Case> v;
  const ConvShape s1 = shape_of(1, 5, 5, 5, 7, 1, 1, 1, 0, 1);    // 1x1
  v.push_back({"1x1", s1, default_tile(s1), epi_of(false, false, Activation::none)});
  const ConvShape s3 = shape_of(1, 3, 6, 6, 5, 3, 3, 1, 1, 1);    // 3x3 pad 1
  v.push_back({"3x3_pad1", s3, default_tile(s3), epi_of(true, false, Activation::relu)});
  const ConvShape s5 = shape_of(1, 2, 7, 7, 3, 5, 5, 1, 2, 1);    // 5x5 pad 2
  v.push_back({"5x5_pad2", s5, default_tile(s5), epi_of(true, true, Activation::relu6)});
  const ConvShape st2 = shape_of(1, 3, 9, 9, 4, 3, 3, 2, 1, 1);   // stride 2
  v.push_back({"stride2", st2, default_tile(st2), epi_of(false, true, Activation::relu)});
  const ConvShape d2 = shape_of(1, 2, 9, 9, 3, 3, 3, 1, 2, 2);    // dilation 2
  v.push_back({"dilation2", d2, default_tile(d2), epi_of(true, false, Activation::none)});
  const ConvShape p0 = shape_of(1, 2, 6, 7, 3, 3, 3, 1, 0, 1);    // padding 0, non-square
  v.push_back({"pad0", p0, default_tile(p0), epi_of(false, false, Activation::relu6)});
  // C not a multiple of c_chunk (3 stages: 2+2+1), K not a multiple of bk (groups 3+3+1).
  const ConvShape rg = shape_of(2, 5, 6, 6, 7, 3, 3, 1, 1, 1);
  v.push_back({"ragged_c_k", rg, tile_of(rg, 1, 1, 1, 3, 4, 4, 2), epi_of(true, true, Activation::relu)});
  // Several outputs per thread and weight (bn=2 over n=3, bh=bw=2): each weight in 8 FMAs.
  const ConvShape mo = shape_of(3, 2, 7, 5, 3, 3, 3, 1, 1, 1);
  v.push_back({"multi_output", mo, tile_of(mo, 2, 2, 2, 2, 2, 2, 1), epi_of(true, false, Activation::relu)});
  // A block covering fewer channels than K: 4 groups of 2 on blockIdx.y.
  const ConvShape bkl = shape_of(1, 3, 5, 5, 8, 3, 3, 1, 1, 1);
  v.push_back({"bk_lt_k", bkl, tile_of(bkl, 1, 1, 1, 2, 4, 8, 3), epi_of(false, false, Activation::none)});
  // Large enough (5 groups of 2304 FMAs) to be compiled as 2 NVRTC programs and merged.
  const ConvShape big = shape_of(1, 32, 9, 9, 40, 3, 3, 1, 1, 1);
  v.push_back({"several_programs", big, tile_of(big, 1, 1, 1, 8, 4, 8, 16), epi_of(true, true, Activation::relu)});
  return v;
}

// ============================================================================================
// Validation

TEST(SparseConvSpec, ShapeValidationNamesTheField) {
  const ConvShape ok = shape_of(1, 3, 8, 8, 4, 3, 3, 1, 1, 1);
  EXPECT_NO_THROW(ok.validate());
  EXPECT_EQ(ok.out_h(), 8);
  EXPECT_EQ(ok.out_w(), 8);
  struct Bad {
    const char* field;
    ConvShape shape;
  };
  std::vector<Bad> bad;
  auto with = [&](const char* field, auto mutate) {
    ConvShape s = ok;
    mutate(s);
    bad.push_back({field, s});
  };
  with("n = 0", [](ConvShape& s) { s.n = 0; });
  with("c = -1", [](ConvShape& s) { s.c = -1; });
  with("h = 0", [](ConvShape& s) { s.h = 0; });
  with("k = 0", [](ConvShape& s) { s.k = 0; });
  with("r = 0", [](ConvShape& s) { s.r = 0; });
  with("stride_w = 0", [](ConvShape& s) { s.stride_w = 0; });
  with("pad_h = -1", [](ConvShape& s) { s.pad_h = -1; });
  with("dil_w = 0", [](ConvShape& s) { s.dil_w = 0; });
  with("output is empty", [](ConvShape& s) { s.r = 11; });
  with("output is empty", [](ConvShape& s) { s.dil_w = 5; s.pad_w = 0; });
  with("input (n*c*h*w)", [](ConvShape& s) { s.n = 1 << 16; s.c = 1 << 16; s.k = 1; });
  for (const auto& b : bad) {
    const std::string msg = outcome_of<InvalidInput>([&] { b.shape.validate(); });
    EXPECT_NE(msg.find(b.field), std::string::npos) << b.field << ": " << msg;
  }
  const std::string msg = outcome_of<InvalidInput>([] { shape_of(1, 3, 8, 8, 4, 3, 3, 0, 1, 1).validate(); });
  EXPECT_NE(msg.find("must be >= 1"), std::string::npos) << msg;  // says what is allowed
}

TEST(SparseConvSpec, TileValidationAndShrinking) {
  const ConvShape s = shape_of(1, 64, 56, 56, 64, 3, 3, 1, 1, 1);
  ConvTile t = default_tile(s);
  EXPECT_NO_THROW(validate_tile(s, t));
  EXPECT_EQ(t.fmas_per_weight(), 1);
  EXPECT_LE(tile_shared_bytes(s, t), 24 * 1024);
  ConvTile bad = t;
  bad.bk = 0;
  EXPECT_NE(outcome_of<InvalidInput>([&] { validate_tile(s, bad); }).find("bk = 0"), std::string::npos);
  bad = t;
  bad.threads_h = 64, bad.threads_w = 32;
  EXPECT_NE(outcome_of<InvalidInput>([&] { validate_tile(s, bad); }).find("1024"), std::string::npos);
  bad = t;
  bad.c_chunk = 64;  // 64 channels x 6 x 34 floats > 48 KB
  bad.threads_h = 8;
  EXPECT_NE(outcome_of<InvalidInput>([&] { validate_tile(s, bad); }).find("shared memory"), std::string::npos);
  // smaller(): bk, then bw, bh, bn halve; the minimal tile has no smaller one.
  ConvTile big = t;
  big.bk = 4, big.bw = 2, big.bh = 2, big.bn = 2;
  std::vector<std::string> seen;
  for (std::optional<ConvTile> cur = big; cur; cur = smaller(*cur)) seen.push_back(cur->key());
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen.back(), "n1h1w1k1_t" + std::to_string(t.threads_h) + "x" + std::to_string(t.threads_w) + "_cc" +
                             std::to_string(t.c_chunk));
}

TEST(SparseConvSpec, DefaultTileIsValidForManyShapes) {
  std::mt19937_64 rng(test_seed());
  for (int i = 0; i < 300; ++i) {
    const int64_t r = dnnfusion::testing::rand_int(rng, 1, 7), dil = dnnfusion::testing::rand_int(rng, 1, 3);
    const int64_t stride = dnnfusion::testing::rand_int(rng, 1, 4), pad = dnnfusion::testing::rand_int(rng, 0, 3);
    const int64_t h = dnnfusion::testing::rand_int(rng, dil * (r - 1) + 1, 300);
    const ConvShape s = shape_of(dnnfusion::testing::rand_int(rng, 1, 70), dnnfusion::testing::rand_int(rng, 1, 600), h,
                                 dnnfusion::testing::rand_int(rng, dil * (r - 1) + 1, 300),
                                 dnnfusion::testing::rand_int(rng, 1, 600), r, r, stride, pad, dil);
    if (std::string(outcome_of<InvalidInput>([&] { s.validate(); })) != "NO EXCEPTION") continue;
    const ConvTile t = default_tile(s);
    EXPECT_NO_THROW(validate_tile(s, t)) << s.key() << " " << t.key() << " " << seed_note();
    const LaunchDims d = launch_dims(s, t);
    // The grid covers every output exactly: blocks x outputs per block >= outputs.
    EXPECT_GE(int64_t{d.grid[0]} * t.threads() * t.bh * t.bw, s.out_h() * s.out_w()) << s.key();
    EXPECT_GE(int64_t{d.grid[1]} * t.bk, s.k);
    EXPECT_GE(int64_t{d.grid[2]} * t.bn, s.n);
    EXPECT_EQ(d.block[0] * d.block[1] * d.block[2], t.threads());
  }
}

TEST(SparseConvSpec, LaunchDims) {
  const ConvShape s = shape_of(3, 2, 7, 5, 3, 3, 3, 1, 1, 1);
  const ConvTile t = tile_of(s, 2, 2, 2, 2, 2, 2, 1);
  const LaunchDims d = launch_dims(s, t);
  EXPECT_EQ(d.grid[0], 2u * 2u);  // ceil(7/4) x ceil(5/4)
  EXPECT_EQ(d.grid[1], 2u);       // ceil(3/2) channel groups
  EXPECT_EQ(d.grid[2], 2u);       // ceil(3/2) image groups
  EXPECT_EQ(d.block[0], 2u);
  EXPECT_EQ(d.block[1], 2u);
  EXPECT_EQ(d.block[2], 1u);
  EXPECT_EQ(d.dynamic_shared_bytes, 0u);
}

// ============================================================================================
// Template text and literals (no NVRTC needed)

TEST(SparseConvTemplate, LiteralsAreDistinctDeterministicAndSafe) {
  const ConvShape s = shape_of(1, 16, 8, 8, 32, 3, 3, 1, 1, 1);
  const TemplateWeights a = template_weights(s), b = template_weights(s);
  ASSERT_EQ(a.bits.size(), static_cast<size_t>(s.weight_count()));
  EXPECT_EQ(a.bits, b.bits);  // the cache relies on it
  EXPECT_EQ(a.index.size(), a.bits.size());  // distinct
  for (size_t i = 0; i < a.bits.size(); ++i) {
    ASSERT_TRUE(is_template_literal(a.bits[i])) << i;
    ASSERT_EQ(a.index.at(a.bits[i]), static_cast<int64_t>(i));
    float f;
    std::memcpy(&f, &a.bits[i], 4);
    ASSERT_TRUE(std::isnormal(f)) << i;
  }
  // The kernel's other float constants can never be taken for a weight.
  for (float c : {0.0f, -0.0f, 6.0f, 1.0f, 0.5f}) {
    uint32_t bits;
    std::memcpy(&bits, &c, 4);
    EXPECT_FALSE(is_template_literal(bits)) << c;
  }
  EXPECT_NE(template_weights(shape_of(1, 16, 8, 8, 32, 3, 3, 2, 1, 1)).bits, a.bits);  // another shape
}

TEST(SparseConvTemplate, SourceHasTheAbiAndEpilogue) {
  const ConvShape s = shape_of(1, 3, 6, 6, 5, 3, 3, 1, 1, 1);
  const ConvTile t = default_tile(s);
  TemplateWeights tw;
  const std::string plain = template_source(s, t, epi_of(false, false, Activation::none), &tw);
  const std::string entry = template_entry_name(s, t, epi_of(false, false, Activation::none));
  EXPECT_NE(plain.find("extern \"C\" __global__ void __launch_bounds__(" + std::to_string(t.threads()) + ") " + entry +
                       "(\n    const float* __restrict__ x, const float* __restrict__ bias, const float* "
                       "__restrict__ residual,\n    float* __restrict__ y)"),
            std::string::npos)
      << plain.substr(0, 3000);
  EXPECT_EQ(plain.find("bias["), std::string::npos);  // an absent bias is never read
  EXPECT_EQ(plain.find("residual["), std::string::npos);
  const std::string full = template_source(s, t, epi_of(true, true, Activation::relu6), nullptr);
  EXPECT_NE(full.find("v = v + bias[k];"), std::string::npos);
  EXPECT_NE(full.find("v = v + residual[o];"), std::string::npos);
  EXPECT_NE(full.find("6.0f"), std::string::npos);
  EXPECT_NE(template_entry_name(s, t, epi_of(true, true, Activation::relu6)), entry);
  // Every weight's literal is in the text exactly as many times as it has FMAs.
  EXPECT_EQ(tw.bits.size(), static_cast<size_t>(s.weight_count()));
  EXPECT_EQ(plain.find("constexpr"), std::string::npos);  // no weight arrays (they go to local memory)
}

TEST(SparseConvTemplate, TooLargeTemplateIsRefused) {
  const ConvShape s = shape_of(1, 512, 14, 14, 512, 3, 3, 1, 1, 1);  // 2.4M weights
  const std::string msg =
      outcome_of<UnsupportedOp>([&] { make_template(s, default_tile(s), Epilogue{}, ""); });
  EXPECT_NE(msg.find("FMAs"), std::string::npos) << msg;
}

// ============================================================================================
// Template PTX structure (NVRTC)

TEST(SparseConvTemplate, PtxHasOneImmediatePerWeightAndNoLocalMemory) {
  REQUIRE_NVRTC();
  for (const Case& c : structure_cases()) {
    SCOPED_TRACE(std::string(c.name) + " " + c.shape.key() + " " + c.tile.key() + " " + c.epi.key());
    const TemplateKernel& t = template_for(c.shape, c.tile, c.epi);
    const int64_t weights = c.shape.weight_count();
    EXPECT_EQ(t.fmas_per_weight, c.tile.fmas_per_weight());
    EXPECT_EQ(t.outputs_per_thread, c.tile.outputs_per_thread());
    EXPECT_EQ(t.ptx.find(".local"), std::string::npos);
    EXPECT_NE(t.ptx.find(".entry " + t.entry + "("), std::string::npos);
    EXPECT_NE(t.ptx.find(".target sm_80"), std::string::npos);
    const PtxCounts n = count_ptx(t.ptx, t.weights);
    EXPECT_EQ(static_cast<int64_t>(n.literal_uses.size()), weights);  // each weight has its immediate
    EXPECT_EQ(n.fma, weights * t.fmas_per_weight);
    for (const auto& [bits, uses] : n.literal_uses) {
      // A literal is either in each of its FMAs or in one mov feeding them.
      ASSERT_TRUE(uses == 1 || uses == t.fmas_per_weight) << std::hex << bits << " used " << uses;
    }
    const LaunchDims d = launch_dims(c.shape, c.tile);
    EXPECT_EQ(std::memcmp(&d, &t.launch, sizeof d), 0);
    EXPECT_FALSE(t.cache_hit);
    EXPECT_GT(t.nvrtc_seconds, 0.0);
    EXPECT_EQ(t.nvrtc_programs, std::string(c.name) == "several_programs" ? 2 : 1);
  }
}

TEST(SparseConvTemplate, CompilesWithoutWarnings) {
  REQUIRE_NVRTC();
  const ConvShape big = shape_of(1, 8, 12, 12, 16, 3, 3, 1, 1, 1);  // long enough to be split in blocks
  for (const Case& c : {structure_cases()[0], Case{"split", big, default_tile(big), epi_of(true, true, Activation::relu6)}}) {
    const std::string src = template_source(c.shape, c.tile, c.epi, nullptr);
    const PtxCompileResult r = compile_cuda_to_ptx(src, "t.cu", template_compile_options());
    EXPECT_EQ(r.log, "") << c.name;
    EXPECT_EQ(std::string(c.name) == "split", src.find("opaque_false()") != std::string::npos) << c.name;
  }
}

TEST(SparseConvTemplate, PtxAssembles) {
  REQUIRE_NVRTC();
  if (ptxas_path().empty()) GTEST_SKIP() << "no ptxas (set DNNFUSION_PTXAS)";
  for (const Case& c : structure_cases()) {
    const TemplateKernel& t = template_for(c.shape, c.tile, c.epi);
    EXPECT_TRUE(assembles(t.ptx)) << c.name;
  }
}

// ============================================================================================
// Rewrite

// --- hand-written PTX: the register map, the mov fallback, materialized immediates ----------

// A one-thread kernel over a 1x1x1x3 weight (k=1, c=1, r=1, s=3) whose PTX we write ourselves.
TemplateKernel handwritten(const std::string& body) {
  TemplateKernel t;
  t.shape = shape_of(1, 1, 1, 3, 1, 1, 3, 1, 0, 1);
  t.weights = template_weights(t.shape);
  t.entry = "k";
  t.fmas_per_weight = 1;
  std::string b = body;
  for (int i = 0; i < 3; ++i) {
    const std::string key = "W" + std::to_string(i);
    for (size_t p; (p = b.find(key)) != std::string::npos;) b.replace(p, 2, hex_bits(t.weights.bits[static_cast<size_t>(i)]));
  }
  t.ptx = ".version 9.0\n.target sm_80\n.address_size 64\n\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n"
          "\t.reg .pred \t%p<3>;\n\t.reg .f32 \t%f<20>;\n\t.reg .b64 \t%rd<4>;\n\n"
          "\tld.param.u64 \t%rd1, [k_param_0];\n\tcvta.to.global.u64 \t%rd2, %rd1;\n"
          "\tld.global.f32 \t%f1, [%rd2];\n\tld.global.f32 \t%f2, [%rd2+4];\n\tsetp.gt.f32 \t%p1, %f1, %f2;\n" +
          b + "\tret;\n\n}\n";
  return t;
}

// The rewrite of `w` over template `t`, checked against the weights.
void check_rewrite(const TemplateKernel& t, const std::vector<float>& w, const std::string& what) {
  SCOPED_TRACE(what);
  const RewriteResult r = rewrite_ptx(t, w.data());
  int64_t nonzero = 0, zero_channels = 0;
  const int64_t per_k = t.shape.c * t.shape.r * t.shape.s;
  for (int64_t k = 0; k < t.shape.k; ++k) {
    int64_t nz = 0;
    for (int64_t i = 0; i < per_k; ++i) nz += w[static_cast<size_t>(k * per_k + i)] != 0.0f;
    nonzero += nz;
    zero_channels += nz == 0;
  }
  EXPECT_EQ(r.nonzero_weights, nonzero);
  EXPECT_EQ(r.fma_kept, nonzero * t.fmas_per_weight);
  EXPECT_EQ(r.fma_kept + r.fma_deleted, t.shape.weight_count() * t.fmas_per_weight);
  EXPECT_EQ(r.outputs_all_zero, zero_channels * t.fmas_per_weight);
  const PtxCounts n = count_ptx(r.ptx, t.weights);
  EXPECT_EQ(n.fma, r.fma_kept);
  EXPECT_TRUE(n.literal_uses.empty()) << "template literals left in the PTX: " << n.literal_uses.size();
  for (float v : w) {
    if (v == 0.0f) continue;
    uint32_t vb;
    std::memcpy(&vb, &v, 4);
    ASSERT_TRUE(n.immediates.count(vb)) << "weight " << v << " missing from the PTX";
  }
  EXPECT_EQ(r.ptx.find(".local"), std::string::npos);
  EXPECT_NE(r.ptx.find(".entry " + t.entry + "("), std::string::npos);
}

TEST(SparseConvRewrite, FmaCountFollowsSparsity) {
  REQUIRE_NVRTC();
  std::mt19937_64 rng(test_seed());
  for (const Case& c : structure_cases()) {
    const TemplateKernel& t = template_for(c.shape, c.tile, c.epi);
    for (double sparsity : {0.0, 0.5, 0.9, 0.99, 1.0}) {
      const auto w = sparse_weights(rng, c.shape.weight_count(), sparsity);
      check_rewrite(t, w, std::string(c.name) + " sparsity " + std::to_string(sparsity) + " " + seed_note());
    }
    // Whole output channels pruned: those outputs become bias (or 0) stores.
    auto w = sparse_weights(rng, c.shape.weight_count(), 0.3);
    const int64_t per_k = c.shape.c * c.shape.r * c.shape.s;
    for (int64_t k = 0; k < c.shape.k; k += 2) std::fill_n(w.begin() + k * per_k, per_k, 0.0f);
    check_rewrite(t, w, std::string(c.name) + " even channels pruned " + seed_note());
  }
}

TEST(SparseConvRewrite, RewrittenPtxAssembles) {
  REQUIRE_NVRTC();
  if (ptxas_path().empty()) GTEST_SKIP() << "no ptxas (set DNNFUSION_PTXAS)";
  std::mt19937_64 rng(test_seed() + 1);
  for (const Case& c : structure_cases()) {
    const TemplateKernel& t = template_for(c.shape, c.tile, c.epi);
    for (double sparsity : {0.0, 0.5, 0.9, 0.99, 1.0}) {
      const auto w = sparse_weights(rng, c.shape.weight_count(), sparsity);
      EXPECT_TRUE(assembles(rewrite_ptx(t, w.data()).ptx)) << c.name << " sparsity " << sparsity << " " << seed_note();
    }
  }
}

TEST(SparseConvRewrite, NegativeZeroAndTinyWeights) {
  REQUIRE_NVRTC();
  const Case c = structure_cases()[1];
  const TemplateKernel& t = template_for(c.shape, c.tile, c.epi);
  std::vector<float> w(static_cast<size_t>(c.shape.weight_count()), 0.25f);
  w[0] = -0.0f;                        // a zero: deleted
  w[1] = std::numeric_limits<float>::denorm_min();  // not a zero: kept, as 0f00000001
  const RewriteResult r = rewrite_ptx(t, w.data());
  EXPECT_EQ(r.nonzero_weights, c.shape.weight_count() - 1);
  EXPECT_EQ(r.fma_kept, (c.shape.weight_count() - 1) * t.fmas_per_weight);
  EXPECT_NE(r.ptx.find("0f00000001"), std::string::npos);
}

TEST(SparseConvRewrite, BadWeightsAreInvalidInput) {
  const TemplateKernel t = handwritten(
      "\tfma.rn.f32 \t%f3, %f1, W0, 0f00000000;\n"
      "\tfma.rn.f32 \t%f4, %f1, W1, %f3;\n"
      "\tfma.rn.f32 \t%f5, %f1, W2, %f4;\n"
      "\tst.global.f32 \t[%rd2+8], %f5;\n");
  std::vector<float> w = {0.5f, std::nanf(""), 0.5f};
  std::string msg = outcome_of<InvalidInput>([&] { rewrite_ptx(t, w.data()); });
  EXPECT_NE(msg.find("weight 1 "), std::string::npos) << msg;
  w = {0.5f, 0.5f, -std::numeric_limits<float>::infinity()};
  msg = outcome_of<InvalidInput>([&] { rewrite_ptx(t, w.data()); });
  EXPECT_NE(msg.find("weight 2 "), std::string::npos) << msg;
  EXPECT_NE(outcome_of<InvalidInput>([&] { rewrite_ptx(t, nullptr); }), "NO EXCEPTION");
  w = {0.5f, 0.5f, 0.5f};
  EXPECT_EQ(rewrite_ptx(t, w.data()).fma_kept, 3);
}

// The template's PTX with its first line containing `needle` passed through `edit`.
template <typename F>
TemplateKernel edited(const TemplateKernel& t, const std::string& needle, F&& edit) {
  TemplateKernel e = t;
  const size_t at = t.ptx.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  if (at == std::string::npos) return e;
  const size_t begin = t.ptx.rfind('\n', at) + 1, end = t.ptx.find('\n', at);
  e.ptx = t.ptx.substr(0, begin) + edit(t.ptx.substr(begin, end - begin)) + t.ptx.substr(end);
  return e;
}

// The line with its opcode (the first word) replaced.
std::string with_opcode(const std::string& line, const std::string& opcode) {
  const size_t b = line.find_first_not_of(" \t"), e = line.find_first_of(" \t", b);
  return line.substr(0, b) + opcode + line.substr(e);
}

TEST(SparseConvRewrite, RefusesPtxItDoesNotUnderstand) {
  REQUIRE_NVRTC();
  const Case c = structure_cases()[1];
  const TemplateKernel& t = template_for(c.shape, c.tile, c.epi);
  const std::vector<float> w(static_cast<size_t>(c.shape.weight_count()), 0.0f);
  const std::string lit = hex_bits(t.weights.bits[5]);
  // A literal missing: its mov/FMA now carries another value.
  auto other_value = [&](std::string line) { return line.replace(line.find(lit), lit.size(), "0f3F800000"); };
  std::string msg = outcome_of<Error>([&] { rewrite_ptx(edited(t, lit, other_value), w.data()); });
  EXPECT_NE(msg.find("weight 5 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  // A literal in an instruction the rewriter does not handle.
  msg = outcome_of<Error>([&] {
    rewrite_ptx(edited(t, lit, [](const std::string& line) { return with_opcode(line, "mul.f32"); }), w.data());
  });
  EXPECT_NE(msg.find("refusing"), std::string::npos) << msg;
  // A literal as an FMA addend.
  auto addend_literal = [&](const std::string& line) { return line.substr(0, line.rfind(',') + 2) + lit + ";"; };
  msg = outcome_of<Error>([&] { rewrite_ptx(edited(t, "fma.rn.f32", addend_literal), w.data()); });
  EXPECT_NE(msg.find("refusing"), std::string::npos) << msg;
  // A weight's FMA (in the mov form or not) that is no FMA any more.
  const std::vector<float> ones(w.size(), 1.0f);
  msg = outcome_of<Error>([&] {
    rewrite_ptx(edited(t, "fma.rn.f32", [](const std::string& line) { return with_opcode(line, "sub.f32"); }),
                ones.data());
  });
  EXPECT_NE(msg.find("refusing"), std::string::npos) << msg;
  // A literal outside any instruction.
  msg = outcome_of<Error>([&] {
    rewrite_ptx(edited(t, ".version", [&](const std::string& line) { return "// " + lit + "\n" + line; }), w.data());
  });
  EXPECT_NE(msg.find("outside an instruction"), std::string::npos) << msg;
  // Not a template kernel at all.
  TemplateKernel empty = t;
  empty.ptx.clear();
  EXPECT_NE(outcome_of<Error>([&] { rewrite_ptx(empty, w.data()); }), "NO EXCEPTION");
}

TEST(SparseConvRewrite, AliasesResolveThroughChains) {
  const TemplateKernel t = handwritten(
      "\tfma.rn.f32 \t%f3, %f1, W0, 0f00000000;\n"
      "\tmov.f32 \t%f4, W1;\n"
      "\tfma.rn.f32 \t%f5, %f4, %f2, %f3;\n"
      "\tfma.rn.f32 \t%f6, %f1, W2, %f5;\n"
      "\tst.global.f32 \t[%rd2+8], %f6;\n"
      "\tex2.approx.f32 \t%f7, %f6;\n"
      "\tst.global.f32 \t[%rd2+12], %f7;\n");
  // All zero: the stores read the chain's start, the immediate 0 (ex2 gets it through a mov).
  std::vector<float> w = {0.0f, 0.0f, 0.0f};
  RewriteResult r = rewrite_ptx(t, w.data());
  EXPECT_EQ(r.fma_deleted, 3);
  EXPECT_EQ(r.mov_deleted, 1);
  EXPECT_EQ(r.materialized, 1);
  EXPECT_EQ(r.outputs_all_zero, 1);  // one output value, read twice
  EXPECT_NE(r.ptx.find("st.global.f32 \t[%rd2+8], 0f00000000;"), std::string::npos) << r.ptx;
  EXPECT_NE(r.ptx.find("mov.f32 \t%dnnf_m0, 0f00000000;\n\tex2.approx.f32 \t%f7, %dnnf_m0;"), std::string::npos) << r.ptx;
  EXPECT_NE(r.ptx.find(".reg .f32 \t%dnnf_m<1>;"), std::string::npos) << r.ptx;
  if (!ptxas_path().empty()) {
    EXPECT_TRUE(assembles(r.ptx)) << r.ptx;
  }
  // Only the middle weight survives: the chain skips the deleted links.
  w = {0.0f, 1.5f, 0.0f};
  r = rewrite_ptx(t, w.data());
  EXPECT_EQ(r.fma_kept, 1);
  EXPECT_EQ(r.outputs_all_zero, 0);
  EXPECT_NE(r.ptx.find("mov.f32 \t%f4, 0f3FC00000;"), std::string::npos) << r.ptx;
  EXPECT_NE(r.ptx.find("fma.rn.f32 \t%f5, %f4, %f2, 0f00000000;"), std::string::npos) << r.ptx;
  EXPECT_NE(r.ptx.find("st.global.f32 \t[%rd2+8], %f5;"), std::string::npos) << r.ptx;
  EXPECT_NE(r.ptx.find("ex2.approx.f32 \t%f7, %f5;"), std::string::npos) << r.ptx;
  if (!ptxas_path().empty()) {
    EXPECT_TRUE(assembles(r.ptx)) << r.ptx;
  }
}

TEST(SparseConvRewrite, UnsoundAliasBecomesAMove) {
  // %f5 is predicated and %f6 is written twice (as after a branch merge): no alias, a mov.
  const TemplateKernel t = handwritten(
      "\tmov.f32 \t%f3, 0f00000000;\n"
      "\tmov.f32 \t%f5, %f3;\n"
      "\t@%p1 fma.rn.f32 \t%f5, %f1, W0, %f3;\n"
      "\tfma.rn.f32 \t%f6, %f2, W1, %f5;\n"
      "\t@%p1 mov.f32 \t%f6, %f1;\n"
      "\tfma.rn.f32 \t%f7, %f2, W2, %f6;\n"
      "\tst.global.f32 \t[%rd2+8], %f7;\n");
  const std::vector<float> w = {0.0f, 0.0f, 2.0f};
  const RewriteResult r = rewrite_ptx(t, w.data());
  EXPECT_EQ(r.fma_deleted, 2);
  EXPECT_EQ(r.fma_to_mov, 2);
  EXPECT_EQ(r.fma_kept, 1);
  EXPECT_NE(r.ptx.find("@%p1 mov.f32 \t%f5, %f3;"), std::string::npos) << r.ptx;
  EXPECT_NE(r.ptx.find("\tmov.f32 \t%f6, %f5;"), std::string::npos) << r.ptx;
  EXPECT_NE(r.ptx.find("fma.rn.f32 \t%f7, %f2, 0f40000000, %f6;"), std::string::npos) << r.ptx;
  if (!ptxas_path().empty()) {
    EXPECT_TRUE(assembles(r.ptx)) << r.ptx;
  }
}

TEST(SparseConvRewrite, AliasOfARewrittenRegisterBecomesAMove) {
  // %f3 (the addend) is written again after the FMA: reading it in place of %f4 later would see
  // the new value, so the FMA becomes a move.
  const TemplateKernel t = handwritten(
      "\tmov.f32 \t%f3, %f2;\n"
      "\tfma.rn.f32 \t%f4, %f1, W0, %f3;\n"
      "\t@%p1 mov.f32 \t%f3, %f1;\n"
      "\tfma.rn.f32 \t%f5, %f1, W1, %f3;\n"
      "\tfma.rn.f32 \t%f6, %f1, W2, %f4;\n"
      "\tst.global.f32 \t[%rd2+8], %f6;\n"
      "\tst.global.f32 \t[%rd2+12], %f5;\n");
  const std::vector<float> w = {0.0f, 0.0f, 0.0f};
  const RewriteResult r = rewrite_ptx(t, w.data());
  EXPECT_EQ(r.fma_deleted, 3);
  EXPECT_EQ(r.fma_to_mov, 2);  // %f4 and %f5 (both alias %f3, written twice)
  EXPECT_NE(r.ptx.find("\tmov.f32 \t%f4, %f3;\n\t@%p1 mov.f32 \t%f3, %f1;\n\tmov.f32 \t%f5, %f3;"), std::string::npos)
      << r.ptx;
  EXPECT_NE(r.ptx.find("st.global.f32 \t[%rd2+8], %f4;"), std::string::npos) << r.ptx;  // %f6 aliases %f4
  if (!ptxas_path().empty()) {
    EXPECT_TRUE(assembles(r.ptx)) << r.ptx;
  }
}

TEST(SparseConvRewrite, ZeroWeightRegisterReadElsewhereIsRefused) {
  const TemplateKernel t = handwritten(
      "\tmov.f32 \t%f4, W0;\n"
      "\tfma.rn.f32 \t%f5, %f4, %f2, 0f00000000;\n"
      "\tfma.rn.f32 \t%f6, %f1, W1, %f5;\n"
      "\tfma.rn.f32 \t%f7, %f1, W2, %f6;\n"
      "\tadd.f32 \t%f8, %f4, %f7;\n"
      "\tst.global.f32 \t[%rd2+8], %f8;\n");
  const std::vector<float> w = {0.0f, 1.0f, 1.0f};
  EXPECT_NE(outcome_of<Error>([&] { rewrite_ptx(t, w.data()); }).find("zero weight's register"), std::string::npos);
  const std::vector<float> nz = {1.0f, 1.0f, 1.0f};  // a non-zero weight register is an ordinary value
  EXPECT_EQ(rewrite_ptx(t, nz.data()).fma_kept, 3);
}

// ============================================================================================
// Cache

TEST(SparseConvTemplate, CacheHitAndCorruptFileRegenerated) {
  REQUIRE_NVRTC();
  TempDir dir;
  const std::string cache = (dir.path() / "nested" / "cache").string();  // created on demand
  const ConvShape s = shape_of(1, 3, 5, 5, 2, 3, 3, 1, 1, 1);
  const ConvTile tile = default_tile(s);
  const Epilogue e = epi_of(true, false, Activation::relu);
  const TemplateKernel first = make_template(s, tile, e, cache);
  EXPECT_FALSE(first.cache_hit);
  ASSERT_TRUE(fs::exists(first.cache_path)) << first.cache_path;
  EXPECT_EQ(fs::path(first.cache_path).parent_path(), fs::path(cache));
  const TemplateKernel second = make_template(s, tile, e, cache);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.nvrtc_seconds, 0.0);
  EXPECT_EQ(second.ptx, first.ptx);
  EXPECT_EQ(second.entry, first.entry);
  EXPECT_EQ(second.weights.bits, first.weights.bits);
  // No temporary left behind.
  int files = 0;
  for (const auto& f : fs::directory_iterator(cache)) files += f.is_regular_file();
  EXPECT_EQ(files, 1);

  const std::string good = slurp(first.cache_path);
  const std::vector<std::string> corruptions = {
      good.substr(0, good.size() / 2),                        // short
      "",                                                     // empty
      good.substr(0, 100) + "X" + good.substr(101),           // one byte changed
      good + "trailing junk\n",                               // appended to
  };
  for (size_t i = 0; i < corruptions.size(); ++i) {
    std::ofstream(first.cache_path, std::ios::binary | std::ios::trunc) << corruptions[i];
    const TemplateKernel again = make_template(s, tile, e, cache);
    EXPECT_FALSE(again.cache_hit) << "corruption " << i;
    EXPECT_EQ(again.ptx, first.ptx) << "corruption " << i;
    EXPECT_EQ(slurp(first.cache_path), good) << "corruption " << i << ": the file is repaired";
  }
  EXPECT_TRUE(make_template(s, tile, e, cache).cache_hit);
  // Another epilogue is another file.
  const TemplateKernel other = make_template(s, tile, epi_of(false, false, Activation::none), cache);
  EXPECT_FALSE(other.cache_hit);
  EXPECT_NE(other.cache_path, first.cache_path);
  // No directory: no cache.
  EXPECT_EQ(make_template(s, tile, e, "").cache_path, "");
}

TEST(SparseConvTemplate, UnusableCacheDirectoryIsAnError) {
  REQUIRE_NVRTC();
  TempDir dir;
  const fs::path file = dir.path() / "a_file";
  std::ofstream(file) << "x";
  const ConvShape s = shape_of(1, 1, 3, 3, 1, 1, 1, 1, 0, 1);
  const std::string msg = outcome_of<Error>([&] { make_template(s, default_tile(s), Epilogue{}, file.string()); });
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
}

// ============================================================================================
// NVRTC loading

TEST(SparseConvNvrtc, SearchOrder) {
  const char* old = std::getenv("DNNFUSION_NVRTC");
  const std::string saved = old ? old : "";
  ::setenv("DNNFUSION_NVRTC", "/from/env/libnvrtc.so.13", 1);
  add_nvrtc_search_dir("/registered/dir");
  const std::vector<std::string> c = nvrtc_search_candidates();
  if (old) ::setenv("DNNFUSION_NVRTC", saved.c_str(), 1);
  else ::unsetenv("DNNFUSION_NVRTC");
  ASSERT_GE(c.size(), 7u);
  EXPECT_EQ(c[0], "/from/env/libnvrtc.so.13");
  EXPECT_EQ(c[1], "/registered/dir/libnvrtc.so.13");
  EXPECT_EQ(c[2], "/registered/dir/libnvrtc.so.12");
  EXPECT_EQ(c[3], "/registered/dir/libnvrtc.so");
  EXPECT_EQ(c[c.size() - 3], "libnvrtc.so.13");
  EXPECT_EQ(c[c.size() - 2], "libnvrtc.so.12");
  EXPECT_EQ(c[c.size() - 1], "libnvrtc.so");
}

TEST(SparseConvNvrtc, ProbeOfMissingLibrariesIsTargetUnavailable) {
  TempDir dir;
  const std::string not_a_library = (dir.path() / "libnvrtc.so.13").string();
  std::ofstream(not_a_library) << "not an ELF file";
  const std::string msg =
      outcome_of<TargetUnavailable>([&] { probe_nvrtc({"/nonexistent/libnvrtc.so.13", not_a_library}); });
  EXPECT_NE(msg.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << msg;
  EXPECT_NE(msg.find(not_a_library), std::string::npos) << msg;
  EXPECT_NE(msg.find("DNNFUSION_NVRTC"), std::string::npos) << msg;  // says how to fix it
  // A library without the NVRTC symbols is not NVRTC.
  const std::string msg2 = outcome_of<TargetUnavailable>([] { probe_nvrtc({"libc.so.6"}); });
  EXPECT_NE(msg2.find("lacks nvrtc"), std::string::npos) << msg2;
}

TEST(SparseConvNvrtc, CompileErrorCarriesTheLog) {
  REQUIRE_NVRTC();
  const std::string msg = outcome_of<Error>(
      [] { compile_cuda_to_ptx("__global__ void f() { undeclared_thing(); }", "broken.cu", {"-std=c++17"}); });
  EXPECT_NE(msg.find("broken.cu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undeclared_thing"), std::string::npos) << msg;
}

TEST(SparseConvNvrtc, ConcurrentCompilesAreSafe) {
  REQUIRE_NVRTC();
  std::vector<std::thread> threads;
  std::vector<std::string> ptx(4);
  for (size_t i = 0; i < ptx.size(); ++i) {
    threads.emplace_back([&ptx, i] {
      const std::string src = "extern \"C\" __global__ void f" + std::to_string(i) +
                              "(float* y) { y[threadIdx.x] = " + std::to_string(i) + ".5f; }";
      ptx[i] = compile_cuda_to_ptx(src, "t.cu", {"--gpu-architecture=compute_80"}).ptx;
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < ptx.size(); ++i) EXPECT_NE(ptx[i].find(".entry f" + std::to_string(i) + "("), std::string::npos);
}

// Runs in a child process (see MissingNvrtcIsTargetUnavailable): nothing has loaded NVRTC there.
TEST(SparseConvNvrtcChild, DISABLED_MakeTemplateWithoutNvrtc) {
  for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
    bool loads = false;
    try {
      probe_nvrtc({soname});
      loads = true;
    } catch (const TargetUnavailable&) {
    }
    if (loads) {
      std::printf("SONAME-VISIBLE %s\n", soname);
      return;
    }
  }
  const ConvShape s = shape_of(1, 1, 3, 3, 1, 1, 1, 1, 0, 1);
  const std::string msg = outcome_of<TargetUnavailable>([&] { make_template(s, default_tile(s), Epilogue{}, ""); });
  EXPECT_NE(msg.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << msg;
  EXPECT_NE(msg.find("libnvrtc.so.12"), std::string::npos) << msg;
  std::printf("CHILD-CHECKED\n");
}

TEST(SparseConvNvrtc, MissingNvrtcIsTargetUnavailable) {
  // A fresh process whose only NVRTC candidates do not exist: the parent may have loaded NVRTC.
  std::vector<std::string> env_text = {"DNNFUSION_NVRTC=/nonexistent/libnvrtc.so.13", "LD_LIBRARY_PATH="};
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "DNNFUSION_NVRTC=", 16) && std::strncmp(*e, "LD_LIBRARY_PATH=", 16)) env_text.push_back(*e);
  }
  std::vector<char*> envp;
  for (auto& s : env_text) envp.push_back(s.data());
  envp.push_back(nullptr);
  TempDir dir;
  const std::string log = (dir.path() / "child.log").string();
  const int rc = run({"/proc/self/exe", "--gtest_also_run_disabled_tests",
                      "--gtest_filter=SparseConvNvrtcChild.DISABLED_MakeTemplateWithoutNvrtc"},
                     log, envp.data());
  const std::string out = slurp(log);
  if (out.find("SONAME-VISIBLE") != std::string::npos) {
    GTEST_SKIP() << "the dynamic loader finds NVRTC by soname here, so it cannot be made missing: " << out;
  }
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("CHILD-CHECKED"), std::string::npos) << out;
}

}  // namespace
