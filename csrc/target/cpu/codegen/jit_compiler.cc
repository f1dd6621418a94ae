#include "target/cpu/codegen/jit_compiler.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"

namespace dnnfusion::codegen {

namespace {

const char* kFlags = "-O3 -march=native -std=c++17 -shared -fPIC -fno-math-errno -ffp-contract=fast -fno-plt";

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool is_executable(const std::string& p) { return !p.empty() && access(p.c_str(), X_OK) == 0; }

std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && is_executable(dir + "/" + name)) return dir + "/" + name;
  return "";
}

void make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    mkdir(cur.c_str(), 0755);
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    DNNF_THROW("cannot create the kernel cache directory ", path, " (set DNNFUSION_CACHE_DIR to a writable directory)");
}

std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    *status = -1;
    return "popen failed";
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *status = pclose(p);
  return out;
}

std::string hex(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

}  // namespace

void* JitModule::symbol(const std::string& name) const {
  void* s = dlsym(handle.get(), name.c_str());
  if (!s) DNNF_THROW("generated module ", path, " lacks symbol ", name);
  return s;
}

std::string cache_dir() {
  if (const char* d = std::getenv("DNNFUSION_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/dnnfusion";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/dnnfusion";
}

std::string find_compiler() {
  if (const char* c = std::getenv("DNNFUSION_CXX"); c && *c) return on_path(c);
  for (const char* c : {"c++", "g++", "clang++"})
    if (auto p = on_path(c); !p.empty()) return p;
  return "";
}

JitModule jit_compile(const std::string& source) {
  const std::string cxx = find_compiler();
  if (cxx.empty()) {
    const char* want = std::getenv("DNNFUSION_CXX");
    DNNF_THROW_AS(CompilerNotFound, "no C++ compiler found for generating fused kernels (looked for ",
               want && *want ? std::string("$DNNFUSION_CXX=") + want : std::string("c++, g++, clang++ on PATH"),
               "); install one (apt-get install g++) or compile with options={'fusion': 'none'}");
  }
  // -march=native makes the object specific to this CPU: the key includes its features.
  const std::string key = hex(fnv1a(source, fnv1a(cxx + kFlags + kernels::isa_name(kernels::best_isa()) +
                                                   kernels::cpu_brand())));
  const std::string dir = cache_dir() + "/kernels";
  make_dirs(dir);
  JitModule m;
  m.path = dir + "/" + key + ".so";
  m.source_path = dir + "/" + key + ".cc";
  auto t0 = std::chrono::steady_clock::now();
  if (access(m.path.c_str(), R_OK) == 0) {
    m.cache_hit = true;
  } else {
    const std::string tag = "." + std::to_string(getpid()) + ".tmp";
    {
      std::ofstream f(m.source_path + tag);
      f << source;
      if (!f) DNNF_THROW("cannot write ", m.source_path, tag);
    }
    std::rename((m.source_path + tag).c_str(), m.source_path.c_str());
    const std::string cmd = "'" + cxx + "' " + kFlags + " -o '" + m.path + tag + "' '" + m.source_path + "'";
    int status = 0;
    std::string out = run_capture(cmd, &status);
    if (status != 0) {
      std::remove((m.path + tag).c_str());
      DNNF_THROW("the C++ compiler failed on generated code (", cmd, "):\n", out.substr(0, 4000));
    }
    // Atomic publish: concurrent processes compiling the same source both succeed.
    if (std::rename((m.path + tag).c_str(), m.path.c_str()) != 0) DNNF_THROW("cannot publish ", m.path);
    m.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  void* h = dlopen(m.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::string err = dlerror();
    if (m.cache_hit) {  // a truncated or foreign cache entry: drop it and rebuild once
      std::remove(m.path.c_str());
      std::fprintf(stderr, "dnnfusion: cached kernel module %s is unusable (%s); rebuilding it\n", m.path.c_str(), err.c_str());
      return jit_compile(source);
    }
    DNNF_THROW("cannot load generated module ", m.path, ": ", err);
  }
  m.handle = std::shared_ptr<void>(h, [](void* p) { dlclose(p); });
  return m;
}

}  // namespace dnnfusion::codegen
