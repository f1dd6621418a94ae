// The accelerator's host driver over opencl_runtime.h. The device gets nothing but the layer's
// register words and its memory: the host decodes the stream only to validate it (before any
// layer runs) and to pick the kernel and NDRange of each layer, the launch geometry a hardware
// datapath would derive from the same registers.
//
// Precondition / postcondition: see accelerator.h. The status buffer is the device's refusal
// register (datapath.cl's header): cleared before each run, read after each layer's end-of-layer
// event, so a layer the device refused stops the run with an Error naming it.
#include "target/fpga/driver/accelerator.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/error.h"
#include "target/fpga/datapath/datapath_source.h"
#include "target/fpga/isa/isa.h"
#include "target/fpga/opencl/opencl_runtime.h"

namespace dnnfusion::fpga {

namespace ocl = opencl;

struct Accelerator::State {
  ocl::Context ctx;
  ocl::Program program;
  std::vector<ocl::Kernel> kernels;  // indexed by LayerType - 1
  ocl::Buffer regs;                  // the register file: one layer's 13 words
  ocl::Buffer status;                // [0] refusal code, [1] the refused layer's index
  std::optional<ocl::Buffer> memory;
  mutable std::mutex mu;
};

namespace {

constexpr size_t kStatusWords = 2;

ocl::Program build_datapath(const ocl::Context& ctx, const std::string& binary_path) {
  if (binary_path.empty()) return ocl::Program::from_source(ctx, datapath_source(), "-cl-std=CL1.2");
  return ocl::Program::from_binary_file(ctx, binary_path);
}

// A binary built from something else lacks the datapath's kernels: say which, and what it has.
std::vector<ocl::Kernel> datapath_kernels(const ocl::Program& program, const std::string& binary_path) {
  std::vector<ocl::Kernel> kernels;
  for (const char* name : kDatapathKernels) {
    try {
      kernels.emplace_back(program, name);
    } catch (const InvalidInput& e) {
      DNNF_THROW_AS(InvalidInput, "the fpga datapath ",
                    binary_path.empty() ? std::string("built from datapath.cl") : "binary '" + binary_path + "'",
                    " has no kernel '", name, "' (a binary must be built from datapath.cl): ", e.what());
    }
  }
  return kernels;
}

// The work the device does for layer d: TILE_X-wide row segments of each 8-channel output block.
std::vector<size_t> ndrange(const LayerDesc& d) {
  const size_t tile = kDatapathTileX;
  const size_t wo = static_cast<size_t>(out_w(d));
  return {(wo + tile - 1) / tile * tile, static_cast<size_t>(out_h(d)), static_cast<size_t>(pad8(d.out_channels) / 8)};
}

void check_range(const char* what, size_t offset, size_t bytes, size_t memory, const void* ptr) {
  if (memory == 0) DNNF_THROW_AS(InvalidInput, "fpga accelerator ", what, ": no device memory yet (call upload first)");
  if (offset > memory || bytes > memory - offset)
    DNNF_THROW_AS(InvalidInput, "fpga accelerator ", what, ": bytes [", offset, ", ", offset + bytes,
                  ") lie outside the device memory [0, ", memory, ")");
  if (bytes > 0 && !ptr) DNNF_THROW_AS(InvalidInput, "fpga accelerator ", what, ": null host pointer for ", bytes, " bytes");
}

std::string refusal(uint32_t code) {
  const uint32_t kind = code >> 8, field = code & 0xFF;
  if (kind == 1) return detail::str_cat("word ", field, " of the layer has the wrong register id");
  if (kind == 2) return detail::str_cat("word ", field, " of the layer has the wrong control state");
  if (kind == 3) return detail::str_cat("Switch_REG says layer type ", field, ", not the kernel's");
  return detail::str_cat("unknown refusal code 0x", std::hex, code);
}

}  // namespace

Accelerator::Accelerator(const AcceleratorOptions& options) {
  ocl::require_opencl();
  ocl::Context ctx(options.platform);
  ocl::Program program = build_datapath(ctx, options.binary_path);
  std::vector<ocl::Kernel> kernels = datapath_kernels(program, options.binary_path);
  ocl::Buffer regs(ctx, kWordsPerLayer * sizeof(uint32_t), ocl::Buffer::Access::ReadOnly);
  ocl::Buffer status(ctx, kStatusWords * sizeof(uint32_t));
  state_.reset(new State{std::move(ctx), std::move(program), std::move(kernels), std::move(regs), std::move(status),
                         std::nullopt, {}});
}

Accelerator::~Accelerator() = default;

std::string Accelerator::platform_name() const { return state_->ctx.platform().name; }
std::string Accelerator::device_name() const { return state_->ctx.device().name; }

void Accelerator::upload(const uint8_t* image, size_t bytes) {
  if (bytes == 0 || !image)
    DNNF_THROW_AS(InvalidInput, "fpga accelerator upload: the memory image must be non-empty (got ", bytes,
                  " bytes", image ? "" : " at a null pointer", ")");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->memory.reset();  // free the old image first: device memory may not hold both
  ocl::Buffer memory(state_->ctx, bytes);
  memory.write(image, bytes);
  state_->memory.emplace(std::move(memory));
}

size_t Accelerator::memory_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->memory ? state_->memory->size() : 0;
}

void Accelerator::write(size_t offset, const uint8_t* src, size_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  check_range("write", offset, bytes, state_->memory ? state_->memory->size() : 0, src);
  if (bytes > 0) state_->memory->write(src, bytes, offset);
}

void Accelerator::read(size_t offset, uint8_t* dst, size_t bytes) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  check_range("read", offset, bytes, state_->memory ? state_->memory->size() : 0, dst);
  if (bytes > 0) state_->memory->read(dst, bytes, offset);
}

RunStats Accelerator::run(const uint32_t* words, size_t n) {
  const auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  if (!s.memory) DNNF_THROW_AS(InvalidInput, "fpga accelerator run: no device memory yet (call upload first)");
  if (!words && n > 0) DNNF_THROW_AS(InvalidInput, "fpga accelerator run: null instruction stream of ", n, " words");
  const Program p = decode_program(words, n);
  if (p.memory_bytes != s.memory->size())
    DNNF_THROW_AS(InvalidInput, "fpga accelerator run: the stream was built for ", p.memory_bytes,
                  " bytes of device memory, the uploaded image has ", s.memory->size());

  const uint32_t clear[kStatusWords] = {0, 0};
  s.status.write(clear, sizeof(clear));
  RunStats stats;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const LayerDesc& d = p.layers[i];
    s.regs.write(words + kHeaderWords + i * kWordsPerLayer, kWordsPerLayer * sizeof(uint32_t));
    ocl::Kernel& k = s.kernels[static_cast<size_t>(d.type) - 1];
    k.set_arg(0, s.regs);
    k.set_arg(1, *s.memory);
    k.set_arg(2, s.status);
    const ocl::Event end_of_layer = s.ctx.enqueue(k, ndrange(d), {static_cast<size_t>(kDatapathTileX), 1, 1});
    end_of_layer.wait();
    uint32_t st[kStatusWords];
    s.status.read(st, sizeof(st));
    if (st[0] != 0)
      DNNF_THROW("fpga accelerator run: the device refused layer ", st[1], " (", layer_type_name(d.type),
                 "): ", refusal(st[0]), "; the stream decoded, so the driver and datapath.cl disagree");
    stats.layer_seconds.push_back(static_cast<double>(end_of_layer.end_ns() - end_of_layer.start_ns()) * 1e-9);
    ++stats.layers;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace dnnfusion::fpga
