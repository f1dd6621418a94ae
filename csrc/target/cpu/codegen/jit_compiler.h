// Turns generated C++ into loaded machine code: compiles a translation unit with the system
// compiler (-O3 -march=native, shared object), caches the result on disk under a hash of the
// source, the compiler and the CPU, and loads it with dlopen. A second compile of the same source
// in a new process finds the cached object and invokes no compiler.
//
// Loading a cached object runs its code with the caller's rights, so the cache is treated as
// untrusted input unless it is private:
//  - the compiler runs from an argument vector (no shell: a cache path with quotes, spaces or
//    `$(...)` is only a path), in its own process group, bounded by $DNNFUSION_COMPILE_TIMEOUT;
//  - the cache root and its `kernels` directory are used only if they are directories owned by
//    the effective user and not group- or world-writable; otherwise one warning per directory and
//    process goes to stderr and the kernels go to a private per-user directory instead
//    (/tmp/dnnfusion-<euid>/kernels if that passes the same check, else a fresh mkdtemp one);
//  - directories the JIT creates are 0700, its files 0600 (the shared object 0700);
//  - a shared object is loaded only through a descriptor that was checked (regular file, owned by
//    the effective user, not group/world-writable, opened without following a symlink): dlopen
//    reads /proc/self/fd/<fd>, so the file checked is the file loaded.
//
// Precondition: /proc is mounted (the descriptor-based load needs it). Postconditions of
// jit_compile: the returned module stays loaded while any copy of its handle lives and resolves
// every required symbol; the object is published by atomic rename (two processes compiling the
// same source both succeed); a missing compiler is CompilerNotFound, one that outlives the timeout
// is CompilerTimeout (the whole process group killed and reaped, temporaries removed), a failing
// or signalled compiler is a dnnfusion::Error naming the compiler, the command and its output.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace dnnfusion::codegen {

struct JitModule {
  std::shared_ptr<void> handle;  // dlopen handle, dlclose'd with the last copy
  std::string path;              // the cached shared object
  std::string source_path;       // the cached source beside it (for debugging)
  bool cache_hit = false;
  double compile_ms = 0;         // 0 on a cache hit
  void* symbol(const std::string& name) const;  // throws if absent
};

// The preferred cache root, before the trust check: $DNNFUSION_CACHE_DIR, else
// $XDG_CACHE_HOME/dnnfusion, else $HOME/.cache/dnnfusion, else (HOME unset or empty) the passwd
// entry's home directory + /.cache/dnnfusion, else /tmp/dnnfusion-<euid>.
std::string cache_dir();
// The directory jit_compile puts shared objects in now: cache_dir()/kernels if it and cache_dir()
// pass the trust check above, else the private fallback (warning once on stderr). Creates it.
std::string kernel_cache_dir();
// $DNNFUSION_CXX, else the first of c++, g++, clang++ found on PATH; "" if none.
std::string find_compiler();
// $DNNFUSION_COMPILE_TIMEOUT in seconds (default 300); a value that is not a positive number is
// an InvalidInput error naming the variable.
double compile_timeout_seconds();

// Compiles (or finds in the cache) `source` and loads it. A cached object that lacks one of
// `required_symbols` is removed and rebuilt once; a fresh one that lacks one is an Error.
JitModule jit_compile(const std::string& source, const std::vector<std::string>& required_symbols = {});

}  // namespace dnnfusion::codegen
