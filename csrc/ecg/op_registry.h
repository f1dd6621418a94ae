// The op registry: for every ECG op, the facts the passes reason with — its mapping type
// (DNNFusion Table 2), its TVM pattern kind (baseline fusion mode), whether its result can vanish
// inside a fused block, its algebraic properties, how to count its FLOPs, and for element-wise
// ops the expression that computes one element (for code generators). The registry is
// metadata only; which ops a target runs is that target's business (csrc/target/target.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dnnfusion::ecg {

class Graph;
struct Node;

enum class MappingType : int8_t { OneToOne, OneToMany, ManyToMany, Reorganize, Shuffle };
const char* mapping_type_name(MappingType t);

// TVM's OpPatternKind, ordered as TVM orders them (fusion compares kinds with <=).
enum class PatternKind : int8_t {
  ElemWise = 0, Broadcast = 1, Injective = 2, CommReduce = 3, OutEWiseFusable = 4, Tuple = 7, Opaque = 8
};
const char* pattern_kind_name(PatternKind k);

struct MathProps {
  bool associative = false;
  bool commutative = false;
  // Ops this one distributes over (mul over add/sub; conv/linear are linear in their input).
  std::vector<std::string> distributes_over;
  // Ops this one commutes with when moved past (a reduction commutes with a constant scale,
  // a monotone elementwise op with max-pooling).
  std::vector<std::string> commutes_with;
};

enum class FlopModel : int8_t {
  None,         // data movement: moves bytes, computes nothing
  PerOutput,    // flops_per_element * numel(output 0)
  PerInput,     // flops_per_element * numel(input 0)
  Convolution,  // 2 * N*K*OH*OW * C/groups*R*S
  ConvolutionBlocked,  // the same, from the attribute weight_shape (the weight operand is packed)
  MatMul,       // 2 * M*N*K with batch
  Attention,    // 4 * B*H*Lq*Lk*D
  Pool,         // kernel area * numel(output 0)
};

// How a One-to-One op computes one output element (ecg/elementwise_expr.h has the vocabulary):
// code generators inline it instead of calling a kernel.
struct ElementwiseRule {
  std::string operands;                             // per tensor input: 'f' float32, 'b' bool, '?' optional float32
  std::function<std::string(const Node&)> text;     // expression over $0, $1, ...; empty: the op has none
  std::function<std::string(const Graph&, const Node&)> refuse;  // "" or why this node has no expression
};

struct OpInfo {
  std::string name;
  MappingType mapping;
  PatternKind pattern;
  bool ir_removable;   // result may stay in registers inside a fused block
  MathProps props;
  FlopModel flop_model;
  double flops_per_element = 0;
  int num_outputs = 1; // outputs the op always produces (split-like ops: variable, 0 here)
  ElementwiseRule elementwise;
};

// nullptr if unknown.
const OpInfo* find_op(const std::string& name);
const std::vector<OpInfo>& all_ops();

int64_t node_flops(const Graph& g, const Node& n);
// Intermediate-result size: bytes of all outputs of the node.
int64_t node_irs_bytes(const Graph& g, const Node& n);

}  // namespace dnnfusion::ecg
