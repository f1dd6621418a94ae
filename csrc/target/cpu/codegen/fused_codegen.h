// Fused code generation for the cpu target (DNNFusion §4.4): turns a fusion plan into a runtime
// Program whose fused blocks run generated C++. What each block materializes and how its values
// are computed is decided first, target-neutrally (codegen/block_plan); this file emits that plan:
// a loop nest per materialized value over its expression DAG (codegen/expr_dag: One-to-One ops
// inline as the op registry's expressions (ecg/elementwise_expr.h), data movement as index
// arithmetic, common sub-expressions once), and the
// dominant Many-to-Many op as its library kernel with the block's element-wise tail as an
// in-register epilogue hook and its element-wise head as a prologue hook (GEMMs with an epilogue:
// the GEMM template instantiated with it inlined). All blocks of a graph become one C++
// translation unit, compiled and cached by jit_compiler.
// Precondition: the plan verifies for the graph with PlanHooks::fusible = can_fuse. Postcondition:
// the Program computes every graph output exactly as the unfused graph would (up to float
// reassociation inside expressions), and singleton blocks run their library kernel unchanged.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/block_report.h"
#include "target/cpu/codegen/jit_compiler.h"
#include "ecg/graph.h"
#include "fusion/fusion_plan.h"
#include "runtime/program.h"

namespace dnnfusion::codegen {

// Whether node n may share a block: the generator has an inline rule or index arithmetic for it,
// or it is a Many-to-Many op with a library kernel (a block's dominant op).
bool can_fuse(const ecg::Graph& g, int n);
// How Many-to-Many node m2m can consume its input value v inside a fused block without v being
// written to memory (fusion::PlanHooks::InputFusion): kPrologue if v feeds input 0 of a kernel with
// a prologue hook, kStrided if every input slot v feeds is read strided by the kernel, else kNo.
int m2m_input_fusible(const ecg::Graph& g, int m2m, int v);
// fusion::PlanHooks::free_merge: `cand` is data movement that costs nothing inside `block` — a
// reshape (linear element order unchanged: index arithmetic in loops, epilogues and operands), a
// permute/slice the block's Many-to-Many kernel reads through strides, or a permute of that
// kernel's output that it can store through strides.
bool free_merge(const ecg::Graph& g, const std::vector<int>& block, int cand);

struct CodegenResult {
  runtime::Program program;
  std::string source;            // the translation unit ("" if nothing needed generating)
  JitModule module;
  int functions = 0;             // distinct generated functions
  std::vector<BlockReport> blocks;
  std::map<std::string, int> edge_rules;  // "One-to-One->Many-to-Many: prologue" -> count
};

// Generates the programs of several graphs into one translation unit (one compiler call): add()
// lowers a graph's plan, compile() builds the unit and binds every program to it.
class CodegenUnit {
 public:
  int add(const ecg::Graph& g, const fusion::Plan& plan);
  void compile();
  CodegenResult& result(int i) { return *results_.at(static_cast<size_t>(i)); }

 private:
  std::map<std::string, std::string> functions_;
  bool uses_gemm_template_ = false;  // the unit instantiates kernels/cpu/gemm_template.h
  std::vector<std::unique_ptr<CodegenResult>> results_;
  std::vector<std::function<void(const JitModule&)>> resolvers_;
};

CodegenResult generate_program(const ecg::Graph& g, const fusion::Plan& plan);

}  // namespace dnnfusion::codegen
