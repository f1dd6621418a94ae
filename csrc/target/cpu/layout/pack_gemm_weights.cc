#include "target/cpu/layout/pack_gemm_weights.h"

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "rewrite/graph_edit.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

namespace {

bool f32(const Graph& g, int v) { return v >= 0 && g.value(v).dtype == DType::Float32; }

// Whether node n is a GEMM this pass packs: the slot of its A operand, else -1.
int packable(const Graph& g, const std::vector<char>& is_const, const Node& n) {
  size_t x = 0;
  if (n.op == "addmm") {
    x = 1;
    if (n.inputs.size() != 3) return -1;
  } else if (n.op != "mm" || n.inputs.size() != 2) {
    return -1;
  }
  if (n.outputs.size() != 1 || !f32(g, n.outputs[0])) return -1;
  const int A = n.inputs[x], B = n.inputs[x + 1];
  if (!f32(g, A) || !f32(g, B) || is_const[A] || !is_const[B] || g.value(B).producer >= 0) return -1;
  const auto& as = g.value(A).shape;
  const auto& bs = g.value(B).shape;
  if (as.size() != 2 || bs.size() != 2 || as[1] != bs[0]) return -1;
  if (n.op == "addmm") {
    const double beta = n.attr_float("beta", 1.0);
    const auto& bias = g.value(n.inputs[0]);
    // The packed GEMM reads its bias as N contiguous floats: a [N], [1, N] or (N = 1) 0-d tensor.
    const bool row = bias.numel() == bs[1] && (bias.shape.size() <= 1 || bias.shape.back() == bs[1]);
    if (beta != 0.0 && (beta != 1.0 || !f32(g, n.inputs[0]) || !row)) return -1;
  }
  return static_cast<int>(x);
}

// Whether a GEMM of M x K x N gets the bf16x6 packing on this machine.
bool packs_bf16x6(int64_t M, int64_t K, int64_t N, const AmxChoice& amx, AmxChoiceStats* st) {
  if (M < kBf16x6MinRows || !kernels::bf16x6_available()) return false;
  return take_amx(amx, [&](const kernels::Parallel& par) { return measure_amx_gemm(M, K, N, par); }, st);
}

}  // namespace

Graph pack_gemm_weights(const Graph& g, const AmxChoice& amx_choice, int* packed, AmxChoiceStats* amx_stats) {
  const auto is_const = rewrite::compile_time_values(g);
  const int nr = kernels::sgemm_panel_width();
  int count = 0;
  AmxChoiceStats st;
  rewrite::GraphRebuilder rb(g);
  for (const Node& n : g.nodes()) {
    const int x = packable(g, is_const, n);
    if (x < 0) {
      rb.copy_node(n.id);
      continue;
    }
    const int A = n.inputs[x], B = n.inputs[x + 1];
    const int64_t M = g.value(A).shape[0], K = g.value(B).shape[0], N = g.value(B).shape[1];
    rb.origin = n.origin;
    const bool bf16x6 = packs_bf16x6(M, K, N, amx_choice, &st);
    ecg::AttrMap pack_attrs{{"nr", int64_t{bf16x6 ? 0 : nr}}};
    if (bf16x6) pack_attrs["packing"] = std::string(kBf16x6Packing);
    const int64_t packed_floats = bf16x6 ? kernels::bf16x6_packed_b_floats(K, N) : kernels::sgemm_packed_b_floats(K, N, nr);
    const int bp = rb.add("gemm_pack_b", {rb.map(B)}, {packed_floats}, DType::Float32, pack_attrs);
    std::vector<int> ins{rb.map(A), bp};
    if (n.op == "addmm" && n.attr_float("beta", 1.0) != 0.0) ins.push_back(rb.map(n.inputs[0]));
    const double alpha = n.op == "addmm" ? n.attr_float("alpha", 1.0) : 1.0;
    ecg::AttrMap mm_attrs = pack_attrs;
    mm_attrs["n"] = N;
    mm_attrs["alpha"] = alpha;
    const int y = rb.add("mm_packed", ins, {M, N}, DType::Float32, mm_attrs);
    rb.replace(n.outputs[0], y);
    ++count;
  }
  if (packed) *packed = count;
  if (amx_stats) *amx_stats = st;
  if (count == 0) return g;
  return rb.finish();
}

}  // namespace dnnfusion::layout
