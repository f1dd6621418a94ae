// OpenCL host runtime glue (contract in opencl_runtime.h). The few OpenCL types, constants and
// entry points used are declared here rather than taken from <CL/cl.h>, so the main build needs no
// OpenCL headers; the values are those of the OpenCL 1.2 ABI, which later versions keep (the tests
// compare the error codes with the Khronos headers where those are installed). Only OpenCL 1.2
// entry points are used: that is what vendor FPGA runtimes implement.
#include "target/fpga/opencl/opencl_runtime.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <mutex>
#include <utility>

#include "common/error.h"
#include "common/private_cache.h"

namespace dnnfusion::fpga::opencl {

namespace {

using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bool = cl_uint;
using cl_bitfield = cl_ulong;
using cl_platform_id = void*;
using cl_device_id = void*;
using cl_context = void*;
using cl_command_queue = void*;
using cl_program = void*;
using cl_kernel = void*;
using cl_mem = void*;
using cl_event = void*;
using cl_context_properties = intptr_t;

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_BUILD_PROGRAM_FAILURE = -11;
constexpr cl_int CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST = -14;
constexpr cl_int CL_INVALID_BINARY = -42;
constexpr cl_int CL_INVALID_BUILD_OPTIONS = -43;
constexpr cl_int CL_INVALID_KERNEL_NAME = -46;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;
constexpr cl_bool CL_TRUE = 1;
constexpr cl_bool CL_FALSE = 0;
constexpr cl_uint CL_PLATFORM_VERSION = 0x0901;
constexpr cl_uint CL_PLATFORM_NAME = 0x0902;
constexpr cl_uint CL_PLATFORM_VENDOR = 0x0903;
constexpr cl_bitfield CL_DEVICE_TYPE_DEFAULT = 1 << 0;
constexpr cl_bitfield CL_DEVICE_TYPE_CPU = 1 << 1;
constexpr cl_bitfield CL_DEVICE_TYPE_GPU = 1 << 2;
constexpr cl_bitfield CL_DEVICE_TYPE_ACCELERATOR = 1 << 3;
constexpr cl_bitfield CL_DEVICE_TYPE_CUSTOM = 1 << 4;
constexpr cl_bitfield CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;
constexpr cl_uint CL_DEVICE_TYPE = 0x1000;
constexpr cl_uint CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004;
constexpr cl_uint CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;
constexpr cl_uint CL_DEVICE_NAME = 0x102B;
constexpr cl_context_properties CL_CONTEXT_PLATFORM = 0x1084;
constexpr cl_bitfield CL_QUEUE_PROFILING_ENABLE = 1 << 1;
constexpr cl_bitfield CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_bitfield CL_MEM_WRITE_ONLY = 1 << 1;
constexpr cl_bitfield CL_MEM_READ_ONLY = 1 << 2;
constexpr cl_uint CL_PROGRAM_NUM_DEVICES = 0x1162;
constexpr cl_uint CL_PROGRAM_BINARY_SIZES = 0x1165;
constexpr cl_uint CL_PROGRAM_BINARIES = 0x1166;
constexpr cl_uint CL_PROGRAM_KERNEL_NAMES = 0x1168;
constexpr cl_uint CL_PROGRAM_BUILD_LOG = 0x1183;
constexpr cl_uint CL_KERNEL_NUM_ARGS = 0x1191;
constexpr cl_uint CL_EVENT_COMMAND_EXECUTION_STATUS = 0x11D3;
constexpr cl_int CL_COMPLETE = 0;
constexpr cl_int CL_RUNNING = 1;
constexpr cl_int CL_SUBMITTED = 2;
constexpr cl_uint CL_PROFILING_COMMAND_QUEUED = 0x1280;
constexpr cl_uint CL_PROFILING_COMMAND_SUBMIT = 0x1281;
constexpr cl_uint CL_PROFILING_COMMAND_START = 0x1282;
constexpr cl_uint CL_PROFILING_COMMAND_END = 0x1283;

constexpr const char* kPoclName = "Portable Computing Language";
constexpr const char* kPlatformVar = "DNNFUSION_OPENCL_PLATFORM";
constexpr const char* kLibraryVar = "DNNFUSION_OPENCL_LIBRARY";
// A build log is for a human; a runaway one must not make the message unreadable.
constexpr size_t kMaxLogChars = 64 * 1024;

struct Api {
  cl_int (*clGetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*);
  cl_int (*clGetPlatformInfo)(cl_platform_id, cl_uint, size_t, void*, size_t*);
  cl_int (*clGetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*);
  cl_int (*clGetDeviceInfo)(cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_context (*clCreateContext)(const cl_context_properties*, cl_uint, const cl_device_id*,
                                void (*)(const char*, const void*, size_t, void*), void*, cl_int*);
  cl_int (*clReleaseContext)(cl_context);
  cl_command_queue (*clCreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int*);
  cl_int (*clReleaseCommandQueue)(cl_command_queue);
  cl_int (*clFlush)(cl_command_queue);
  cl_int (*clFinish)(cl_command_queue);
  cl_program (*clCreateProgramWithSource)(cl_context, cl_uint, const char**, const size_t*, cl_int*);
  cl_program (*clCreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id*, const size_t*,
                                          const unsigned char**, cl_int*, cl_int*);
  cl_int (*clBuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*, void (*)(cl_program, void*), void*);
  cl_int (*clGetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_int (*clGetProgramInfo)(cl_program, cl_uint, size_t, void*, size_t*);
  cl_int (*clReleaseProgram)(cl_program);
  cl_kernel (*clCreateKernel)(cl_program, const char*, cl_int*);
  cl_int (*clGetKernelInfo)(cl_kernel, cl_uint, size_t, void*, size_t*);
  cl_int (*clSetKernelArg)(cl_kernel, cl_uint, size_t, const void*);
  cl_int (*clReleaseKernel)(cl_kernel);
  cl_mem (*clCreateBuffer)(cl_context, cl_bitfield, size_t, void*, cl_int*);
  cl_int (*clReleaseMemObject)(cl_mem);
  cl_int (*clEnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint,
                                 const cl_event*, cl_event*);
  cl_int (*clEnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint, const cl_event*,
                                cl_event*);
  cl_int (*clEnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*,
                                   cl_uint, const cl_event*, cl_event*);
  cl_int (*clWaitForEvents)(cl_uint, const cl_event*);
  cl_int (*clGetEventInfo)(cl_event, cl_uint, size_t, void*, size_t*);
  cl_int (*clGetEventProfilingInfo)(cl_event, cl_uint, size_t, void*, size_t*);
  cl_int (*clReleaseEvent)(cl_event);
};

// ---- error codes ----

struct CodeInfo {
  cl_int code;
  const char* name;
  const char* meaning;
};

const CodeInfo kCodes[] = {
    {0, "CL_SUCCESS", "no error"},
    {-1, "CL_DEVICE_NOT_FOUND", "no device of the requested type"},
    {-2, "CL_DEVICE_NOT_AVAILABLE", "the device is not available (busy or powered off)"},
    {-3, "CL_COMPILER_NOT_AVAILABLE", "the platform has no online compiler (load a binary instead)"},
    {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE", "device memory for a buffer could not be allocated"},
    {-5, "CL_OUT_OF_RESOURCES", "the device ran out of resources"},
    {-6, "CL_OUT_OF_HOST_MEMORY", "the implementation ran out of host memory"},
    {-7, "CL_PROFILING_INFO_NOT_AVAILABLE", "no profiling information (queue without profiling, or command not complete)"},
    {-8, "CL_MEM_COPY_OVERLAP", "source and destination of a copy overlap"},
    {-9, "CL_IMAGE_FORMAT_MISMATCH", "images of different formats"},
    {-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED", "image format not supported by the device"},
    {-11, "CL_BUILD_PROGRAM_FAILURE", "the program failed to build for the device"},
    {-12, "CL_MAP_FAILURE", "a buffer or image could not be mapped"},
    {-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET", "a sub-buffer offset is not aligned for the device"},
    {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", "a command waited on terminated abnormally"},
    {-15, "CL_COMPILE_PROGRAM_FAILURE", "the program failed to compile"},
    {-16, "CL_LINKER_NOT_AVAILABLE", "the platform has no linker"},
    {-17, "CL_LINK_PROGRAM_FAILURE", "the program failed to link"},
    {-18, "CL_DEVICE_PARTITION_FAILED", "the device could not be partitioned"},
    {-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE", "no kernel argument information (program built without it)"},
    {-30, "CL_INVALID_VALUE", "an argument has an invalid value"},
    {-31, "CL_INVALID_DEVICE_TYPE", "invalid device type"},
    {-32, "CL_INVALID_PLATFORM", "invalid platform"},
    {-33, "CL_INVALID_DEVICE", "invalid device, or a device not in the context"},
    {-34, "CL_INVALID_CONTEXT", "invalid context"},
    {-35, "CL_INVALID_QUEUE_PROPERTIES", "command-queue properties not supported by the device"},
    {-36, "CL_INVALID_COMMAND_QUEUE", "invalid command queue"},
    {-37, "CL_INVALID_HOST_PTR", "invalid host pointer for the memory flags"},
    {-38, "CL_INVALID_MEM_OBJECT", "invalid memory object (an argument expecting a buffer got something else)"},
    {-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR", "invalid image format"},
    {-40, "CL_INVALID_IMAGE_SIZE", "image size not supported by the device"},
    {-41, "CL_INVALID_SAMPLER", "invalid sampler"},
    {-42, "CL_INVALID_BINARY", "the binary is not a valid program for the device"},
    {-43, "CL_INVALID_BUILD_OPTIONS", "invalid build options"},
    {-44, "CL_INVALID_PROGRAM", "invalid program object"},
    {-45, "CL_INVALID_PROGRAM_EXECUTABLE", "the program has no successfully built executable for the device"},
    {-46, "CL_INVALID_KERNEL_NAME", "the program has no kernel of that name"},
    {-47, "CL_INVALID_KERNEL_DEFINITION", "the kernel's definition differs between devices"},
    {-48, "CL_INVALID_KERNEL", "invalid kernel object"},
    {-49, "CL_INVALID_ARG_INDEX", "the kernel has no argument of that index"},
    {-50, "CL_INVALID_ARG_VALUE", "invalid argument value (e.g. a value for a __local argument)"},
    {-51, "CL_INVALID_ARG_SIZE", "the argument's size differs from the kernel parameter's type"},
    {-52, "CL_INVALID_KERNEL_ARGS", "the kernel's arguments were not all set"},
    {-53, "CL_INVALID_WORK_DIMENSION", "work dimensions outside 1..3"},
    {-54, "CL_INVALID_WORK_GROUP_SIZE", "invalid work-group size (too large, or not dividing the global size)"},
    {-55, "CL_INVALID_WORK_ITEM_SIZE", "a work-group dimension exceeds the device's maximum work-item size"},
    {-56, "CL_INVALID_GLOBAL_OFFSET", "invalid global work offset"},
    {-57, "CL_INVALID_EVENT_WAIT_LIST", "invalid event wait list"},
    {-58, "CL_INVALID_EVENT", "invalid event object"},
    {-59, "CL_INVALID_OPERATION", "operation not valid in this state"},
    {-60, "CL_INVALID_GL_OBJECT", "invalid OpenGL object"},
    {-61, "CL_INVALID_BUFFER_SIZE", "buffer size 0 or above the device's maximum allocation"},
    {-62, "CL_INVALID_MIP_LEVEL", "invalid mipmap level"},
    {-63, "CL_INVALID_GLOBAL_WORK_SIZE", "global work size 0 or too large for the device"},
    {-64, "CL_INVALID_PROPERTY", "invalid or unsupported property"},
    {-65, "CL_INVALID_IMAGE_DESCRIPTOR", "invalid image descriptor"},
    {-66, "CL_INVALID_COMPILER_OPTIONS", "invalid compiler options"},
    {-67, "CL_INVALID_LINKER_OPTIONS", "invalid linker options"},
    {-68, "CL_INVALID_DEVICE_PARTITION_COUNT", "invalid device partition count"},
    {-69, "CL_INVALID_PIPE_SIZE", "invalid pipe size"},
    {-70, "CL_INVALID_DEVICE_QUEUE", "invalid device queue"},
    {-71, "CL_INVALID_SPEC_ID", "invalid specialization constant id"},
    {-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED", "a size exceeds an implementation limit"},
    {-1001, "CL_PLATFORM_NOT_FOUND_KHR", "the ICD loader found no platform"},
};

const CodeInfo* find_code(int code) {
  for (const CodeInfo& c : kCodes)
    if (c.code == code) return &c;
  return nullptr;
}

std::string describe(cl_int code) {
  return opencl_error_name(code) + " (" + opencl_error_meaning(code) + "), code " + std::to_string(code);
}

[[noreturn]] void fail(const std::string& call, cl_int code) {
  DNNF_THROW("OpenCL call ", call, " failed: ", describe(code));
}

void check(cl_int r, const std::string& call) {
  if (r != CL_SUCCESS) fail(call, r);
}

// ---- the loader ----

struct Loader {
  Api api{};
  std::string unavailable;  // "" when usable (decided at load, in the loading process)
  bool bound = false;       // the entry points are all there
  pid_t pid = 0;            // the process that loaded OpenCL
  std::string cache_note;   // why POCL_CACHE_DIR could not be set, if it could not
};

template <typename F>
bool bind(void* lib, F* slot, const char* name) {
  void* p = dlsym(lib, name);
  if (p) *slot = reinterpret_cast<F>(p);
  return p != nullptr;
}

// The first entry point the loader lacks, "" if none.
std::string bind_all(void* lib, Api* a) {
#define DNNF_CL_BIND(fn) \
  if (!bind(lib, &a->fn, #fn)) return #fn;
  DNNF_CL_BIND(clGetPlatformIDs) DNNF_CL_BIND(clGetPlatformInfo) DNNF_CL_BIND(clGetDeviceIDs)
  DNNF_CL_BIND(clGetDeviceInfo) DNNF_CL_BIND(clCreateContext) DNNF_CL_BIND(clReleaseContext)
  DNNF_CL_BIND(clCreateCommandQueue) DNNF_CL_BIND(clReleaseCommandQueue) DNNF_CL_BIND(clFlush)
  DNNF_CL_BIND(clFinish) DNNF_CL_BIND(clCreateProgramWithSource) DNNF_CL_BIND(clCreateProgramWithBinary)
  DNNF_CL_BIND(clBuildProgram) DNNF_CL_BIND(clGetProgramBuildInfo) DNNF_CL_BIND(clGetProgramInfo)
  DNNF_CL_BIND(clReleaseProgram) DNNF_CL_BIND(clCreateKernel) DNNF_CL_BIND(clGetKernelInfo)
  DNNF_CL_BIND(clSetKernelArg) DNNF_CL_BIND(clReleaseKernel) DNNF_CL_BIND(clCreateBuffer)
  DNNF_CL_BIND(clReleaseMemObject) DNNF_CL_BIND(clEnqueueWriteBuffer) DNNF_CL_BIND(clEnqueueReadBuffer)
  DNNF_CL_BIND(clEnqueueNDRangeKernel) DNNF_CL_BIND(clWaitForEvents) DNNF_CL_BIND(clGetEventInfo)
  DNNF_CL_BIND(clGetEventProfilingInfo) DNNF_CL_BIND(clReleaseEvent)
#undef DNNF_CL_BIND
  return "";
}

// PoCL reads POCL_CACHE_DIR when it first initializes and shows no device without a writable one;
// the caller's own setting is respected.
void set_pocl_cache_dir(Loader* l) {
  const char* set = std::getenv("POCL_CACHE_DIR");
  if (set && *set) return;
  try {
    ::setenv("POCL_CACHE_DIR", private_cache_dir("pocl").c_str(), 1);
  } catch (const std::exception& e) {
    l->cache_note = e.what();
  }
}

std::string library_name() {
  const char* lib = std::getenv(kLibraryVar);
  return lib && *lib ? lib : "libOpenCL.so.1";
}

std::string availability(const Api& a, const Loader& l);

void load(Loader* l) {
  l->pid = getpid();
  set_pocl_cache_dir(l);
  const std::string name = library_name();
  dlerror();
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    l->unavailable = "the OpenCL ICD loader " + name + " could not be loaded (" + (e ? e : "dlopen failed") +
                     "); the fpga target needs it and an OpenCL platform: install ocl-icd-libopencl1 and "
                     "pocl-opencl-icd (scripts/setup.sh does), or the FPGA vendor's runtime";
    return;
  }
  if (const std::string missing = bind_all(lib, &l->api); !missing.empty()) {
    l->unavailable = "the OpenCL library " + name + " lacks the entry point " + missing +
                     " (an OpenCL 1.2 ICD loader is needed)";
    return;  // the library stays loaded: unloading an OpenCL implementation is not always safe
  }
  l->bound = true;
  try {
    l->unavailable = availability(l->api, *l);
  } catch (const std::exception& e) {
    l->unavailable = e.what();
  }
}

Loader& loader() {
  static Loader l;
  static std::once_flag once;
  std::call_once(once, [] { load(&l); });
  return l;
}

// False in a child forked after OpenCL was loaded: nothing of OpenCL may be touched there.
bool same_process() { return loader().pid == getpid(); }

std::string fork_reason() {
  return "OpenCL was initialized in process " + std::to_string(loader().pid) + " and cannot be used in process " +
         std::to_string(getpid()) +
         ", a child forked from it after that: OpenCL implementations do not survive fork() (their threads and "
         "driver state are not copied); use OpenCL in the parent only, or start the child with exec (e.g. "
         "multiprocessing's 'spawn' start method) and initialize OpenCL there";
}

void check_process() {
  if (!same_process()) DNNF_THROW(fork_reason());
}

// The entry points, once the loader is there (TargetUnavailable otherwise) and in its process.
const Api& api() {
  check_process();
  if (!loader().bound) DNNF_THROW_AS(TargetUnavailable, "the fpga target cannot run on this machine: ", loader().unavailable);
  return loader().api;
}

// ---- queries ----

// A string property read with `get(size, value, size_ret)`, an OpenCL clGet*Info call.
template <typename Get>
std::string info_string(Get get, const std::string& call) {
  size_t n = 0;
  check(get(0, nullptr, &n), call);
  std::string s(n, '\0');
  if (n) check(get(n, s.data(), nullptr), call);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

template <typename T, typename Get>
T info_value(Get get, const std::string& call) {
  T v{};
  check(get(sizeof v, &v, nullptr), call);
  return v;
}

std::string platform_string(const Api& a, cl_platform_id p, cl_uint what) {
  return info_string([&](size_t n, void* v, size_t* r) { return a.clGetPlatformInfo(p, what, n, v, r); },
                     "clGetPlatformInfo");
}

std::string device_type_name(cl_bitfield t) {
  const std::pair<cl_bitfield, const char*> names[] = {{CL_DEVICE_TYPE_CPU, "CPU"},
                                                       {CL_DEVICE_TYPE_GPU, "GPU"},
                                                       {CL_DEVICE_TYPE_ACCELERATOR, "ACCELERATOR"},
                                                       {CL_DEVICE_TYPE_CUSTOM, "CUSTOM"},
                                                       {CL_DEVICE_TYPE_DEFAULT, "DEFAULT"}};
  std::string s;
  for (const auto& [bit, name] : names)
    if (t & bit) s += (s.empty() ? "" : "|") + std::string(name);
  return s.empty() ? "UNKNOWN" : s;
}

DeviceInfo device_info(const Api& a, cl_device_id d) {
  auto get = [&](cl_uint what) {
    return [&a, d, what](size_t n, void* v, size_t* r) { return a.clGetDeviceInfo(d, what, n, v, r); };
  };
  DeviceInfo info;
  info.name = info_string(get(CL_DEVICE_NAME), "clGetDeviceInfo(CL_DEVICE_NAME)");
  info.type = device_type_name(info_value<cl_bitfield>(get(CL_DEVICE_TYPE), "clGetDeviceInfo(CL_DEVICE_TYPE)"));
  info.global_mem_bytes = info_value<cl_ulong>(get(CL_DEVICE_GLOBAL_MEM_SIZE), "clGetDeviceInfo(CL_DEVICE_GLOBAL_MEM_SIZE)");
  info.max_work_group_size =
      info_value<size_t>(get(CL_DEVICE_MAX_WORK_GROUP_SIZE), "clGetDeviceInfo(CL_DEVICE_MAX_WORK_GROUP_SIZE)");
  return info;
}

struct Found {
  cl_platform_id id = nullptr;
  std::vector<cl_device_id> devices;
  PlatformInfo info;
};

std::vector<cl_platform_id> platform_ids(const Api& a) {
  cl_uint n = 0;
  const cl_int r = a.clGetPlatformIDs(0, nullptr, &n);
  if (r == CL_PLATFORM_NOT_FOUND_KHR || (r == CL_SUCCESS && n == 0)) return {};
  check(r, "clGetPlatformIDs");
  std::vector<cl_platform_id> ids(n);
  check(a.clGetPlatformIDs(n, ids.data(), &n), "clGetPlatformIDs");
  ids.resize(n);
  return ids;
}

// A platform without a device answers CL_DEVICE_NOT_FOUND: an empty list, not an error.
std::vector<cl_device_id> device_ids(const Api& a, cl_platform_id p) {
  cl_uint n = 0;
  const cl_int r = a.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n);
  if (r == CL_DEVICE_NOT_FOUND || (r == CL_SUCCESS && n == 0)) return {};
  check(r, "clGetDeviceIDs");
  std::vector<cl_device_id> ids(n);
  check(a.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ids.data(), &n), "clGetDeviceIDs");
  ids.resize(n);
  return ids;
}

std::vector<Found> enumerate(const Api& a) {
  std::vector<Found> out;
  for (cl_platform_id p : platform_ids(a)) {
    Found f;
    f.id = p;
    f.info.name = platform_string(a, p, CL_PLATFORM_NAME);
    f.info.vendor = platform_string(a, p, CL_PLATFORM_VENDOR);
    f.info.version = platform_string(a, p, CL_PLATFORM_VERSION);
    f.devices = device_ids(a, p);
    for (cl_device_id d : f.devices) f.info.devices.push_back(device_info(a, d));
    out.push_back(std::move(f));
  }
  return out;
}

// "'Portable Computing Language' (The pocl project, 1 device), ...": for messages.
std::string describe_platforms(const std::vector<Found>& found) {
  if (found.empty()) return "none";
  std::string s;
  for (const Found& f : found) {
    const size_t n = f.devices.size();
    s += (s.empty() ? "'" : ", '") + f.info.name + "' (" + f.info.vendor + ", " + std::to_string(n) +
         (n == 1 ? " device)" : " devices)");
  }
  return s;
}

bool is_pocl(const Found& f) { return f.info.name == kPoclName; }

// Why PoCL may show no device, for messages about a platform without one.
std::string pocl_hint(const Loader& l) {
  const char* dir = std::getenv("POCL_CACHE_DIR");
  std::string s = "; PoCL shows no device when its cache directory is not writable: POCL_CACHE_DIR is " +
                  (dir ? "'" + std::string(dir) + "'" : std::string("unset")) + " (set it to a writable directory)";
  if (!l.cache_note.empty()) s += "; no private one could be made: " + l.cache_note;
  return s;
}

std::string availability(const Api& a, const Loader& l) {
  const std::vector<Found> found = enumerate(a);
  if (found.empty())
    return "the OpenCL ICD loader finds no platform: no vendor ICD is registered in /etc/OpenCL/vendors (or "
           "$OCL_ICD_VENDORS); install one (pocl-opencl-icd for the CPU, as scripts/setup.sh does) or the FPGA "
           "vendor's runtime";
  bool pocl = false;
  for (const Found& f : found) {
    if (!f.devices.empty()) return "";
    pocl = pocl || is_pocl(f);
  }
  return "no OpenCL platform has a device (platforms found: " + describe_platforms(found) + ")" +
         (pocl ? pocl_hint(l) : std::string());
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The platform `want` names (see the header); InvalidInput when none or several do.
const Found& match_platform(const std::vector<Found>& found, const std::string& want, const std::string& source) {
  const std::string w = lower(want);
  std::vector<const Found*> exact, partial;
  for (const Found& f : found) {
    if (lower(f.info.name) == w) exact.push_back(&f);
    if (lower(f.info.name).find(w) != std::string::npos || lower(f.info.vendor).find(w) != std::string::npos)
      partial.push_back(&f);
  }
  if (!exact.empty()) return *exact.front();
  if (partial.size() == 1) return *partial.front();
  if (partial.empty())
    DNNF_THROW_AS(InvalidInput, "no OpenCL platform matches '", want, "' (", source,
                  "; a platform is chosen by a case-insensitive part of its name or vendor); platforms found: ",
                  describe_platforms(found));
  std::vector<Found> several;
  for (const Found* f : partial) several.push_back(*f);
  DNNF_THROW_AS(InvalidInput, "the OpenCL platform name '", want, "' (", source, ") matches several platforms: ",
                describe_platforms(several), "; give more of the name");
}

// The platform a Context with `requested` ("" for the default) uses.
const Found& choose_platform(const std::vector<Found>& found, const std::string& requested) {
  if (!requested.empty()) return match_platform(found, requested, "the platform argument");
  const char* env = std::getenv(kPlatformVar);
  if (env && *env) return match_platform(found, env, std::string("$") + kPlatformVar);
  for (const Found& f : found)
    if (is_pocl(f) && !f.devices.empty()) return f;
  for (const Found& f : found)
    if (!f.devices.empty()) return f;
  return found.front();  // there is none with a device: the caller says so
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string dims_text(const std::vector<size_t>& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + ")";
}

// ---- binary containers ----

// Little-endian unsigned integer of `n` bytes at `at` (the caller checked the bounds).
uint64_t read_le(const std::vector<unsigned char>& b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}

// Whether [offset, offset + count * entry) lies inside a file of `size` bytes, without overflow.
bool within(uint64_t offset, uint64_t count, uint64_t entry, uint64_t size) {
  if (offset > size) return false;
  return count == 0 || entry <= (size - offset) / count;
}

// An ELF image (an .aocx is one) whose header, program headers, section headers or section
// contents lie past its end: truncated. Big-endian images are left to the implementation.
std::string elf_problem(const std::vector<unsigned char>& b) {
  const bool is64 = b.size() > 4 && b[4] == 2;
  if (b.size() < (is64 ? 64u : 52u)) return "an ELF image shorter than its header";
  if (b[5] != 1) return "";
  const uint64_t phoff = is64 ? read_le(b, 0x20, 8) : read_le(b, 0x1C, 4);
  const uint64_t shoff = is64 ? read_le(b, 0x28, 8) : read_le(b, 0x20, 4);
  const size_t base = is64 ? 0x36 : 0x2A;  // e_phentsize, e_phnum, e_shentsize, e_shnum follow
  const uint64_t phentsize = read_le(b, base, 2), phnum = read_le(b, base + 2, 2);
  const uint64_t shentsize = read_le(b, base + 4, 2), shnum = read_le(b, base + 6, 2);
  const uint64_t size = b.size();
  if (!within(phoff, phnum, phentsize, size)) return "an ELF image whose program headers lie past its end";
  if (!within(shoff, shnum, shentsize, size)) return "an ELF image whose section headers lie past its end";
  constexpr uint64_t kNoBits = 8;  // SHT_NOBITS: no contents in the file
  for (uint64_t i = 0; i < shnum && shentsize >= (is64 ? 40u : 24u); ++i) {
    const size_t at = static_cast<size_t>(shoff + i * shentsize);
    if (read_le(b, at + 4, 4) == kNoBits) continue;
    const uint64_t off = is64 ? read_le(b, at + 0x18, 8) : read_le(b, at + 0x10, 4);
    const uint64_t len = is64 ? read_le(b, at + 0x20, 8) : read_le(b, at + 0x14, 4);
    if (!within(off, 1, len, size)) return "an ELF image whose section " + std::to_string(i) + " lies past its end";
  }
  return "";
}

// A Xilinx xclbin ("xclbin2" container): its header at byte 304 declares the file's length.
std::string xclbin_problem(const std::vector<unsigned char>& b) {
  constexpr size_t kLengthAt = 304;
  if (b.size() < kLengthAt + 8) return "an xclbin shorter than its header";
  const uint64_t length = read_le(b, kLengthAt, 8);
  if (length > b.size())
    return "an xclbin of " + std::to_string(b.size()) + " bytes whose header declares " + std::to_string(length);
  return "";
}

// Why `b` is a truncated or broken container, "" when it looks whole or is of another format.
// Implementations trust these containers' offsets (a truncated binary can crash them), so what can
// be checked cheaply is checked before they see it.
std::string container_problem(const std::vector<unsigned char>& b) {
  auto starts = [&](const char* magic, size_t n) { return b.size() >= n && std::equal(magic, magic + n, b.begin()); };
  if (starts("\x7f" "ELF", 4)) return elf_problem(b);
  if (starts("xclbin2", 8)) return xclbin_problem(b);
  return "";
}

}  // namespace

// ---- the shared context state ----

namespace detail {
struct ContextState {
  cl_context context = nullptr;
  cl_device_id device = nullptr;
  cl_command_queue queue = nullptr;
  PlatformInfo platform;
  unsigned device_index = 0;
  ContextState() = default;
  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;
  // Errors are ignored (possibly at exit, after the implementation shut down); nothing is released
  // in a forked child, where the implementation's state is not usable.
  ~ContextState() {
    if (!same_process()) return;
    const Api& a = loader().api;
    if (queue) a.clReleaseCommandQueue(queue);
    if (context) a.clReleaseContext(context);
  }
};
}  // namespace detail

namespace {

const detail::ContextState& live(const std::shared_ptr<detail::ContextState>& s, const char* what) {
  if (!s) DNNF_THROW_AS(InvalidInput, "use of a moved-from OpenCL ", what);
  return *s;
}

void same_context(const std::shared_ptr<detail::ContextState>& a, const std::shared_ptr<detail::ContextState>& b,
                  const char* what) {
  if (a != b) DNNF_THROW_AS(InvalidInput, what, " belongs to another OpenCL Context");
}

}  // namespace

std::string opencl_error_name(int code) {
  const CodeInfo* c = find_code(code);
  return c ? c->name : "unknown OpenCL error";
}

std::string opencl_error_meaning(int code) {
  const CodeInfo* c = find_code(code);
  return c ? c->meaning : "not a standard OpenCL error code (a vendor extension's?)";
}

std::string opencl_unavailable_reason() {
  if (!same_process()) return fork_reason();
  return loader().unavailable;
}

void require_opencl() {
  if (const std::string why = opencl_unavailable_reason(); !why.empty())
    DNNF_THROW_AS(TargetUnavailable, "the fpga target cannot run on this machine: ", why);
}

std::vector<PlatformInfo> list_platforms() {
  std::vector<PlatformInfo> out;
  for (Found& f : enumerate(api())) out.push_back(std::move(f.info));
  return out;
}

// ---- Event ----

Event::~Event() {
  if (event_ && same_process()) loader().api.clReleaseEvent(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event old(std::move(*this));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::wait() const {
  const Api& a = api();
  if (!event_) DNNF_THROW_AS(InvalidInput, "wait on an empty OpenCL Event");
  const cl_int r = a.clWaitForEvents(1, &event_);
  if (r == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) status();  // names the command's own code
  check(r, "clWaitForEvents");
}

EventStatus Event::status() const {
  const Api& a = api();
  if (!event_) DNNF_THROW_AS(InvalidInput, "status of an empty OpenCL Event");
  const cl_int s = info_value<cl_int>(
      [&](size_t n, void* v, size_t* r) { return a.clGetEventInfo(event_, CL_EVENT_COMMAND_EXECUTION_STATUS, n, v, r); },
      "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)");
  if (s < 0) DNNF_THROW("an OpenCL command terminated abnormally: ", describe(s));
  if (s == CL_COMPLETE) return EventStatus::Complete;
  if (s == CL_RUNNING) return EventStatus::Running;
  if (s == CL_SUBMITTED) return EventStatus::Submitted;
  return EventStatus::Queued;
}

uint64_t Event::profiling(unsigned what, const char* name) const {
  const Api& a = api();
  if (!event_) DNNF_THROW_AS(InvalidInput, "profiling time of an empty OpenCL Event");
  if (status() != EventStatus::Complete)
    DNNF_THROW("the profiling time ", name, " of an OpenCL command is known once it completed (wait() first)");
  return info_value<cl_ulong>(
      [&](size_t n, void* v, size_t* r) { return a.clGetEventProfilingInfo(event_, what, n, v, r); },
      std::string("clGetEventProfilingInfo(") + name + ")");
}

uint64_t Event::queued_ns() const { return profiling(CL_PROFILING_COMMAND_QUEUED, "CL_PROFILING_COMMAND_QUEUED"); }
uint64_t Event::submit_ns() const { return profiling(CL_PROFILING_COMMAND_SUBMIT, "CL_PROFILING_COMMAND_SUBMIT"); }
uint64_t Event::start_ns() const { return profiling(CL_PROFILING_COMMAND_START, "CL_PROFILING_COMMAND_START"); }
uint64_t Event::end_ns() const { return profiling(CL_PROFILING_COMMAND_END, "CL_PROFILING_COMMAND_END"); }

// ---- Context ----

namespace {

void create_context(const Api& a, const Found& f, unsigned device, detail::ContextState* s) {
  s->platform = f.info;
  s->device_index = device;
  s->device = f.devices[device];
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(f.id), 0};
  cl_int r = CL_SUCCESS;
  s->context = a.clCreateContext(props, 1, &s->device, nullptr, nullptr, &r);
  check(r, "clCreateContext");
  s->queue = a.clCreateCommandQueue(s->context, s->device, CL_QUEUE_PROFILING_ENABLE, &r);
  check(r, "clCreateCommandQueue");
}

}  // namespace

Context::Context(const std::string& platform, unsigned device) {
  const Api& a = api();
  require_opencl();
  const std::vector<Found> found = enumerate(a);
  if (found.empty())  // the loader found some at start-up; an ICD removed since
    DNNF_THROW_AS(TargetUnavailable, "the OpenCL ICD loader finds no platform any more");
  const Found& f = choose_platform(found, platform);
  if (f.devices.empty())
    DNNF_THROW_AS(TargetUnavailable, "the OpenCL platform '", f.info.name, "' has no device",
                  is_pocl(f) ? pocl_hint(loader()) : std::string());
  if (device >= f.devices.size())
    DNNF_THROW_AS(InvalidInput, "OpenCL device ", device, " does not exist on platform '", f.info.name, "' (",
                  f.devices.size(), " devices)");
  auto state = std::make_shared<detail::ContextState>();
  create_context(a, f, device, state.get());
  state_ = std::move(state);
}

Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

const PlatformInfo& Context::platform() const { return live(state_, "Context").platform; }

const DeviceInfo& Context::device() const {
  const detail::ContextState& s = live(state_, "Context");
  return s.platform.devices[s.device_index];
}

void Context::finish() const {
  const Api& a = api();
  check(a.clFinish(live(state_, "Context").queue), "clFinish");
}

namespace {

void check_ndrange(const std::string& kernel, const std::vector<size_t>& global, const std::vector<size_t>& local) {
  if (global.empty() || global.size() > 3)
    DNNF_THROW_AS(InvalidInput, "enqueue of kernel '", kernel, "': 1 to 3 global dimensions are allowed, got ",
                  global.size());
  if (!local.empty() && local.size() != global.size())
    DNNF_THROW_AS(InvalidInput, "enqueue of kernel '", kernel, "': local size ", dims_text(local),
                  " must have as many dimensions as global size ", dims_text(global), " (or none)");
  for (size_t i = 0; i < global.size(); ++i) {
    const size_t l = local.empty() ? 1 : local[i];
    if (global[i] == 0 || l == 0 || global[i] % l != 0)
      DNNF_THROW_AS(InvalidInput, "enqueue of kernel '", kernel, "': global size ", dims_text(global),
                    " and local size ", dims_text(local),
                    " must be positive, each local size dividing its global size (OpenCL 1.2)");
  }
}

}  // namespace

Event Context::enqueue(const Kernel& kernel, const std::vector<size_t>& global, const std::vector<size_t>& local) const {
  const Api& a = api();
  const detail::ContextState& s = live(state_, "Context");
  live(kernel.state_, "Kernel");
  same_context(state_, kernel.state_, ("kernel '" + kernel.name_ + "'").c_str());
  check_ndrange(kernel.name_, global, local);
  cl_event ev = nullptr;
  check(a.clEnqueueNDRangeKernel(s.queue, kernel.kernel_, static_cast<cl_uint>(global.size()), nullptr, global.data(),
                                 local.empty() ? nullptr : local.data(), 0, nullptr, &ev),
        "clEnqueueNDRangeKernel(kernel '" + kernel.name_ + "', global " + dims_text(global) + ", local " +
            (local.empty() ? std::string("chosen by the implementation") : dims_text(local)) + ")");
  Event out(ev);
  // The device starts now rather than at the next wait, while the host prepares what follows.
  check(a.clFlush(s.queue), "clFlush");
  return out;
}

// ---- Program ----

Program::Program(std::shared_ptr<detail::ContextState> state, void* program)
    : state_(std::move(state)), program_(program) {}

Program::~Program() {
  if (program_ && same_process()) loader().api.clReleaseProgram(program_);
}

Program::Program(Program&& o) noexcept : state_(std::move(o.state_)), program_(std::exchange(o.program_, nullptr)) {}

Program& Program::operator=(Program&& o) noexcept {
  if (this != &o) {
    Program old(std::move(*this));
    state_ = std::move(o.state_);
    program_ = std::exchange(o.program_, nullptr);
  }
  return *this;
}

Program Program::from_source(const Context& ctx, const std::string& source, const std::string& options) {
  const Api& a = api();
  const detail::ContextState& s = live(ctx.state_, "Context");
  if (source.empty()) DNNF_THROW_AS(InvalidInput, "an OpenCL program from empty source");
  const char* text = source.c_str();
  const size_t length = source.size();
  cl_int r = CL_SUCCESS;
  cl_program p = a.clCreateProgramWithSource(s.context, 1, &text, &length, &r);
  check(r, "clCreateProgramWithSource");
  Program program(ctx.state_, p);
  program.build(options);
  return program;
}

Program Program::from_binary(const Context& ctx, const std::vector<unsigned char>& binary, const std::string& options) {
  const Api& a = api();
  const detail::ContextState& s = live(ctx.state_, "Context");
  if (binary.empty()) DNNF_THROW_AS(InvalidInput, "an OpenCL program from an empty binary");
  if (const std::string problem = container_problem(binary); !problem.empty())
    DNNF_THROW_AS(InvalidInput, "the OpenCL program binary is malformed (", problem,
                  "), refused before clCreateProgramWithBinary: a truncated or damaged file?");
  const unsigned char* bytes = binary.data();
  const size_t length = binary.size();
  cl_int status = CL_SUCCESS, r = CL_SUCCESS;
  cl_program p = a.clCreateProgramWithBinary(s.context, 1, &s.device, &length, &bytes, &status, &r);
  Program program(ctx.state_, r == CL_SUCCESS ? p : nullptr);
  if (r == CL_INVALID_BINARY || (r == CL_SUCCESS && status != CL_SUCCESS))
    DNNF_THROW_AS(InvalidInput, "OpenCL call clCreateProgramWithBinary refused the ", length, "-byte binary for device '",
                  s.platform.devices[s.device_index].name, "': ", describe(r == CL_SUCCESS ? status : r),
                  "; a binary must be built for this device by its platform's offline compiler");
  check(r, "clCreateProgramWithBinary");
  program.build(options);
  return program;
}

Program Program::from_binary_file(const Context& ctx, const std::string& path, const std::string& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) DNNF_THROW_AS(InvalidInput, "cannot open the OpenCL binary file '", path, "'");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) DNNF_THROW_AS(InvalidInput, "cannot read the OpenCL binary file '", path, "'");
  if (bytes.empty()) DNNF_THROW_AS(InvalidInput, "the OpenCL binary file '", path, "' is empty");
  return from_binary(ctx, bytes, options);
}

void Program::build(const std::string& options) {
  const Api& a = api();
  const detail::ContextState& s = live(state_, "Program");
  const cl_int r = a.clBuildProgram(program_, 1, &s.device, options.c_str(), nullptr, nullptr);
  if (r == CL_SUCCESS) return;
  std::string log = build_log();
  if (log.size() > kMaxLogChars) log = log.substr(0, kMaxLogChars) + "\n[build log cut at " + std::to_string(kMaxLogChars) + " characters]";
  const std::string what = "OpenCL call clBuildProgram(options '" + options + "') failed: " + describe(r) +
                           "; build log for device '" + s.platform.devices[s.device_index].name + "':\n" +
                           (log.empty() ? "(empty)" : log);
  if (r == CL_INVALID_BUILD_OPTIONS) throw InvalidInput(what);
  throw Error(what);
}

std::string Program::build_log() const {
  const Api& a = api();
  const detail::ContextState& s = live(state_, "Program");
  return info_string(
      [&](size_t n, void* v, size_t* r) {
        return a.clGetProgramBuildInfo(program_, s.device, CL_PROGRAM_BUILD_LOG, n, v, r);
      },
      "clGetProgramBuildInfo(CL_PROGRAM_BUILD_LOG)");
}

std::vector<std::string> Program::kernel_names() const {
  const Api& a = api();
  live(state_, "Program");
  const std::string names = info_string(
      [&](size_t n, void* v, size_t* r) { return a.clGetProgramInfo(program_, CL_PROGRAM_KERNEL_NAMES, n, v, r); },
      "clGetProgramInfo(CL_PROGRAM_KERNEL_NAMES)");
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    const size_t end = std::min(names.find(';', start), names.size());
    if (end > start) out.push_back(names.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<unsigned char> Program::binary() const {
  const Api& a = api();
  live(state_, "Program");
  auto get = [&](cl_uint what) {
    return [&a, this, what](size_t n, void* v, size_t* r) { return a.clGetProgramInfo(program_, what, n, v, r); };
  };
  const cl_uint devices = info_value<cl_uint>(get(CL_PROGRAM_NUM_DEVICES), "clGetProgramInfo(CL_PROGRAM_NUM_DEVICES)");
  std::vector<size_t> sizes(devices);
  check(get(CL_PROGRAM_BINARY_SIZES)(sizes.size() * sizeof(size_t), sizes.data(), nullptr),
        "clGetProgramInfo(CL_PROGRAM_BINARY_SIZES)");
  if (devices != 1 || sizes[0] == 0)
    DNNF_THROW("the OpenCL program has no binary for its device (", devices, " devices, ", sizes.empty() ? 0 : sizes[0],
               " bytes)");
  std::vector<unsigned char> out(sizes[0]);
  unsigned char* ptr = out.data();
  check(get(CL_PROGRAM_BINARIES)(sizeof ptr, &ptr, nullptr), "clGetProgramInfo(CL_PROGRAM_BINARIES)");
  return out;
}

// ---- Buffer ----

Buffer::Buffer(const Context& ctx, size_t bytes, Access access) : state_(ctx.state_), size_(bytes) {
  const Api& a = api();
  const detail::ContextState& s = live(state_, "Context");
  if (bytes == 0) DNNF_THROW_AS(InvalidInput, "an OpenCL buffer of 0 bytes");
  const cl_bitfield flags = access == Access::ReadOnly    ? CL_MEM_READ_ONLY
                            : access == Access::WriteOnly ? CL_MEM_WRITE_ONLY
                                                          : CL_MEM_READ_WRITE;
  cl_int r = CL_SUCCESS;
  mem_ = a.clCreateBuffer(s.context, flags, bytes, nullptr, &r);
  check(r, "clCreateBuffer(" + std::to_string(bytes) + " bytes)");
}

Buffer::~Buffer() {
  if (mem_ && same_process()) loader().api.clReleaseMemObject(mem_);
}

Buffer::Buffer(Buffer&& o) noexcept
    : state_(std::move(o.state_)), size_(std::exchange(o.size_, 0)), mem_(std::exchange(o.mem_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Buffer old(std::move(*this));
    state_ = std::move(o.state_);
    size_ = std::exchange(o.size_, 0);
    mem_ = std::exchange(o.mem_, nullptr);
  }
  return *this;
}

Event Buffer::copy(bool to_device, bool blocking, void* host, size_t bytes, size_t offset) const {
  const Api& a = api();
  const detail::ContextState& s = live(state_, "Buffer");
  const char* dir = to_device ? "write" : "read";
  if (!host) DNNF_THROW_AS(InvalidInput, "OpenCL buffer ", dir, " with a null host pointer");
  if (bytes == 0 || bytes > size_ || offset > size_ - bytes)
    DNNF_THROW_AS(InvalidInput, "OpenCL buffer ", dir, " of ", bytes, " bytes at offset ", offset, " does not fit the ",
                  size_, "-byte buffer (1 to size() - offset bytes are allowed)");
  cl_event ev = nullptr;
  cl_event* out = blocking ? nullptr : &ev;
  const cl_bool block = blocking ? CL_TRUE : CL_FALSE;
  const cl_int r = to_device ? a.clEnqueueWriteBuffer(s.queue, mem_, block, offset, bytes, host, 0, nullptr, out)
                             : a.clEnqueueReadBuffer(s.queue, mem_, block, offset, bytes, host, 0, nullptr, out);
  check(r, to_device ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer");
  Event e(ev);
  if (!blocking) check(a.clFlush(s.queue), "clFlush");
  return e;
}

void Buffer::write(const void* src, size_t bytes, size_t offset) {
  copy(true, true, const_cast<void*>(src), bytes, offset);  // OpenCL only reads it
}

void Buffer::read(void* dst, size_t bytes, size_t offset) const { copy(false, true, dst, bytes, offset); }

Event Buffer::write_async(const void* src, size_t bytes, size_t offset) {
  return copy(true, false, const_cast<void*>(src), bytes, offset);
}

Event Buffer::read_async(void* dst, size_t bytes, size_t offset) const { return copy(false, false, dst, bytes, offset); }

// ---- Kernel ----

Kernel::Kernel(const Program& program, const std::string& name) : state_(program.state_), name_(name) {
  const Api& a = api();
  live(state_, "Program");
  cl_int r = CL_SUCCESS;
  kernel_ = a.clCreateKernel(program.program_, name.c_str(), &r);
  if (r == CL_INVALID_KERNEL_NAME) {
    kernel_ = nullptr;
    DNNF_THROW_AS(InvalidInput, "OpenCL call clCreateKernel('", name, "') failed: ", describe(r),
                  "; the program's kernels: ", join(program.kernel_names(), ", "));
  }
  check(r, "clCreateKernel('" + name + "')");
  num_args_ = info_value<cl_uint>(
      [&](size_t n, void* v, size_t* ret) { return a.clGetKernelInfo(kernel_, CL_KERNEL_NUM_ARGS, n, v, ret); },
      "clGetKernelInfo(CL_KERNEL_NUM_ARGS)");
}

Kernel::~Kernel() {
  if (kernel_ && same_process()) loader().api.clReleaseKernel(kernel_);
}

Kernel::Kernel(Kernel&& o) noexcept
    : state_(std::move(o.state_)),
      kernel_(std::exchange(o.kernel_, nullptr)),
      name_(std::move(o.name_)),
      num_args_(std::exchange(o.num_args_, 0)) {}

Kernel& Kernel::operator=(Kernel&& o) noexcept {
  if (this != &o) {
    Kernel old(std::move(*this));
    state_ = std::move(o.state_);
    kernel_ = std::exchange(o.kernel_, nullptr);
    name_ = std::move(o.name_);
    num_args_ = std::exchange(o.num_args_, 0);
  }
  return *this;
}

void Kernel::set_raw(unsigned index, size_t size, const void* value, const char* what) {
  const Api& a = api();
  live(state_, "Kernel");
  if (index >= num_args_)
    DNNF_THROW_AS(InvalidInput, "kernel '", name_, "' takes ", num_args_, " arguments; argument ", index,
                  " does not exist");
  check(a.clSetKernelArg(kernel_, index, size, value),
        "clSetKernelArg(kernel '" + name_ + "', argument " + std::to_string(index) + ", " + what + ")");
}

void Kernel::set_arg(unsigned index, const Buffer& buffer) {
  live(buffer.state_, "Buffer");
  same_context(state_, buffer.state_, "the buffer");
  set_raw(index, sizeof(cl_mem), &buffer.mem_, "buffer");
}

void Kernel::set_arg(unsigned index, int32_t value) { set_raw(index, sizeof value, &value, "int32"); }
void Kernel::set_arg(unsigned index, uint32_t value) { set_raw(index, sizeof value, &value, "uint32"); }
void Kernel::set_arg(unsigned index, int64_t value) { set_raw(index, sizeof value, &value, "int64"); }

void Kernel::set_local_arg(unsigned index, size_t bytes) {
  if (bytes == 0) DNNF_THROW_AS(InvalidInput, "kernel '", name_, "' argument ", index, ": 0 bytes of local memory");
  set_raw(index, bytes, nullptr, ("local memory of " + std::to_string(bytes) + " bytes").c_str());
}

}  // namespace dnnfusion::fpga::opencl
