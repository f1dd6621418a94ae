// The JIT behind generated kernels (contract in jit_compiler.h). The cache holds code this process
// will execute, so everything read from it is checked where it is opened (directories by lstat,
// shared objects through the descriptor that dlopen then reads), and the compiler is a child we
// can bound and kill: an argument vector (no shell to reinterpret a path), its own process group
// (the driver's cc1plus/as/ld die with it), a deadline.
#include "target/cpu/codegen/jit_compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "common/error.h"
#include "common/hash.h"
#include "common/private_cache.h"
#include "common/subprocess.h"
#include "kernels/cpu/cpu_features.h"

extern char** environ;

namespace dnnfusion::codegen {

namespace {

// Part of the cache key as written: changing its text invalidates every cached object.
// -fno-trapping-math: the generated loops clamp and select with ?: (erf, exp, hardswish), which
// GCC only if-converts into vector blends when comparisons may not trap; with AVX2 (no masked
// AVX-512 ops to fall back on) those loops otherwise stay scalar. No result changes: we never
// unmask floating-point exceptions. Measured on an AVX2-only Zen 4 (2 threads): bert-base's
// 1024x768x3072 GEMM with its fused GELU epilogue 130 -> 154 GFLOP/s, 158 without the epilogue.
const char* kFlags =
    "-O3 -march=native -std=c++17 -shared -fPIC -fno-math-errno -fno-trapping-math -ffp-contract=fast -fno-plt";

std::string errno_text(int e) { return std::strerror(e); }

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

// ---- loading through a checked descriptor ----

// A file opened for loading: the descriptor (if trusted) and what was checked.
struct Opened {
  enum State { Missing, Untrusted, Ok } state = Missing;
  int fd = -1;
  struct stat st {};
  std::string why;    // for Untrusted
  bool ours = false;  // owned by the effective user: ours to remove
};

// Opens `path` without following a symlink (O_NONBLOCK: a FIFO planted there must not hang the
// open) and checks the descriptor: a regular file owned by us that nobody else can write.
Opened open_checked(const std::string& path) {
  Opened o;
  o.fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (o.fd < 0) {
    const int e = errno;
    if (e == ENOENT) return o;
    o.state = Opened::Untrusted;
    struct stat ls;
    if (lstat(path.c_str(), &ls) == 0) {
      o.ours = ls.st_uid == geteuid();
      o.why = S_ISLNK(ls.st_mode) ? "a symbolic link" : "unreadable (" + errno_text(e) + ")";
    } else {
      o.why = "unreadable (" + errno_text(e) + ")";
    }
    return o;
  }
  if (fstat(o.fd, &o.st) != 0) {
    o.why = "not inspectable (" + errno_text(errno) + ")";
  } else {
    o.ours = o.st.st_uid == geteuid();
    o.why = S_ISREG(o.st.st_mode) ? ownership_problem(o.st) : "not a regular file";
  }
  if (!o.why.empty()) {
    close(o.fd);
    o.fd = -1;
    o.state = Opened::Untrusted;
    return o;
  }
  o.state = Opened::Ok;
  return o;
}

// Releases a module loaded as /proc/self/fd/<fd>. dlopen matches an already loaded object by the
// name it was opened under before it looks at any file, so while an object loaded under that name
// stays mapped, fd must stay open (otherwise the number is reused for another file and a later
// dlopen of "/proc/self/fd/<fd>" silently returns the old object). Objects glibc keeps mapped
// after dlclose (NODELETE, e.g. with STB_GNU_UNIQUE symbols) therefore keep their descriptor.
struct Unload {
  int fd;
  void operator()(void* h) const {
    dlclose(h);
    const std::string name = "/proc/self/fd/" + std::to_string(fd);
    if (void* still = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      dlclose(still);
      return;
    }
    close(fd);
  }
};

// One handle per loaded file: loading a file that is loaded already shares its handle instead of
// adding another name to glibc's object (see Unload).
class Loader {
 public:
  // Takes `fd` (checked, described by `st`). Null with *err set if dlopen refuses the file.
  std::shared_ptr<void> load(int fd, const struct stat& st, std::string* err) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = live_.begin(); it != live_.end();) it = it->second.expired() ? live_.erase(it) : std::next(it);
    const auto id = std::make_pair(st.st_dev, st.st_ino);
    if (auto it = live_.find(id); it != live_.end()) {
      if (std::shared_ptr<void> h = it->second.lock()) {
        close(fd);
        return h;
      }
    }
    const std::string name = "/proc/self/fd/" + std::to_string(fd);
    dlerror();
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      *err = e ? e : "dlopen failed";
      if (access("/proc/self/fd", F_OK) != 0) *err += " (loading generated code needs /proc mounted)";
      close(fd);
      return nullptr;
    }
    std::shared_ptr<void> p(h, Unload{fd});
    live_[id] = p;
    return p;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<void>> live_;
};

Loader& loader() {
  static Loader* l = new Loader;  // never destroyed: handles may be released during exit
  return *l;
}

// The first of `names` that `h` does not export, "" if none.
std::string missing_symbol(void* h, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (!dlsym(h, n.c_str())) return n;
  return "";
}

// Writes a new file (0600). O_EXCL: nothing that sits at the name is written through; what is
// there (in a directory only we can write: a leftover of a crashed process with our pid) goes.
void write_new_file(const std::string& path, const std::string& data) {
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) DNNF_THROW("cannot write ", path, ": ", errno_text(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      close(fd);
      unlink(path.c_str());
      DNNF_THROW("cannot write ", path, ": ", errno_text(e));
    }
    done += static_cast<size_t>(w);
  }
  close(fd);
}

// Compiles `source` into dir/<key>.so, checks and loads the output through its descriptor, and
// publishes it by rename. Throws on every failure, leaving no temporary behind.
JitModule build(const std::string& cxx, const std::string& source, const std::string& dir, const std::string& key,
                const std::vector<std::string>& required, double timeout_s) {
  JitModule m;
  m.path = dir + "/" + key + ".so";
  m.source_path = dir + "/" + key + ".cc";
  const auto t0 = std::chrono::steady_clock::now();
  static std::atomic<unsigned> counter{0};
  // pid + counter: other processes and other threads of this one build the same key side by side.
  const std::string tag = "." + std::to_string(getpid()) + "." + std::to_string(counter++) + ".tmp";
  write_new_file(m.source_path + tag, source);
  if (std::rename((m.source_path + tag).c_str(), m.source_path.c_str()) != 0) {
    const int e = errno;
    unlink((m.source_path + tag).c_str());
    DNNF_THROW("cannot write ", m.source_path, ": ", errno_text(e));
  }
  const std::string out = m.path + tag;
  // The compiler's own temporaries (cc1plus's assembly, collect2's files) go to a directory that is
  // removed afterwards, also when the compiler was killed and could not clean up.
  const std::string tmpdir = dir + "/" + key + tag + "d";
  std::error_code ec;
  std::filesystem::remove_all(tmpdir, ec);  // a crashed process's leftover under the same pid
  if (mkdir(tmpdir.c_str(), 0700) != 0) DNNF_THROW("cannot create ", tmpdir, ": ", errno_text(errno));
  std::vector<std::string> argv{cxx};
  {
    std::istringstream flags(kFlags);
    for (std::string f; flags >> f;) argv.push_back(f);
  }
  argv.push_back("-o");
  argv.push_back(out);
  // A relative cache path starting with '-' must stay an input file, not become an option.
  argv.push_back(m.source_path[0] == '/' ? m.source_path : "./" + m.source_path);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0) env.emplace_back(*e);
  env.push_back("TMPDIR=" + tmpdir);
  const std::string cmd = display_command(argv);

  ProcessResult r;
  auto cleanup = [&] {
    std::error_code ec;
    std::filesystem::remove_all(tmpdir, ec);
  };
  try {
    r = run_process(argv, env, timeout_s, "the C++ compiler");
  } catch (...) {
    cleanup();
    unlink(out.c_str());
    throw;
  }
  cleanup();
  auto fail = [&](auto&&... parts) {
    unlink(out.c_str());
    DNNF_THROW(parts...);
  };
  if (r.timed_out) {
    unlink(out.c_str());
    DNNF_THROW_AS(CompilerTimeout, "the C++ compiler ", cxx, " did not finish compiling generated code within ",
                  format_seconds(timeout_s), " s and was killed (", cmd, "); raise the limit with ", kCompileTimeoutVar,
                  "=<seconds> (now ", format_seconds(timeout_s), ", default ", format_seconds(kDefaultCompileTimeoutS), ")",
                  r.output.empty() ? "" : ":\n", r.output.substr(0, 4000));
  }
  if (WIFSIGNALED(r.status)) {
    const int sig = WTERMSIG(r.status);
    const char* name = strsignal(sig);
    fail("the C++ compiler ", cxx, " was killed by signal ", sig, " (", name ? name : "?",
         ") while compiling generated code (", cmd, ")", r.output.empty() ? "" : ":\n", r.output.substr(0, 4000));
  }
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    fail("the C++ compiler failed on generated code (", cmd, "):\n", r.output.substr(0, 4000));

  // Check the descriptor, then load through it: the file loaded is the file checked.
  const int fd = open(out.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("the C++ compiler wrote no usable output ", out, " (", errno_text(errno), "; ", cmd, ")");
  // The compiler created it with the umask's mode (group-writable under umask 002).
  fchmod(fd, 0700);
  struct stat st;
  std::string why = fstat(fd, &st) != 0 ? "not inspectable" : !S_ISREG(st.st_mode) ? "not a regular file" : ownership_problem(st);
  if (!why.empty()) {
    close(fd);
    fail("the compiled module ", out, " is ", why, "; not loading it");
  }
  std::string err;
  std::shared_ptr<void> h = loader().load(fd, st, &err);
  if (!h) fail("cannot load generated module ", m.path, ": ", err);
  if (const std::string miss = missing_symbol(h.get(), required); !miss.empty()) {
    h.reset();
    fail("generated module ", m.path, " lacks the required symbol ", miss, " (the generated source does not define it)");
  }
  // Atomic publish: concurrent processes compiling the same source both succeed.
  if (std::rename(out.c_str(), m.path.c_str()) != 0) {
    const int e = errno;
    h.reset();
    fail("cannot publish ", m.path, ": ", errno_text(e));
  }
  m.handle = std::move(h);
  m.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace

void* JitModule::symbol(const std::string& name) const {
  void* s = dlsym(handle.get(), name.c_str());
  if (!s) DNNF_THROW("generated module ", path, " lacks symbol ", name);
  return s;
}

std::string cache_dir() { return cache_root(); }

std::string kernel_cache_dir() { return private_cache_dir("kernels"); }

std::string find_compiler() {
  if (const char* c = std::getenv("DNNFUSION_CXX"); c && *c) return on_path(c);
  for (const char* c : {"c++", "g++", "clang++"})
    if (auto p = on_path(c); !p.empty()) return p;
  return "";
}

double compile_timeout_seconds() { return dnnfusion::compile_timeout_seconds(); }

JitModule jit_compile(const std::string& source, const std::vector<std::string>& required_symbols) {
  const std::string cxx = find_compiler();
  if (cxx.empty()) {
    const char* want = std::getenv("DNNFUSION_CXX");
    DNNF_THROW_AS(CompilerNotFound, "no C++ compiler found for generating fused kernels (looked for ",
               want && *want ? std::string("$DNNFUSION_CXX=") + want : std::string("c++, g++, clang++ on PATH"),
               "); install one (apt-get install g++) or compile with options={'fusion': 'none'}");
  }
  // Read before the cache is consulted: a malformed value is reported on every call, not only
  // on the first cache miss.
  const double timeout_s = compile_timeout_seconds();
  // -march=native makes the object specific to this CPU: the key includes its features.
  const std::string key = hex64(fnv1a(source, fnv1a(cxx + kFlags + kernels::isa_name(kernels::best_isa()) +
                                                   kernels::cpu_brand())));
  std::string dir = kernel_cache_dir();
  // Two rounds at most: the configured directory, then the private one when the cached file there
  // belongs to someone else (and so is not ours to remove).
  for (int round = 0; round < 2; ++round) {
    const std::string path = dir + "/" + key + ".so";
    Opened o = open_checked(path);
    if (o.state == Opened::Missing) return build(cxx, source, dir, key, required_symbols, timeout_s);
    if (o.state == Opened::Untrusted) {
      if (o.ours) {
        warn_once("file:" + path + ":" + o.why,
                  "dnnfusion: cached kernel module " + path + " is " + o.why + "; not loading it, rebuilding it");
        unlink(path.c_str());
        return build(cxx, source, dir, key, required_symbols, timeout_s);
      }
      const std::string priv = private_fallback_dir("kernels");
      if (priv == dir) DNNF_THROW("cached kernel module ", path, " is ", o.why, "; not loading it (remove it)");
      warn_once("file:" + path + ":" + o.why, "dnnfusion: cached kernel module " + path + " is " + o.why +
                                    "; not loading it, compiling into the private directory " + priv + " instead");
      dir = priv;
      continue;
    }
    std::string err;
    std::shared_ptr<void> h = loader().load(o.fd, o.st, &err);
    std::string problem;
    if (!h) problem = "unusable (" + err + ")";
    else if (std::string miss = missing_symbol(h.get(), required_symbols); !miss.empty())
      problem = "missing the required symbol " + miss;
    if (problem.empty()) {
      JitModule m;
      m.handle = std::move(h);
      m.path = path;
      m.source_path = dir + "/" + key + ".cc";
      m.cache_hit = true;
      return m;
    }
    h.reset();
    // A truncated or stale entry (or a hash collision): drop it and rebuild once.
    unlink(path.c_str());
    warn_once("file:" + path + ":" + problem,
              "dnnfusion: cached kernel module " + path + " is " + problem + "; rebuilding it");
    return build(cxx, source, dir, key, required_symbols, timeout_s);
  }
  DNNF_THROW("no usable kernel cache directory for ", key, " (last tried ", dir, ")");
}

}  // namespace dnnfusion::codegen
