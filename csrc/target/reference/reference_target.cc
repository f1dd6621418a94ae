// The reference target: every op it knows runs through the plain reference kernels of
// csrc/kernels/reference, one node at a time, in NCHW, on one thread — no fusion, no layouts, no
// packing, no generated code. It is the oracle the tests compare the optimized targets with, and
// what a user reaches for when a compiled model's numbers differ from eager ("is it the optimized
// kernel?"): options={"target": "reference"}.
#include <memory>

#include "common/error.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "target/reference/reference_kernels.h"
#include "target/target.h"

namespace dnnfusion::target {
namespace reference {
namespace {

class ReferenceTarget final : public Target {
 public:
  std::string name() const override { return "reference"; }
  std::string description() const override {
    return "plain reference kernels, one op at a time, NCHW, single-threaded (the oracle for debugging numbers)";
  }
  std::string device_type() const override { return "cpu"; }
  bool fuses() const override { return false; }

  void* allocate(size_t bytes) const override { return host_allocate(bytes); }
  void deallocate(void* p) const override { host_deallocate(p); }
  void strided_copy(size_t elem_size, const std::vector<int64_t>& shape, const void* src,
                    const std::vector<int64_t>& strides, int64_t offset, void* dst,
                    const kernels::Parallel&) const override {
    ::dnnfusion::reference::strided_copy(elem_size, shape, src, strides, offset, dst);
  }

 protected:
  void register_kernels(runtime::KernelTable& t) const override {
    runtime::register_view_ops(t);
    register_elementwise_ops(t);
    register_nn_ops(t);
    register_misc_ops(t);
  }
};

}  // namespace
}  // namespace reference

std::unique_ptr<Target> make_reference_target() { return std::make_unique<reference::ReferenceTarget>(); }

}  // namespace dnnfusion::target
