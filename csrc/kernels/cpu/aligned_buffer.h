// A 64-byte aligned scratch buffer that only grows: kernels keep one per thread for their packing
// so that a call per layer never reaches the allocator. Portable code only (the ISA files include
// nothing with inline functions, kernels/cpu/gemm_ukernel.h).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace dnnfusion::kernels {

template <typename T>
struct AlignedBuffer {
  T* ptr = nullptr;
  size_t cap = 0;  // elements
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(ptr); }
  // At least n elements; the contents are not kept when it grows.
  T* get(size_t n) {
    if (n > cap) {
      std::free(ptr);
      ptr = nullptr;
      cap = 0;
      const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      ptr = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (ptr == nullptr) throw std::bad_alloc();
      cap = bytes / sizeof(T);
    }
    return ptr;
  }
};

}  // namespace dnnfusion::kernels
