// Data-movement ops as index arithmetic (DNNFusion §4.4, intra-block): inside a fused block a
// Reorganize/Shuffle/slice/expand op is not executed; it only changes how its consumer indexes the
// tensors at the leaves of the expression. A StridedView says where element c of a value lives in
// a leaf buffer: offset + sum_k c[k]*strides[k] (elements). compose_view() pushes one
// data-movement node through such a view.
// Precondition: `in` has the shape of the node's input 0. Postcondition: the returned view has the
// shape of the node's output 0 and addresses exactly the elements the op would produce, or
// nullopt when no strided view can (a reshape that splits a non-mergeable dimension).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::codegen {

struct StridedView {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  bool operator==(const StridedView& o) const { return shape == o.shape && strides == o.strides && offset == o.offset; }
  bool is_contiguous() const;
  static StridedView contiguous(const std::vector<int64_t>& shape);
};

// True for the ops compose_view understands (view family, permute family, expand, slice, select,
// identity copies).
bool is_index_op(const std::string& op);

std::optional<StridedView> compose_view(const ecg::Graph& g, const ecg::Node& n, const StridedView& in);

// `in` broadcast (numpy rules, right-aligned) to `out_shape`: size-1 dims get stride 0.
StridedView broadcast_view(const StridedView& in, const std::vector<int64_t>& out_shape);

// The same elements seen with shape `shape` (row-major reinterpretation), if strides allow.
std::optional<StridedView> reshape_view(const StridedView& in, const std::vector<int64_t>& shape);

}  // namespace dnnfusion::codegen
