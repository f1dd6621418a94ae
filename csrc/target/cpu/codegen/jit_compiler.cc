// The JIT behind generated kernels (contract in jit_compiler.h). The cache holds code this process
// will execute, so everything read from it is checked where it is opened (directories by lstat,
// shared objects through the descriptor that dlopen then reads), and the compiler is a child we
// can bound and kill: an argument vector (no shell to reinterpret a path), its own process group
// (the driver's cc1plus/as/ld die with it), a deadline.
#include "target/cpu/codegen/jit_compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
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
#include <thread>
#include <utility>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"

extern char** environ;

namespace dnnfusion::codegen {

namespace {

// Part of the cache key as written: changing its text invalidates every cached object.
const char* kFlags = "-O3 -march=native -std=c++17 -shared -fPIC -fno-math-errno -ffp-contract=fast -fno-plt";
constexpr double kDefaultTimeoutS = 300;
constexpr const char* kTimeoutVar = "DNNFUSION_COMPILE_TIMEOUT";
// Diagnostics only: a compiler stuck printing errors must not grow this process without bound.
constexpr size_t kMaxCapturedOutput = size_t{1} << 20;

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

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

// Warnings about one directory or file would otherwise repeat on every compile of the process.
void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(key).second) return;
  }
  std::fprintf(stderr, "%s\n", message.c_str());
}

// Why a file or directory with this status may have been written by someone else; "" if not.
std::string ownership_problem(const struct stat& st) {
  if (st.st_uid != geteuid()) return "owned by uid " + std::to_string(st.st_uid);
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "group- or world-writable";
  return "";
}

// Why directory `path` may not hold code this process loads; "" if it may.
std::string dir_problem(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return "not accessible (" + errno_text(errno) + ")";
  if (S_ISLNK(st.st_mode)) {
    // A link the user made (~/.cache moved to another disk) is theirs to make; one planted by
    // another user is not, whatever it points to.
    if (st.st_uid != geteuid()) return "a symbolic link owned by uid " + std::to_string(st.st_uid);
    if (stat(path.c_str(), &st) != 0) return "a dangling symbolic link";
  }
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  return ownership_problem(st);
}

// mkdir -p with 0700 for what it creates (existing components keep their modes: the trust check
// decides about them).
void make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    mkdir(cur.c_str(), 0700);
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    DNNF_THROW("cannot create the kernel cache directory ", path, " (set DNNFUSION_CACHE_DIR to a writable directory)");
}

std::string private_tmp_root() { return "/tmp/dnnfusion-" + std::to_string(geteuid()); }

// The passwd entry's home directory of the effective user, "" if there is none.
std::string passwd_home() {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  for (;;) {
    struct passwd pw, *res = nullptr;
    const int rc = getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &res);
    if (rc == ERANGE && buf.size() < (size_t{1} << 20)) {
      buf.resize(buf.size() * 2);
      continue;
    }
    if (rc != 0 || !res || !res->pw_dir || res->pw_dir[0] != '/') return "";
    return res->pw_dir;
  }
}

// Where kernels go when the configured cache cannot be trusted: /tmp/dnnfusion-<euid>/kernels,
// unless another user got there first (then a fresh mkdtemp directory, which only we can own).
// Chosen once per process and re-checked on every use.
std::string private_kernel_dir() {
  static std::mutex mu;
  static std::string chosen;
  std::lock_guard<std::mutex> lock(mu);
  if (!chosen.empty() && dir_problem(chosen).empty()) return chosen;
  const std::string root = private_tmp_root();
  mkdir(root.c_str(), 0700);
  std::string bad = root, why = dir_problem(root);
  if (why.empty()) {
    bad = root + "/kernels";
    mkdir(bad.c_str(), 0700);
    why = dir_problem(bad);
    if (why.empty()) return chosen = bad;
  }
  std::string tmpl = root + "-XXXXXX";
  if (!mkdtemp(tmpl.data()))
    DNNF_THROW("cannot create a private kernel cache directory (mkdtemp ", tmpl, "): ", errno_text(errno));
  const std::string k = tmpl + "/kernels";
  if (mkdir(k.c_str(), 0700) != 0 || !dir_problem(k).empty())
    DNNF_THROW("cannot create the private kernel cache directory ", k);
  warn_once("private:" + bad, "dnnfusion: private kernel cache " + bad + " is " + why + "; compiling into " + k + " instead");
  return chosen = k;
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

// ---- running the compiler ----

struct ProcessResult {
  int status = 0;
  bool timed_out = false;
  std::string output;  // stdout and stderr interleaved, at most kMaxCapturedOutput bytes
};

// For messages only: the command as one could paste it into a shell.
std::string display_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=+,:") == std::string::npos;
    if (plain) {
      s += a;
      continue;
    }
    s += '\'';
    for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += '\'';
  }
  return s;
}

// Runs argv[0] (a path) with `env` in a new process group, stdin from /dev/null, stdout+stderr
// captured. posix_spawn, not fork: the caller may be multi-threaded (glibc spawns with
// CLONE_VFORK and runs nothing but the file actions in the child). On the deadline the whole
// group is SIGKILLed and the child reaped before this returns.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env, double timeout_s) {
  std::vector<char*> av, ev;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (const auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);

  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) DNNF_THROW("cannot create a pipe for the C++ compiler: ", errno_text(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  // Python ignores SIGPIPE; ignored dispositions survive exec, handled ones do not need this.
  for (int s : {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGALRM, SIGCHLD, SIGUSR1, SIGUSR2, SIGXFSZ, SIGXCPU})
    sigaddset(&dflt, s);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &dflt);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, av[0], &fa, &at, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(pfd[1]);
  if (rc != 0) {
    close(pfd[0]);
    DNNF_THROW("cannot run the C++ compiler ", argv[0], ": ", errno_text(rc));
  }
  int out = pfd[0];
  fcntl(out, F_SETFL, fcntl(out, F_GETFL) | O_NONBLOCK);

  ProcessResult r;
  auto drain = [&] {
    char buf[4096];
    while (out >= 0) {
      const ssize_t n = read(out, buf, sizeof buf);
      if (n > 0) {
        if (r.output.size() < kMaxCapturedOutput)
          r.output.append(buf, std::min(static_cast<size_t>(n), kMaxCapturedOutput - r.output.size()));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      close(out);  // end of file (every writer gone) or a broken pipe
      out = -1;
    }
  };
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(timeout_s, 1e9)));
  for (;;) {
    int st = 0;
    const pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) {
      r.status = st;
      break;
    }
    if (w < 0 && errno != EINTR) {
      const int e = errno;
      if (out >= 0) close(out);
      DNNF_THROW("lost the C++ compiler's exit status (waitpid: ", errno_text(e),
                 "; a process that ignores SIGCHLD cannot wait for its children)");
    }
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      r.timed_out = true;
      // The group, not the pid: the driver's cc1plus/as/ld (or a script's children) die too. The
      // unreaped leader keeps the group id from being reused before the kill lands.
      kill(-pid, SIGKILL);
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      r.status = st;
      break;
    }
    const int ms = static_cast<int>(
        std::clamp<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1, 1, 100));
    if (out >= 0) {
      pollfd p{out, POLLIN, 0};
      if (poll(&p, 1, ms) > 0) drain();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 10)));
    }
  }
  drain();  // what the compiler wrote before it exited; descendants still holding the pipe are not waited for
  if (out >= 0) close(out);
  return r;
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

std::string format_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
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
    r = run_process(argv, env, timeout_s);
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
                  format_seconds(timeout_s), " s and was killed (", cmd, "); raise the limit with ", kTimeoutVar,
                  "=<seconds> (now ", format_seconds(timeout_s), ", default ", format_seconds(kDefaultTimeoutS), ")",
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

std::string cache_dir() {
  if (const char* d = std::getenv("DNNFUSION_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/dnnfusion";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/dnnfusion";
  // No HOME (services, cron, some sudo setups): the passwd entry still says where this user's
  // files belong. /tmp itself is shared by all users, so the last resort is a per-user directory.
  if (std::string pw = passwd_home(); !pw.empty()) return pw + "/.cache/dnnfusion";
  return private_tmp_root();
}

std::string kernel_cache_dir() {
  const std::string root = cache_dir();
  make_dirs(root);
  std::string bad = root, why = dir_problem(root);
  if (why.empty()) {
    bad = root + "/kernels";
    if (mkdir(bad.c_str(), 0700) != 0 && errno != EEXIST)
      DNNF_THROW("cannot create the kernel cache directory ", bad, ": ", errno_text(errno),
                 " (set DNNFUSION_CACHE_DIR to a writable directory)");
    why = dir_problem(bad);
    if (why.empty()) return bad;
  }
  const std::string priv = private_kernel_dir();
  warn_once("dir:" + bad, "dnnfusion: kernel cache " + bad + " is " + why + "; compiling into the private directory " +
                              priv + " instead");
  return priv;
}

std::string find_compiler() {
  if (const char* c = std::getenv("DNNFUSION_CXX"); c && *c) return on_path(c);
  for (const char* c : {"c++", "g++", "clang++"})
    if (auto p = on_path(c); !p.empty()) return p;
  return "";
}

double compile_timeout_seconds() {
  const char* v = std::getenv(kTimeoutVar);
  if (!v || !*v) return kDefaultTimeoutS;
  char* end = nullptr;
  errno = 0;
  const double t = std::strtod(v, &end);
  if (end == v || *end != '\0' || errno == ERANGE || !std::isfinite(t) || t <= 0)
    DNNF_THROW_AS(InvalidInput, kTimeoutVar, "='", v, "' is not a valid compile timeout: it must be a positive number of ",
                  "seconds (default ", format_seconds(kDefaultTimeoutS), "), e.g. ", kTimeoutVar, "=600");
  return t;
}

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
  const std::string key = hex(fnv1a(source, fnv1a(cxx + kFlags + kernels::isa_name(kernels::best_isa()) +
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
      const std::string priv = private_kernel_dir();
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
