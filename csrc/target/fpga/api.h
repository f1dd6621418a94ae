// The fpga target's user-facing API (Python: dnnfusion.fpga, bound by fpga/python/bind_api.cc):
// the accelerator's ISA v1 (layer descriptors, encoder, validating decoder, disassembler, cost
// model), the device-memory packers, the bit-exact datapath model (simulate), the OpenCL platform
// queries and the host driver that runs instruction streams on an OpenCL device.
// Precondition/postcondition: those of the headers below.
#pragma once
#include "target/fpga/datapath/simulate.h"       // simulate
#include "target/fpga/driver/accelerator.h"      // Accelerator, RunStats
#include "target/fpga/isa/isa.h"                 // LayerDesc, encode/decode/disassemble, estimate
#include "target/fpga/isa/weight_layout.h"       // pack_weights/params/activation
#include "target/fpga/opencl/opencl_runtime.h"   // opencl_unavailable_reason, platforms
