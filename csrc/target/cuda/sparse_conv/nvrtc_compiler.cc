// The dlopen-based NVRTC loader and the CUDA C -> PTX call (nvrtc_compiler.h).
//
// Precondition: none. Postcondition: see the header; the NVRTC function types below are declared
// here from NVRTC's documented C API (no nvrtc.h), and a program handle is always destroyed, also
// when compiling throws.
#include "target/cuda/sparse_conv/nvrtc_compiler.h"

#include <dirent.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "common/error.h"

namespace dnnfusion::cuda {
namespace {

// NVRTC's C API: nvrtcResult is an int enum whose success value is 0, nvrtcProgram an opaque
// pointer.
using nvrtcResult = int;
using nvrtcProgram = void*;
constexpr nvrtcResult kNvrtcSuccess = 0;

struct NvrtcApi {
  std::string path;
  void* handle = nullptr;
  const char* (*get_error_string)(nvrtcResult) = nullptr;
  nvrtcResult (*version)(int*, int*) = nullptr;
  nvrtcResult (*create_program)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*) = nullptr;
  nvrtcResult (*destroy_program)(nvrtcProgram*) = nullptr;
  nvrtcResult (*compile_program)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*get_ptx_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_ptx)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_log_size)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*get_log)(nvrtcProgram, char*) = nullptr;
};

std::mutex g_mutex;                 // guards the two below
std::vector<std::string> g_dirs;    // add_nvrtc_search_dir, in order
const NvrtcApi* g_api = nullptr;    // set once, never freed: the library stays loaded

template <typename Fn>
bool bind(void* handle, const char* name, Fn* fn, std::string* why) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (!*fn) *why = std::string("lacks ") + name;
  return *fn != nullptr;
}

// libnvrtc opens its builtins library (libnvrtc-builtins.so.<major>.<minor>) by soname when it
// first compiles, and a pip wheel's lib folder is not on the loader's path. A library already
// loaded under that soname satisfies the lookup, so the builtins beside a libnvrtc given by path
// are loaded first (the ".alt" variants belong to libnvrtc.alt and are left alone).
void preload_builtins_beside(const std::string& candidate) {
  const size_t slash = candidate.rfind('/');
  if (slash == std::string::npos) return;
  const std::string dir = candidate.substr(0, slash);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  static const std::string kPrefix = "libnvrtc-builtins.so.";
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, kPrefix.size(), kPrefix) == 0) {
      dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_GLOBAL);  // a failure shows at compile time
    }
  }
  ::closedir(d);
}

// Loads one candidate; on failure returns null and says why.
std::unique_ptr<NvrtcApi> try_load(const std::string& candidate, std::string* why) {
  preload_builtins_beside(candidate);
  void* h = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    *why = e ? e : "dlopen failed";
    return nullptr;
  }
  auto api = std::make_unique<NvrtcApi>();
  api->path = candidate;
  api->handle = h;
  const bool ok = bind(h, "nvrtcGetErrorString", &api->get_error_string, why) &&
                  bind(h, "nvrtcVersion", &api->version, why) &&
                  bind(h, "nvrtcCreateProgram", &api->create_program, why) &&
                  bind(h, "nvrtcDestroyProgram", &api->destroy_program, why) &&
                  bind(h, "nvrtcCompileProgram", &api->compile_program, why) &&
                  bind(h, "nvrtcGetPTXSize", &api->get_ptx_size, why) &&
                  bind(h, "nvrtcGetPTX", &api->get_ptx, why) &&
                  bind(h, "nvrtcGetProgramLogSize", &api->get_log_size, why) &&
                  bind(h, "nvrtcGetProgramLog", &api->get_log, why);
  if (!ok) {
    dlclose(h);
    return nullptr;
  }
  return api;
}

std::vector<std::string> candidates_locked() {
  static const char* const kNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> out;
  if (const char* env = std::getenv("DNNFUSION_NVRTC"); env && *env) out.emplace_back(env);
  for (const auto& dir : g_dirs) {
    for (const char* name : kNames) out.push_back(dir + "/" + name);
  }
  for (const char* name : kNames) out.emplace_back(name);
  return out;
}

// The first candidate that loads, or TargetUnavailable naming each and why it failed.
std::unique_ptr<NvrtcApi> load_first(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const auto& c : candidates) {
    std::string why;
    if (auto loaded = try_load(c, &why)) return loaded;
    tried += "\n  " + c + ": " + why;
  }
  DNNF_THROW_AS(TargetUnavailable,
                "NVRTC (the CUDA runtime compiler, needed to generate sparse GPU convolutions) could not be "
                "loaded; tried, in order:",
                tried,
                "\nInstall it (pip install nvidia-cuda-nvrtc, or the CUDA toolkit), or set DNNFUSION_NVRTC to "
                "the path of libnvrtc.so.");
}

const NvrtcApi& api() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_api) g_api = load_first(candidates_locked()).release();
  return *g_api;
}

void check(const NvrtcApi& a, nvrtcResult r, const char* what) {
  if (r != kNvrtcSuccess) DNNF_THROW("NVRTC ", what, " failed: ", a.get_error_string(r), " (", r, ")");
}

// Destroys the program on every exit path, the throwing ones included.
struct ProgramGuard {
  const NvrtcApi& a;
  nvrtcProgram* prog;
  ~ProgramGuard() { a.destroy_program(prog); }
};

std::string program_log(const NvrtcApi& a, nvrtcProgram prog) {
  size_t size = 0;
  if (a.get_log_size(prog, &size) != kNvrtcSuccess || size <= 1) return "";
  std::string log(size, '\0');
  if (a.get_log(prog, log.data()) != kNvrtcSuccess) return "";
  log.resize(size - 1);  // the size counts the terminating NUL
  return log;
}

}  // namespace

void add_nvrtc_search_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& d : g_dirs) {
    if (d == dir) return;
  }
  g_dirs.push_back(dir);
}

std::vector<std::string> nvrtc_search_candidates() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return candidates_locked();
}

std::string probe_nvrtc(const std::vector<std::string>& candidates) {
  const std::unique_ptr<NvrtcApi> a = load_first(candidates);
  dlclose(a->handle);  // the process-wide library, if the same, keeps its own reference
  return a->path;
}

NvrtcInfo nvrtc_info() {
  const NvrtcApi& a = api();
  NvrtcInfo info;
  info.path = a.path;
  check(a, a.version(&info.major, &info.minor), "nvrtcVersion");
  return info;
}

PtxCompileResult compile_cuda_to_ptx(const std::string& source, const std::string& name,
                                     const std::vector<std::string>& options) {
  const NvrtcApi& a = api();
  nvrtcProgram prog = nullptr;
  check(a, a.create_program(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr), "nvrtcCreateProgram");
  const ProgramGuard guard{a, &prog};
  std::vector<const char*> opts;
  for (const auto& o : options) opts.push_back(o.c_str());
  PtxCompileResult out;
  const auto t0 = std::chrono::steady_clock::now();
  const nvrtcResult r = a.compile_program(prog, static_cast<int>(opts.size()), opts.data());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.log = program_log(a, prog);
  if (r != kNvrtcSuccess) {
    DNNF_THROW("NVRTC could not compile ", name, " (", a.get_error_string(r), "):\n", out.log);
  }
  size_t size = 0;
  check(a, a.get_ptx_size(prog, &size), "nvrtcGetPTXSize");
  std::string ptx(size, '\0');
  check(a, a.get_ptx(prog, ptx.data()), "nvrtcGetPTX");
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  out.ptx = std::move(ptx);
  return out;
}

}  // namespace dnnfusion::cuda
