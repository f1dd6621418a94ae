// CUDA driver glue (contract in cuda_driver.h). The few driver types, enum values and entry points
// used are declared here rather than taken from cuda.h, which the build must not need; the values
// are those of the driver ABI, stable since CUDA 4. Entry points whose ABI changed are looked up
// under their versioned names (_v2), as cuda.h's macros would have named them.
#include "target/cuda/toolchain/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <initializer_list>
#include <mutex>

#include "common/error.h"
#include "target/cuda/toolchain/sass_stats.h"

namespace dnnfusion::cuda {

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
constexpr int CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr int CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2;
constexpr int CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr int CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// Dynamic shared memory a launch may use without opting in (all archs).
constexpr unsigned kDefaultSharedLimit = 48 * 1024;

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuStreamSynchronize)(CUstream);
  // Optional (driver 12.4+): a parameter's offset and size, CUDA_ERROR_INVALID_VALUE past the last.
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*);
};

struct Driver {
  Api api{};
  std::string unavailable;  // "" when usable
  int devices = 0;
};

// Binds `slot` to the first of `names` libcuda exports; false if none.
template <typename F>
bool bind(void* lib, F* slot, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* p = dlsym(lib, n)) {
      *slot = reinterpret_cast<F>(p);
      return true;
    }
  return false;
}

// The first required entry point libcuda lacks, "" if none.
std::string bind_all(void* lib, Api* a) {
  struct Need {
    bool ok;
    const char* name;
  };
  const Need needs[] = {
      {bind(lib, &a->cuInit, {"cuInit"}), "cuInit"},
      {bind(lib, &a->cuGetErrorName, {"cuGetErrorName"}), "cuGetErrorName"},
      {bind(lib, &a->cuGetErrorString, {"cuGetErrorString"}), "cuGetErrorString"},
      {bind(lib, &a->cuDeviceGetCount, {"cuDeviceGetCount"}), "cuDeviceGetCount"},
      {bind(lib, &a->cuDeviceGet, {"cuDeviceGet"}), "cuDeviceGet"},
      {bind(lib, &a->cuDeviceGetAttribute, {"cuDeviceGetAttribute"}), "cuDeviceGetAttribute"},
      {bind(lib, &a->cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}), "cuDevicePrimaryCtxRetain"},
      {bind(lib, &a->cuDevicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2"}), "cuDevicePrimaryCtxRelease_v2"},
      {bind(lib, &a->cuCtxPushCurrent, {"cuCtxPushCurrent_v2"}), "cuCtxPushCurrent_v2"},
      {bind(lib, &a->cuCtxPopCurrent, {"cuCtxPopCurrent_v2"}), "cuCtxPopCurrent_v2"},
      {bind(lib, &a->cuModuleLoadData, {"cuModuleLoadData"}), "cuModuleLoadData"},
      {bind(lib, &a->cuModuleUnload, {"cuModuleUnload"}), "cuModuleUnload"},
      {bind(lib, &a->cuModuleGetFunction, {"cuModuleGetFunction"}), "cuModuleGetFunction"},
      {bind(lib, &a->cuFuncGetAttribute, {"cuFuncGetAttribute"}), "cuFuncGetAttribute"},
      {bind(lib, &a->cuFuncSetAttribute, {"cuFuncSetAttribute"}), "cuFuncSetAttribute"},
      {bind(lib, &a->cuLaunchKernel, {"cuLaunchKernel"}), "cuLaunchKernel"},
      {bind(lib, &a->cuMemAlloc, {"cuMemAlloc_v2"}), "cuMemAlloc_v2"},
      {bind(lib, &a->cuMemFree, {"cuMemFree_v2"}), "cuMemFree_v2"},
      {bind(lib, &a->cuMemcpyHtoD, {"cuMemcpyHtoD_v2"}), "cuMemcpyHtoD_v2"},
      {bind(lib, &a->cuMemcpyDtoH, {"cuMemcpyDtoH_v2"}), "cuMemcpyDtoH_v2"},
      {bind(lib, &a->cuStreamSynchronize, {"cuStreamSynchronize"}), "cuStreamSynchronize"},
  };
  bind(lib, &a->cuFuncGetParamInfo, {"cuFuncGetParamInfo"});
  for (const auto& n : needs)
    if (!n.ok) return n.name;
  return "";
}

std::string error_text(const Api& a, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (a.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown error";
  if (a.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "no description";
  return std::string(name) + " (" + text + "), code " + std::to_string(r);
}

// Loads libcuda, binds it, initializes it and counts devices; records why not on failure.
void init(Driver* d) {
  dlerror();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    d->unavailable = std::string("the NVIDIA driver library libcuda.so.1 could not be loaded (") + (e ? e : "dlopen failed") +
                     "); the cuda target needs an NVIDIA GPU with its driver installed";
    return;
  }
  if (const std::string missing = bind_all(lib, &d->api); !missing.empty()) {
    d->unavailable = "libcuda.so.1 lacks the entry point " + missing + ": the NVIDIA driver is too old (update it)";
    return;  // the library stays loaded: harmless, and unloading a driver library is not always safe
  }
  if (const CUresult r = d->api.cuInit(0); r != CUDA_SUCCESS) {
    d->unavailable = "cuInit failed: " + error_text(d->api, r);
    return;
  }
  if (const CUresult r = d->api.cuDeviceGetCount(&d->devices); r != CUDA_SUCCESS) {
    d->unavailable = "cuDeviceGetCount failed: " + error_text(d->api, r);
    d->devices = 0;
    return;
  }
  if (d->devices < 1) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    d->unavailable = std::string("the NVIDIA driver sees no CUDA device") +
                     (visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : std::string());
  }
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] { init(&d); });
  return d;
}

// The API of a usable driver; TargetUnavailable otherwise.
const Api& api() {
  require_driver();
  return driver().api;
}

void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) DNNF_THROW("CUDA driver call ", call, " failed: ", error_text(driver().api, r));
}

CUdevice device_handle(int device) {
  const Api& a = api();
  if (device < 0 || device >= driver().devices)
    DNNF_THROW_AS(InvalidInput, "CUDA device ", device, " does not exist (", driver().devices, " visible)");
  CUdevice dev = 0;
  check(a.cuDeviceGet(&dev, device), "cuDeviceGet");
  return dev;
}

CUcontext retain_primary(int device) {
  CUcontext ctx = nullptr;
  check(api().cuDevicePrimaryCtxRetain(&ctx, device_handle(device)), "cuDevicePrimaryCtxRetain");
  return ctx;
}

// Releases what retain_primary returned; errors are ignored (called from destructors, possibly
// after the driver shut down at exit).
void release_primary(int device) {
  CUdevice dev = 0;
  if (driver().api.cuDeviceGet(&dev, device) == CUDA_SUCCESS) driver().api.cuDevicePrimaryCtxRelease(dev);
}

// Makes `ctx` current on this thread for the scope, then restores the previous one.
class ContextScope {
 public:
  explicit ContextScope(CUcontext ctx) { check(driver().api.cuCtxPushCurrent(ctx), "cuCtxPushCurrent"); }
  ~ContextScope() {
    CUcontext popped = nullptr;
    driver().api.cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
};

// The number of parameters of f, or -1 if the driver cannot tell.
int param_count(const Api& a, CUfunction f) {
  if (!a.cuFuncGetParamInfo) return -1;
  // Kernel parameters fit in 32764 bytes, at least one byte each: more answers than that mean a
  // driver that does not stop, which therefore cannot tell.
  constexpr size_t kMaxParams = 32764;
  for (size_t i = 0; i <= kMaxParams; ++i) {
    size_t offset = 0, size = 0;
    if (a.cuFuncGetParamInfo(f, i, &offset, &size) != CUDA_SUCCESS) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

std::string driver_unavailable_reason() { return driver().unavailable; }

void require_driver() {
  if (const std::string why = driver_unavailable_reason(); !why.empty())
    DNNF_THROW_AS(TargetUnavailable, "the cuda target cannot run on this machine: ", why);
}

int device_count() { return driver().unavailable.empty() ? driver().devices : 0; }

std::string device_arch(int device) {
  const Api& a = api();
  const CUdevice dev = device_handle(device);
  int major = 0, minor = 0;
  check(a.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  check(a.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  return "sm_" + std::to_string(major * 10 + minor);
}

// ---- CudaModule ----

CudaModule::CudaModule(const std::string& cubin, int device) : device_(device) {
  const Api& a = api();
  // The driver trusts the image's offsets: a truncated or corrupt one is refused here instead.
  cubin_sections(cubin);
  context_ = retain_primary(device);
  try {
    ContextScope scope(context_);
    check(a.cuModuleLoadData(&module_, cubin.data()), "cuModuleLoadData");
  } catch (...) {
    release_primary(device_);
    throw;
  }
}

CudaModule::~CudaModule() {
  const Api& a = driver().api;
  CUcontext popped = nullptr;
  if (a.cuCtxPushCurrent(context_) == CUDA_SUCCESS) {
    a.cuModuleUnload(module_);
    a.cuCtxPopCurrent(&popped);
  }
  release_primary(device_);
}

CudaFunction CudaModule::function(const std::string& name) const {
  const Api& a = api();
  CudaFunction f;
  f.name = name;
  ContextScope scope(context_);
  const CUresult r = a.cuModuleGetFunction(&f.handle, module_, name.c_str());
  if (r != CUDA_SUCCESS)
    DNNF_THROW("CUDA driver call cuModuleGetFunction(\"", name, "\") failed: ", error_text(a, r));
  f.param_count = param_count(a, f.handle);
  return f;
}

FuncAttributes CudaModule::func_attributes(const CudaFunction& f) const {
  const Api& a = api();
  ContextScope scope(context_);
  FuncAttributes out;
  auto get = [&](int attr, int* v) { check(a.cuFuncGetAttribute(v, attr, f.handle), "cuFuncGetAttribute"); };
  get(CU_FUNC_ATTRIBUTE_NUM_REGS, &out.registers);
  get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &out.local_bytes);
  get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &out.max_threads_per_block);
  get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &out.static_shared_bytes);
  get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, &out.const_bytes);
  get(CU_FUNC_ATTRIBUTE_BINARY_VERSION, &out.binary_version);
  return out;
}

void CudaModule::launch(const CudaFunction& f, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                        unsigned shared_bytes, void* stream, const std::vector<void*>& args) const {
  const Api& a = api();
  if (!f.handle) DNNF_THROW_AS(InvalidInput, "launch: no function (look it up with CudaModule::function)");
  for (int i = 0; i < 3; ++i)
    if (grid[i] == 0 || block[i] == 0)
      DNNF_THROW_AS(InvalidInput, "launch of ", f.name, ": grid and block dimensions must be positive, got grid (",
                    grid[0], ", ", grid[1], ", ", grid[2], ") block (", block[0], ", ", block[1], ", ", block[2], ")");
  if (f.param_count >= 0 && static_cast<size_t>(f.param_count) != args.size())
    DNNF_THROW_AS(InvalidInput, "launch of ", f.name, ": the kernel takes ", f.param_count, " parameters, ", args.size(),
                  " arguments given");
  ContextScope scope(context_);
  if (shared_bytes > kDefaultSharedLimit)
    check(a.cuFuncSetAttribute(f.handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(shared_bytes)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  std::vector<void*> params(args);  // cuLaunchKernel takes void**, and reads it only
  check(a.cuLaunchKernel(f.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes, stream,
                         params.empty() ? nullptr : params.data(), nullptr),
        "cuLaunchKernel");
}

// ---- memory and streams ----

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : device_(device), size_(bytes) {
  const Api& a = api();
  if (bytes == 0) DNNF_THROW_AS(InvalidInput, "DeviceBuffer: zero bytes requested");
  context_ = retain_primary(device);
  try {
    ContextScope scope(context_);
    CUdeviceptr p = 0;
    check(a.cuMemAlloc(&p, bytes), "cuMemAlloc");
    address_ = p;
  } catch (...) {
    release_primary(device_);
    throw;
  }
}

DeviceBuffer::~DeviceBuffer() {
  const Api& a = driver().api;
  CUcontext popped = nullptr;
  if (a.cuCtxPushCurrent(context_) == CUDA_SUCCESS) {
    a.cuMemFree(address_);
    a.cuCtxPopCurrent(&popped);
  }
  release_primary(device_);
}

void DeviceBuffer::copy_from_host(const void* src, size_t bytes) {
  if (bytes > size_) DNNF_THROW_AS(InvalidInput, "copy of ", bytes, " bytes into a ", size_, "-byte device buffer");
  ContextScope scope(context_);
  check(api().cuMemcpyHtoD(address_, src, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::copy_to_host(void* dst, size_t bytes) const {
  if (bytes > size_) DNNF_THROW_AS(InvalidInput, "copy of ", bytes, " bytes out of a ", size_, "-byte device buffer");
  ContextScope scope(context_);
  check(api().cuMemcpyDtoH(dst, address_, bytes), "cuMemcpyDtoH");
}

void stream_synchronize(void* stream, int device) {
  const Api& a = api();
  const CUcontext ctx = retain_primary(device);
  struct Release {
    int device;
    ~Release() { release_primary(device); }
  } release{device};
  ContextScope scope(ctx);
  check(a.cuStreamSynchronize(stream), "cuStreamSynchronize");
}

}  // namespace dnnfusion::cuda
