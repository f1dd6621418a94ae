// The target seam: the registry (unknown, unavailable, duplicate targets), the kernel tables keyed
// by (target, op), the pipeline choosing a target by name, and the pass logger.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "ecg/graph.h"
#include "pass_logger.h"
#include "pipeline.h"
#include "target/target.h"
#include "test_env_util.h"

namespace dnnfusion {
namespace {

using ecg::Graph;
using test_util::error_of;

// A target defined by the test alone: no kernels, optionally missing its hardware.
class FakeTarget final : public target::Target {
 public:
  FakeTarget(std::string name, std::string missing) : name_(std::move(name)), missing_(std::move(missing)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test target"; }
  std::string device_type() const override { return "cpu"; }
  std::string unavailable_reason() const override { return missing_; }
  bool fuses() const override { return false; }
  void* allocate(size_t bytes) const override { return std::malloc(bytes); }
  void deallocate(void* p) const override { std::free(p); }
  void strided_copy(size_t, const std::vector<int64_t>&, const void*, const std::vector<int64_t>&, int64_t, void*,
                    const kernels::Parallel&) const override {}

 protected:
  void register_kernels(runtime::KernelTable& t) const override { runtime::register_view_ops(t); }

 private:
  std::string name_, missing_;
};

TEST(TargetRegistry, BuiltInTargetsCpuFirstThenReference) {
  const auto names = target::registry().names();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "cpu");
  EXPECT_EQ(target::registry().default_target().name(), "cpu");
  EXPECT_NE(std::find(names.begin(), names.end(), "reference"), names.end());
  for (const auto& n : names) {
    EXPECT_EQ(target::registry().get(n).name(), n);
    EXPECT_FALSE(target::registry().get(n).description().empty());
  }
}

TEST(TargetRegistry, UnknownTargetListsTheRegisteredOnes) {
  const std::string msg = error_of<UnknownTarget>([] { target::registry().get("tpu"); });
  EXPECT_NE(msg.find("'tpu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reference"), std::string::npos) << msg;
}

TEST(TargetRegistry, DuplicateRegistrationIsAnError) {
  target::Registry r;
  r.add(std::make_unique<FakeTarget>("fake", ""));
  const std::string msg = error_of<Error>([&] { r.add(std::make_unique<FakeTarget>("fake", "")); });
  EXPECT_NE(msg.find("'fake' registered twice"), std::string::npos) << msg;
  EXPECT_EQ(r.names(), std::vector<std::string>{"fake"});
}

TEST(TargetRegistry, UnavailableTargetNamesWhatIsMissing) {
  target::Registry r;
  r.add(std::make_unique<FakeTarget>("here", ""));
  r.add(std::make_unique<FakeTarget>("gpu-like", "no CUDA driver (libcuda.so.1 not found)"));
  EXPECT_EQ(r.require_available("here").name(), "here");
  const std::string msg = error_of<TargetUnavailable>([&] { r.require_available("gpu-like"); });
  EXPECT_NE(msg.find("gpu-like"), std::string::npos) << msg;
  EXPECT_NE(msg.find("libcuda.so.1 not found"), std::string::npos) << msg;
  EXPECT_EQ(r.get("gpu-like").name(), "gpu-like");  // registered, just not runnable here
}

TEST(TargetRegistry, KernelTablesAreKeyedByTargetAndOp) {
  const auto& cpu = target::registry().get("cpu");
  const auto& ref = target::registry().get("reference");
  ASSERT_NE(cpu.find_kernel("convolution"), nullptr);
  ASSERT_NE(ref.find_kernel("convolution"), nullptr);
  EXPECT_NE(cpu.find_kernel("convolution")->run, ref.find_kernel("convolution")->run);
  // Ops only the cpu target's own passes create have no reference kernel.
  EXPECT_NE(cpu.find_kernel("conv2d_nchwc"), nullptr);
  EXPECT_EQ(ref.find_kernel("conv2d_nchwc"), nullptr);
  Graph g;
  int x = g.add_input({1, 8}, DType::Float32, "x");
  int n = g.add_node("relu", {x}, {{{1, 8}, DType::Float32}});
  FakeTarget fake("fake", "");
  EXPECT_EQ(fake.supports(g, g.node(n)), "no fake kernel for op 'relu'");
  EXPECT_EQ(cpu.supports(g, g.node(n)), "");
}

Graph small_graph() {
  Graph g;
  int x = g.add_input({2, 3}, DType::Float32, "x");
  int a = g.node(g.add_node("relu", {x}, {{{2, 3}, DType::Float32}})).outputs[0];
  int b = g.node(g.add_node("neg", {a}, {{{2, 3}, DType::Float32}})).outputs[0];
  g.set_outputs({b});
  return g;
}

TEST(Pipeline, CompilesForTheNamedTargetAndRefusesUnknownOnes) {
  for (const std::string name : {"cpu", "reference"}) {
    CompileOptions opts;
    opts.target = name;
    opts.threads = 1;
    Compiled c = compile_graph(small_graph(), opts);
    EXPECT_EQ(c.stats.target, name);
    std::vector<float> in = {-1, 2, -3, 4, -5, 6}, out(6);
    c.exe->run({in.data()}, {out.data()});
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], -std::max(in[i], 0.f)) << name;
  }
  CompileOptions bad;
  bad.target = "tpu";
  EXPECT_THROW(compile_graph(small_graph(), bad), UnknownTarget);
}

TEST(Pipeline, ReferenceTargetNeverFusesAndRunsNoTargetPasses) {
  CompileOptions opts;
  opts.target = "reference";
  opts.fusion = fusion::Mode::DnnFusion;  // asked for, but the reference target does not fuse
  Compiled c = compile_graph(small_graph(), opts);
  EXPECT_EQ(c.plan.blocks.size(), 2u);
  EXPECT_EQ(c.stats.generated_functions, 0);
  for (const auto& p : c.stats.passes) EXPECT_NE(p.name, "propagate_blocked_layout");
  EXPECT_TRUE(c.stats.target_counters.empty());
}

TEST(Pipeline, CpuTargetReportsEveryCounterItDeclares) {
  CompileOptions opts;
  opts.layout = CompileOptions::Layout::Off;  // its layout pass does not run, its counters still exist
  Compiled c = compile_graph(small_graph(), opts);
  for (const char* k : {"convs_blocked", "gemms_packed", "expand_dw_fused", "convs_winograd_f4"})
    EXPECT_EQ(c.stats.target_counters.count(k), 1u) << k;
  EXPECT_EQ(c.stats.target_notes.count("layout_method"), 1u);
}

// ---- the pass logger ----

struct LoggedRun {
  CompileStats stats;
  std::string printed;
};

LoggedRun run_logged(PassLogger::Settings s, const std::vector<Pass>& passes) {
  LoggedRun r;
  PassLogger log(r.stats, s, [&](const std::string& text) { r.printed += text; });
  Graph g = small_graph();
  CompileOptions opts;
  const Evaluator eval = [](const Graph&) { return std::vector<std::vector<uint8_t>>{}; };
  PassContext ctx{g, opts, r.stats, target::registry().default_target(), eval, false, {}};
  log.dump("imported ECG", g.dump());
  for (const Pass& p : passes) log.run(p, ctx);
  return r;
}

const std::vector<Pass>& two_passes() {
  static const std::vector<Pass> p = {
      {"noop", [](PassContext& c) { c.detail = "nothing to do"; }},
      {"drop_neg",
       [](PassContext& c) {  // outputs relu directly: the graph changes
         Graph g;
         int x = g.add_input({2, 3}, DType::Float32, "x");
         int a = g.node(g.add_node("relu", {x}, {{{2, 3}, DType::Float32}})).outputs[0];
         g.set_outputs({a});
         c.g = g;
         c.changed = true;
         c.detail = "1 node removed";
       }},
  };
  return p;
}

TEST(PassLogger, RecordsEveryPassInOrderWithDetailAndTime) {
  LoggedRun r = run_logged({}, two_passes());
  ASSERT_EQ(r.stats.passes.size(), 2u);
  EXPECT_EQ(r.stats.passes[0].name, "noop");
  EXPECT_FALSE(r.stats.passes[0].changed);
  EXPECT_EQ(r.stats.passes[0].detail, "nothing to do");
  EXPECT_EQ(r.stats.passes[1].name, "drop_neg");
  EXPECT_TRUE(r.stats.passes[1].changed);
  EXPECT_GE(r.stats.passes[1].ms, 0.0);
  EXPECT_EQ(r.printed, "");  // nothing printed unless asked
}

TEST(PassLogger, DebugDumpsAfterEachPassOrSaysUnchanged) {
  PassLogger::Settings s;
  s.debug = true;
  LoggedRun r = run_logged(s, two_passes());
  EXPECT_NE(r.printed.find("[dnnfusion] imported ECG:\n"), std::string::npos) << r.printed;
  EXPECT_NE(r.printed.find("after pass noop: unchanged\n"), std::string::npos) << r.printed;
  const size_t at = r.printed.find("after pass drop_neg:\n");
  ASSERT_NE(at, std::string::npos) << r.printed;
  EXPECT_NE(r.printed.find("relu", at), std::string::npos);
  EXPECT_EQ(r.printed.find("neg", at + 20), std::string::npos) << "dumped the graph before the pass";
}

TEST(PassLogger, TimingPrintsOneLinePerPassWithItsDetail) {
  PassLogger::Settings s;
  s.timing = true;
  LoggedRun r = run_logged(s, two_passes());
  EXPECT_EQ(std::count(r.printed.begin(), r.printed.end(), '\n'), 2) << r.printed;
  EXPECT_NE(r.printed.find("pass noop"), std::string::npos);
  EXPECT_NE(r.printed.find("ms nothing to do\n"), std::string::npos) << r.printed;
  EXPECT_EQ(r.printed.find("imported ECG"), std::string::npos);  // dumps are debug-only
}

TEST(PassLogger, VerifyCatchesAPassThatBreaksTheGraph) {
  PassLogger::Settings s;
  s.verify = true;
  const std::vector<Pass> broken = {{"break_it", [](PassContext& c) {
                                       Graph g;
                                       int x = g.add_input({2, 3}, DType::Float32, "x");
                                       int a = g.node(g.add_node("relu", {x}, {{{2, 3}, DType::Float32}})).outputs[0];
                                       g.set_outputs({a});
                                       g.value(a).shape = {2, -3};  // a negative dimension breaks invariant I2
                                       c.g = g;
                                     }}};
  EXPECT_THROW(run_logged(s, broken), Error);
  s.verify = false;
  EXPECT_NO_THROW(run_logged(s, broken));
}

}  // namespace
}  // namespace dnnfusion
