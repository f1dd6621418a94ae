// Data-movement ops as strided views of their input (view, permute, expand, slice, split...).
// The executor aliases a view whose result is contiguous and copies the others with
// kernels::strided_copy, so none of these ops has a run() of its own.
#include <algorithm>
#include <limits>

#include "common/error.h"
#include "runtime/op_kernels.h"

namespace dnnfusion::runtime {

using ecg::Graph;
using ecg::Node;

namespace {

const std::vector<int64_t>& in_shape(const Graph& g, const Node& n) { return g.value(n.inputs[0]).shape; }
const std::vector<int64_t>& out_shape(const Graph& g, const Node& n, int slot) { return g.value(n.outputs[slot]).shape; }

ViewSpec same_order(const Graph& g, const Node& n, int slot) {
  const auto& s = out_shape(g, n, slot);
  return ViewSpec{s, contiguous_strides(s), 0};
}

ViewSpec permute_view(const Graph& g, const Node& n, int) {
  auto cs = contiguous_strides(in_shape(g, n));
  const int64_t r = static_cast<int64_t>(cs.size());
  std::vector<int64_t> dims;
  if (n.op == "permute") {
    dims = n.attr_ints("dims");
  } else if (n.op == "t") {
    for (int64_t i = r - 1; i >= 0; --i) dims.push_back(i);
  } else {  // transpose
    for (int64_t i = 0; i < r; ++i) dims.push_back(i);
    if (r > 0) std::swap(dims[normalize_dim(n.attr_int("dim0"), r, n)], dims[normalize_dim(n.attr_int("dim1"), r, n)]);
  }
  DNNF_CHECK(static_cast<int64_t>(dims.size()) == r, n.op, ": ", dims.size(), " dims for a rank-", r, " input");
  ViewSpec v{out_shape(g, n, 0), {}, 0};
  for (auto d : dims) v.strides.push_back(cs[normalize_dim(d, r, n)]);
  return v;
}

ViewSpec expand_view(const Graph& g, const Node& n, int) {
  const auto& in = in_shape(g, n);
  const auto& out = out_shape(g, n, 0);
  auto cs = contiguous_strides(in);
  ViewSpec v{out, std::vector<int64_t>(out.size(), 0), 0};
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) v.strides[lead + i] = (in[i] == 1 && out[lead + i] != 1) ? 0 : cs[i];
  return v;
}

int64_t clamp_index(int64_t i, int64_t size) {
  if (i < 0) i += size;
  return std::min(std::max<int64_t>(i, 0), size);
}

ViewSpec slice_view(const Graph& g, const Node& n, int) {
  const auto& in = in_shape(g, n);
  auto cs = contiguous_strides(in);
  const int64_t d = normalize_dim(n.attr_int("dim", 0), static_cast<int64_t>(in.size()), n);
  const int64_t start = clamp_index(n.attr_int("start", 0), in[d]);
  const int64_t step = n.attr_int("step", 1);
  DNNF_CHECK(step > 0, "slice step must be positive, got ", step);
  ViewSpec v{out_shape(g, n, 0), cs, start * cs[d]};
  v.strides[d] = cs[d] * step;
  return v;
}

ViewSpec select_view(const Graph& g, const Node& n, int slot) {
  const auto& in = in_shape(g, n);
  auto cs = contiguous_strides(in);
  const int64_t d = normalize_dim(n.attr_int("dim"), static_cast<int64_t>(in.size()), n);
  int64_t idx = n.op == "unbind" ? slot : n.attr_int("index");
  if (idx < 0) idx += in[d];
  DNNF_CHECK(idx >= 0 && idx < in[d], "select index ", idx, " out of range for size ", in[d]);
  ViewSpec v{out_shape(g, n, slot), {}, idx * cs[d]};
  for (size_t i = 0; i < cs.size(); ++i)
    if (static_cast<int64_t>(i) != d) v.strides.push_back(cs[i]);
  return v;
}

ViewSpec split_view(const Graph& g, const Node& n, int slot) {
  const auto& in = in_shape(g, n);
  auto cs = contiguous_strides(in);
  const int64_t d = normalize_dim(n.attr_int("dim", 0), static_cast<int64_t>(in.size()), n);
  int64_t start = 0;
  for (int s = 0; s < slot; ++s) start += out_shape(g, n, s)[d];
  return ViewSpec{out_shape(g, n, slot), cs, start * cs[d]};
}

ViewSpec as_strided_view(const Graph& g, const Node& n, int) {
  ViewSpec v{n.attr_ints("size"), n.attr_ints("stride"), n.attr_int("storage_offset", 0)};
  return v;
}

std::string check_as_strided(const Graph& g, const Node& n) {
  auto size = n.attr_ints("size");
  auto stride = n.attr_ints("stride");
  if (size.size() != stride.size()) return "as_strided: size and stride differ in length";
  int64_t hi = n.attr_int("storage_offset", 0);
  for (size_t i = 0; i < size.size(); ++i) {
    if (stride[i] < 0) return "as_strided with a negative stride";
    if (size[i] > 0) hi += (size[i] - 1) * stride[i];
  }
  if (hi >= std::max<int64_t>(g.value(n.inputs[0]).numel(), 1)) return "as_strided reads past the end of its input";
  return "";
}

std::string check_split(const Graph& g, const Node& n) {
  if (n.outputs.empty()) return "split with no outputs";
  return "";
}

}  // namespace

void register_view_ops(KernelTable& t) {
  for (const char* op : {"view", "_unsafe_view", "reshape", "flatten", "squeeze", "unsqueeze", "alias", "clone",
                         "contiguous", "lift_fresh_copy"})
    t.emplace_back(op, OpKernel{nullptr, nullptr, nullptr, same_order});
  for (const char* op : {"permute", "transpose", "t"}) t.emplace_back(op, OpKernel{nullptr, nullptr, nullptr, permute_view});
  t.emplace_back("expand", OpKernel{nullptr, nullptr, nullptr, expand_view});
  t.emplace_back("slice", OpKernel{nullptr, nullptr, nullptr, slice_view});
  t.emplace_back("select", OpKernel{nullptr, nullptr, nullptr, select_view});
  t.emplace_back("unbind", OpKernel{check_split, nullptr, nullptr, select_view});
  t.emplace_back("split", OpKernel{check_split, nullptr, nullptr, split_view});
  t.emplace_back("split_with_sizes", OpKernel{check_split, nullptr, nullptr, split_view});
  t.emplace_back("as_strided", OpKernel{check_as_strided, nullptr, nullptr, as_strided_view});
}

}  // namespace dnnfusion::runtime
