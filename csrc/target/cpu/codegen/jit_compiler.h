// Turns generated C++ into loaded machine code: compiles a translation unit with the system
// compiler (-O3 -march=native, shared object), caches the result on disk under a hash of the
// source, the compiler and the CPU, and loads it with dlopen. A second compile of the same source
// in a new process finds the cached object and invokes no compiler.
// Precondition: none. Postcondition of jit_compile: the returned module stays loaded while any copy
// of its handle lives; a missing or failing compiler is a dnnfusion::Error naming the compiler,
// the command and (for failures) the compiler's output.
#pragma once
#include <memory>
#include <string>

namespace dnnfusion::codegen {

struct JitModule {
  std::shared_ptr<void> handle;  // dlopen handle, dlclose'd with the last copy
  std::string path;              // the cached shared object
  std::string source_path;       // the cached source beside it (for debugging)
  bool cache_hit = false;
  double compile_ms = 0;         // 0 on a cache hit
  void* symbol(const std::string& name) const;  // throws if absent
};

// $DNNFUSION_CACHE_DIR, else $XDG_CACHE_HOME/dnnfusion, else ~/.cache/dnnfusion.
std::string cache_dir();
// $DNNFUSION_CXX, else the first of c++, g++, clang++ found on PATH; "" if none.
std::string find_compiler();

JitModule jit_compile(const std::string& source);

}  // namespace dnnfusion::codegen
