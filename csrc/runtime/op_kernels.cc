#include "runtime/op_kernels.h"

#include <algorithm>

#include "common/error.h"

namespace dnnfusion::runtime {

bool ViewSpec::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;  // the stride of a size-1 dim is irrelevant
    if (strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(shape[i], 1);
  return s;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const ecg::Node& n) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) DNNF_THROW("node '", n.origin, "': dim ", dim, " is out of range for rank ", rank);
  return dim < 0 ? dim + r : dim;
}

std::string require_dtypes(const ecg::Graph& g, const ecg::Node& n, std::initializer_list<DType> allowed) {
  auto ok = [&](DType t) { return std::find(allowed.begin(), allowed.end(), t) != allowed.end(); };
  auto list = [&]() {
    std::string s;
    for (DType t : allowed) s += std::string(s.empty() ? "" : ", ") + dtype_name(t);
    return s;
  };
  for (int v : n.inputs)
    if (v >= 0 && !ok(g.value(v).dtype))
      return std::string("dtype ") + dtype_name(g.value(v).dtype) + " is not supported by the core kernel (supported: " + list() + ")";
  for (int v : n.outputs)
    if (!ok(g.value(v).dtype))
      return std::string("output dtype ") + dtype_name(g.value(v).dtype) + " is not supported by the core kernel (supported: " + list() + ")";
  return "";
}

double var_correction(const ecg::Node& n) {
  if (n.has_attr("unbiased")) return n.attr_int("unbiased") ? 1.0 : 0.0;
  return n.attr_float("correction", 1.0);
}

}  // namespace dnnfusion::runtime
