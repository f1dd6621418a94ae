// The Extended Computational Graph (ECG): values with shape, dtype and a weight-vs-activation
// mark, and nodes that name an op of the op registry with their attributes. The invariants a
// well-formed graph keeps are listed in csrc/ecg/README.md and checked by verify_graph().
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "common/dtype.h"

namespace dnnfusion::ecg {

// Where a value's data comes from. Weights and constants are known at compile time (the
// papers draw them as letters under an op); rewriting and fusion treat them differently.
enum class ValueKind : int8_t { Input, Weight, Constant, Activation };
const char* value_kind_name(ValueKind k);

struct Value {
  int id = -1;
  std::vector<int64_t> shape;
  DType dtype = DType::Float32;
  ValueKind kind = ValueKind::Activation;
  std::string name;
  int producer = -1;        // node id, -1 for inputs/weights/constants
  int producer_slot = 0;    // which output of the producer
  std::vector<int> users;   // node ids (one entry per use)
  bool is_output = false;
  // Weight: borrowed pointer that the caller keeps alive. Constant: bytes owned by the graph,
  // 64-byte aligned (pre-packed GEMM weights are read with aligned vector loads).
  const void* data = nullptr;
  std::shared_ptr<uint8_t> owned;

  int64_t numel() const;
  int64_t nbytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }
  bool is_compile_time() const { return kind == ValueKind::Weight || kind == ValueKind::Constant; }
};

using Attr = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;
using AttrMap = std::map<std::string, Attr>;

struct OpInfo;

struct Node {
  int id = -1;
  std::string op;               // registry name, e.g. "convolution"
  std::vector<int> inputs;      // value ids; -1 marks an absent optional tensor (e.g. no bias)
  std::vector<int> outputs;     // value ids
  AttrMap attrs;
  std::string origin;           // the ATen op it came from, for reports and errors
  const OpInfo* info = nullptr; // set by Graph::add_node from the registry

  bool has_attr(const std::string& k) const { return attrs.count(k) != 0; }
  int64_t attr_int(const std::string& k) const;
  int64_t attr_int(const std::string& k, int64_t dflt) const;
  double attr_float(const std::string& k) const;            // accepts an int attr too
  double attr_float(const std::string& k, double dflt) const;
  const std::string& attr_str(const std::string& k) const;
  std::vector<int64_t> attr_ints(const std::string& k) const;  // accepts a single int too
  std::vector<int64_t> attr_ints(const std::string& k, const std::vector<int64_t>& dflt) const;
  std::vector<double> attr_floats(const std::string& k) const;
  // Optional tensor input i, or -1 if the node has fewer inputs or it is absent.
  int input_or_absent(size_t i) const { return i < inputs.size() ? inputs[i] : -1; }
};

struct OutputSpec {
  std::vector<int64_t> shape;
  DType dtype;
};

class Graph {
 public:
  int add_input(const std::vector<int64_t>& shape, DType dtype, const std::string& name = "");
  // Borrowed weight: `data` must stay valid (and contiguous) as long as the graph and anything
  // compiled from it live.
  int add_weight(const std::vector<int64_t>& shape, DType dtype, const void* data, const std::string& name = "");
  // Constant owned by the graph (copied from `data`, nbytes = numel * dtype size).
  int add_constant(const std::vector<int64_t>& shape, DType dtype, const void* data, const std::string& name = "");
  // Appends a node; the op must be in the registry (throws otherwise). Returns the node id.
  int add_node(const std::string& op, const std::vector<int>& inputs, const std::vector<OutputSpec>& outputs,
               AttrMap attrs = {}, const std::string& origin = "");
  void set_outputs(const std::vector<int>& value_ids);

  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  const Value& value(int id) const { return values_.at(static_cast<size_t>(id)); }
  Value& value(int id) { return values_.at(static_cast<size_t>(id)); }
  const Node& node(int id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& node(int id) { return nodes_.at(static_cast<size_t>(id)); }

  // Human-readable listing, one node per line (used by DNNFUSION_DEBUG dumps and tests).
  std::string dump() const;
  // "convolution(1x3x224x224 float32, 64x3x7x7 float32 [w]) -> 1x64x112x112 float32"
  std::string describe_node(int node_id) const;

 private:
  int new_value(const std::vector<int64_t>& shape, DType dtype, ValueKind kind, const std::string& name);
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace dnnfusion::ecg
