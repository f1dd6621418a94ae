#include "target/cuda/sparse_conv/compiled_conv_cache.h"

#include <map>
#include <mutex>

#include "common/error.h"
#include "common/hash.h"
#include "target/cuda/toolchain/cuda_driver.h"

namespace dnnfusion::cuda {

namespace {

struct Cache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<CompiledConv>> entries;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: kernels may run during static destruction
  return *c;
}

std::string key_of(const ConvShape& shape, const Epilogue& e, const std::vector<float>& w,
                   const std::vector<float>& b, const std::string& arch, int device) {
  uint64_t h = fnv1a(shape.key() + "|" + e.key() + "|" + arch + "|" + std::to_string(device));
  h = fnv1a(std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float)), h);
  h = fnv1a(std::string(reinterpret_cast<const char*>(b.data()), b.size() * sizeof(float)), h);
  return "sc_" + hex64(h);
}

}  // namespace

std::shared_ptr<const CompiledConv> get_or_build(const ConvShape& shape, const Epilogue& epilogue, const float* weights,
                                                 const float* bias, const std::string& arch, int device,
                                                 bool* reused) {
  std::vector<float> w(weights, weights + shape.weight_count());
  std::vector<float> b = bias ? std::vector<float>(bias, bias + shape.k) : std::vector<float>{};
  std::string id = key_of(shape, epilogue, w, b, arch, device);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lk(c.mu);
    for (auto it = c.entries.find(id); it != c.entries.end(); id += "x", it = c.entries.find(id))
      if (it->second->weights == w && it->second->bias == b && it->second->kernel->shape.key() == shape.key() &&
          it->second->kernel->epilogue.key() == epilogue.key()) {
        if (reused) *reused = true;
        return it->second;
      }
  }
  auto e = std::make_shared<CompiledConv>();
  SparseConvOptions o;
  o.arch = arch;
  e->kernel = build_sparse_conv(shape, epilogue, weights, o);  // outside the lock: seconds to minutes
  e->weights = std::move(w);
  e->bias = std::move(b);
  e->device = device;
  if (device >= 0 && !e->bias.empty()) {
    e->device_bias = std::make_shared<DeviceBuffer>(e->bias.size() * sizeof(float), device);
    e->device_bias->copy_from_host(e->bias.data(), e->bias.size() * sizeof(float));
  }
  std::lock_guard<std::mutex> lk(c.mu);
  while (c.entries.count(id)) id += "x";  // a colliding key, or another thread built the same layer
  e->id = id;
  c.entries[id] = e;
  if (reused) *reused = false;
  return e;
}

std::shared_ptr<const CompiledConv> find_compiled_conv(const std::string& id) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  auto it = c.entries.find(id);
  if (it == c.entries.end()) DNNF_THROW("no sparse convolution kernel '", id, "' was built in this process");
  return it->second;
}

}  // namespace dnnfusion::cuda
