#include "target/cpu/layout/choose_conv_schemes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include "common/conv_geometry.h"
#include "common/error.h"
#include "common/progress.h"
#include "ecg/op_registry.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/conv_winograd.h"
#include "target/cpu/layout/solve_layout_assignment.h"
#include "target/cpu/layout/timing_operands.h"
#include "target/cpu/layout/tuning_db.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;
using kernels::Conv2dShape;
using kernels::ConvNchwcKnobs;

std::string SchemeReport::method() const {
  if (global) return exact ? "global (exact)" : "global (heuristic)";
  if (tuned_now + from_db > 0) return heuristic ? "local (partly heuristic)" : "local";
  return "heuristic";
}

namespace {

// The NCHW conv node's shape, or nullopt when it is not a 2-D float conv with compile-time
// weights that conv2d_nchwc supports.
std::optional<Conv2dShape> blockable_conv(const Graph& g, const Node& n) {
  if (n.op != "convolution" || n.attr_int("transposed", 0)) return std::nullopt;
  const auto& x = g.value(n.inputs[0]).shape;
  const auto& wv = g.value(n.inputs[1]);
  if (x.size() != 4 || wv.shape.size() != 4 || !wv.is_compile_time() || g.value(n.outputs[0]).dtype != DType::Float32)
    return std::nullopt;
  if (n.input_or_absent(2) >= 0 && !g.value(n.inputs[2]).is_compile_time()) return std::nullopt;
  auto stride = n.attr_ints("stride", {1}), pad = n.attr_ints("padding", {0}), dil = n.attr_ints("dilation", {1});
  Conv2dShape s{x[0], x[1], x[2], x[3], wv.shape[0], wv.shape[2], wv.shape[3],
                at_or(stride, 0, 1), at_or(stride, 1, 1), at_or(pad, 0, 0), at_or(pad, 1, 0),
                at_or(dil, 0, 1), at_or(dil, 1, 1), n.attr_int("groups", 1)};
  try {
    if (!kernels::conv_nchwc_supported(s)) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (s.OH() <= 0 || s.OW() <= 0) return std::nullopt;
  return s;
}

bool depthwise(const Conv2dShape& s) { return s.groups > 1 && s.groups == s.C && s.K == s.C; }
bool grouped(const Conv2dShape& s) { return s.groups > 1 && !depthwise(s); }

std::vector<int> oc_blocks(kernels::Isa isa) {
  if (isa == kernels::Isa::Avx512) return {8, 16, 32, 64};
  return {8, 16};
}

ConvNchwcKnobs heuristic_knobs(const Conv2dShape& s, int ic, int oc, kernels::Isa isa) {
  const ConvNchwcKnobs d = kernels::conv_nchwc_default_knobs(s, isa);
  return ConvNchwcKnobs{ic, oc, d.oc_bn == oc ? d.reg_n : kernels::conv_nchwc_tile_reg_n(s, isa, oc), true};
}

struct Candidate {
  ConvNchwcKnobs knobs;
  double us = -1;  // measured time of one call, < 0: unknown
};

struct ConvVar {
  int node;
  Conv2dShape s;
  std::vector<Candidate> cands;
  bool measured() const {
    return std::all_of(cands.begin(), cands.end(), [](const Candidate& c) { return c.us >= 0; });
  }
};

// (ic_bn, oc_bn) pairs: blocks the ISA vectorizes that fit the channels (block_fits: divide them
// or pad them by at most half); a narrow input that no block fits (the RGB image) is one block of
// all its channels.
std::vector<std::pair<int, int>> block_pairs(const Conv2dShape& s, kernels::Isa isa) {
  std::vector<std::pair<int, int>> out;
  for (int oc : oc_blocks(isa)) {
    if (!block_fits(s.K, oc)) continue;
    if (depthwise(s)) {
      out.push_back({oc, oc});
      continue;
    }
    bool any = false;
    for (int ic : oc_blocks(isa))
      if (block_fits(s.C, ic) && kernels::conv_nchwc_group_blocks_fit(s, ic, oc)) out.push_back({ic, oc}), any = true;
    if (!any && s.C <= 64 && kernels::conv_nchwc_group_blocks_fit(s, static_cast<int>(s.C), oc))
      out.push_back({static_cast<int>(s.C), oc});
  }
  if (out.empty() && grouped(s)) {  // groups narrower than every vector block: the kernel's choice,
    const auto d = kernels::conv_nchwc_default_knobs(s, isa);  // if it fits the channels (else NCHW)
    if (block_fits(s.C, d.ic_bn) && block_fits(s.K, d.oc_bn) && kernels::conv_nchwc_group_blocks_fit(s, d.ic_bn, d.oc_bn))
      out.push_back({d.ic_bn, d.oc_bn});
  }
  return out;
}

double median_us(const std::function<void()>& fn) {
  fn();  // warm caches and the pool
  std::vector<double> t;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 9; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (i >= 2 && t1 - start > std::chrono::milliseconds(40)) break;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  fill_timing_operand(v.data(), static_cast<int64_t>(n), seed);
  return v;
}

// Local search for one workload and block pair: every candidate knob set of the pair, timed.
Candidate tune_pair(const Conv2dShape& s, int ic, int oc, const kernels::Parallel& par) {
  const auto isa = kernels::active_isa();
  std::vector<ConvNchwcKnobs> knobs;
  for (const auto& k : kernels::conv_nchwc_candidate_knobs(s, isa))
    if (k.ic_bn == ic && k.oc_bn == oc) knobs.push_back(k);
  if (knobs.empty()) knobs.push_back(heuristic_knobs(s, ic, oc, isa));
  auto x = random_floats(static_cast<size_t>(kernels::nchwc_floats(s.N, s.C, s.H, s.W, depthwise(s) ? oc : ic)), 1);
  auto w = random_floats(static_cast<size_t>(s.K * (s.C / s.groups) * s.R * s.S), 2);
  auto bias = random_floats(static_cast<size_t>(s.K), 3);
  std::vector<float> y(static_cast<size_t>(kernels::nchwc_floats(s.N, s.K, s.OH(), s.OW(), oc)));
  Candidate best;
  for (const auto& k : knobs) {
    std::vector<float> packed(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(s, k)));
    kernels::conv_nchwc_pack_weight(s, k, w.data(), packed.data());
    const double us = median_us([&] {
      kernels::conv2d_nchwc(s, k, x.data(), packed.data(), bias.data(), nullptr, kernels::Activation::None, y.data(),
                            par);
    });
    if (best.us < 0 || us < best.us) best = Candidate{k, us};
  }
  return best;
}

// Conv nodes whose output reaches value v through layout-oblivious (element-wise) ops only.
void producing_convs(const Graph& g, int v, const std::unordered_map<int, int>& var_of, std::set<int>* out) {
  std::vector<int> stack{v};
  std::set<int> seen;
  while (!stack.empty()) {
    const int cur = stack.back();
    stack.pop_back();
    if (!seen.insert(cur).second) continue;
    const int p = g.value(cur).producer;
    if (p < 0) continue;
    const Node& n = g.node(p);
    if (auto it = var_of.find(p); it != var_of.end()) {
      out->insert(it->second);
      continue;
    }
    if (!n.info || n.info->mapping != ecg::MappingType::OneToOne || n.outputs.size() != 1) continue;
    for (int in : n.inputs)
      if (in >= 0 && !g.value(in).is_compile_time() && g.value(in).shape == g.value(cur).shape) stack.push_back(in);
  }
}

class Chooser {
 public:
  Chooser(const Graph& g, const ChooseOptions& o) : g_(g), o_(o) {}

  ConvSchemes run() {
    const auto isa = kernels::active_isa();
    for (const Node& n : g_.nodes()) {
      auto s = blockable_conv(g_, n);
      if (!s) continue;
      ConvVar v{n.id, *s, {}};
      for (auto [ic, oc] : block_pairs(*s, isa)) v.cands.push_back({heuristic_knobs(*s, ic, oc, isa), -1});
      if (v.cands.empty()) continue;
      var_of_[n.id] = static_cast<int>(vars_.size());
      vars_.push_back(std::move(v));
    }
    if (o_.db) measure();
    ConvSchemes out;
    out.winograd = o_.winograd;
    SchemeReport& rep = out.report;
    rep.tuned_now = tuned_now_;
    rep.from_db = from_db_;
    const bool all_measured = !vars_.empty() && std::all_of(vars_.begin(), vars_.end(), [](const ConvVar& v) { return v.measured(); });
    std::vector<int> choice(vars_.size(), -1);
    if (all_measured && o_.global_search) {
      LayoutSolution sol = solve_layout_assignment(problem());
      choice = sol.choice;
      rep.global = true;
      rep.exact = sol.exact;
      rep.predicted_us = sol.cost;
    }
    for (size_t i = 0; i < vars_.size(); ++i) {
      const ConvVar& v = vars_[i];
      if (choice[i] < 0 && v.measured()) {
        choice[i] = 0;
        for (size_t c = 1; c < v.cands.size(); ++c)
          if (v.cands[c].us < v.cands[choice[i]].us) choice[i] = static_cast<int>(c);
      }
      if (choice[i] >= 0) {
        const auto& k = v.cands[choice[i]].knobs;
        out.by_node[v.node] = ConvScheme{k.ic_bn, k.oc_bn, k.reg_n, k.unroll_ker};
      } else {
        ++rep.heuristic;
        out.adaptive.insert(v.node);
        out.by_node[v.node] = default_scheme(v);
      }
    }
    rep.convs = static_cast<int>(out.by_node.size());
    return out;
  }

 private:
  ConvScheme default_scheme(const ConvVar& v) const {
    const auto d = kernels::conv_nchwc_default_knobs(v.s, kernels::active_isa());
    for (const auto& c : v.cands)  // the kernel's default pair when it fits the channels
      if (c.knobs.oc_bn == d.oc_bn && c.knobs.ic_bn == d.ic_bn) return {d.ic_bn, d.oc_bn, d.reg_n, d.unroll_ker};
    const Candidate* pick = &v.cands.back();  // else the default oc_bn with the widest ic_bn, else the widest pair
    for (const auto& c : v.cands)
      if (c.knobs.oc_bn == d.oc_bn && (pick->knobs.oc_bn != d.oc_bn || c.knobs.ic_bn > pick->knobs.ic_bn)) pick = &c;
    const auto& k = pick->knobs;
    return {k.ic_bn, k.oc_bn, k.oc_bn == d.oc_bn ? d.reg_n : k.reg_n, k.unroll_ker};
  }

  // Fills candidate times from the database, measuring (tune) what it lacks.
  void measure() {
    std::vector<std::pair<int, int>> todo;  // (var, cand) to measure
    for (size_t i = 0; i < vars_.size(); ++i)
      for (size_t c = 0; c < vars_[i].cands.size(); ++c) {
        Candidate& cand = vars_[i].cands[c];
        const auto key = TuningDb::make_key(vars_[i].s, cand.knobs.ic_bn, cand.knobs.oc_bn, o_.threads);
        if (auto e = o_.db->lookup(key)) {
          ConvNchwcKnobs k{cand.knobs.ic_bn, cand.knobs.oc_bn, e->reg_n, e->unroll_ker};
          try {
            kernels::conv_nchwc_check(vars_[i].s, k, kernels::active_isa());
            cand = Candidate{k, e->us};
            ++from_db_;
            continue;
          } catch (const std::exception&) {  // knobs this ISA cannot run: re-tune
          }
        }
        if (o_.tune) todo.emplace_back(static_cast<int>(i), static_cast<int>(c));
      }
    if (todo.empty()) return;
    DNNF_CHECK(o_.par != nullptr, "choose_conv_schemes: tuning needs a thread pool");
    std::map<std::string, Candidate> done;  // identical workloads (ResNet's repeated blocks) once
    size_t step = 0;
    progress_bar("tuning convolutions", 0, todo.size());
    for (auto [i, c] : todo) {
      Candidate& cand = vars_[i].cands[c];
      const auto key = TuningDb::make_key(vars_[i].s, cand.knobs.ic_bn, cand.knobs.oc_bn, o_.threads);
      auto it = done.find(key);
      if (it == done.end()) {
        it = done.emplace(key, tune_pair(vars_[i].s, cand.knobs.ic_bn, cand.knobs.oc_bn, *o_.par)).first;
        o_.db->store(key, TuningDb::Entry{it->second.knobs.reg_n, it->second.knobs.unroll_ker, it->second.us});
        ++tuned_now_;
      }
      cand = it->second;
      progress_bar("tuning convolutions", ++step, todo.size());
    }
    try {
      o_.db->save();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dnnfusion: %s (tuning results kept for this compile only)\n", e.what());
    }
  }

  // Measured time of re-blocking an [N, C, H, W] tensor from block a to block b (0 when equal).
  // Measured once per process: compiles of one model (e.g. explain's three fusion modes) must see
  // the same costs, or timing noise gives them different layouts.
  double reblock_us(const std::vector<int64_t>& shape, int a, int b) {
    if (a == b) return 0;
    static std::mutex mu;
    static std::map<std::tuple<std::vector<int64_t>, int, int, int>, double> measured;
    const auto key = std::make_tuple(shape, a, b, o_.threads);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (auto it = measured.find(key); it != measured.end()) return it->second;
    }
    const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
    auto x = random_floats(static_cast<size_t>(kernels::nchwc_floats(N, C, H, W, a)), 4);
    std::vector<float> y(static_cast<size_t>(kernels::nchwc_floats(N, C, H, W, b)));
    kernels::SerialParallel serial;
    const kernels::Parallel& par = o_.par ? *o_.par : serial;
    const double us = median_us([&] { kernels::nchwc_to_nchwc(x.data(), N, C, H, W, a, b, y.data(), par); });
    std::lock_guard<std::mutex> lock(mu);
    return measured.emplace(key, us).first->second;  // a concurrent first measurement wins
  }

  void add_edge(std::map<std::pair<int, int>, std::vector<std::vector<double>>>& edges, int a, int b,
                const std::vector<int64_t>& shape, bool a_out, bool b_out) {
    if (a == b) return;
    if (a > b) std::swap(a, b), std::swap(a_out, b_out);
    auto& m = edges[{a, b}];
    const auto& ca = vars_[a].cands;
    const auto& cb = vars_[b].cands;
    if (m.empty()) m.assign(ca.size(), std::vector<double>(cb.size(), 0.0));
    for (size_t i = 0; i < ca.size(); ++i)
      for (size_t j = 0; j < cb.size(); ++j) {
        const int ba = a_out ? ca[i].knobs.oc_bn : ca[i].knobs.ic_bn;
        const int bb = b_out ? cb[j].knobs.oc_bn : cb[j].knobs.ic_bn;
        m[i][j] += reblock_us(shape, ba, bb);
      }
  }

  // Variables = convs, node costs = measured times, edge costs = re-blocking between a producer's
  // output block and a consumer's input block, and between convs whose outputs meet in an
  // element-wise op (a residual add needs both operands in one block).
  LayoutProblem problem() {
    LayoutProblem p;
    for (const auto& v : vars_) {
      std::vector<double> cost;
      for (const auto& c : v.cands) cost.push_back(c.us);
      p.node_cost.push_back(std::move(cost));
    }
    std::map<std::pair<int, int>, std::vector<std::vector<double>>> edges;
    for (const auto& v : vars_) {
      std::set<int> prods;
      const int x = g_.node(v.node).inputs[0];
      producing_convs(g_, x, var_of_, &prods);
      for (int a : prods) add_edge(edges, a, var_of_.at(v.node), g_.value(x).shape, true, false);
    }
    for (const Node& n : g_.nodes()) {
      if (!n.info || n.info->mapping != ecg::MappingType::OneToOne || n.outputs.size() != 1 || n.inputs.size() < 2)
        continue;
      const auto& y = g_.value(n.outputs[0]).shape;
      if (y.size() != 4) continue;
      std::vector<std::set<int>> per_input;
      for (int in : n.inputs)
        if (in >= 0 && !g_.value(in).is_compile_time() && g_.value(in).shape == y) {
          per_input.emplace_back();
          producing_convs(g_, in, var_of_, &per_input.back());
        }
      for (size_t i = 0; i < per_input.size(); ++i)
        for (size_t j = i + 1; j < per_input.size(); ++j)
          for (int a : per_input[i])
            for (int b : per_input[j]) add_edge(edges, a, b, y, true, true);
    }
    for (auto& [ab, m] : edges) p.edges.push_back({ab.first, ab.second, std::move(m)});
    return p;
  }

  const Graph& g_;
  const ChooseOptions& o_;
  std::vector<ConvVar> vars_;
  std::unordered_map<int, int> var_of_;  // conv node id -> variable
  int tuned_now_ = 0, from_db_ = 0;
};

}  // namespace

ConvSchemeFn ConvSchemes::fn() const {
  return [this](const Graph& g, const Node& n, int input_block) -> std::optional<ConvScheme> {
    auto it = by_node.find(n.id);
    if (it == by_node.end()) return std::nullopt;
    ConvScheme sc = it->second;
    // Heuristic schemes follow the producer's block, so conv chains never re-block. A depthwise
    // conv (ic_bn = oc_bn) takes the block for its output too: mobilenet_v2 re-blocked 32 -> 16
    // before each of its 15 depthwise layers otherwise, and the tuner prefers 32 there anyway.
    const auto conv = blockable_conv(g, n);
    if (conv && adaptive.count(n.id) && input_block > 0 && input_block != sc.ic_bn && block_fits(conv->C, input_block)) {
      if (!depthwise(*conv)) {
        // Grouped convs only where the groups allow the block (always for groups == 1).
        if (kernels::conv_nchwc_group_blocks_fit(*conv, input_block, sc.oc_bn)) sc.ic_bn = input_block;
      } else {
        const auto isa = kernels::active_isa();
        const auto blocks = oc_blocks(isa);
        if (std::find(blocks.begin(), blocks.end(), input_block) != blocks.end()) {
          ConvNchwcKnobs k = heuristic_knobs(*conv, input_block, input_block, isa);
          try {
            kernels::conv_nchwc_check(*conv, k, isa);
            sc = ConvScheme{k.ic_bn, k.oc_bn, k.reg_n, k.unroll_ker};
          } catch (const std::exception&) {
            // keep the scheme chosen for this conv alone: the kernel cannot take that block
          }
        }
      }
    }
    // Decided last, on the final blocks and the real input size (the tuned times are the direct
    // algorithm's; Winograd's gain is large enough that the heuristic decides it).
    if (winograd && conv)
      sc.winograd = kernels::conv_winograd_tile(*conv);
    return sc;
  };
}

ConvSchemes choose_conv_schemes(const Graph& g, const ChooseOptions& opts) { return Chooser(g, opts).run(); }

}  // namespace dnnfusion::layout
