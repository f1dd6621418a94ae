// Shared editing utility of the rewriting passes. The ECG is append-only, so a pass rebuilds:
// GraphRebuilder copies the graph inputs (same order, names), re-adds the nodes the pass keeps on
// remapped value ids, lets the pass emit replacement nodes and redirect uses of a value, and
// finally sets the remapped outputs. Weights keep their borrowed data pointer and constants share
// their owned bytes (nothing is copied); both are copied lazily, on first use, so compile-time
// values nobody reads any more disappear with the nodes that read them.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::rewrite {

class GraphRebuilder {
 public:
  // placeholders = true: a source value the replacement reads becomes a fresh graph input of the
  // same shape/dtype instead of a copy — for building a replacement alone (to count its cost).
  explicit GraphRebuilder(const ecg::Graph& src, bool placeholders = false);

  const ecg::Graph& src() const { return src_; }
  ecg::Graph& out() { return out_; }
  const ecg::Graph& out() const { return out_; }

  // The new id of source value v (-1 stays -1). Weights/constants are copied on first use.
  int map(int v);
  // From now on, uses of source value v read new value `nv`.
  void replace(int v, int nv);
  // Re-adds source node `n` on its remapped operands; returns the new node id.
  int copy_node(int n);
  // Source value behind a placeholder input (placeholder mode), else -1.
  int source_of(int nv) const;
  // Sets the remapped outputs and returns the graph; the rebuilder is spent afterwards.
  ecg::Graph finish();

  // ---- emitting new nodes (operands are new ids) ----
  std::string origin;  // origin recorded on emitted nodes (the ATen op they stand for)
  const std::vector<int64_t>& shape(int nv) const { return out_.value(nv).shape; }
  DType dtype(int nv) const { return out_.value(nv).dtype; }
  int add(const std::string& op, const std::vector<int>& inputs, const std::vector<int64_t>& shape, DType dtype,
          ecg::AttrMap attrs = {});
  // A node with several outputs; returns their new ids.
  std::vector<int> add_outputs(const std::string& op, const std::vector<int>& inputs,
                               const std::vector<ecg::OutputSpec>& outputs, ecg::AttrMap attrs = {});
  // Elementwise ops on float32 operands, numpy broadcasting.
  int binary(const std::string& op, int a, int b);
  int unary(const std::string& op, int a, ecg::AttrMap attrs = {});
  int view(int a, const std::vector<int64_t>& shape);
  int expand(int a, const std::vector<int64_t>& shape);
  int scalar(float value);
  // Re-emits source node `like` on new operands (and attrs); the outputs keep their shapes/dtypes.
  std::vector<int> emit_like(const ecg::Node& like, const std::vector<int>& inputs, const ecg::AttrMap& attrs);
  std::vector<int> emit_like(const ecg::Node& like, const std::vector<int>& inputs) {
    return emit_like(like, inputs, like.attrs);
  }

 private:
  const ecg::Graph& src_;
  ecg::Graph out_;
  bool placeholders_;
  std::vector<int> map_;                 // source value -> new value (-1: not yet)
  std::unordered_map<int, int> sparse_;  // the same in placeholder mode, which touches few values
  std::vector<int> placeholder_src_;     // new value id -> source value (placeholder mode)
};

// Drops nodes none of whose outputs reaches a graph output; `removed` gets how many.
ecg::Graph remove_dead_nodes(const ecg::Graph& g, int* removed = nullptr);

// Per value: known at compile time — a weight/constant, or computed only from such values (or
// from nothing, like arange). These are what fold_constants evaluates.
std::vector<char> compile_time_values(const ecg::Graph& g);

// Numpy broadcast of two shapes; throws if they do not broadcast.
std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// `s` right-aligned to `rank` dims (leading 1s); requires s.size() <= rank.
std::vector<int64_t> align_shape(const std::vector<int64_t>& s, size_t rank);

// Whether `s` broadcasts to exactly `target` (numpy rules, target unchanged).
bool broadcasts_to(const std::vector<int64_t>& s, const std::vector<int64_t>& target);

}  // namespace dnnfusion::rewrite
