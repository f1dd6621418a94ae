// The CUDA driver API, reached through dlopen("libcuda.so.1") so that the project builds and
// imports without CUDA: loading a cubin into a device's primary context, launching its kernels on a
// caller's stream, and the few memory calls tests and benchmarks need.
//
// Contexts: everything runs in the device's primary context (the one PyTorch's runtime API uses),
// retained while a CudaModule or DeviceBuffer lives, and made current only for the duration of
// each call (pushed, then popped), so the calling thread's current context is what it was.
//
// Precondition: none for the queries; the classes need driver_unavailable_reason() == "" (else
// TargetUnavailable). Postcondition: the library is loaded and cuInit run at most once per process,
// thread-safely, on first use; every failing driver call is a dnnfusion::Error naming the call and
// the driver's error name and description.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dnnfusion::cuda {

// "" when libcuda.so.1 loads, has the entry points used here, cuInit(0) succeeds and at least one
// device is visible; else what is missing, as a sentence for an error message.
std::string driver_unavailable_reason();
// Throws TargetUnavailable with driver_unavailable_reason() unless it is "".
void require_driver();
// Number of visible devices; 0 when the driver is unavailable.
int device_count();
// "sm_<major><minor>" of the device's compute capability, e.g. "sm_90". TargetUnavailable without
// a driver; InvalidInput for a device index out of range.
std::string device_arch(int device);

// A kernel of a loaded module. Valid while its CudaModule lives.
struct CudaFunction {
  void* handle = nullptr;  // CUfunction
  std::string name;
  int param_count = -1;    // from cuFuncGetParamInfo (driver 12.4+); -1 when the driver cannot say
};

// What cuFuncGetAttribute reports for a kernel.
struct FuncAttributes {
  int registers = 0;              // per thread
  int local_bytes = 0;            // per thread (spills, local arrays)
  int max_threads_per_block = 0;  // the most a launch may use, given the registers
  int static_shared_bytes = 0;
  int const_bytes = 0;
  int binary_version = 0;         // SASS version, major * 10 + minor
};

// A cubin loaded (cuModuleLoadData) into a device's primary context; unloaded on destruction.
class CudaModule {
 public:
  // `cubin` is checked first (cubin_sections, sass_stats.h): a malformed image is InvalidInput; one
  // the device cannot run (another SM major version) is the driver's error.
  CudaModule(const std::string& cubin, int device = 0);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  int device() const { return device_; }
  // The entry function `name`; Error (CUDA_ERROR_NOT_FOUND) if the module has none.
  CudaFunction function(const std::string& name) const;
  FuncAttributes func_attributes(const CudaFunction& f) const;
  // Launches f asynchronously on `stream` (a CUstream, e.g. PyTorch's current stream; nullptr is
  // the legacy default stream). args[i] points at the value of the kernel's parameter i, as
  // cuLaunchKernel's kernelParams; their count must match the kernel's when the driver can tell
  // (InvalidInput otherwise). Dynamic shared memory above 48 KiB is opted into for f first.
  void launch(const CudaFunction& f, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
              unsigned shared_bytes, void* stream, const std::vector<void*>& args) const;

 private:
  int device_;
  void* context_ = nullptr;  // CUcontext, retained
  void* module_ = nullptr;   // CUmodule
};

// Device memory (cuMemAlloc) in a device's primary context; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, int device = 0);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint64_t address() const { return address_; }  // the CUdeviceptr, to pass as a kernel argument
  size_t size() const { return size_; }
  // Synchronous copies of `bytes` (at most size(), else InvalidInput) from/to host memory.
  void copy_from_host(const void* src, size_t bytes);
  void copy_to_host(void* dst, size_t bytes) const;

 private:
  int device_;
  size_t size_;
  void* context_ = nullptr;
  uint64_t address_ = 0;
};

// Waits for all work queued on `stream` (nullptr: the legacy default stream) of `device`.
void stream_synchronize(void* stream, int device = 0);

}  // namespace dnnfusion::cuda
