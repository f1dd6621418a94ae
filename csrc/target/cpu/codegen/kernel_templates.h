// The kernel templates generated code instantiates, as text: a generated translation unit pastes
// them after generated_prelude() (target/cpu/codegen/prelude.h) so its fused element-wise code is inlined
// into the kernel instead of being called back through a function pointer. The text is the header
// itself, embedded at build time (CMakeLists.txt), so it cannot drift from what the tests compile.
#pragma once

namespace dnnfusion::codegen {

// csrc/kernels/cpu/gemm_template.h: template dnnf_gemm::gemm<Epi>(...), a GEMM whose epilogue
// functor runs on each accumulator tile row before the one store to C. Needs the prelude's
// `struct dnnf_parallel` declared before it.
const char* gemm_template_source();

}  // namespace dnnfusion::codegen
