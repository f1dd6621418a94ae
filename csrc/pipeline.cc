#include "pipeline.h"

#include "common/error.h"
#include "ecg/verifier.h"
#include "fusion/plan_with_profiles.h"
#include "fusion/profile_db.h"
#include "pass_logger.h"
#include "rewrite/apply_math_rules.h"
#include "rewrite/batchnorm_to_affine.h"
#include "rewrite/eliminate_common_subexpressions.h"
#include "rewrite/fold_batchnorm.h"
#include "rewrite/fold_empty_values.h"
#include "rewrite/merge_parallel_gemms.h"
#include "rewrite/remove_noops.h"
#include "rewrite/split_to_slices.h"
#include "runtime/thread_pool.h"
#include "target/target.h"

namespace dnnfusion {

CompileOptions::Layout parse_layout_mode(const std::string& s) {
  if (s == "global") return CompileOptions::Layout::Global;
  if (s == "local") return CompileOptions::Layout::Local;
  if (s == "convs-only") return CompileOptions::Layout::ConvsOnly;
  if (s == "off") return CompileOptions::Layout::Off;
  DNNF_THROW_AS(InvalidInput, "unknown layout mode '", s, "' (valid: global, local, convs-only, off)");
}

CompileOptions::Amx parse_amx_mode(const std::string& s) {
  if (s == "measure") return CompileOptions::Amx::Measure;
  if (s == "rule") return CompileOptions::Amx::Rule;
  if (s == "off") return CompileOptions::Amx::Off;
  DNNF_THROW_AS(InvalidInput, "unknown amx mode '", s, "' (valid: measure, rule, off)");
}

const char* amx_mode_name(CompileOptions::Amx a) {
  switch (a) {
    case CompileOptions::Amx::Measure: return "measure";
    case CompileOptions::Amx::Rule: return "rule";
    case CompileOptions::Amx::Off: return "off";
  }
  return "measure";
}

namespace {

Pass verify_pass() {
  return {"verify", [](PassContext& c) { ecg::verify_graph(c.g); }};
}

Pass math_rules_pass() {
  return {"apply_math_rules", [](PassContext& c) {
            rewrite::RuleStats st;
            c.g = rewrite::apply_math_rules(c.g, &st);
            c.changed = st.applied() > 0;
            c.detail = std::to_string(st.applied()) + " rewrites, FLOPs " + std::to_string(st.flops_before) + " -> " +
                       std::to_string(st.flops_after);
            for (const auto& [name, r] : st.rules) c.stats.rules_applied[name] += r.applied;
          }};
}

// Rewriting by mathematical properties and the cleanups around it. It runs in every fusion mode
// (except the two fusion-aware rewrites), so that the modes differ by fusion alone.
std::vector<Pass> rewrite_passes(const CompileOptions& opts) {
  const Pass noops = counting_pass("remove_noops", rewrite::remove_noops, "no-ops removed", "remove no-op");
  const Pass cse = counting_pass("eliminate_common_subexpressions", rewrite::eliminate_common_subexpressions,
                                 "nodes merged", "common subexpression");
  std::vector<Pass> p = {
      verify_pass(),
      counting_pass("fold_empty_values", rewrite::fold_empty_values, "zero-size nodes removed"),
      fold_constants_pass(),
      noops,
      cse,  // before the rules, so factoring rules see shared operands
      counting_pass("fold_batchnorm", rewrite::fold_batchnorm, "batch norms folded", "fold batch_norm into conv/linear"),
      counting_pass("batchnorm_to_affine", rewrite::batchnorm_to_affine, "batch norms made mul + add",
                    "batch_norm to per-channel mul + add"),
      fold_constants_pass(),
      math_rules_pass(),
      fold_constants_pass(),
      noops,  // e.g. x * (c / c) folded to x * 1
      cse,
  };
  // The slices these introduce are free only where the DNNFusion planner folds them into strided
  // operands; elsewhere (none, tvm) each would be a copy, so they stay off there.
  if (opts.fusion == fusion::Mode::DnnFusion) {
    p.push_back(counting_pass("split_to_slices", rewrite::split_to_slices, "splits replaced by slices", "split into slices"));
    p.push_back(counting_pass("merge_parallel_gemms", rewrite::merge_parallel_gemms, "GEMMs merged",
                              "merge parallel GEMMs (X·[W1 W2])"));
    p.push_back(fold_constants_pass());
  }
  return p;
}

fusion::ProfiledPlanning profiled_planning(const target::Target& t, const CompileOptions& opts,
                                           std::unique_ptr<fusion::ProfileDb>& db) {
  fusion::ProfiledPlanning pp;
  if (!(opts.fusion == fusion::Mode::DnnFusion && opts.profile)) return pp;
  db = std::make_unique<fusion::ProfileDb>(fusion::ProfileDb::default_path());
  pp.db = db.get();
  pp.signature = t.profile_signature(runtime::shared_pool(opts.threads).num_threads());
  pp.key_detail = [&t](const ecg::Graph& g, const fusion::YellowQuery& q) { return t.yellow_key(g, q); };
  pp.measure = [&t, &opts](const ecg::Graph& g, const std::vector<fusion::YellowQuery>& qs) {
    return t.measure_yellow(g, qs, opts);
  };
  return pp;
}

Pass plan_fusion_pass(const target::Target& t, fusion::Mode mode, fusion::Plan& plan, const PassLogger& log) {
  return {"plan_fusion", [&t, mode, &plan, &log](PassContext& c) {
            std::unique_ptr<fusion::ProfileDb> db;
            const fusion::ProfiledPlanning pp = profiled_planning(t, c.opts, db);
            plan = fusion::plan_with_profiles(mode, c.g, t.plan_hooks(c.opts), pp, &c.stats.profiled_pairs);
            c.detail = std::string(fusion::mode_name(mode)) + ": " + std::to_string(plan.blocks.size()) + " blocks, " +
                       std::to_string(c.stats.profiled_pairs) + " yellow pairs profiled";
            if (!log.debug()) return;
            std::string s;
            for (size_t b = 0; b < plan.blocks.size(); ++b) {
              s += "  block " + std::to_string(b) + " [" + ecg::mapping_type_name(plan.blocks[b].type) + "]:";
              for (int n : plan.blocks[b].nodes) s += " " + std::to_string(n) + ":" + c.g.node(n).op;
              s += "\n";
            }
            log.dump(std::string("fusion plan (") + fusion::mode_name(mode) + ")", s);
          }};
}

Pass codegen_pass(const target::Target& t, const fusion::Plan& plan, Compiled& out, runtime::Program& program) {
  return {"codegen", [&t, &plan, &out, &program](PassContext& c) {
            target::CodegenOutput cg = t.codegen(c.g, plan, c.opts);
            program = std::move(cg.program);
            out.blocks = std::move(cg.blocks);
            CompileStats& s = c.stats;
            s.edge_rules = std::move(cg.edge_rules);
            s.generated_functions = cg.functions;
            s.codegen_compile_ms = cg.compile_ms;
            s.codegen_cache_hit = cg.cache_hit;
            s.generated_source_path = cg.source_path;
            c.detail = std::to_string(cg.functions) + " generated functions" +
                       (cg.functions ? (cg.cache_hit ? " (kernel cache hit)"
                                                     : ", compiled in " + std::to_string(static_cast<int>(cg.compile_ms)) + " ms")
                                     : "");
          }};
}

Pass bind_pass(const target::Target& t, runtime::Program& program, Compiled& out, bool debug) {
  return {"plan_and_bind", [&t, &program, &out, debug](PassContext& c) {
            out.exe = std::make_unique<runtime::Executable>(std::move(c.g), runtime::ExecOptions{c.opts.threads, &t},
                                                            std::move(program));
            const auto& s = out.exe->stats();
            c.detail = std::to_string(s.kernels_per_call) + " kernels, arena " + std::to_string(s.arena_bytes) + " B";
            if (debug) c.g = out.exe->graph();  // for the debug dump
          }};
}

}  // namespace

Compiled compile_graph(ecg::Graph g, const CompileOptions& requested) {
  const target::Target& t = requested.target.empty() ? target::registry().default_target()
                                                     : target::registry().require_available(requested.target);
  CompileOptions opts = requested;
  if (!t.fuses()) opts.fusion = fusion::Mode::None;  // every block one node, whatever was asked
  Compiled out;
  CompileStats& stats = out.stats;
  stats.target = t.name();
  t.init_stats(stats);
  PassLogger log(stats);
  // Compile-time subgraphs run on the target's own kernels, single-threaded.
  const target::Target& evaluator = t.evaluates_constants() ? t : target::registry().host_evaluator();
  const Evaluator evaluate = [&evaluator](const ecg::Graph& cg) {
    runtime::Executable exe(cg, runtime::ExecOptions{1, &evaluator});
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<void*> outs;
    for (int o : cg.outputs()) bytes.emplace_back(static_cast<size_t>(cg.value(o).nbytes()));
    for (auto& b : bytes) outs.push_back(b.data());
    exe.run({}, outs);
    return bytes;
  };
  PassContext ctx{g, opts, stats, t, evaluate, false, {}};
  runtime::Program program;

  log.dump("imported ECG", g.dump());
  stats.ops_imported = static_cast<int>(g.nodes().size());
  for (const Pass& p : rewrite_passes(opts)) log.run(p, ctx);
  for (const Pass& p : t.passes(opts)) log.run(p, ctx);
  stats.ops_after_rewrite = static_cast<int>(g.nodes().size());
  log.run(plan_fusion_pass(t, opts.fusion, out.plan, log), ctx);
  log.run(codegen_pass(t, out.plan, out, program), ctx);
  log.run(bind_pass(t, program, out, log.debug()), ctx);
  return out;
}

}  // namespace dnnfusion
