// The OpenCL host runtime of the fpga target: the one layer of the host driver that talks to
// OpenCL. The ICD loader (libOpenCL.so.1, or $DNNFUSION_OPENCL_LIBRARY) is reached through dlopen
// on first use, so the project builds, imports and runs its other targets without OpenCL; the same
// code drives PoCL's CPU device in development and CI and a vendor FPGA platform in production
// (programs from OpenCL C source, or from the vendor's .aocx / .xclbin binary).
//
// Platform choice (Context): the name given, else $DNNFUSION_OPENCL_PLATFORM, else PoCL ("Portable
// Computing Language") when installed, else the first platform that has a device. A name selects
// the platforms whose name or vendor contains it, ignoring case ("pocl", "xilinx", "intel(r) fpga
// sdk"); an exact name wins over substrings; no match, or several, is InvalidInput listing them.
//
// Processes: OpenCL implementations keep threads and driver state that do not survive fork(), so
// the pid that first loaded OpenCL is recorded and any use from another process (a forked child)
// is an Error saying so, raised before any OpenCL call; destructors in such a child release nothing.
//
// Lifetimes: Program, Kernel and Buffer keep their Context's OpenCL objects alive, so they may
// outlive the Context object they were made from. The queue is in order: commands run one after
// the other, as enqueued. OpenCL calls are thread-safe, except that one Kernel's arguments must not
// be set from two threads at once.
//
// Precondition: none for the queries; the classes need opencl_unavailable_reason() == "" (else
// TargetUnavailable). Postcondition: the loader is loaded at most once per process, thread-safely,
// with POCL_CACHE_DIR set first to a private writable directory when unset (PoCL shows no device
// without one); every failing OpenCL call is a dnnfusion::Error naming the call, the code's
// symbolic name (CL_INVALID_KERNEL_ARGS, ...) and its meaning; bad arguments are InvalidInput.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dnnfusion::fpga::opencl {

struct DeviceInfo {
  std::string name;
  std::string type;  // "CPU", "GPU", "ACCELERATOR", "CUSTOM" or "DEFAULT" (several joined by '|')
  uint64_t global_mem_bytes = 0;
  size_t max_work_group_size = 0;
};

struct PlatformInfo {
  std::string name;  // CL_PLATFORM_NAME, e.g. "Portable Computing Language"
  std::string vendor;
  std::string version;  // CL_PLATFORM_VERSION, e.g. "OpenCL 3.0 PoCL 3.1 ..."
  std::vector<DeviceInfo> devices;
};

// "" when the loader loads with the entry points used here and some platform has a device; else
// why not, as a sentence for an error message (loader missing, no platform, platforms without a
// device, with the POCL_CACHE_DIR hint when PoCL is among them, or use after fork).
std::string opencl_unavailable_reason();
// Throws TargetUnavailable with opencl_unavailable_reason() unless it is "".
void require_opencl();
// Every platform the loader finds, with its devices. TargetUnavailable when the loader itself is
// missing; empty when it finds no platform.
std::vector<PlatformInfo> list_platforms();

// "CL_INVALID_KERNEL_ARGS" for a standard code (0, -1..-72, -1001), else "unknown OpenCL error".
std::string opencl_error_name(int code);
// What the code means, one phrase ("the kernel's arguments were not all set").
std::string opencl_error_meaning(int code);

class Context;
class Program;
class Kernel;
class Buffer;

namespace detail {
struct ContextState;  // the cl_context, device and queue, shared by everything made from them
}

enum class EventStatus { Queued, Submitted, Running, Complete };

// One enqueued command: wait for it, ask its state, read its profiling times.
class Event {
 public:
  Event() = default;  // no command; valid() is false
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  bool valid() const { return event_ != nullptr; }
  // Blocks until the command completed; Error if it failed (its code named).
  void wait() const;
  // Error if the command terminated abnormally (its negative code named).
  EventStatus status() const;
  // Device times in nanoseconds (CL_PROFILING_COMMAND_*). Error unless the command completed.
  uint64_t queued_ns() const;
  uint64_t submit_ns() const;
  uint64_t start_ns() const;
  uint64_t end_ns() const;
  void* handle() const { return event_; }  // the cl_event

 private:
  friend class Context;
  friend class Buffer;
  explicit Event(void* event) : event_(event) {}
  uint64_t profiling(unsigned what, const char* name) const;
  void* event_ = nullptr;
};

// A platform, one of its devices, and an in-order command queue with profiling enabled.
class Context {
 public:
  // `platform`: see the file comment ("" chooses by $DNNFUSION_OPENCL_PLATFORM, then PoCL, then
  // the first). `device`: index among the platform's devices (InvalidInput if out of range).
  explicit Context(const std::string& platform = "", unsigned device = 0);
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const PlatformInfo& platform() const;  // the chosen platform, all its devices listed
  const DeviceInfo& device() const;      // the chosen device
  // Runs `kernel` over `global` work items (1 to 3 dimensions, each > 0) in work-groups of `local`
  // ({} lets the implementation choose; else as many dimensions, each dividing its global size).
  Event enqueue(const Kernel& kernel, const std::vector<size_t>& global, const std::vector<size_t>& local = {}) const;
  // Blocks until every command enqueued so far completed.
  void finish() const;

 private:
  friend class Program;
  friend class Buffer;
  std::shared_ptr<detail::ContextState> state_;
};

// An OpenCL program built for the context's device.
class Program {
 public:
  // From OpenCL C source with clBuildProgram `options` ("-D N=8 -cl-std=CL1.2"). A build that fails
  // is an Error with the build log.
  static Program from_source(const Context& ctx, const std::string& source, const std::string& options = "");
  // From a device binary (.aocx, .xclbin, or what binary() returned) for the context's device. A
  // binary the implementation refuses, or a truncated ELF (.aocx) or xclbin container (checked
  // first: implementations trust their offsets), is InvalidInput naming clCreateProgramWithBinary;
  // one that loads but does not build is an Error with the build log. Other formats (PoCL's own)
  // are checked by the implementation alone: a damaged one may crash it, as PoCL 3.1 does on a
  // truncated PoCL binary.
  static Program from_binary(const Context& ctx, const std::vector<unsigned char>& binary,
                             const std::string& options = "");
  // The same from a file; InvalidInput when it cannot be read or is empty.
  static Program from_binary_file(const Context& ctx, const std::string& path, const std::string& options = "");
  ~Program();
  Program(Program&&) noexcept;
  Program& operator=(Program&&) noexcept;
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  std::string build_log() const;                  // the device's build log ("" when silent)
  std::vector<std::string> kernel_names() const;  // CL_PROGRAM_KERNEL_NAMES
  std::vector<unsigned char> binary() const;      // the device binary (CL_PROGRAM_BINARIES)

 private:
  friend class Kernel;
  Program(std::shared_ptr<detail::ContextState> state, void* program);
  void build(const std::string& options);
  std::shared_ptr<detail::ContextState> state_;
  void* program_ = nullptr;  // cl_program
};

// Device memory of `bytes` bytes (> 0) in a context.
class Buffer {
 public:
  enum class Access { ReadWrite, ReadOnly, WriteOnly };  // as kernels see it
  Buffer(const Context& ctx, size_t bytes, Access access = Access::ReadWrite);
  ~Buffer();
  Buffer(Buffer&&) noexcept;
  Buffer& operator=(Buffer&&) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t size() const { return size_; }
  // Copies `bytes` (> 0, offset + bytes <= size(), else InvalidInput) between host memory and the
  // buffer at `offset`. The blocking forms return when the copy is done; the *_async forms return
  // at once, and the host memory must stay alive and untouched until the Event completed.
  void write(const void* src, size_t bytes, size_t offset = 0);
  void read(void* dst, size_t bytes, size_t offset = 0) const;
  Event write_async(const void* src, size_t bytes, size_t offset = 0);
  Event read_async(void* dst, size_t bytes, size_t offset = 0) const;
  void* handle() const { return mem_; }  // the cl_mem

 private:
  friend class Kernel;
  Event copy(bool to_device, bool blocking, void* host, size_t bytes, size_t offset) const;
  std::shared_ptr<detail::ContextState> state_;
  size_t size_ = 0;
  void* mem_ = nullptr;  // cl_mem
};

// A kernel of a built program and its arguments (kept until set again).
class Kernel {
 public:
  // InvalidInput naming CL_INVALID_KERNEL_NAME and the program's kernels if none is called `name`.
  Kernel(const Program& program, const std::string& name);
  ~Kernel();
  Kernel(Kernel&&) noexcept;
  Kernel& operator=(Kernel&&) noexcept;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const std::string& name() const { return name_; }
  unsigned num_args() const { return num_args_; }
  // Argument `index` (< num_args(), else InvalidInput) of the kernel's type: a __global pointer, a
  // 32-bit int / uint, a 64-bit long; a type mismatch is the implementation's Error.
  void set_arg(unsigned index, const Buffer& buffer);
  void set_arg(unsigned index, int32_t value);
  void set_arg(unsigned index, uint32_t value);
  void set_arg(unsigned index, int64_t value);
  // A __local pointer argument: `bytes` (> 0) of local memory per work-group.
  void set_local_arg(unsigned index, size_t bytes);
  void* handle() const { return kernel_; }  // the cl_kernel

 private:
  friend class Context;
  void set_raw(unsigned index, size_t size, const void* value, const char* what);
  std::shared_ptr<detail::ContextState> state_;
  void* kernel_ = nullptr;  // cl_kernel
  std::string name_;
  unsigned num_args_ = 0;
};

}  // namespace dnnfusion::fpga::opencl
