// The cpu target's kernel table: ECG ops bound to the kernel families of csrc/kernels/cpu, one
// registration function per binding file under ops/. The table itself belongs to the target
// (target::Target::find_kernel); code inside csrc/target/cpu reaches it through cpu_target().
#pragma once
#include "runtime/op_kernels.h"
#include "target/target.h"

namespace dnnfusion::target::cpu {

void register_elementwise_ops(runtime::KernelTable& t);
void register_nn_ops(runtime::KernelTable& t);
void register_misc_ops(runtime::KernelTable& t);

// The registered cpu target (its kernels, for the code generator's questions about them).
const Target& cpu_target();

}  // namespace dnnfusion::target::cpu
