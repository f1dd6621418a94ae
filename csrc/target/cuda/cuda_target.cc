// The cuda target: convolutions pruned without structure run as kernels generated for their own
// weights (zero weights cost no instruction), with their bias, folded batch norm, residual add and
// ReLU/ReLU6 inside the kernel; everything else stays on ATen on the GPU (the target refuses it at
// import, so it runs eagerly where the user's tensors are). How the kernels are made:
// csrc/target/cuda/README.md.
//
// Where they run: on the GPU through the CUDA driver (loaded with dlopen, on PyTorch's current
// stream, which the bridge passes as KernelCall::device), or — with DNNFUSION_CUDA_EMULATE=1, a
// switch for tests and for checking generated kernels on a machine without a GPU — on the CPU
// through the PTX interpreter, with CPU tensors (device type "cpu"). The switch is read on every
// query, so a process can compile both ways.
//
// Precondition: see target.h. Postcondition: a compiled region computes what the unfused graph
// computes, up to fp32 rounding (the kernel's FMA order differs from cuDNN's).
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "common/error.h"
#include "target/cuda/graph/fuse_sparse_convs.h"
#include "target/cuda/graph/sparse_conv_chains.h"
#include "target/cuda/sparse_conv/compiled_conv_cache.h"
#include "target/cuda/sparse_conv/nvrtc_compiler.h"
#include "target/cuda/toolchain/cuda_driver.h"
#include "target/cuda/toolchain/cuda_tools.h"
#include "target/target.h"

namespace dnnfusion::target {
namespace cuda_target {
namespace {

namespace cu = ::dnnfusion::cuda;

bool emulated() {
  const char* e = std::getenv("DNNFUSION_CUDA_EMULATE");
  return e && *e && std::strcmp(e, "0") != 0;
}

// The device of the compile running on this thread: the arena of its Executable lives there.
thread_local int t_compile_device = 0;

const char* const kChainOps[] = {"convolution", "_native_batch_norm_legit_no_training", "add", "relu", "hardtanh",
                                 "clamp"};

void run_sparse_conv(runtime::KernelCall& c) {
  auto e = cu::find_compiled_conv(c.n.attr_str("kernel"));
  const float* residual = static_cast<const float*>(c.in.size() > 3 ? c.in[3] : nullptr);
  if (e->device < 0) {
    cu::emulate_sparse_conv(*e->kernel, static_cast<const float*>(c.in[0]), e->bias.empty() ? nullptr : e->bias.data(),
                            residual, static_cast<float*>(c.out[0]), c.par.num_threads());
    return;
  }
  if (!c.device) DNNF_THROW("sparse_conv2d: the caller gave no CUDA device and stream");
  if (c.device->index != e->device)
    DNNF_THROW_AS(InvalidInput, "the region was compiled for cuda:", e->device, " but its inputs are on cuda:",
                  c.device->index, " (recompile on that device)");
  cu::launch_sparse_conv(*e->kernel, reinterpret_cast<uint64_t>(c.in[0]),
                         e->device_bias ? e->device_bias->address() : 0, reinterpret_cast<uint64_t>(residual),
                         reinterpret_cast<uint64_t>(c.out[0]), c.device->stream, e->device);
}

std::string check_sparse_conv(const ecg::Graph& g, const ecg::Node& n) {
  if (!n.has_attr("kernel")) return "sparse_conv2d without a built kernel";
  return "";
}

class CudaTarget final : public Target {
 public:
  std::string name() const override { return "cuda"; }
  std::string description() const override {
    return "NVIDIA GPUs: convolutions pruned without structure as PTX kernels generated for their weights; the "
           "rest on ATen";
  }
  std::string device_type() const override { return emulated() ? "cpu" : "cuda"; }
  std::string unavailable_reason() const override {
    if (!emulated()) {
      std::string why = cu::driver_unavailable_reason();
      if (!why.empty()) return why + " (DNNFUSION_CUDA_EMULATE=1 runs the generated kernels on the CPU instead)";
    }
    try {
      cu::nvrtc_info();
    } catch (const std::exception& e) {
      return e.what();
    }
    if (cu::find_cuda_tool("ptxas").empty()) return cu::cuda_tool_search_description("ptxas");
    return "";
  }
  bool fuses() const override { return false; }
  bool evaluates_constants() const override { return false; }

  std::optional<std::string> import_decision(const ecg::Graph& g, const ecg::Node& n,
                                             const CompileOptions& opts) const override {
    for (const char* op : kChainOps)
      if (n.op == op) return cu::chain_refusal(g, n, opts);
    return std::nullopt;
  }

  void init_stats(CompileStats& s) const override {
    for (const char* c : {"sparse_kernels", "sparse_kernels_reused", "epilogue_ops_fused"}) s.target_counters[c] = 0;
    for (const char* c : {"sparse_kernel_lines", "execution"}) s.target_notes[c] = "";
  }

  std::vector<Pass> passes(const CompileOptions&) const override {
    return {{"fuse_sparse_convs", [](PassContext& c) {
               const bool emu = emulated();
               const int device = emu ? -1 : c.opts.device_index;
               t_compile_device = c.opts.device_index;
               const std::string arch = emu ? "sm_80" : cu::device_arch(device);
               cu::FuseSparseConvsReport r;
               c.g = cu::fuse_sparse_convs(c.g, c.opts, arch, device, &r);
               c.changed = r.kernels > 0;
               c.detail = std::to_string(r.kernels) + " sparse kernels (" + std::to_string(r.reused) + " reused), " +
                          std::to_string(r.epilogue_ops) + " epilogue ops absorbed";
               auto& k = c.stats.target_counters;
               k["sparse_kernels"] += r.kernels;
               k["sparse_kernels_reused"] += r.reused;
               k["epilogue_ops_fused"] += r.epilogue_ops;
               std::string lines;
               for (const auto& l : r.lines) lines += l + "\n";
               c.stats.target_notes["sparse_kernel_lines"] += lines;
               c.stats.target_notes["execution"] =
                   emu ? "emulated on the CPU by the PTX interpreter (DNNFUSION_CUDA_EMULATE), kernels built for " + arch
                       : "cuda:" + std::to_string(device) + " (" + arch + ")";
             }}};
  }

  void* allocate(size_t bytes) const override {
    if (emulated()) return host_allocate(bytes);
    auto buf = std::make_unique<cu::DeviceBuffer>(bytes ? bytes : 1, t_compile_device);
    void* p = reinterpret_cast<void*>(buf->address());
    std::lock_guard<std::mutex> lk(mu_);
    buffers_[p] = std::move(buf);
    return p;
  }
  void deallocate(void* p) const override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (buffers_.erase(p)) return;
    }
    host_deallocate(p);
  }
  void strided_copy(size_t, const std::vector<int64_t>&, const void*, const std::vector<int64_t>&, int64_t, void*,
                    const kernels::Parallel&) const override {
    DNNF_THROW_AS(UnsupportedOp, "the cuda target has no strided copies (data-movement ops stay on ATen)");
  }

 protected:
  void register_kernels(runtime::KernelTable& t) const override {
    runtime::OpKernel k;
    k.check = check_sparse_conv;
    k.run = run_sparse_conv;
    t.emplace_back("sparse_conv2d", k);
  }

 private:
  mutable std::mutex mu_;
  mutable std::map<void*, std::unique_ptr<cu::DeviceBuffer>> buffers_;
};

}  // namespace
}  // namespace cuda_target

std::unique_ptr<Target> make_cuda_target() { return std::make_unique<cuda_target::CudaTarget>(); }

}  // namespace dnnfusion::target
