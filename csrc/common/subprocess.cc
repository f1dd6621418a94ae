// Bounded child processes (contract in subprocess.h). posix_spawn, not fork: the caller may be
// multi-threaded (glibc spawns with CLONE_VFORK and runs nothing but the file actions in the
// child), and a fork of a process holding locks in other threads is unsafe to run code in.
#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.h"

extern char** environ;

namespace dnnfusion {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Starts argv in a new process group writing into `write_end`; returns its pid.
pid_t spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env, int write_end,
                  int* spawn_errno) {
  std::vector<char*> av, ev;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (const auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, write_end, 1);
  posix_spawn_file_actions_adddup2(&fa, write_end, 2);
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
  *spawn_errno = posix_spawn(&pid, av[0], &fa, &at, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return pid;
}

// Reads what is available from *fd into r->output (bounded); closes *fd (-1) at end of file.
void drain(int* fd, ProcessResult* r, size_t max_output) {
  char buf[4096];
  while (*fd >= 0) {
    const ssize_t n = read(*fd, buf, sizeof buf);
    if (n > 0) {
      const size_t room = max_output - std::min(max_output, r->output.size());
      r->output.append(buf, std::min(static_cast<size_t>(n), room));
      r->output_truncated |= static_cast<size_t>(n) > room;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close(*fd);  // end of file (every writer gone) or a broken pipe
    *fd = -1;
  }
}

// Collects the output of `pid` until it exits or the deadline passes (then kills its group).
ProcessResult wait_with_deadline(pid_t pid, int out, double timeout_s, const std::string& label, size_t max_output) {
  ProcessResult r;
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
      DNNF_THROW("lost ", label, "'s exit status (waitpid: ", errno_text(e),
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
      if (poll(&p, 1, ms) > 0) drain(&out, &r, max_output);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 10)));
    }
  }
  drain(&out, &r, max_output);  // what it wrote before it exited; descendants still holding the pipe are not waited for
  if (out >= 0) close(out);
  return r;
}

}  // namespace

bool ProcessResult::succeeded() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env, double timeout_s,
                          const std::string& label, size_t max_output) {
  if (argv.empty()) DNNF_THROW_AS(InvalidInput, "run_process: empty argument vector for ", label);
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) DNNF_THROW("cannot create a pipe for ", label, ": ", errno_text(errno));
  int spawn_errno = 0;
  const pid_t pid = spawn_child(argv, env, pfd[1], &spawn_errno);
  close(pfd[1]);
  if (spawn_errno != 0) {
    close(pfd[0]);
    DNNF_THROW("cannot run ", label, " ", argv[0], ": ", errno_text(spawn_errno));
  }
  fcntl(pfd[0], F_SETFL, fcntl(pfd[0], F_GETFL) | O_NONBLOCK);
  return wait_with_deadline(pid, pfd[0], timeout_s, label, max_output);
}

std::vector<std::string> current_environment(const std::vector<std::string>& drop) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(drop.begin(), drop.end(), name) == drop.end()) env.push_back(entry);
  }
  return env;
}

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

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

std::string format_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

double compile_timeout_seconds() {
  const char* v = std::getenv(kCompileTimeoutVar);
  if (!v || !*v) return kDefaultCompileTimeoutS;
  char* end = nullptr;
  errno = 0;
  const double t = std::strtod(v, &end);
  if (end == v || *end != '\0' || errno == ERANGE || !std::isfinite(t) || t <= 0)
    DNNF_THROW_AS(InvalidInput, kCompileTimeoutVar, "='", v, "' is not a valid compile timeout: it must be a positive ",
                  "number of seconds (default ", format_seconds(kDefaultCompileTimeoutS), "), e.g. ", kCompileTimeoutVar,
                  "=600");
  return t;
}

}  // namespace dnnfusion
