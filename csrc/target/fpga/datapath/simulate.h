// The bit-exact model of the fpga target's int8 datapath (ISA v1, csrc/target/fpga/ISA.md): it
// decodes an instruction stream with the driver's validator and executes each layer the way the
// hardware does — 8-output-channel blocks, one 8x8 tap line (3x3), one 32x8 step (1x1) or one
// 8-lane tap (depthwise) at a time, int32 wrap-around accumulators, requant.h per output channel,
// padded lanes written as 0 — reading and writing only the device memory image. The OpenCL
// kernels are checked bit for bit against it.
//
// Precondition: `memory` holds at least the memory size the stream's header names. Postcondition:
// either the stream was refused (InvalidInput, memory untouched) or every layer ran in order and
// the only bytes changed are those of each layer's output region; no layer reads outside the
// regions its registers name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "target/fpga/isa/isa.h"

namespace dnnfusion::fpga {

// Validates the whole stream, then runs its layers; returns the decoded program.
Program simulate(std::vector<uint8_t>& memory, const uint32_t* words, size_t n);

// Runs one layer on a memory image of memory_bytes bytes (checked with check_layer first).
void simulate_layer(uint8_t* memory, size_t memory_bytes, const LayerDesc& d);

}  // namespace dnnfusion::fpga
