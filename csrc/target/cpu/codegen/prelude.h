// The prelude every generated CPU translation unit starts with: the runtime ABI (dnnf_parallel)
// and the element-wise expression vocabulary of ecg/elementwise_expr.h, with branch-free float
// math (exp, erf, tanh) the compiler can vectorize, unlike libm calls.
#pragma once
#include <string>

namespace dnnfusion::codegen {

const std::string& generated_prelude();

}  // namespace dnnfusion::codegen
