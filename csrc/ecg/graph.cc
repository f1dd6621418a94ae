#include "ecg/graph.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "common/error.h"
#include "common/large_alloc.h"
#include "ecg/op_registry.h"

namespace dnnfusion::ecg {

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Input: return "input";
    case ValueKind::Weight: return "weight";
    case ValueKind::Constant: return "const";
    case ValueKind::Activation: return "act";
  }
  return "?";
}

int64_t Value::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::ostringstream os;
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "x" : "") << shape[i];
  return os.str();
}

namespace {
template <typename T>
const T* get_attr(const Node& n, const std::string& k) {
  auto it = n.attrs.find(k);
  if (it == n.attrs.end()) return nullptr;
  return std::get_if<T>(&it->second);
}
[[noreturn]] void attr_error(const Node& n, const std::string& k, const char* want) {
  DNNF_THROW("node '", n.op, "' (", n.origin, "): attribute '", k, "' ",
             n.attrs.count(k) ? "has the wrong type, expected " : "is missing, expected ", want);
}
}  // namespace

int64_t Node::attr_int(const std::string& k) const {
  if (auto* v = get_attr<int64_t>(*this, k)) return *v;
  attr_error(*this, k, "an int");
}
int64_t Node::attr_int(const std::string& k, int64_t dflt) const { return has_attr(k) ? attr_int(k) : dflt; }
double Node::attr_float(const std::string& k) const {
  if (auto* v = get_attr<double>(*this, k)) return *v;
  if (auto* v = get_attr<int64_t>(*this, k)) return static_cast<double>(*v);
  attr_error(*this, k, "a number");
}
double Node::attr_float(const std::string& k, double dflt) const { return has_attr(k) ? attr_float(k) : dflt; }
const std::string& Node::attr_str(const std::string& k) const {
  if (auto* v = get_attr<std::string>(*this, k)) return *v;
  attr_error(*this, k, "a string");
}
std::vector<int64_t> Node::attr_ints(const std::string& k) const {
  if (auto* v = get_attr<std::vector<int64_t>>(*this, k)) return *v;
  if (auto* v = get_attr<int64_t>(*this, k)) return {*v};
  attr_error(*this, k, "a list of ints");
}
std::vector<int64_t> Node::attr_ints(const std::string& k, const std::vector<int64_t>& dflt) const {
  return has_attr(k) ? attr_ints(k) : dflt;
}
std::vector<double> Node::attr_floats(const std::string& k) const {
  if (auto* v = get_attr<std::vector<double>>(*this, k)) return *v;
  if (auto* v = get_attr<std::vector<int64_t>>(*this, k)) return std::vector<double>(v->begin(), v->end());
  if (auto* v = get_attr<double>(*this, k)) return {*v};
  attr_error(*this, k, "a list of numbers");
}

int Graph::new_value(const std::vector<int64_t>& shape, DType dtype, ValueKind kind, const std::string& name) {
  for (auto d : shape) DNNF_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  Value v;
  v.id = static_cast<int>(values_.size());
  v.shape = shape;
  v.dtype = dtype;
  v.kind = kind;
  v.name = name.empty() ? "v" + std::to_string(v.id) : name;
  values_.push_back(std::move(v));
  return values_.back().id;
}

int Graph::add_input(const std::vector<int64_t>& shape, DType dtype, const std::string& name) {
  int id = new_value(shape, dtype, ValueKind::Input, name);
  inputs_.push_back(id);
  return id;
}

int Graph::add_weight(const std::vector<int64_t>& shape, DType dtype, const void* data, const std::string& name) {
  int id = new_value(shape, dtype, ValueKind::Weight, name);
  DNNF_CHECK(data != nullptr || values_[id].numel() == 0, "weight '", name, "' has no data");
  values_[id].data = data;
  return id;
}

int Graph::add_constant(const std::vector<int64_t>& shape, DType dtype, const void* data, const std::string& name) {
  int id = new_value(shape, dtype, ValueKind::Constant, name);
  auto& v = values_[id];
  // Large constants (packed weights) on huge pages: see common/large_alloc.h.
  auto* p = static_cast<uint8_t*>(allocate_large(static_cast<size_t>(v.nbytes())));
  v.owned = std::shared_ptr<uint8_t>(p, [](uint8_t* q) { free_large(q); });
  if (v.nbytes() > 0) std::memcpy(p, data, static_cast<size_t>(v.nbytes()));
  v.data = p;
  return id;
}

int Graph::add_node(const std::string& op, const std::vector<int>& inputs, const std::vector<OutputSpec>& outputs,
                    AttrMap attrs, const std::string& origin) {
  const OpInfo* info = find_op(op);
  if (!info) DNNF_THROW("unknown ECG op '", op, "' (from ", origin.empty() ? "?" : origin, ")");
  Node n;
  n.id = static_cast<int>(nodes_.size());
  n.op = op;
  n.inputs = inputs;
  n.attrs = std::move(attrs);
  n.origin = origin.empty() ? op : origin;
  n.info = info;
  for (int v : inputs) {
    if (v < 0) continue;
    DNNF_CHECK(v < static_cast<int>(values_.size()), "node '", op, "' uses unknown value id ", v);
    values_[v].users.push_back(n.id);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    int id = new_value(outputs[i].shape, outputs[i].dtype, ValueKind::Activation, "");
    values_[id].producer = n.id;
    values_[id].producer_slot = static_cast<int>(i);
    n.outputs.push_back(id);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

void Graph::set_outputs(const std::vector<int>& ids) {
  for (int v : outputs_) values_.at(v).is_output = false;
  outputs_ = ids;
  for (int v : outputs_) values_.at(v).is_output = true;
}

std::string Graph::describe_node(int node_id) const {
  const Node& n = node(node_id);
  std::ostringstream os;
  os << n.op << "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (i) os << ", ";
    if (n.inputs[i] < 0) {
      os << "None";
      continue;
    }
    const Value& v = value(n.inputs[i]);
    os << shape_str(v.shape) << " " << dtype_name(v.dtype);
    if (v.is_compile_time()) os << " [" << value_kind_name(v.kind) << "]";
  }
  os << ") -> ";
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value& v = value(n.outputs[i]);
    os << (i ? ", " : "") << shape_str(v.shape) << " " << dtype_name(v.dtype);
  }
  return os.str();
}

namespace {
void print_attr(std::ostream& os, const Attr& a) {
  if (auto* i = std::get_if<int64_t>(&a)) os << *i;
  else if (auto* d = std::get_if<double>(&a)) os << *d;
  else if (auto* s = std::get_if<std::string>(&a)) os << '"' << *s << '"';
  else if (auto* iv = std::get_if<std::vector<int64_t>>(&a)) {
    os << "[";
    for (size_t i = 0; i < iv->size(); ++i) os << (i ? "," : "") << (*iv)[i];
    os << "]";
  } else if (auto* dv = std::get_if<std::vector<double>>(&a)) {
    os << "[";
    for (size_t i = 0; i < dv->size(); ++i) os << (i ? "," : "") << (*dv)[i];
    os << "]";
  }
}
}  // namespace

std::string Graph::dump() const {
  std::ostringstream os;
  for (int v : inputs_) os << "input %" << value(v).name << " : " << shape_str(value(v).shape) << " " << dtype_name(value(v).dtype) << "\n";
  for (const auto& v : values_)
    if (v.is_compile_time())
      os << value_kind_name(v.kind) << " %" << v.name << " : " << shape_str(v.shape) << " " << dtype_name(v.dtype) << "\n";
  for (const auto& n : nodes_) {
    os << "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << "%" << value(n.outputs[i]).name;
    os << " = " << n.op << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << (n.inputs[i] < 0 ? "None" : "%" + value(n.inputs[i]).name);
    for (const auto& [k, a] : n.attrs) {
      os << ", " << k << "=";
      print_attr(os, a);
    }
    os << ")  # ";
    for (size_t i = 0; i < n.outputs.size(); ++i)
      os << (i ? ", " : "") << shape_str(value(n.outputs[i]).shape) << " " << dtype_name(value(n.outputs[i]).dtype);
    os << "  [" << mapping_type_name(n.info->mapping) << "]\n";
  }
  os << "return";
  for (int v : outputs_) os << " %" << value(v).name;
  os << "\n";
  return os.str();
}

}  // namespace dnnfusion::ecg
