#include "target/cpu/layout/propagate_blocked_layout.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "ecg/op_registry.h"
#include "kernels/cpu/conv_nchwc.h"
#include "rewrite/graph_edit.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

bool block_fits(int64_t C, int b) { return kernels::nchwc_block_fits(C, b); }

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_elementwise(const Node& n) {
  if (!n.info || n.info->mapping != ecg::MappingType::OneToOne) return false;
  if (n.info->pattern != ecg::PatternKind::ElemWise && n.info->pattern != ecg::PatternKind::Broadcast) return false;
  return n.outputs.size() == 1 && !n.inputs.empty() && n.op != "_native_batch_norm_legit_no_training";
}

class Propagator {
 public:
  Propagator(const Graph& g, const ConvSchemeFn& scheme, bool propagate)
      : g_(g), rb_(g), scheme_(scheme), propagate_(propagate) {}

  Graph run(LayoutStats* stats) {
    for (const Node& n : g_.nodes()) {
      rb_.origin = n.origin;
      if (n.op == "convolution" && try_conv(n)) {
        if (!propagate_) back_to_plain(n.outputs[0]);
        continue;
      }
      if (!propagate_) {
        for (int v : n.inputs)
          if (v >= 0) plain(v);
        rb_.copy_node(n.id);
        continue;
      }
      if (is_elementwise(n) && try_elementwise(n)) continue;
      if (n.op == "cat" && try_cat(n)) continue;
      if ((n.op == "_adaptive_avg_pool2d" || n.op == "mean") && try_global_pool(n)) continue;
      if ((n.op == "max_pool2d_with_indices" || n.op == "avg_pool2d") && try_pool(n)) continue;
      for (int v : n.inputs)
        if (v >= 0) plain(v);
      rb_.copy_node(n.id);
    }
    for (int o : g_.outputs()) plain(o);
    if (stats) *stats = st_;
    return rb_.finish();
  }

 private:
  // A blocked tensor's shape: [N, ceil(C/b), H, W, b].
  static std::vector<int64_t> blocked_shape(const std::vector<int64_t>& s, int b) {
    return {s[0], ceil_div(s[1], b), s[2], s[3], b};
  }

  // Block of source value v's blocked form, 0 if it has none.
  int block_of(int v) const {
    auto it = home_.find(v);
    return it == home_.end() ? 0 : it->second;
  }

  // New id of source value v in NCHW; materializes the transform back on first request.
  int plain(int v) {
    if (only_blocked_.erase(v)) {
      const auto& s = g_.value(v).shape;
      const int b = home_.at(v);
      const int nv = blocked_.at({v, b});
      const int64_t cb = ceil_div(s[1], b);
      const int p = rb_.add("permute", {nv}, {s[0], cb, b, s[2], s[3]}, g_.value(v).dtype,
                            {{"dims", std::vector<int64_t>{0, 1, 4, 2, 3}}});
      int plain_v = rb_.view(p, {s[0], cb * b, s[2], s[3]});
      if (cb * b != s[1])  // drop the padded channels
        plain_v = rb_.add("slice", {plain_v}, s, g_.value(v).dtype,
                          {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", s[1]}, {"step", int64_t{1}}});
      rb_.replace(v, plain_v);
      if (!reblocking_) ++st_.to_plain;
    }
    return rb_.map(v);
  }

  // New id of source value v (an [n, C|1, h, w] tensor, rank <= 4 right-aligned to NCHW) in the
  // layout of a blocked tensor with C channels and block b.
  int blocked(int v, int b, int64_t C) {
    if (auto it = blocked_.find({v, b}); it != blocked_.end()) return it->second;
    std::vector<int64_t> s = g_.value(v).shape;
    while (s.size() < 4) s.insert(s.begin(), 1);
    const bool activation = !g_.value(v).is_compile_time();
    int nv;
    if (const int a = block_of(v); a && s[1] == C) {
      if ((a % b == 0 || b % a == 0) && ceil_div(C, a) * a == ceil_div(C, b) * b) {
        nv = reblock(blocked_.at({v, a}), s, a, b);
      } else {
        // Through NCHW: two loops, as the channel split of one block is no strided view of the other.
        reblocking_ = true;
        const int p = plain(v);
        reblocking_ = false;
        nv = to_blocked(p, s, b);
      }
      ++st_.reblocked;
    } else if (s[1] == 1) {
      nv = rb_.view(plain(v), {s[0], 1, s[2], s[3], 1});
    } else {
      nv = to_blocked(plain(v), s, b);
      if (activation) ++st_.to_blocked;  // constants are folded at compile time
    }
    blocked_[{v, b}] = nv;
    return nv;
  }

  // [N, C/a, H, W, a] -> [N, C/b, H, W, b] where one block divides the other (and both pad C to
  // the same count Cp): one permute (one loop) between views that split and merge contiguous
  // dimensions (aliases). Going through NCHW would need two loops: the NCHW view of a blocked
  // tensor merges dimensions no stride describes.
  int reblock(int src, const std::vector<int64_t>& s, int a, int b) {
    const int64_t N = s[0], C = ceil_div(s[1], a) * a, H = s[2], W = s[3];
    const DType dt = rb_.dtype(src);
    if (a > b) {  // split each a-block into k = a/b consecutive b-blocks
      const int64_t k = a / b;
      const int r = rb_.view(src, {N, C / a, H, W, k, b});
      const int p = rb_.add("permute", {r}, {N, C / a, k, H, W, b}, dt, {{"dims", std::vector<int64_t>{0, 1, 4, 2, 3, 5}}});
      return rb_.view(p, blocked_shape(s, b));
    }
    const int64_t k = b / a;  // k consecutive a-blocks form one b-block
    const int r = rb_.view(src, {N, C / b, k, H, W, a});
    const int p = rb_.add("permute", {r}, {N, C / b, H, W, k, a}, dt, {{"dims", std::vector<int64_t>{0, 1, 3, 4, 2, 5}}});
    return rb_.view(p, blocked_shape(s, b));
  }

  int to_blocked(int nv, const std::vector<int64_t>& s, int b) {
    const int64_t cb = ceil_div(s[1], b);
    if (cb * b != s[1])  // zero channels up to whole blocks
      nv = rb_.add("constant_pad_nd", {nv}, {s[0], cb * b, s[2], s[3]}, rb_.dtype(nv),
                   {{"pad", std::vector<int64_t>{0, 0, 0, 0, 0, cb * b - s[1]}}, {"value", 0.0}});
    const int r = rb_.view(nv, {s[0], cb, b, s[2], s[3]});
    return rb_.add("permute", {r}, blocked_shape(s, b), rb_.dtype(nv), {{"dims", std::vector<int64_t>{0, 1, 3, 4, 2}}});
  }

  // Materializes v in NCHW and forgets its blocked form, so the next consumer converts again.
  void back_to_plain(int v) {
    plain(v);
    for (auto it = blocked_.begin(); it != blocked_.end();) it = it->first.first == v ? blocked_.erase(it) : std::next(it);
    home_.erase(v);
  }

  void set_blocked(int v, int nv, int b) {
    home_[v] = b;
    blocked_[{v, b}] = nv;
    only_blocked_.insert(v);
  }

  bool try_conv(const Node& n) {
    const auto& x = g_.value(n.inputs[0]).shape;
    const auto& w = g_.value(n.inputs[1]);
    const auto& y = g_.value(n.outputs[0]);
    if (x.size() != 4 || n.attr_int("transposed", 0) || y.dtype != DType::Float32 || !w.is_compile_time() ||
        (n.input_or_absent(2) >= 0 && !g_.value(n.inputs[2]).is_compile_time()))
      return false;
    const auto sc = scheme_(g_, n, block_of(n.inputs[0]));
    if (!sc) return false;
    const int64_t C = x[1], K = y.shape[1], groups = n.attr_int("groups", 1);
    const kernels::Conv2dShape grp{1, C, 1, 1, K, 1, 1, 1, 1, 0, 0, 1, 1, groups};  // channels and groups only
    DNNF_CHECK(block_fits(C, sc->ic_bn) && block_fits(K, sc->oc_bn) &&
                   kernels::conv_nchwc_group_blocks_fit(grp, sc->ic_bn, sc->oc_bn),
               "layout scheme for '", n.origin, "' does not fit the convolution (C=", C, " K=", K, " groups=", groups,
               " ic_bn=", sc->ic_bn, " oc_bn=", sc->oc_bn, ")");
    ecg::AttrMap attrs = n.attrs;
    attrs["ic_bn"] = int64_t{sc->ic_bn};
    attrs["oc_bn"] = int64_t{sc->oc_bn};
    attrs["reg_n"] = int64_t{sc->reg_n};
    attrs["unroll_ker"] = int64_t{sc->unroll_ker};
    attrs["winograd"] = int64_t{sc->winograd};
    attrs["in_channels"] = C;
    attrs["weight_shape"] = w.shape;
    const int xb = blocked(n.inputs[0], sc->ic_bn, C);
    const kernels::Conv2dShape taps{1, C, w.shape[2], w.shape[3], K, w.shape[2], w.shape[3], 1, 1, 0, 0, 1, 1, groups};
    const int64_t packed = kernels::conv_nchwc_packed_weight_floats(taps, {sc->ic_bn, sc->oc_bn, sc->reg_n, sc->unroll_ker, sc->winograd});
    const int wp = rb_.add("conv2d_nchwc_pack_weight", {rb_.map(w.id)}, {packed}, DType::Float32, attrs);
    const int bias = n.input_or_absent(2) >= 0 ? rb_.map(n.inputs[2]) : -1;
    const int out = rb_.add("conv2d_nchwc", {xb, wp, bias}, blocked_shape(y.shape, sc->oc_bn), DType::Float32, attrs);
    set_blocked(y.id, out, sc->oc_bn);
    ++st_.convs_blocked;
    st_.winograd_f2 += sc->winograd == 2;
    st_.winograd_f4 += sc->winograd == 4;
    return true;
  }

  // An element-wise op runs blocked when an operand already is and every operand has the shape
  // of the output or broadcasts to it per channel/scalar (NCHW right-aligned).
  bool try_elementwise(const Node& n) {
    const auto& y = g_.value(n.outputs[0]);
    if (y.shape.size() != 4) return false;
    int b = 0;
    for (int v : n.inputs)
      if (v >= 0 && block_of(v) && g_.value(v).shape == y.shape) {
        b = block_of(v);
        break;
      }
    if (!b) return false;
    for (int v : n.inputs) {
      if (v < 0) continue;
      const auto& s = g_.value(v).shape;
      if (s.size() > 4) return false;
      const size_t lead = 4 - s.size();
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] != 1 && s[i] != y.shape[lead + i]) return false;
    }
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(v < 0 ? -1 : blocked(v, b, y.shape[1]));
    const int out = rb_.add(n.op, ins, blocked_shape(y.shape, b), y.dtype, n.attrs);
    set_blocked(y.id, out, b);
    ++st_.ops_propagated;
    return true;
  }

  bool try_cat(const Node& n) {
    const auto& y = g_.value(n.outputs[0]);
    const int64_t rank = static_cast<int64_t>(y.shape.size());
    int64_t d = n.attr_int("dim", 0);
    if (d < 0) d += rank;
    if (rank != 4 || d != 1 || n.inputs.empty()) return false;
    // The concatenation runs in the narrowest input block; wider blocks it divides are re-blocked
    // (one permute each, once per value). DenseNet joins its stem and transition outputs (64-wide
    // blocks) with its 32-channel growth convs' (32-wide): refusing mixed blocks sent every one of
    // its 58 concatenations through NCHW and back (densenet121 28.7 -> 31.5 ms).
    int b = 0;
    for (int v : n.inputs) {
      if (v < 0 || !block_of(v)) return false;
      b = b ? std::min(b, block_of(v)) : block_of(v);
    }
    for (int v : n.inputs)
      if (block_of(v) % b || g_.value(v).shape[1] % b) return false;
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(blocked(v, b, g_.value(v).shape[1]));
    ecg::AttrMap attrs = n.attrs;
    attrs["dim"] = int64_t{1};
    const int out = rb_.add("cat", ins, blocked_shape(y.shape, b), y.dtype, attrs);
    set_blocked(y.id, out, b);
    ++st_.ops_propagated;
    return true;
  }

  // Max / average pooling of a blocked tensor (pooling is layout-tolerant); max-pool only when its
  // indices are unused (inference graphs never read them).
  bool try_pool(const Node& n) {
    const int x = n.inputs[0];
    const int b = block_of(x);
    const auto& y = g_.value(n.outputs[0]);
    if (!b || y.shape.size() != 4 || y.dtype != DType::Float32) return false;
    for (size_t i = 1; i < n.outputs.size(); ++i)
      if (!g_.value(n.outputs[i]).users.empty() || g_.value(n.outputs[i]).is_output) return false;
    if (n.op == "avg_pool2d") {
      const auto dil = n.attr_ints("dilation", {1});
      if (std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d != 1; })) return false;
    }
    const int out = rb_.add(n.op == "avg_pool2d" ? "avg_pool2d_nchwc" : "max_pool2d_nchwc", {blocked(x, b, y.shape[1])},
                            blocked_shape(y.shape, b), y.dtype, n.attrs);
    set_blocked(y.id, out, b);
    ++st_.ops_propagated;
    return true;
  }

  // Global average pooling ([N, C, 1, 1]): the mean over H and W of the blocked tensor.
  bool try_global_pool(const Node& n) {
    const int x = n.inputs[0];
    const int b = block_of(x);
    const auto& y = g_.value(n.outputs[0]);
    if (!b || y.shape.size() != 4 || y.shape[2] != 1 || y.shape[3] != 1 || y.dtype != DType::Float32) return false;
    if (n.op == "mean") {
      std::set<int64_t> dims;
      for (auto d : n.attr_ints("dim", {})) dims.insert(d < 0 ? d + 4 : d);
      if (dims != std::set<int64_t>{2, 3}) return false;
    }
    const int out = rb_.add("mean", {blocked(x, b, y.shape[1])}, blocked_shape(y.shape, b), y.dtype,
                            {{"dim", std::vector<int64_t>{2, 3}}, {"keepdim", int64_t{1}}});
    set_blocked(y.id, out, b);
    ++st_.ops_propagated;
    return true;
  }

  const Graph& g_;
  rewrite::GraphRebuilder rb_;
  const ConvSchemeFn& scheme_;
  LayoutStats st_;
  const bool propagate_;
  bool reblocking_ = false;
  std::map<std::pair<int, int>, int> blocked_;  // (source value, block) -> new blocked value
  std::unordered_map<int, int> home_;           // source value -> block it was produced in
  std::unordered_set<int> only_blocked_;        // no NCHW copy made yet
};

}  // namespace

Graph propagate_blocked_layout(const Graph& g, const ConvSchemeFn& scheme, LayoutStats* stats, bool propagate) {
  return Propagator(g, scheme, propagate).run(stats);
}

}  // namespace dnnfusion::layout
