// The sparse convolution kernels a compile built, kept for the process and found by the graph
// node that runs them (its attribute "kernel"): the built kernel, its bias on the GPU, the device.
// A later compile of the same convolution (same shape, epilogue, weights, bias, arch, device) gets
// the same entry instead of re-running the rewrite and ptxas — recompiles per input shape and the
// tests compile the same layers many times. An entry is matched by an FNV-1a key and then by its
// stored weights and bias, so a hash collision can never hand out another layer's kernel.
//
// Precondition: weights/bias hold shape.weight_count() / shape.k floats (bias may be null).
// Postcondition: get_or_build returns an entry whose kernel computes this layer; find returns the
// entry of an id that get_or_build returned in this process (Error otherwise). Thread-safe.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "target/cuda/sparse_conv/sparse_conv_kernel.h"

namespace dnnfusion::cuda {

class DeviceBuffer;

struct CompiledConv {
  std::string id;
  std::shared_ptr<const SparseConvKernel> kernel;
  std::vector<float> weights, bias;       // what it was built from (bias empty when absent)
  int device = -1;                        // -1: emulated on the CPU, no device memory
  std::shared_ptr<DeviceBuffer> device_bias;  // on `device`, when it has a bias
};

// device < 0: the kernel is built for `arch` but runs emulated; no driver is touched.
std::shared_ptr<const CompiledConv> get_or_build(const ConvShape& shape, const Epilogue& epilogue, const float* weights,
                                                 const float* bias, const std::string& arch, int device,
                                                 bool* reused = nullptr);
std::shared_ptr<const CompiledConv> find_compiled_conv(const std::string& id);

}  // namespace dnnfusion::cuda
