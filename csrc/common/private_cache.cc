// See private_cache.h. The fallback is chosen once per name and process and re-checked on every
// use, so a directory that turns unsafe while we run is not used again.
#include "common/private_cache.h"

#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "common/error.h"

namespace dnnfusion {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

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
    DNNF_THROW("cannot create the cache directory ", path, " (set DNNFUSION_CACHE_DIR to a writable directory)");
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

}  // namespace

// /tmp/dnnfusion-<euid>/name, unless another user got there first (then a fresh mkdtemp
// directory, which only we can own).
std::string private_fallback_dir(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::string> chosen;
  std::lock_guard<std::mutex> lock(mu);
  std::string& c = chosen[name];
  if (!c.empty() && dir_problem(c).empty()) return c;
  const std::string root = private_tmp_root();
  mkdir(root.c_str(), 0700);
  std::string bad = root, why = dir_problem(root);
  if (why.empty()) {
    bad = root + "/" + name;
    mkdir(bad.c_str(), 0700);
    why = dir_problem(bad);
    if (why.empty()) return c = bad;
  }
  std::string tmpl = root + "-XXXXXX";
  if (!mkdtemp(tmpl.data()))
    DNNF_THROW("cannot create a private cache directory (mkdtemp ", tmpl, "): ", errno_text(errno));
  const std::string d = tmpl + "/" + name;
  if (mkdir(d.c_str(), 0700) != 0 || !dir_problem(d).empty()) DNNF_THROW("cannot create the private cache directory ", d);
  warn_once("private:" + bad, "dnnfusion: private kernel cache " + bad + " is " + why + "; compiling into " + d + " instead");
  return c = d;
}

void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(key).second) return;
  }
  std::fprintf(stderr, "%s\n", message.c_str());
}

std::string ownership_problem(const struct stat& st) {
  if (st.st_uid != geteuid()) return "owned by uid " + std::to_string(st.st_uid);
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "group- or world-writable";
  return "";
}

std::string dir_problem(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return "not accessible (" + errno_text(errno) + ")";
  if (S_ISLNK(st.st_mode)) {
    if (st.st_uid != geteuid()) return "a symbolic link owned by uid " + std::to_string(st.st_uid);
    if (stat(path.c_str(), &st) != 0) return "a dangling symbolic link";
  }
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  return ownership_problem(st);
}

std::string cache_root() {
  if (const char* d = std::getenv("DNNFUSION_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/dnnfusion";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/dnnfusion";
  // No HOME (services, cron, some sudo setups): the passwd entry still says where this user's
  // files belong. /tmp itself is shared by all users, so the last resort is a per-user directory.
  if (std::string pw = passwd_home(); !pw.empty()) return pw + "/.cache/dnnfusion";
  return private_tmp_root();
}

std::string private_cache_dir(const std::string& name) {
  const std::string root = cache_root();
  make_dirs(root);
  std::string bad = root, why = dir_problem(root);
  if (why.empty()) {
    bad = root + "/" + name;
    if (mkdir(bad.c_str(), 0700) != 0 && errno != EEXIST)
      DNNF_THROW("cannot create the cache directory ", bad, ": ", errno_text(errno),
                 " (set DNNFUSION_CACHE_DIR to a writable directory)");
    why = dir_problem(bad);
    if (why.empty()) return bad;
  }
  const std::string priv = private_fallback_dir(name);
  warn_once("dir:" + bad, "dnnfusion: kernel cache " + bad + " is " + why + "; compiling into the private directory " +
                              priv + " instead");
  return priv;
}

}  // namespace dnnfusion
