// See sparse_conv_kernel.h. The steps are the paper's: template (once per shape, cached) ->
// rewrite (once per weight set) -> ptxas (once per weight set and arch); the only loop is the
// tile shrink on spills, because a spilling kernel moves every spilled accumulator through local
// memory and loses the point of keeping weights in instructions.
#include "target/cuda/sparse_conv/sparse_conv_kernel.h"

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/private_cache.h"
#include "target/cuda/ptx/ptx_interpreter.h"
#include "target/cuda/ptx/ptx_program.h"
#include "target/cuda/sparse_conv/conv_template.h"
#include "target/cuda/sparse_conv/ptx_rewrite.h"
#include "target/cuda/toolchain/cuda_driver.h"
#include "target/cuda/toolchain/cuda_tools.h"
#include "target/cuda/toolchain/ptxas.h"
#include "target/cuda/toolchain/sass_stats.h"

namespace dnnfusion::cuda {
namespace {

int64_t count_nonzeros(const float* w, int64_t n) {
  int64_t nz = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(w[i])) DNNF_THROW_AS(InvalidInput, "sparse_conv2d: weight ", i, " is ", w[i], " (weights must be finite)");
    nz += w[i] != 0.0f;
  }
  return nz;
}

// What one tile gives: the kernel's code and how to launch it.
struct Code {
  ConvTile tile;
  LaunchDims launch;
  std::string entry, ptx, cubin;
};

// One attempt at a tile: template, rewrite, assemble.
Code build_with_tile(const ConvShape& shape, const Epilogue& epilogue, const ConvTile& tile, const float* weights,
                     const SparseConvOptions& options, SparseConvStats& stats) {
  const std::string dir = options.cache_dir.empty() ? private_cache_dir("cuda") : options.cache_dir;
  const TemplateKernel t = make_template(shape, tile, epilogue, dir);
  stats.template_seconds += t.seconds;
  stats.nvrtc_seconds += t.nvrtc_seconds;
  stats.template_cache_hit = t.cache_hit;
  stats.ptx_fma_dense = shape.weight_count() * t.fmas_per_weight;

  const RewriteResult rw = rewrite_ptx(t, weights);
  stats.rewrite_seconds += rw.seconds;
  stats.ptx_fma = rw.fma_kept;

  Cubin cubin = assemble_ptx(rw.ptx, options.arch);
  stats.ptxas_seconds += cubin.ptxas_seconds;
  const KernelResources& res = cubin.kernel(t.entry);
  stats.registers = res.registers;
  stats.spill_bytes = res.spill_store_bytes + res.spill_load_bytes;

  return Code{tile, t.launch, t.entry, rw.ptx, std::move(cubin.bytes)};
}

void fill_sass_stats(const std::string& cubin, SparseConvStats& stats) {
  const SassStats s = sass_stats(cubin);
  stats.cubin_bytes = static_cast<long>(cubin.size());
  stats.sass_instructions = s.instructions;
  stats.sass_ffma = s.ffma;
  stats.sass_note = s.nvdisasm_unavailable_reason;
}

}  // namespace

std::shared_ptr<const SparseConvKernel> build_sparse_conv(const ConvShape& shape, const Epilogue& epilogue,
                                                          const float* weights, const SparseConvOptions& options) {
  shape.validate();
  validate_arch(options.arch);
  SparseConvStats stats;
  stats.weights = shape.weight_count();
  stats.nonzeros = count_nonzeros(weights, stats.weights);

  Code code = build_with_tile(shape, epilogue, default_tile(shape), weights, options, stats);
  while (stats.spill_bytes > 0) {
    const std::optional<ConvTile> next = smaller(code.tile);
    if (!next) break;  // minimal tile: keep the spilling kernel, the stats say so
    ++stats.tile_shrinks;
    code = build_with_tile(shape, epilogue, *next, weights, options, stats);
  }
  fill_sass_stats(code.cubin, stats);
  auto k = std::make_shared<SparseConvKernel>();
  k->shape = shape;
  k->epilogue = epilogue;
  k->tile = code.tile;
  k->launch = code.launch;
  k->arch = options.arch;
  k->entry = std::move(code.entry);
  k->ptx = std::move(code.ptx);
  k->cubin = std::move(code.cubin);
  k->stats = stats;
  return k;
}

struct SparseConvKernel::Loaded {
  std::shared_ptr<ptx::Module> module;                   // parsed PTX
  std::map<int, std::unique_ptr<CudaModule>> gpu;        // loaded cubin per device
  std::map<int, CudaFunction> entry;                     // its entry function, looked up once
};

namespace {

SparseConvKernel::Loaded& loaded(const SparseConvKernel& kernel) {
  if (!kernel.loaded) kernel.loaded = std::make_shared<SparseConvKernel::Loaded>();
  return *kernel.loaded;
}

// emulate() may run many times on one kernel (a model's forward passes): parse once.
std::shared_ptr<ptx::Module> parsed(const SparseConvKernel& kernel) {
  std::lock_guard<std::mutex> lock(kernel.loaded_mutex);
  auto& m = loaded(kernel).module;
  if (!m) m = std::make_shared<ptx::Module>(ptx::parse_module(kernel.ptx));
  return m;
}

}  // namespace

void emulate_sparse_conv(const SparseConvKernel& kernel, const float* x, const float* bias, const float* residual,
                         float* y, int threads) {
  const ConvShape& s = kernel.shape;
  const size_t x_bytes = sizeof(float) * s.n * s.c * s.h * s.w;
  const size_t y_bytes = sizeof(float) * s.n * s.k * s.out_h() * s.out_w();
  ptx::LaunchArgs args;
  args.grid = {kernel.launch.grid[0], kernel.launch.grid[1], kernel.launch.grid[2]};
  args.block = {kernel.launch.block[0], kernel.launch.block[1], kernel.launch.block[2]};
  args.dynamic_shared_bytes = kernel.launch.dynamic_shared_bytes;
  args.threads = threads;
  auto addr = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
  const float* b = kernel.epilogue.bias ? bias : nullptr;
  const float* r = kernel.epilogue.residual ? residual : nullptr;
  if (kernel.epilogue.bias && !b) DNNF_THROW_AS(InvalidInput, "sparse conv: the kernel adds a bias and none was given");
  if (kernel.epilogue.residual && !r) DNNF_THROW_AS(InvalidInput, "sparse conv: the kernel adds a residual and none was given");
  args.params = {addr(x), addr(b), addr(r), addr(y)};
  args.regions.push_back({const_cast<float*>(x), x_bytes, false});
  if (b) args.regions.push_back({const_cast<float*>(b), sizeof(float) * s.k, false});
  if (r) args.regions.push_back({const_cast<float*>(r), y_bytes, false});
  args.regions.push_back({y, y_bytes, true});
  ptx::run(*parsed(kernel), kernel.entry, args);
}

namespace {

// The module and its entry on `device`, loaded and looked up on the first launch only.
std::pair<const CudaModule*, CudaFunction> loaded_entry(const SparseConvKernel& kernel, int device) {
  std::lock_guard<std::mutex> lock(kernel.loaded_mutex);
  SparseConvKernel::Loaded& l = loaded(kernel);
  auto& m = l.gpu[device];
  if (!m) {
    m = std::make_unique<CudaModule>(kernel.cubin, device);
    l.entry[device] = m->function(kernel.entry);
  }
  return {m.get(), l.entry.at(device)};
}

}  // namespace

void launch_sparse_conv(const SparseConvKernel& kernel, uint64_t x, uint64_t bias, uint64_t residual, uint64_t y,
                        void* stream, int device) {
  require_driver();
  const auto [m, f] = loaded_entry(kernel, device);
  std::vector<void*> args = {&x, &bias, &residual, &y};
  const LaunchDims& l = kernel.launch;
  m->launch(f, {l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]},
           static_cast<unsigned>(l.dynamic_shared_bytes), stream, args);
}

}  // namespace dnnfusion::cuda
