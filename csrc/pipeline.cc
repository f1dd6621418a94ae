#include "pipeline.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "ecg/verifier.h"
#include "rewrite/fold_constants.h"

namespace dnnfusion {

namespace {

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

// Evaluates a graph of compile-time values with the runtime itself (single thread).
std::vector<std::vector<uint8_t>> evaluate(const ecg::Graph& g) {
  runtime::Executable exe(g, runtime::ExecOptions{1});
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<void*> outs;
  for (int o : g.outputs()) bytes.emplace_back(static_cast<size_t>(g.value(o).nbytes()));
  for (auto& b : bytes) outs.push_back(b.data());
  exe.run({}, outs);
  return bytes;
}

}  // namespace

Compiled compile_graph(ecg::Graph g, const CompileOptions& opts) {
  const bool debug = env_on("DNNFUSION_DEBUG");
  const bool timing = env_on("DNNFUSION_TIME_PASSES");
  const bool verify = debug || env_on("DNNFUSION_VERIFY");
  Compiled result;
  auto run_pass = [&](const char* name, auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    std::string before = debug ? g.dump() : std::string();
    PassRecord rec{name, 0, false, ""};
    fn(rec);
    rec.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (verify) ecg::verify_graph(g);
    if (debug) {
      std::string after = g.dump();
      std::fprintf(stderr, "[dnnfusion] after pass %s:%s\n%s", name, after == before ? " unchanged" : "",
                   after == before ? "" : after.c_str());
    }
    if (timing) std::fprintf(stderr, "[dnnfusion] pass %-16s %8.2f ms %s\n", name, rec.ms, rec.detail.c_str());
    result.passes.push_back(rec);
  };

  if (debug) std::fprintf(stderr, "[dnnfusion] imported ECG:\n%s", g.dump().c_str());
  // The pass list, in order.
  run_pass("verify", [&](PassRecord&) { ecg::verify_graph(g); });
  run_pass("fold_constants", [&](PassRecord& rec) {
    g = rewrite::fold_constants(g, evaluate, &result.folded_nodes);
    rec.changed = result.folded_nodes > 0;
    rec.detail = std::to_string(result.folded_nodes) + " nodes folded";
  });
  run_pass("plan_and_bind", [&](PassRecord& rec) {
    result.exe = std::make_unique<runtime::Executable>(std::move(g), runtime::ExecOptions{opts.threads});
    const auto& s = result.exe->stats();
    rec.detail = std::to_string(s.kernels_per_call) + " kernels, arena " + std::to_string(s.arena_bytes) + " B";
    if (debug) g = result.exe->graph();  // for the debug dump
  });
  return result;
}

}  // namespace dnnfusion
