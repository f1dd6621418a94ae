// Runs one entry of a decoded PTX module (ptx_program.h) over a whole grid on the CPU: the
// correctness oracle of the cuda target on machines without a GPU.
//
// Precondition: `m` came from parse_module(); `args.params` holds one value per .param of the entry
// (pointer parameters carry host addresses, reinterpret_cast<uint64_t>(ptr)); every byte of host
// memory the kernel may touch through a global (or generic) address lies in `args.regions`.
// Postcondition: the kernel's stores are in host memory and the statistics are returned; or an
// InvalidInput names the failing instruction (line and text), thread and block: an access outside
// the regions / shared / local memory, a misaligned or read-only access, integer division by zero,
// a barrier deadlock, or more than `max_instructions` executed. A bad kernel never crashes the
// process.
//
// Semantics worth knowing:
//   - One thread runs at a time. bar.sync is a phase barrier: every thread of the block runs until
//     it reaches a barrier or exits, then all waiting threads are released together. A thread that
//     has exited counts as arrived (so early-exit before __syncthreads() does not deadlock), and
//     threads waiting at different bar.sync instructions with the same id release together (as on
//     sm_70+); threads waiting on different barrier ids are a deadlock and throw.
//   - fp32 is IEEE binary32: .rn via host float arithmetic and std::fmaf, .rz/.rm/.rp exactly via
//     error-free transformations in double, .ftz flushes subnormal inputs and results, .sat clamps
//     to [0, 1]. mul.f32/add.f32 without a rounding modifier run unfused (ptxas could contract
//     them into an fma on the device; kernels meant to match exactly use fma.rn/__fmaf_rn).
//     NaN results are the canonical NaN 0x7fffffff, as the GPU produces.
//   - Integers wrap; shifts clamp their amount to the width; INT_MIN / -1 wraps to INT_MIN.
//   - Registers start at 0; shared and local memory start as 0xff bytes (a float read before any
//     write is a NaN). Local memory is limited to 64 MiB per block (it holds register spills).
//   - Blocks are independent; with threads > 1 they run on a pool of at most 256 host threads and
//     the results are identical to threads == 1 (a kernel whose blocks write the same address is
//     racy on the GPU as well; run such a kernel with threads == 1). When several blocks fail,
//     the error of the lowest block index is reported, as a serial run would.
//   - The launch fails like the driver's would for more than 1024 threads a block, a block beyond
//     the entry's .maxntid/.reqntid, or more than 227 KiB of shared memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "target/cuda/ptx/ptx_program.h"

namespace dnnfusion::cuda::ptx {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

// Host memory the kernel's global pointers point into.
struct MemoryRegion {
  void* data;
  size_t bytes;
  bool writable;
};

// Roughly 40 s of interpretation at 100 M instructions/s: generous for real layers, a bound for
// an infinite loop.
constexpr uint64_t kDefaultMaxInstructions = 4000000000ull;

struct LaunchArgs {
  Dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  std::vector<uint64_t> params;  // one per .param, low bytes used per its declared size
  std::vector<MemoryRegion> regions;
  int threads = 1;  // host threads running blocks in parallel
  // PTX instructions (issued, predicated-off included) the whole launch may execute.
  uint64_t max_instructions = kDefaultMaxInstructions;
};

struct RunStats {
  uint64_t instructions = 0;  // PTX instructions issued (predicated-off ones included)
  uint64_t fma = 0;           // fp32 fma/mad executed
  uint64_t global_loads = 0, global_stores = 0, shared_loads = 0, shared_stores = 0;
  double seconds = 0;
};

RunStats run(const Module& m, const std::string& entry, const LaunchArgs& args);

}  // namespace dnnfusion::cuda::ptx
