// The reference target's kernel table: ECG ops bound to the plain reference kernels of
// csrc/kernels/reference (single-threaded loops, no blocking, no ISA-specific code), one
// registration function per binding file. A binding checks every attribute of the op the way the
// cpu target's binding does, and refuses (with the reason) what its kernel does not implement.
#pragma once
#include "runtime/op_kernels.h"

namespace dnnfusion::target::reference {

void register_elementwise_ops(runtime::KernelTable& t);
void register_nn_ops(runtime::KernelTable& t);
void register_misc_ops(runtime::KernelTable& t);

}  // namespace dnnfusion::target::reference
