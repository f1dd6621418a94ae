// dnnf_gemm::gemm (kernels/cpu/gemm_template.h) built the way generated code is: the embedded text
// after the generated prelude, through jit_compile. Checked against a double-accumulating
// reference over random shapes (0 and tile edges included), transposed / strided / broadcast
// operands, B pre-packed (gemm_packed_b), bias modes, alpha and beta, three epilogues (none, erf-GELU + residual read at
// start+t, relu), serial and on the runtime's thread pool; plus exactly-once epilogue visits, the
// forced AVX2 and scalar micro-kernels, no exported template symbols, and that the embedded text
// is the header's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>

#include "target/cpu/codegen/prelude.h"
#include "target/cpu/codegen/jit_compiler.h"
#include "target/cpu/codegen/kernel_templates.h"
#include "kernel_test_util.h"
#include "kernels/cpu/gemm.h"
#include "runtime/program.h"
#include "runtime/thread_pool.h"

namespace dnnfusion {
namespace {

namespace dt = dnnfusion::testing;

// The argument block the generated entry points take; its text is pasted into the JIT source so
// both sides agree on the layout.
#define DNNF_GT_ARGS                                                       \
  struct GtArgs {                                                          \
    int64_t batch, M, N, K;                                                \
    const float* a;                                                        \
    int64_t a_rs, a_cs, sa;                                                \
    const float* b;                                                        \
    int64_t b_rs, b_cs, sb;                                                \
    float* c;                                                              \
    int64_t ldc, sc;                                                       \
    const float* bias;                                                     \
    int bias_mode;                                                         \
    float alpha, beta;                                                     \
    const float* res;                                                      \
    int* visits;                                                           \
    int64_t total;                                                         \
    int* stray;                                                            \
    const float* bpk;                                                      \
  };
DNNF_GT_ARGS
#define DNNF_GT_STR2(...) #__VA_ARGS__
#define DNNF_GT_STR(x) DNNF_GT_STR2(x)

const char* kEntries = R"ENTRIES(
namespace {
template <class E>
void gt_run(const GtArgs& g, const E& e, const dnnf_parallel* par) {
  if (g.bpk) {
    dnnf_gemm::gemm_packed_b(g.M, g.N, g.K, dnnf_gemm::Mat{g.a, g.a_rs, g.a_cs}, g.bpk, g.c, g.ldc,
                             g.bias, g.bias_mode, g.alpha, e, par);
    return;
  }
  dnnf_gemm::gemm(g.batch, g.M, g.N, g.K, dnnf_gemm::Mat{g.a, g.a_rs, g.a_cs}, g.sa,
                  dnnf_gemm::Mat{g.b, g.b_rs, g.b_cs}, g.sb, g.c, g.ldc, g.sc, g.bias, g.bias_mode,
                  g.alpha, g.beta, e, par);
}
struct GeluRes {
  const float* res;
  void operator()(float* v, int64_t start, int count) const {
    for (int t = 0; t < count; ++t) {
      const float x = v[t];
      v[t] = 0.5f * x * (1.f + dnnf_erf(x * 0.7071067811865476f)) + res[start + t];
    }
  }
};
struct Relu {
  void operator()(float* v, int64_t, int count) const {
    for (int t = 0; t < count; ++t) v[t] = v[t] < 0.f ? 0.f : v[t];
  }
};
// Counts visits per output index; anything out of range, or a row longer than any NR, is stray.
struct Count {
  int* visits;
  int64_t total;
  int* stray;
  void operator()(float*, int64_t start, int count) const {
    if (count < 1 || count > 32) __atomic_fetch_add(stray, 1, __ATOMIC_RELAXED);
    for (int t = 0; t < count; ++t) {
      const int64_t i = start + t;
      if (i >= 0 && i < total) __atomic_fetch_add(&visits[i], 1, __ATOMIC_RELAXED);
      else __atomic_fetch_add(stray, 1, __ATOMIC_RELAXED);
    }
  }
};
}  // namespace
extern "C" int gt_isa() { return DNNF_GEMM_ISA; }
extern "C" int gt_nr() { return dnnf_gemm::detail::kNR; }
extern "C" void gt_identity(const GtArgs* g, const dnnf_parallel* p) { gt_run(*g, dnnf_gemm::Identity{}, p); }
extern "C" void gt_gelu_res(const GtArgs* g, const dnnf_parallel* p) { gt_run(*g, GeluRes{g->res}, p); }
extern "C" void gt_relu(const GtArgs* g, const dnnf_parallel* p) { gt_run(*g, Relu{}, p); }
extern "C" void gt_count(const GtArgs* g, const dnnf_parallel* p) { gt_run(*g, Count{g->visits, g->total, g->stray}, p); }
)ENTRIES";

using EntryFn = void (*)(const GtArgs*, const dnnf_parallel*);
enum class Epi { Identity, GeluRes, Relu };
const char* epi_name(Epi e) { return e == Epi::Identity ? "identity" : e == Epi::GeluRes ? "gelu+res" : "relu"; }

struct Module {
  codegen::JitModule jit;
  EntryFn identity, gelu_res, relu, count;
  int isa, nr;
};

// isa < 0: what the macros pick (as generated code gets it); else DNNF_GEMM_ISA forced. Compiled
// once per process (the kernel cache makes later processes skip the compiler).
const Module& module(int isa) {
  static std::unique_ptr<Module> mods[4];
  std::unique_ptr<Module>& m = mods[isa + 1];
  if (!m) {
    std::string src = codegen::generated_prelude();
    if (isa >= 0) src += "#define DNNF_GEMM_ISA " + std::to_string(isa) + "\n";
    src += codegen::gemm_template_source();
    src += DNNF_GT_STR(DNNF_GT_ARGS);
    src += kEntries;
    m = std::make_unique<Module>();
    m->jit = codegen::jit_compile(src);
    if (!m->jit.cache_hit)
      std::printf("[ note ] gemm template module (isa %d) compiled in %.0f ms\n", isa, m->jit.compile_ms);
    m->identity = reinterpret_cast<EntryFn>(m->jit.symbol("gt_identity"));
    m->gelu_res = reinterpret_cast<EntryFn>(m->jit.symbol("gt_gelu_res"));
    m->relu = reinterpret_cast<EntryFn>(m->jit.symbol("gt_relu"));
    m->count = reinterpret_cast<EntryFn>(m->jit.symbol("gt_count"));
    m->isa = reinterpret_cast<int (*)()>(m->jit.symbol("gt_isa"))();
    m->nr = reinterpret_cast<int (*)()>(m->jit.symbol("gt_nr"))();
  }
  return *m;
}

// The runtime's adapter (executor.cc keeps its own file-static): the C ABI onto a ThreadPool.
void pool_parallel_for(void* pool, int64_t n, int64_t grain,
                       void (*body)(const void*, int64_t, int64_t), const void* ctx) {
  static_cast<runtime::ThreadPool*>(pool)->parallel_for(
      n, grain, [&](int64_t b, int64_t e) { body(ctx, b, e); });
}

struct Pool {
  runtime::ThreadPool pool{2};
  dnnf_parallel par{&pool, pool_parallel_for};
};
const dnnf_parallel* pool_par() {
  static Pool p;
  return &p.par;
}

// One operand of `batch` entries of rows x cols: element (b,i,k) = buf[b*stride + i*rs + k*cs].
struct Operand {
  std::vector<float> buf;
  int64_t rs = 0, cs = 0, stride = 0;
  float at(int64_t b, int64_t i, int64_t k) const { return buf[b * stride + i * rs + k * cs]; }
};

enum Layout { kRowMajor, kTransposed, kStrided, kRowBroadcast, kColBroadcast, kLayouts };
const char* layout_name(int l) {
  static const char* n[] = {"row-major", "transposed", "strided", "row-broadcast", "col-broadcast"};
  return n[l];
}

Operand make_operand(std::mt19937_64& rng, int64_t batch, int64_t rows, int64_t cols, int layout,
                     bool batch_broadcast) {
  Operand o;
  const int64_t pad = dt::rand_int(rng, 0, 3);
  switch (layout) {
    case kRowMajor: o.rs = cols + pad; o.cs = 1; break;
    case kTransposed: o.rs = 1; o.cs = rows + pad; break;
    case kStrided: o.rs = 2 * cols + 1 + pad; o.cs = 2; break;
    case kRowBroadcast: o.rs = 0; o.cs = 1; break;
    default: o.rs = 1; o.cs = 0; break;
  }
  const int64_t span =
      rows > 0 && cols > 0 ? (rows - 1) * o.rs + (cols - 1) * o.cs + 1 : 1;
  o.stride = batch_broadcast ? 0 : span + dt::rand_int(rng, 0, 5);
  o.buf = dt::random_vec(rng, static_cast<size_t>(o.stride * (batch - 1) + span));
  return o;
}

struct Case {
  int64_t batch, M, N, K;
  int la, lb;
  bool bca, bcb;
  int bias_mode;
  float alpha, beta;
  Epi epi;
  bool parallel;
  bool packed = false;  // B pre-packed by kernels::sgemm_pack_b (gemm_packed_b: batch 1, beta 0)
  std::string str() const {
    std::ostringstream s;
    s << "batch=" << batch << " M=" << M << " N=" << N << " K=" << K << " A=" << layout_name(la)
      << (bca ? "(batch-broadcast)" : "") << " B=" << layout_name(lb)
      << (bcb ? "(batch-broadcast)" : "") << " bias_mode=" << bias_mode << " alpha=" << alpha
      << " beta=" << beta << " epi=" << epi_name(epi) << (parallel ? " pool" : " serial")
      << (packed ? " packed-B" : "");
    return s.str();
  }
};

Case random_case(std::mt19937_64& rng, int64_t max_dim) {
  static const int64_t edges[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 15, 16, 17,
                                  23, 24, 25, 31, 32, 33, 47, 48, 63, 64, 65, 70};
  auto dim = [&] {
    if (dt::rand_int(rng, 0, 2) == 0) return std::min(max_dim, dt::rand_int(rng, 0, max_dim));
    return std::min(max_dim, edges[dt::rand_int(rng, 0, std::size(edges) - 1)]);
  };
  Case c;
  c.batch = dt::rand_int(rng, 1, 3);
  c.M = dim();
  c.N = dim();
  c.K = dim();
  c.la = static_cast<int>(dt::rand_int(rng, 0, kLayouts - 1));
  c.lb = static_cast<int>(dt::rand_int(rng, 0, kLayouts - 1));
  c.bca = dt::rand_int(rng, 0, 3) == 0;
  c.bcb = dt::rand_int(rng, 0, 3) == 0;
  c.bias_mode = static_cast<int>(dt::rand_int(rng, 0, 2));
  static const float alphas[] = {1.f, -0.75f, 1.5f};
  c.alpha = alphas[dt::rand_int(rng, 0, 2)];
  c.beta = dt::rand_int(rng, 0, 1) ? 0.f : 0.5f;
  c.epi = static_cast<Epi>(dt::rand_int(rng, 0, 2));
  c.parallel = dt::rand_int(rng, 0, 1) == 1;
  if (dt::rand_int(rng, 0, 3) == 0) {
    c.packed = true;
    c.batch = 1;
    c.beta = 0.f;
  }
  return c;
}

// Runs one case through `m` and the reference; checks C's valid region and that nothing else of
// C's buffer (padding between rows and batch entries, the tail) changed.
void check_case(std::mt19937_64& rng, const Module& m, const Case& c, int index) {
  SCOPED_TRACE("case " + std::to_string(index) + ": " + c.str() + "; " + dt::seed_note());
  const Operand A = make_operand(rng, c.batch, c.M, c.K, c.la, c.bca);
  const Operand B = make_operand(rng, c.batch, c.K, c.N, c.lb, c.bcb);
  const int64_t ldc = c.N + dt::rand_int(rng, 0, 3);
  const int64_t sc = c.M * ldc + dt::rand_int(rng, 0, 5);
  std::vector<float> C = dt::random_vec(rng, static_cast<size_t>(c.batch * sc + 7));
  // beta == 0 promises C is not read: NaN there would leak into the result.
  if (c.beta == 0.f)
    for (auto& x : C) x = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> C_old = C;
  const std::vector<float> bias = dt::random_vec(rng, static_cast<size_t>(std::max<int64_t>(1, std::max(c.M, c.N))));
  const int64_t total = c.batch * c.M * c.N;
  const std::vector<float> res = dt::random_vec(rng, static_cast<size_t>(std::max<int64_t>(1, total)));

  std::unique_ptr<float, decltype(&std::free)> bpk(nullptr, &std::free);
  if (c.packed) {
    const size_t n = static_cast<size_t>(kernels::sgemm_packed_b_floats(c.K, c.N, m.nr));
    bpk.reset(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64)));
    kernels::sgemm_pack_b(c.K, c.N, {B.buf.data(), B.rs, B.cs}, m.nr, bpk.get());
  }
  GtArgs g{c.batch, c.M, c.N, c.K, A.buf.data(), A.rs, A.cs, A.stride, B.buf.data(), B.rs, B.cs,
           B.stride, C.data(), ldc, sc, c.bias_mode ? bias.data() : nullptr, c.bias_mode,
           c.alpha, c.beta, res.data(), nullptr, 0, nullptr, bpk.get()};
  const EntryFn fn = c.epi == Epi::Identity ? m.identity : c.epi == Epi::GeluRes ? m.gelu_res : m.relu;
  fn(&g, c.parallel ? pool_par() : nullptr);

  std::vector<float> got(static_cast<size_t>(total)), want(static_cast<size_t>(total));
  std::vector<char> in_c(C.size(), 0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < c.K; ++k)
          acc += static_cast<double>(A.at(b, i, k)) * static_cast<double>(B.at(b, k, j));
        const int64_t ci = b * sc + i * ldc + j;
        double v = c.alpha * acc + (c.beta != 0.f ? c.beta * static_cast<double>(C_old[ci]) : 0.0);
        if (c.bias_mode == 1) v += bias[i];
        if (c.bias_mode == 2) v += bias[j];
        const int64_t o = (b * c.M + i) * c.N + j;
        if (c.epi == Epi::GeluRes) v = 0.5 * v * (1.0 + std::erf(v * 0.7071067811865476)) + res[o];
        if (c.epi == Epi::Relu) v = v < 0 ? 0 : v;
        want[o] = static_cast<float>(v);
        got[o] = C[ci];
        in_c[ci] = 1;
      }
  EXPECT_TRUE(dt::all_close(got.data(), want.data(), got.size(), 1e-4f, 1e-5f));
  int64_t touched = 0;
  for (size_t q = 0; q < C.size(); ++q)
    if (!in_c[q] && std::memcmp(&C[q], &C_old[q], sizeof(float)) != 0) ++touched;
  EXPECT_EQ(touched, 0) << "elements outside the output were written";
}

// Shapes past one cache block of K (partial sums through C) and of N, with several row panels;
// the contiguous layouts come first since their packing fast paths are what K/N offsets stress.
std::vector<Case> large_cases(std::mt19937_64& rng) {
  const int64_t shapes[][6] = {{1, 29, 530, 800, kRowMajor, kRowMajor},
                               {2, 77, 45, 1100, kRowMajor, kTransposed},
                               {1, 130, 97, 385, kTransposed, kRowMajor},
                               {3, 13, 33, 520, kStrided, kTransposed},
                               {1, 40, 1000, 90, kRowMajor, kStrided}};
  std::vector<Case> out;
  int e = 0;
  for (const auto& s : shapes) {
    Case c = random_case(rng, 70);
    c.packed = false;
    c.batch = s[0];
    c.M = s[1];
    c.N = s[2];
    c.K = s[3];
    c.la = static_cast<int>(s[4]);
    c.lb = static_cast<int>(s[5]);
    c.bca = c.bcb = false;
    c.epi = static_cast<Epi>(e++ % 3);
    out.push_back(c);
  }
  return out;
}

void run_random_cases(const Module& m, int n_random) {
  std::mt19937_64 rng(dt::test_seed());
  int index = 0;
  for (int r = 0; r < n_random; ++r) check_case(rng, m, random_case(rng, 70), index++);
  for (const Case& c : large_cases(rng)) {
    for (bool parallel : {false, true}) {
      Case cc = c;
      cc.parallel = parallel;
      check_case(rng, m, cc, index++);
      if (cc.batch == 1) {  // again with B pre-packed: panels read in place across K and N blocks
        cc.packed = true;
        cc.beta = 0.f;
        check_case(rng, m, cc, index++);
      }
    }
  }
}

TEST(GemmTemplate, EmbeddedTextIsTheHeader) {
  std::string here = __FILE__;
  const size_t cut = here.rfind("tests/cpp/");
  if (cut == std::string::npos) GTEST_SKIP() << "source tree not found from " << here;
  std::ifstream f(here.substr(0, cut) + "csrc/kernels/cpu/gemm_template.h", std::ios::binary);
  if (!f) GTEST_SKIP() << "csrc/kernels/cpu/gemm_template.h not readable";
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(text.str(), codegen::gemm_template_source()) << "rebuild: the embedded copy is stale";
}

TEST(GemmTemplate, MatchesReferenceOnRandomCases) {
  const Module& m = module(-1);
  // Generated code is built with -march=native: the macros must pick the best kernel the CPU has.
  if (kernels::isa_supported(kernels::Isa::Avx512)) {
    EXPECT_EQ(m.isa, 2);
  } else if (kernels::isa_supported(kernels::Isa::Avx2)) {
    EXPECT_EQ(m.isa, 1);
  }
  run_random_cases(m, 300);
}

TEST(GemmTemplate, ForcedAvx2AndScalarKernelsMatchReference) {
  for (int isa : {1, 0}) {
    if (isa == 1 && !kernels::isa_supported(kernels::Isa::Avx2)) {
      std::printf("[ note ] CPU lacks AVX2+FMA: the template's 6x16 kernel is not tested\n");
      continue;
    }
    SCOPED_TRACE("DNNF_GEMM_ISA=" + std::to_string(isa));
    const Module& m = module(isa);
    EXPECT_EQ(m.isa, isa);
    run_random_cases(m, 80);
  }
}

TEST(GemmTemplate, EpilogueSeesEachElementExactlyOnce) {
  const Module& m = module(-1);
  std::mt19937_64 rng(dt::test_seed() + 1);
  const int64_t shapes[][4] = {{1, 1, 1, 1},   {3, 13, 33, 5},   {2, 70, 65, 0},   {1, 25, 530, 800},
                               {2, 77, 45, 400}, {12, 128, 64, 20}, {1, 0, 5, 5},   {4, 5, 1, 9}};
  for (const auto& s : shapes) {
    for (bool parallel : {false, true}) {
      const int64_t batch = s[0], M = s[1], N = s[2], K = s[3];
      SCOPED_TRACE("batch=" + std::to_string(batch) + " M=" + std::to_string(M) + " N=" +
                   std::to_string(N) + " K=" + std::to_string(K) + (parallel ? " pool" : " serial"));
      const Operand A = make_operand(rng, batch, M, K, kRowMajor, false);
      const Operand B = make_operand(rng, batch, K, N, kRowMajor, false);
      const int64_t total = batch * M * N;
      std::vector<float> C(static_cast<size_t>(std::max<int64_t>(1, total)));
      std::vector<int> visits(C.size(), 0);
      int stray = 0;
      GtArgs g{batch, M, N, K, A.buf.data(), A.rs, A.cs, A.stride, B.buf.data(), B.rs, B.cs,
               B.stride, C.data(), N, M * N, nullptr, 0, 1.f, 0.f, nullptr, visits.data(),
               total, &stray, nullptr};
      m.count(&g, parallel ? pool_par() : nullptr);
      EXPECT_EQ(stray, 0) << "epilogue called outside [0, batch*M*N) or with a bad count";
      int64_t wrong = 0, first = -1;
      for (int64_t i = 0; i < total; ++i)
        if (visits[i] != 1 && wrong++ == 0) first = i;
      EXPECT_EQ(wrong, 0) << "first at index " << first << " visited " << (first >= 0 ? visits[first] : 0)
                          << " times";
    }
  }
}

TEST(GemmTemplate, ModuleExportsNoTemplateSymbols) {
  const Module& m = module(-1);
  FILE* p = popen(("nm -DC --defined-only '" + m.jit.path + "' 2>/dev/null").c_str(), "r");
  if (!p) GTEST_SKIP() << "nm not runnable";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (pclose(p) != 0 || out.empty()) GTEST_SKIP() << "nm not available";
  EXPECT_NE(out.find("gt_gelu_res"), std::string::npos) << out;
  EXPECT_EQ(out.find("dnnf_gemm"), std::string::npos) << "template symbols leak from the module:\n" << out;
}

}  // namespace
}  // namespace dnnfusion
