// The host driver of the fpga target's int8 CNN accelerator (ISA v1, csrc/target/fpga/ISA.md): it
// builds the OpenCL datapath (datapath/datapath.cl from source, or a vendor binary with the same
// kernels), holds the device memory image, and runs instruction streams on it the way AukC's host
// does — validate the whole stream, then per layer write the layer's 13 register words to the
// device, start the layer and wait for its end-of-layer signal before the next one.
//
// Precondition: OpenCL usable in this process (opencl_runtime.h; TargetUnavailable otherwise, and
// an Error in a process forked after OpenCL was loaded). Postcondition of run(): either the stream
// was refused before anything ran (InvalidInput: it does not decode, or it was built for another
// memory size; device memory unchanged), or every layer ran in order and device memory is what
// simulate() computes from the same image and stream, bit for bit. run() calls are serialized;
// write/read/upload take the same lock, so none of them lands in the middle of a run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dnnfusion::fpga {

struct AcceleratorOptions {
  std::string platform;     // "" : $DNNFUSION_OPENCL_PLATFORM, else PoCL, else the first (opencl_runtime rules)
  std::string binary_path;  // "" : build datapath.cl from source; else a vendor binary (.aocx/.xclbin) with the same kernels
};

struct RunStats {
  int layers = 0;
  double seconds = 0;                  // host wall time of run()
  std::vector<double> layer_seconds;   // per layer, from the end-of-layer events' profiling (start..end)
};

class Accelerator {
 public:
  // TargetUnavailable without OpenCL; InvalidInput for an unknown platform (the message lists the
  // platforms found) or an unreadable / refused binary; Error with the build log if the kernels do
  // not build.
  explicit Accelerator(const AcceleratorOptions& options = {});
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  std::string platform_name() const;
  std::string device_name() const;
  // Allocates device memory of `bytes` and uploads the whole image (weights, parameter tables,
  // activation buffers); call once per model (a second call replaces the image).
  void upload(const uint8_t* image, size_t bytes);
  size_t memory_bytes() const;  // 0 before upload()
  void write(size_t offset, const uint8_t* src, size_t bytes);   // e.g. an input activation; InvalidInput when out of range
  void read(size_t offset, uint8_t* dst, size_t bytes) const;    // e.g. an output activation
  // Validates the whole stream first (decode_program: a corrupt or truncated stream, or one whose
  // memory size differs from the uploaded image, is refused with InvalidInput and nothing runs),
  // then per layer: submits the layer's words, enqueues its kernel, waits on the end-of-layer event
  // before the next layer. An Error if the device refuses a layer's words or a command fails.
  RunStats run(const uint32_t* words, size_t n);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dnnfusion::fpga
