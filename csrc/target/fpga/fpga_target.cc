// The fpga target: an int8 CNN accelerator driven over OpenCL (csrc/target/fpga/README.md). Its
// compile is not the core's per-node pipeline: it needs calibration data, quantizes whole runs of
// supported layers and encodes them as the accelerator's instruction stream, and hands the rest to
// the cpu target — so the Python glue does it (dnnfusion/fpga; dnnfusion/targets/fpga.py takes the
// whole Dynamo graph for torch.compile), through the driver and the bit-exact model bound as _C.fpga. This registration gives the target its name
// in options and listings and says whether this machine can run it: an OpenCL platform with a
// device (PoCL in development and CI, a vendor FPGA platform in production). The kernel table is
// empty: the accelerator runs instruction streams, not ECG nodes.
// Precondition/postcondition: those of target.h.
#include <memory>

#include "common/error.h"
#include "target/fpga/opencl/opencl_runtime.h"
#include "target/target.h"

namespace dnnfusion::target {
namespace fpga_target {
namespace {

class FpgaTarget final : public Target {
 public:
  std::string name() const override { return "fpga"; }
  std::string description() const override {
    return "int8 CNN accelerator over OpenCL: supported conv/pool/add layers quantized and offloaded as an "
           "instruction stream, the rest on the cpu target (needs calibration data)";
  }
  std::string device_type() const override { return "cpu"; }  // the model's tensors stay on the host
  std::string unavailable_reason() const override { return fpga::opencl::opencl_unavailable_reason(); }
  bool fuses() const override { return false; }
  bool evaluates_constants() const override { return false; }

  void* allocate(size_t bytes) const override { return host_allocate(bytes); }
  void deallocate(void* p) const override { host_deallocate(p); }
  void strided_copy(size_t, const std::vector<int64_t>&, const void*, const std::vector<int64_t>&, int64_t, void*,
                    const kernels::Parallel&) const override {
    DNNF_THROW_AS(UnsupportedOp, "the fpga target runs instruction streams, not ECG nodes");
  }

 protected:
  void register_kernels(runtime::KernelTable&) const override {}
};

}  // namespace
}  // namespace fpga_target

std::unique_ptr<Target> make_fpga_target() { return std::make_unique<fpga_target::FpgaTarget>(); }

}  // namespace dnnfusion::target
