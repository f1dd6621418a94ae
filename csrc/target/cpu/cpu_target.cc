// The cpu target: NCHW[x]c layouts with pre-packed weights and Winograd (layout/), GEMM weight
// packing, expand + depthwise conv fusion, fused blocks emitted as one C++ translation unit and
// compiled by the system compiler (codegen/), and the kernel table over csrc/kernels/cpu (ops/).
// Buffers are 64-byte-aligned host memory; the thread pool splits each kernel's outer loop.
#include <memory>

#include "common/error.h"
#include "fusion/profile_db.h"
#include "kernels/cpu/data_movement.h"
#include "runtime/thread_pool.h"
#include "codegen/view_compose.h"
#include "target/cpu/codegen/fused_codegen.h"
#include "target/cpu/codegen/yellow_profiler.h"
#include "target/cpu/cpu_kernels.h"
#include "target/cpu/layout/choose_conv_schemes.h"
#include "target/cpu/layout/fold_input_scale.h"
#include "target/cpu/layout/fuse_channel_mean.h"
#include "target/cpu/layout/fuse_depthwise_project.h"
#include "target/cpu/layout/fuse_expand_depthwise.h"
#include "target/cpu/layout/pack_gemm_weights.h"
#include "target/cpu/layout/use_amx_convs.h"
#include "target/cpu/layout/propagate_blocked_layout.h"
#include "target/cpu/layout/tuning_db.h"
#include "rewrite/remove_noops.h"

namespace dnnfusion::target {
namespace cpu {

namespace {

// The counters this target reports (dnnfusion/targets/cpu.py reads them by these names).
constexpr const char* kCounters[] = {"convs_blocked",     "convs_winograd_f2", "convs_winograd_f4",
                                     "layout_to_blocked", "layout_to_plain",   "layout_reblocked",
                                     "layout_propagated", "convs_tuned_now",   "expand_dw_fused",
                                     "se_means_fused",    "dw_projects_fused", "gemms_packed",
                                     "gemms_bf16x6",      "convs_amx",         "gemms_amx_declined",
                                     "convs_amx_declined"};

// How this compile picks the layers that run on AMX (measuring on the pool the model runs on).
layout::AmxChoice amx_choice(const CompileOptions& o) {
  return {o.amx, &runtime::shared_pool(o.threads)};
}

// "3 on AMX (bf16x6), 1 kept fp32 after timing both (2 shapes timed, 41 ms)"
std::string amx_detail(const layout::AmxChoiceStats& st, const CompileOptions& o) {
  std::string d = std::to_string(st.taken) + " on AMX (bf16x6)";
  if (o.amx == CompileOptions::Amx::Measure && (st.taken || st.declined))
    d += ", " + std::to_string(st.declined) + " kept fp32 after timing both (" + std::to_string(st.timed) +
         " shapes timed, " + std::to_string(static_cast<int>(st.ms + 0.5)) + " ms)";
  else if (o.amx != CompileOptions::Amx::Measure)
    d += std::string(" (amx mode '") + amx_mode_name(o.amx) + "')";
  return d;
}

Pass use_amx_convs_pass() {
  return {"use_amx_convs", [](PassContext& c) {
            layout::AmxChoiceStats st;
            c.g = layout::use_amx_convs(c.g, amx_choice(c.opts), &st);
            c.changed = st.taken > 0;
            c.detail = "convs: " + amx_detail(st, c.opts);
            c.stats.target_counters["convs_amx"] += st.taken;
            c.stats.target_counters["convs_amx_declined"] += st.declined;
          }};
}

// NCHW[x]c: choose every conv's scheme (heuristic, tuning database or global search, with the
// Winograd choice), then propagate the blocked layout through the ops that tolerate it.
Pass propagate_layout_pass() {
  return {"propagate_blocked_layout", [](PassContext& c) {
            const CompileOptions& o = c.opts;
            std::unique_ptr<layout::TuningDb> tdb;
            if (!o.tuning_db.empty())
              tdb = std::make_unique<layout::TuningDb>(o.tuning_db == "<default>" ? layout::TuningDb::default_path()
                                                                                   : o.tuning_db);
            auto& pool = runtime::shared_pool(o.threads);
            layout::ChooseOptions co;
            co.tune = o.tune && tdb;
            co.global_search = o.layout != CompileOptions::Layout::Local;
            co.winograd = o.winograd;
            co.db = tdb.get();
            co.par = &pool;
            co.threads = pool.num_threads();
            const layout::ConvSchemes schemes = layout::choose_conv_schemes(c.g, co);
            layout::LayoutStats st;
            c.g = layout::propagate_blocked_layout(c.g, schemes.fn(), &st, o.layout != CompileOptions::Layout::ConvsOnly);
            auto& k = c.stats.target_counters;
            k["convs_blocked"] = st.convs_blocked;
            k["convs_winograd_f2"] = st.winograd_f2;
            k["convs_winograd_f4"] = st.winograd_f4;
            k["layout_to_blocked"] = st.to_blocked;
            k["layout_to_plain"] = st.to_plain;
            k["layout_reblocked"] = st.reblocked;
            k["layout_propagated"] = st.ops_propagated;
            k["convs_tuned_now"] = schemes.report.tuned_now;
            c.stats.target_notes["layout_method"] = schemes.report.method();
            c.changed = st.convs_blocked > 0;
            c.detail = std::to_string(st.convs_blocked) + " convs NCHW[x]c (" + schemes.report.method() +
                       "; Winograd F4 " + std::to_string(st.winograd_f4) + ", F2 " + std::to_string(st.winograd_f2) +
                       "), transforms " + std::to_string(st.to_blocked) + " in / " + std::to_string(st.to_plain) +
                       " out / " + std::to_string(st.reblocked) + " re-block, " + std::to_string(st.ops_propagated) +
                       " ops propagated";
          }};
}

class CpuTarget final : public Target {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "NCHW[x]c CPU kernels (AVX-512 / AVX2 / scalar by cpuid), fused blocks compiled by the system C++ compiler";
  }
  std::string device_type() const override { return "cpu"; }
  bool fuses() const override { return true; }

  std::vector<Pass> passes(const CompileOptions& o) const override {
    std::vector<Pass> p;
    if (o.layout != CompileOptions::Layout::Off) {
      p.push_back(propagate_layout_pass());
      p.push_back(fold_constants_pass());  // packs the conv weights once
      p.push_back(counting_pass("remove_noops", rewrite::remove_noops, "no-ops removed"));
      p.push_back(counting_pass("fold_input_scale", layout::fold_input_scale, "channel scales folded into conv weights"));
      // A conv -> conv fusion: beyond TVM's rules (and off with fusion off), so DNNFusion mode only.
      if (o.fusion == fusion::Mode::DnnFusion && o.fuse_expand_depthwise) {
        p.push_back(counting_pass("fuse_expand_depthwise", layout::fuse_expand_depthwise,
                                  "conv + depthwise conv pairs fused", "", "expand_dw_fused"));
        p.push_back(counting_pass("fuse_channel_mean", layout::fuse_channel_mean,
                                  "squeeze-excitation means taken in the conv kernel", "", "se_means_fused"));
        p.push_back(counting_pass("fuse_depthwise_project",
                                  [](const ecg::Graph& g, int* n) { return layout::fuse_depthwise_project(g, n); },
                                  "1x1 projections fused after their depthwise conv", "", "dw_projects_fused"));
      }
      // After the fusions: they read the direct kernel's packed weights.
      p.push_back(use_amx_convs_pass());
      p.push_back({"fold_constants", [fold = fold_constants_pass()](PassContext& c) {
                     if (c.stats.target_counters["convs_amx"]) fold.run(c);  // evaluates the repacking once
                     else c.detail = "skipped: no conv on AMX";
                   }});
    }
    if (o.pack_gemm_weights) {
      p.push_back({"pack_gemm_weights", [](PassContext& c) {
                     int n = 0;
                     layout::AmxChoiceStats st;
                     c.g = layout::pack_gemm_weights(c.g, amx_choice(c.opts), &n, &st);
                     c.changed = n > 0;
                     c.detail = std::to_string(n) + " GEMM weights packed; " + amx_detail(st, c.opts);
                     c.stats.target_counters["gemms_packed"] += n;
                     c.stats.target_counters["gemms_bf16x6"] += st.taken;
                     c.stats.target_counters["gemms_amx_declined"] += st.declined;
                   }});
      p.push_back({"fold_constants", [fold = fold_constants_pass()](PassContext& c) {
                     if (c.stats.target_counters["gemms_packed"]) fold.run(c);  // evaluates the packing once
                     else c.detail = "skipped: no GEMM weight packed";
                   }});
    }
    return p;
  }

  fusion::PlanHooks plan_hooks(const CompileOptions&) const override {
    fusion::PlanHooks h;
    h.fusible = [](const ecg::Graph& g, int n) { return codegen::can_fuse(g, n); };
    h.m2m_input_fusible = [](const ecg::Graph& g, int m, int v) { return codegen::m2m_input_fusible(g, m, v); };
    h.is_index_op = [](const ecg::Graph& g, int n) { return codegen::is_index_op(g.node(n).op); };
    h.free_merge = [](const ecg::Graph& g, const std::vector<int>& block, int cand) {
      return codegen::free_merge(g, block, cand);
    };
    return h;
  }

  std::vector<YellowTiming> measure_yellow(const ecg::Graph& g, const std::vector<YellowQuery>& queries,
                                           const CompileOptions& o) const override {
    return codegen::measure_yellow(g, queries, o.threads, *this);
  }
  std::string yellow_key(const ecg::Graph& g, const YellowQuery& q) const override { return codegen::yellow_key(g, q); }
  std::string profile_signature(int threads) const override { return fusion::ProfileDb::machine_signature(threads); }

  CodegenOutput codegen(const ecg::Graph& g, const fusion::Plan& plan, const CompileOptions& o) const override {
    if (o.fusion == fusion::Mode::None) return {};  // one library kernel per node, nothing generated
    codegen::CodegenResult cg = codegen::generate_program(g, plan);
    CodegenOutput out;
    out.program = std::move(cg.program);
    out.blocks = std::move(cg.blocks);
    out.edge_rules = std::move(cg.edge_rules);
    out.functions = cg.functions;
    out.compile_ms = cg.module.compile_ms;
    out.cache_hit = cg.module.cache_hit;
    out.source_path = cg.module.source_path;
    return out;
  }

  void init_stats(CompileStats& s) const override {
    for (const char* k : kCounters) s.target_counters[k] = 0;
    s.target_notes["layout_method"] = "";
  }

  void* allocate(size_t bytes) const override { return host_allocate(bytes); }
  void deallocate(void* p) const override { host_deallocate(p); }
  void strided_copy(size_t elem_size, const std::vector<int64_t>& shape, const void* src,
                    const std::vector<int64_t>& strides, int64_t offset, void* dst,
                    const kernels::Parallel& par) const override {
    kernels::strided_copy(elem_size, shape, src, strides, offset, dst, par);
  }

 protected:
  void register_kernels(runtime::KernelTable& t) const override {
    runtime::register_view_ops(t);
    register_elementwise_ops(t);
    register_nn_ops(t);
    register_misc_ops(t);
  }
};

}  // namespace

const Target& cpu_target() { return registry().get("cpu"); }

}  // namespace cpu

std::unique_ptr<Target> make_cpu_target() { return std::make_unique<cpu::CpuTarget>(); }

}  // namespace dnnfusion::target
