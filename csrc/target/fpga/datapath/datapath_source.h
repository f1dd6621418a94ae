// The OpenCL C source of the fpga datapath (datapath/datapath.cl), carried inside the library as
// text so the driver can build it at run time for whatever OpenCL device it finds; the build
// (CMakeLists.txt) pastes datapath.cl into a raw string literal of a generated source file, so the
// .cl file stays the one copy — the same file a vendor's offline compiler (aoc, v++) is given.
//
// Precondition: none. Postcondition: the returned text is datapath.cl byte for byte, NUL-terminated
// and alive for the whole process; its kernels are named by kDatapathKernels, indexed by
// Switch_REG value - 1 (LayerType).
#pragma once

namespace dnnfusion::fpga {

const char* datapath_source();

// Kernel names of datapath.cl, one per ISA v1 layer type in Switch_REG order (1..5).
inline constexpr const char* kDatapathKernels[5] = {"conv3x3", "conv1x1", "dw3x3", "maxpool", "add"};
// Work-group width of every datapath kernel (reqd_work_group_size in datapath.cl): TILE_X output
// pixels of one row of one 8-channel block.
inline constexpr int kDatapathTileX = 8;

}  // namespace dnnfusion::fpga
