#include "target/cuda/graph/fuse_sparse_convs.h"

#include <cstdio>
#include <optional>

#include "common/error.h"
#include "common/progress.h"
#include "rewrite/graph_edit.h"
#include "target/cuda/graph/sparse_conv_chains.h"
#include "target/cuda/sparse_conv/compiled_conv_cache.h"

namespace dnnfusion::cuda {

using ecg::Graph;
using ecg::Node;

namespace {

// Whether chain value v must exist as a tensor: a graph output, or read by a node that is not
// the next step of its chain.
bool materialized(const Graph& g, int v, const CompileOptions& opts) {
  if (g.value(v).is_output) return true;
  for (int u : g.value(v).users) {
    const Node& user = g.node(u);
    auto c = user.outputs.empty() ? std::nullopt : chain_of(g, user.outputs[0], opts);
    if (!c || c->from != v) return true;
  }
  return false;
}

std::string describe(const CompiledConv& e, bool reused) {
  const SparseConvKernel& k = *e.kernel;
  const SparseConvStats& s = k.stats;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s %s: density %.1f%% (%lld of %lld weights), SASS FFMA %ld, PTX FMA %lld of %lld dense, "
                "%ld registers, %ld B spilled, cubin %ld B, template %.2f s%s, rewrite %.3f s, ptxas %.2f s%s",
                k.shape.key().c_str(), k.epilogue.key().c_str(),
                s.weights ? 100.0 * double(s.nonzeros) / double(s.weights) : 0.0, (long long)s.nonzeros,
                (long long)s.weights, s.sass_ffma, (long long)s.ptx_fma, (long long)s.ptx_fma_dense, s.registers,
                s.spill_bytes, s.cubin_bytes, s.template_seconds, s.template_cache_hit ? " (cached)" : "",
                s.rewrite_seconds, s.ptxas_seconds, reused ? " [built earlier in this process]" : "");
  return buf;
}

}  // namespace

Graph fuse_sparse_convs(const Graph& g, const CompileOptions& opts, const std::string& arch, int device,
                        FuseSparseConvsReport* report) {
  std::vector<int> todo;  // nodes whose output 0 is a chain value that must exist
  int absorbed = 0;
  for (const Node& n : g.nodes()) {
    if (n.outputs.empty() || !chain_of(g, n.outputs[0], opts)) continue;
    if (n.op != "convolution") ++absorbed;
    if (materialized(g, n.outputs[0], opts)) todo.push_back(n.id);
  }
  FuseSparseConvsReport rep;
  rep.epilogue_ops = absorbed;
  rewrite::GraphRebuilder rb(g);
  size_t next = 0;
  for (const Node& n : g.nodes()) {
    if (next < todo.size() && todo[next] == n.id) {
      progress_bar("sparse conv kernels", next, todo.size());
      ++next;
      const SparseChain c = *chain_of(g, n.outputs[0], opts);
      const Node& conv = g.node(c.conv);
      const int bias = conv.input_or_absent(2);
      const Epilogue ep{bias >= 0, c.residual >= 0, c.act};
      bool reused = false;
      auto e = get_or_build(conv_shape_of(g, conv), ep, static_cast<const float*>(g.value(conv.inputs[1]).data),
                            bias >= 0 ? static_cast<const float*>(g.value(bias).data) : nullptr, arch, device,
                            &reused);
      ecg::AttrMap attrs;
      for (const char* a : {"stride", "padding", "dilation"})
        if (conv.has_attr(a)) attrs[a] = conv.attrs.at(a);
      attrs["activation"] = std::string(activation_name(c.act));
      attrs["kernel"] = e->id;
      rb.origin = conv.origin;
      const ecg::Value& out = g.value(n.outputs[0]);
      const int nv = rb.add("sparse_conv2d",
                            {rb.map(conv.inputs[0]), rb.map(conv.inputs[1]), bias >= 0 ? rb.map(bias) : -1,
                             c.residual >= 0 ? rb.map(c.residual) : -1},
                            out.shape, out.dtype, std::move(attrs));
      rb.replace(n.outputs[0], nv);
      for (size_t i = 1; i < n.outputs.size(); ++i)  // a batch norm's unused statistics
        DNNF_CHECK(g.value(n.outputs[i]).users.empty() && !g.value(n.outputs[i]).is_output,
                   "sparse chain step with a used secondary output");
      ++rep.kernels;
      rep.reused += reused;
      rep.lines.push_back(describe(*e, reused));
      continue;
    }
    rb.copy_node(n.id);
  }
  if (!todo.empty()) progress_bar("sparse conv kernels", todo.size(), todo.size());
  if (report) *report = std::move(rep);
  return rewrite::remove_dead_nodes(rb.finish());
}

}  // namespace dnnfusion::cuda
