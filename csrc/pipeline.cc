#include "pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "ecg/op_registry.h"
#include "ecg/verifier.h"
#include "codegen/yellow_profiler.h"
#include "codegen/view_compose.h"
#include "fusion/profile_db.h"
#include "layout/choose_conv_schemes.h"
#include "layout/fold_input_scale.h"
#include "layout/fuse_expand_depthwise.h"
#include "layout/pack_gemm_weights.h"
#include "layout/propagate_blocked_layout.h"
#include "layout/tuning_db.h"
#include "rewrite/apply_math_rules.h"
#include "rewrite/eliminate_common_subexpressions.h"
#include "rewrite/batchnorm_to_affine.h"
#include "rewrite/fold_batchnorm.h"
#include "rewrite/merge_parallel_gemms.h"
#include "rewrite/split_to_slices.h"
#include "rewrite/fold_constants.h"
#include "rewrite/remove_noops.h"

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

// The node pair a yellow query is about: the candidate and the block node it is connected to
// (the block's dominant op when that one is adjacent).
std::pair<int, int> adjacent_pair(const ecg::Graph& g, const std::vector<int>& block, int cand) {
  std::pair<int, int> best{-1, -1};
  for (int b : block) {
    std::pair<int, int> pr{-1, -1};
    for (int v : g.node(b).inputs)
      if (v >= 0 && g.value(v).producer == cand) pr = {cand, b};
    for (int v : g.node(cand).inputs)
      if (v >= 0 && g.value(v).producer == b) pr = {b, cand};
    if (pr.first < 0) continue;
    if (best.first < 0 || g.node(b).info->mapping == ecg::MappingType::ManyToMany) best = pr;
  }
  DNNF_CHECK(best.first >= 0, "yellow fusion query for node ", cand, " which touches no node of its block");
  return best;
}

}  // namespace

CompileOptions::Layout parse_layout_mode(const std::string& s) {
  if (s == "global") return CompileOptions::Layout::Global;
  if (s == "local") return CompileOptions::Layout::Local;
  if (s == "convs-only") return CompileOptions::Layout::ConvsOnly;
  if (s == "off") return CompileOptions::Layout::Off;
  DNNF_THROW("unknown layout mode '", s, "' (valid: global, local, convs-only, off)");
}

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
  result.ops_imported = static_cast<int>(g.nodes().size());
  // The pass list, in order.
  run_pass("verify", [&](PassRecord&) { ecg::verify_graph(g); });
  auto fold = [&](PassRecord& rec) {
    int n = 0;
    g = rewrite::fold_constants(g, evaluate, &n);
    result.folded_nodes += n;
    rec.changed = n > 0;
    rec.detail = std::to_string(n) + " nodes folded";
  };
  run_pass("fold_constants", fold);
  // A pass that reports how many nodes it changed: counted under `rule` in the report (rewrites)
  // and/or added to `*total`.
  using CountingPass = ecg::Graph (*)(const ecg::Graph&, int*);
  auto counting = [&](CountingPass pass, const char* what, const char* rule = nullptr, int* total = nullptr) {
    return [&, pass, what, rule, total](PassRecord& rec) {
      int n = 0;
      g = pass(g, &n);
      rec.changed = n > 0;
      rec.detail = std::to_string(n) + " " + what;
      if (n && rule) result.rules_applied[rule] += n;
      if (total) *total += n;
    };
  };
  {  // rewriting runs in every fusion mode (but see merge_parallel_gemms), so the modes differ by fusion alone
    const auto noops = counting(rewrite::remove_noops, "no-ops removed", "remove no-op");
    const auto cse = counting(rewrite::eliminate_common_subexpressions, "nodes merged", "common subexpression");
    run_pass("remove_noops", noops);
    run_pass("eliminate_common_subexpressions", cse);  // first, so factoring rules see shared operands
    run_pass("fold_batchnorm", counting(rewrite::fold_batchnorm, "batch norms folded", "fold batch_norm into conv/linear"));
    run_pass("batchnorm_to_affine",
             counting(rewrite::batchnorm_to_affine, "batch norms made mul + add", "batch_norm to per-channel mul + add"));
    run_pass("fold_constants", fold);
    run_pass("apply_math_rules", [&](PassRecord& rec) {
      rewrite::RuleStats st;
      g = rewrite::apply_math_rules(g, &st);
      rec.changed = st.applied() > 0;
      rec.detail = std::to_string(st.applied()) + " rewrites, FLOPs " + std::to_string(st.flops_before) + " -> " +
                   std::to_string(st.flops_after);
      for (const auto& [name, r] : st.rules) result.rules_applied[name] += r.applied;
    });
    run_pass("fold_constants", fold);
    run_pass("remove_noops", noops);  // e.g. x * (c / c) folded to x * 1
    run_pass("eliminate_common_subexpressions", cse);
    // Fusion-aware: the slices these introduce are free only where the DNNFusion planner folds them
    // into strided operands; elsewhere (none, tvm) each would be a copy, so they stay off there.
    if (opts.fusion == fusion::Mode::DnnFusion) {
      run_pass("split_to_slices", counting(rewrite::split_to_slices, "splits replaced by slices", "split into slices"));
      run_pass("merge_parallel_gemms", counting(rewrite::merge_parallel_gemms, "GEMMs merged", "merge parallel GEMMs (X·[W1 W2])"));
      run_pass("fold_constants", fold);
    }
  }
  if (opts.layout != CompileOptions::Layout::Off) {
    run_pass("propagate_blocked_layout", [&](PassRecord& rec) {
      std::unique_ptr<layout::TuningDb> tdb;
      if (!opts.tuning_db.empty())
        tdb = std::make_unique<layout::TuningDb>(opts.tuning_db == "<default>" ? layout::TuningDb::default_path()
                                                                               : opts.tuning_db);
      auto& pool = runtime::shared_pool(opts.threads);
      layout::ChooseOptions co;
      co.tune = opts.tune && tdb;
      co.global_search = opts.layout != CompileOptions::Layout::Local;
      co.winograd = opts.winograd;
      co.db = tdb.get();
      co.par = &pool;
      co.threads = pool.num_threads();
      const layout::ConvSchemes schemes = layout::choose_conv_schemes(g, co);
      layout::LayoutStats st;
      g = layout::propagate_blocked_layout(g, schemes.fn(), &st, opts.layout != CompileOptions::Layout::ConvsOnly);
      result.convs_blocked = st.convs_blocked;
      result.convs_winograd_f2 = st.winograd_f2;
      result.convs_winograd_f4 = st.winograd_f4;
      result.layout_to_blocked = st.to_blocked;
      result.layout_to_plain = st.to_plain;
      result.layout_reblocked = st.reblocked;
      result.layout_propagated = st.ops_propagated;
      result.layout_method = schemes.report.method();
      result.convs_tuned_now = schemes.report.tuned_now;
      rec.changed = st.convs_blocked > 0;
      rec.detail = std::to_string(st.convs_blocked) + " convs NCHW[x]c (" + result.layout_method + "; Winograd F4 " +
                   std::to_string(st.winograd_f4) + ", F2 " + std::to_string(st.winograd_f2) + "), transforms " +
                   std::to_string(st.to_blocked) + " in / " + std::to_string(st.to_plain) + " out / " +
                   std::to_string(st.reblocked) + " re-block, " + std::to_string(st.ops_propagated) + " ops propagated";
    });
    run_pass("fold_constants", fold);  // packs the conv weights once
    run_pass("remove_noops", counting(rewrite::remove_noops, "no-ops removed"));
    run_pass("fold_input_scale", counting(layout::fold_input_scale, "channel scales folded into conv weights"));
    // A conv -> conv fusion: beyond TVM's rules (and off with fusion off), so DNNFusion mode only.
    if (opts.fusion == fusion::Mode::DnnFusion && opts.fuse_expand_depthwise)
      run_pass("fuse_expand_depthwise", counting(layout::fuse_expand_depthwise, "1x1 expand + depthwise convs fused",
                                                 nullptr, &result.expand_dw_fused));
  }
  if (opts.pack_gemm_weights) {
    run_pass("pack_gemm_weights", [&](PassRecord& rec) {
      int n = 0;
      g = layout::pack_gemm_weights(g, &n);
      result.gemms_packed = n;
      rec.changed = n > 0;
      rec.detail = std::to_string(n) + " GEMM weights packed";
    });
    if (result.gemms_packed) run_pass("fold_constants", fold);  // evaluates the packing once
  }
  result.ops_after_rewrite = static_cast<int>(g.nodes().size());
  fusion::PlanHooks hooks;
  hooks.fusible = [](const ecg::Graph& gr, int n) { return codegen::can_fuse(gr, n); };
  hooks.m2m_input_fusible = [](const ecg::Graph& gr, int m, int v) { return codegen::m2m_input_fusible(gr, m, v); };
  hooks.is_index_op = [](const ecg::Graph& gr, int n) { return codegen::is_index_op(gr.node(n).op); };
  hooks.free_merge = [](const ecg::Graph& gr, const std::vector<int>& block, int cand) {
    return codegen::free_merge(gr, block, cand);
  };
  // Yellow cells ask the profile database; pairs it has not seen are measured in one batch (one
  // compiler run), stored, and the plan is made again with the answers.
  std::unique_ptr<fusion::ProfileDb> db;
  std::vector<codegen::YellowQuery> pending;
  std::vector<std::string> pending_keys;
  const std::string signature = fusion::ProfileDb::machine_signature(runtime::shared_pool(opts.threads).num_threads());
  if (opts.fusion == fusion::Mode::DnnFusion && opts.profile) {
    db = std::make_unique<fusion::ProfileDb>(fusion::ProfileDb::default_path());
    hooks.yellow_is_faster = [&](const ecg::Graph& gr, const std::vector<int>& block, int cand) {
      auto [p, c] = adjacent_pair(gr, block, cand);
      std::vector<std::vector<int64_t>> shapes;
      for (int v : gr.node(p).inputs)
        if (v >= 0) shapes.push_back(gr.value(v).shape);
      shapes.push_back(gr.value(gr.node(c).outputs[0]).shape);
      codegen::YellowQuery q{block, cand};
      const std::string key = fusion::ProfileDb::make_key(signature, gr.node(p).op, gr.node(c).op, shapes,
                                                          codegen::yellow_key(gr, q));
      if (auto e = db->lookup(key)) return e->fusing_not_slower();
      if (std::find(pending_keys.begin(), pending_keys.end(), key) == pending_keys.end()) {
        pending.push_back(q);
        pending_keys.push_back(key);
      }
      return false;
    };
  }
  run_pass("plan_fusion", [&](PassRecord& rec) {
    for (int round = 0;; ++round) {
      result.plan = fusion::plan_fusion(opts.fusion, g, hooks);
      if (pending.empty() || round == 8) break;
      auto timings = codegen::measure_yellow(g, pending, opts.threads);
      for (size_t i = 0; i < pending.size(); ++i)
        db->store(pending_keys[i], fusion::ProfileDb::Entry{timings[i].fused_us, timings[i].separate_us});
      result.profiled_pairs += static_cast<int>(pending.size());
      try {
        db->save();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dnnfusion: %s (measurements kept for this process only)\n", e.what());
      }
      pending.clear();
      pending_keys.clear();
    }
    fusion::verify_plan(g, result.plan, hooks);
    rec.detail = std::string(fusion::mode_name(opts.fusion)) + ": " + std::to_string(result.plan.blocks.size()) +
                 " blocks, " + std::to_string(result.profiled_pairs) + " yellow pairs profiled";
    if (debug) {
      std::string s;
      for (size_t b = 0; b < result.plan.blocks.size(); ++b) {
        s += "  block " + std::to_string(b) + " [" + ecg::mapping_type_name(result.plan.blocks[b].type) + "]:";
        for (int n : result.plan.blocks[b].nodes) s += " " + std::to_string(n) + ":" + g.node(n).op;
        s += "\n";
      }
      std::fprintf(stderr, "[dnnfusion] fusion plan (%s):\n%s", fusion::mode_name(opts.fusion), s.c_str());
    }
  });
  runtime::Program program;
  if (opts.fusion != fusion::Mode::None) {
    run_pass("codegen", [&](PassRecord& rec) {
      codegen::CodegenResult cg = codegen::generate_program(g, result.plan);
      program = std::move(cg.program);
      result.blocks = std::move(cg.blocks);
      result.edge_rules = std::move(cg.edge_rules);
      result.generated_functions = cg.functions;
      result.codegen_compile_ms = cg.module.compile_ms;
      result.codegen_cache_hit = cg.module.cache_hit;
      result.generated_source_path = cg.module.source_path;
      rec.detail = std::to_string(cg.functions) + " generated functions" +
                   (cg.functions ? (cg.module.cache_hit ? " (kernel cache hit)" : ", compiled in " + std::to_string(static_cast<int>(cg.module.compile_ms)) + " ms") : "");
    });
  }
  run_pass("plan_and_bind", [&](PassRecord& rec) {
    result.exe = std::make_unique<runtime::Executable>(std::move(g), runtime::ExecOptions{opts.threads}, std::move(program));
    const auto& s = result.exe->stats();
    rec.detail = std::to_string(s.kernels_per_call) + " kernels, arena " + std::to_string(s.arena_bytes) + " B";
    if (debug) g = result.exe->graph();  // for the debug dump
  });
  return result;
}

}  // namespace dnnfusion
