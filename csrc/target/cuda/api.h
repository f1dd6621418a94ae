// The cuda target's user-facing API (Python: dnnfusion.cuda, bound by cuda/python/bind_api.cc):
// building one sparse convolution kernel for its weights, running it on the CPU through the PTX
// interpreter or on a GPU, and what this machine has of the toolchain (NVRTC, ptxas, nvdisasm)
// and the driver. Everything here works on a machine without a GPU except launch_sparse_conv.
// Precondition/postcondition: those of the headers below.
#pragma once
#include "target/cuda/sparse_conv/nvrtc_compiler.h"       // add_nvrtc_search_dir, nvrtc_info
#include "target/cuda/sparse_conv/sparse_conv_kernel.h"   // build_sparse_conv, emulate/launch
#include "target/cuda/toolchain/cuda_driver.h"            // driver_unavailable_reason, device_arch
#include "target/cuda/toolchain/cuda_tools.h"             // add_cuda_tool_dir, find_cuda_tool, archs
