// The hooks through which a fused block's generated code runs *inside* a library kernel: an
// epilogue applies the block's element-wise tail to the kernel's output while it is still in
// registers/L1 (right after the kernel produced its final value, before anything else reads it),
// and a prologue computes the kernel's input on the fly instead of reading a materialized tensor.
// Kernels stay free of codegen: they only see a function pointer and an opaque context.
#pragma once
#include <cstdint>

namespace dnnfusion::kernels {

struct ElementHook {
  // Epilogue: transforms, in place, `count` contiguous elements of the kernel's output that hold
  // row-major linear indices [start, start + count) of the output and live at `data`. Called once
  // per output element, after that element's final value is stored, from any worker thread.
  // Prologue: writes elements [start, start + count) (row-major linear indices) of the kernel's
  // input 0 into `data`; the kernel then never reads its materialized input 0 (which may be null).
  void (*fn)(const void* ctx, float* data, int64_t start, int64_t count) = nullptr;
  const void* ctx = nullptr;
  // Epilogue, a hint only: operands the hook reads at exactly the indices it transforms (index i
  // at same_index[k] + i; a residual add's other operand), null where there are fewer. A kernel
  // may prefetch them while it computes the elements the hook will get.
  const float* same_index[2] = {nullptr, nullptr};
  explicit operator bool() const { return fn != nullptr; }
  void operator()(float* data, int64_t start, int64_t count) const { fn(ctx, data, start, count); }
};

}  // namespace dnnfusion::kernels
