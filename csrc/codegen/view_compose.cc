#include "codegen/view_compose.h"

#include <algorithm>

#include "common/error.h"

namespace dnnfusion::codegen {

namespace {

std::vector<int64_t> row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

int64_t norm_dim(int64_t d, int64_t rank) {
  if (d < 0) d += rank;
  DNNF_CHECK(d >= 0 && d < std::max<int64_t>(rank, 1), "dimension ", d, " out of range for rank ", rank);
  return d;
}

int64_t clamp_index(int64_t i, int64_t size) {
  if (i < 0) i += size;
  return std::min(std::max<int64_t>(i, 0), size);
}

}  // namespace

bool StridedView::is_contiguous() const {
  auto rm = row_major(shape);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && strides[i] != rm[i]) return false;
  return true;
}

StridedView StridedView::contiguous(const std::vector<int64_t>& shape) { return StridedView{shape, row_major(shape), 0}; }

bool is_index_op(const std::string& op) {
  static const char* ops[] = {"view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "flatten", "permute",
                              "transpose", "t", "expand", "slice", "select", "alias", "clone", "contiguous",
                              "lift_fresh_copy"};
  for (const char* o : ops)
    if (op == o) return true;
  return false;
}

StridedView broadcast_view(const StridedView& in, const std::vector<int64_t>& out_shape) {
  DNNF_CHECK(in.shape.size() <= out_shape.size(), "cannot broadcast rank ", in.shape.size(), " to ", out_shape.size());
  StridedView v{out_shape, std::vector<int64_t>(out_shape.size(), 0), in.offset};
  const size_t lead = out_shape.size() - in.shape.size();
  for (size_t i = 0; i < in.shape.size(); ++i) {
    DNNF_CHECK(in.shape[i] == out_shape[lead + i] || in.shape[i] == 1, "shape ", ecg::shape_str(in.shape),
               " does not broadcast to ", ecg::shape_str(out_shape));
    v.strides[lead + i] = in.shape[i] == 1 ? 0 : in.strides[i];
  }
  return v;
}

// Splits the old dims into chunks whose elements are evenly spaced, then lays the new dims over
// the chunks; a new dim that straddles two chunks has no single stride.
std::optional<StridedView> reshape_view(const StridedView& in, const std::vector<int64_t>& shape) {
  int64_t numel = 1, new_numel = 1;
  for (auto d : in.shape) numel *= d;
  for (auto d : shape) new_numel *= d;
  DNNF_CHECK(numel == new_numel, "reshape of ", ecg::shape_str(in.shape), " to ", ecg::shape_str(shape));
  StridedView out{shape, std::vector<int64_t>(shape.size(), 0), in.offset};
  if (numel == 0) return out;
  // Drop size-1 dims of the input: they never constrain the layout.
  std::vector<int64_t> os, ost;
  for (size_t i = 0; i < in.shape.size(); ++i)
    if (in.shape[i] != 1) os.push_back(in.shape[i]), ost.push_back(in.strides[i]);
  int64_t vd = static_cast<int64_t>(shape.size()) - 1;
  if (os.empty()) {
    for (auto& s : out.strides) s = 0;
    return out;
  }
  int64_t chunk_stride = ost.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(os.size()) - 1; td >= 0; --td) {
    tensor_numel *= os[td];
    if (td == 0 || ost[td - 1] != tensor_numel * chunk_stride) {
      while (vd >= 0 && (view_numel < tensor_numel || shape[vd] == 1)) {
        out.strides[vd] = view_numel * chunk_stride;
        view_numel *= shape[vd];
        --vd;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_stride = ost[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  while (vd >= 0 && shape[vd] == 1) out.strides[vd--] = 0;
  if (vd != -1) return std::nullopt;
  return out;
}

std::optional<StridedView> compose_view(const ecg::Graph& g, const ecg::Node& n, const StridedView& in) {
  const std::vector<int64_t>& out_shape = g.value(n.outputs[0]).shape;
  const int64_t r = static_cast<int64_t>(in.shape.size());
  const std::string& op = n.op;
  if (op == "alias" || op == "clone" || op == "contiguous" || op == "lift_fresh_copy") return in;
  if (op == "view" || op == "_unsafe_view" || op == "reshape" || op == "squeeze" || op == "unsqueeze" || op == "flatten")
    return reshape_view(in, out_shape);
  if (op == "permute" || op == "transpose" || op == "t") {
    std::vector<int64_t> dims;
    if (op == "permute") {
      dims = n.attr_ints("dims");
    } else if (op == "t") {
      for (int64_t i = r - 1; i >= 0; --i) dims.push_back(i);
    } else {
      for (int64_t i = 0; i < r; ++i) dims.push_back(i);
      if (r > 0) std::swap(dims[norm_dim(n.attr_int("dim0"), r)], dims[norm_dim(n.attr_int("dim1"), r)]);
    }
    DNNF_CHECK(static_cast<int64_t>(dims.size()) == r, op, ": ", dims.size(), " dims for rank ", r);
    StridedView v{out_shape, {}, in.offset};
    for (auto d : dims) v.strides.push_back(in.strides[norm_dim(d, r)]);
    return v;
  }
  if (op == "expand") {
    StridedView v = broadcast_view(in, out_shape);
    return v;
  }
  if (op == "slice") {
    const int64_t d = norm_dim(n.attr_int("dim", 0), r);
    const int64_t start = clamp_index(n.attr_int("start", 0), in.shape[d]);
    const int64_t step = n.attr_int("step", 1);
    if (step <= 0) return std::nullopt;
    StridedView v{out_shape, in.strides, in.offset + start * in.strides[d]};
    v.strides[d] *= step;
    return v;
  }
  if (op == "select") {
    const int64_t d = norm_dim(n.attr_int("dim"), r);
    int64_t idx = n.attr_int("index");
    if (idx < 0) idx += in.shape[d];
    if (idx < 0 || idx >= in.shape[d]) return std::nullopt;
    StridedView v{out_shape, {}, in.offset + idx * in.strides[d]};
    for (int64_t i = 0; i < r; ++i)
      if (i != d) v.strides.push_back(in.strides[i]);
    return v;
  }
  return std::nullopt;
}

}  // namespace dnnfusion::codegen
