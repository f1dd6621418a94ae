// The JIT's defences (jit_compiler.h): a compiler that hangs, fails or dies is a clear error and
// leaves no process or temporary behind; a cache path is only a path (no shell); a cache
// directory or cached file someone else could have written is not used; a cached module missing a
// required symbol is rebuilt. Also the size/type limits on the on-disk databases
// (keyed_file_store.h). Each test works in its own temporary directory and restores the
// environment variables it sets; the positive cases use the real system compiler.
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/keyed_file_store.h"
#include "target/cpu/codegen/jit_compiler.h"
#include "test_env_util.h"

namespace fs = std::filesystem;
using dnnfusion::CompilerTimeout;
using dnnfusion::Error;
using dnnfusion::KeyedFileStore;
using dnnfusion::test_util::ScopedEnv;
namespace codegen = dnnfusion::codegen;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// This file's temporary directories: /tmp/dnnf_jit_test_XXXXXX (mode 0700, ours).
struct TempDir : dnnfusion::test_util::TempDir {
  TempDir() : dnnfusion::test_util::TempDir("/tmp/dnnf_jit_test_") {}
};

// Module files compiled into the shared private directory are removed with the object.
struct RemoveModuleFiles {
  std::vector<std::string> paths;
  void add(const codegen::JitModule& m) {
    paths.push_back(m.path);
    paths.push_back(m.source_path);
  }
  ~RemoveModuleFiles() {
    for (const auto& p : paths) ::unlink(p.c_str());
  }
};

void write_file(const fs::path& p, const std::string& text, mode_t mode) {
  {
    std::ofstream f(p, std::ios::binary);
    f << text;
  }
  ::chmod(p.c_str(), mode);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A source no earlier run has cached: the cache key is a hash of the text.
std::string fresh_source(const std::string& body) {
  static std::atomic<int> n{0};
  return "// " + std::to_string(::getpid()) + "." +
         std::to_string(Clock::now().time_since_epoch().count()) + "." + std::to_string(n++) + "\n" + body;
}

const char* kExportsF = "extern \"C\" int f() { return 1; }\n";
const char* kExportsFG = "extern \"C\" int f() { return 1; }\nextern \"C\" int g() { return 2; }\n";

int call_int(const codegen::JitModule& m, const std::string& name) {
  return reinterpret_cast<int (*)()>(m.symbol(name))();
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The directory holding `path` could only have been written by us.
void expect_private_dir(const std::string& dir) {
  struct stat st;
  ASSERT_EQ(::lstat(dir.c_str(), &st), 0) << dir;
  EXPECT_TRUE(S_ISDIR(st.st_mode)) << dir;
  EXPECT_EQ(st.st_uid, ::geteuid()) << dir;
  EXPECT_EQ(st.st_mode & 022, 0u) << dir;
}

// No process with this pid, or only its zombie (an orphan waiting for init to reap it).
bool process_gone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return true;
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

bool wait_gone(pid_t pid, double seconds) {
  const auto t0 = Clock::now();
  while (!process_gone(pid)) {
    if (seconds_since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Names in `dir` that look like a build's leftovers (temporary output or scratch directory).
std::vector<std::string> temporaries_in(const fs::path& dir) {
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) left.push_back(name);
  }
  return left;
}

}  // namespace

TEST(JitCompiler, HangingCompilerIsKilledWithItsProcessGroupAtTheTimeout) {
  TempDir t;
  const fs::path script = t.path() / "hang.sh";
  // The shell's child must die too: only killing the process group reaches it.
  write_file(script,
             "#!/bin/sh\necho $$ > '" + (t.path() / "sh.pid").string() + "'\nsleep 100 &\necho $! > '" +
                 (t.path() / "sleep.pid").string() + "'\nwait\n",
             0700);
  ScopedEnv cxx("DNNFUSION_CXX", script.string());
  ScopedEnv timeout("DNNFUSION_COMPILE_TIMEOUT", "1");
  ScopedEnv cache("DNNFUSION_CACHE_DIR", (t.path() / "cache").string());
  const auto t0 = Clock::now();
  try {
    codegen::jit_compile(fresh_source(kExportsF));
    ADD_FAILURE() << "expected CompilerTimeout";
  } catch (const CompilerTimeout& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(script.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("within 1 s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("DNNFUSION_COMPILE_TIMEOUT"), std::string::npos) << msg;
  }
  EXPECT_LT(seconds_since(t0), 5.0);
  for (const char* f : {"sh.pid", "sleep.pid"}) {
    const std::string pid = slurp(t.path() / f);
    ASSERT_FALSE(pid.empty()) << f;
    EXPECT_TRUE(wait_gone(static_cast<pid_t>(std::stol(pid)), 3.0)) << f << " " << pid << " still runs";
  }
  EXPECT_EQ(temporaries_in(t.path() / "cache" / "kernels"), std::vector<std::string>{});
}

TEST(JitCompiler, FailingCompilerIsAnErrorCarryingItsOutput) {
  TempDir t;
  const fs::path script = t.path() / "fail.sh";
  write_file(script, "#!/bin/sh\necho 'fake-cxx: out of cheese' >&2\nexit 1\n", 0700);
  ScopedEnv cxx("DNNFUSION_CXX", script.string());
  ScopedEnv timeout("DNNFUSION_COMPILE_TIMEOUT", nullptr);
  ScopedEnv cache("DNNFUSION_CACHE_DIR", (t.path() / "cache").string());
  try {
    codegen::jit_compile(fresh_source(kExportsF));
    ADD_FAILURE() << "expected an error";
  } catch (const CompilerTimeout& e) {
    ADD_FAILURE() << "not a timeout: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fake-cxx: out of cheese"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(temporaries_in(t.path() / "cache" / "kernels"), std::vector<std::string>{});
}

TEST(JitCompiler, CompilerKilledBySignalIsAClearError) {
  TempDir t;
  const fs::path script = t.path() / "crash.sh";
  write_file(script, "#!/bin/sh\nkill -KILL $$\nsleep 5\n", 0700);
  ScopedEnv cxx("DNNFUSION_CXX", script.string());
  ScopedEnv cache("DNNFUSION_CACHE_DIR", (t.path() / "cache").string());
  try {
    codegen::jit_compile(fresh_source(kExportsF));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("killed by signal " + std::to_string(SIGKILL)), std::string::npos) << e.what();
  }
}

TEST(JitCompiler, MalformedTimeoutIsAnErrorNamingTheVariable) {
  TempDir t;
  ScopedEnv cache("DNNFUSION_CACHE_DIR", (t.path() / "cache").string());
  {
    ScopedEnv unset("DNNFUSION_COMPILE_TIMEOUT", nullptr);
    EXPECT_EQ(codegen::compile_timeout_seconds(), 300);
  }
  {
    ScopedEnv ok("DNNFUSION_COMPILE_TIMEOUT", "2.5");
    EXPECT_EQ(codegen::compile_timeout_seconds(), 2.5);
  }
  for (const char* bad : {"abc", "0", "-5", "10s", "nan", "inf", " "}) {
    ScopedEnv timeout("DNNFUSION_COMPILE_TIMEOUT", bad);
    try {
      codegen::jit_compile(fresh_source(kExportsF));
      ADD_FAILURE() << "expected an error for '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("DNNFUSION_COMPILE_TIMEOUT"), std::string::npos) << msg;
      EXPECT_NE(msg.find("positive number of seconds"), std::string::npos) << msg;
    }
  }
}

TEST(JitCompiler, ShellMetacharactersInTheCachePathExecuteNothing) {
  TempDir t;
  const std::string pwned = (t.path() / "pwned").string();
  const std::string dir = t.path().string() + "/it's a $(touch " + pwned + ") `touch " + pwned + "2` dir";
  ScopedEnv cache("DNNFUSION_CACHE_DIR", dir);
  ScopedEnv cxx("DNNFUSION_CXX", nullptr);
  const codegen::JitModule m = codegen::jit_compile(fresh_source(kExportsF), {"f"});
  EXPECT_FALSE(m.cache_hit);
  EXPECT_EQ(call_int(m, "f"), 1);
  EXPECT_TRUE(starts_with(m.path, dir + "/kernels/")) << m.path;
  EXPECT_FALSE(fs::exists(pwned));
  EXPECT_FALSE(fs::exists(pwned + "2"));
}

TEST(JitCompiler, CacheHitRunsNoCompilerAndTheCacheIsPrivate) {
  TempDir t;
  const std::string dir = (t.path() / "a" / "b").string();
  ScopedEnv cache("DNNFUSION_CACHE_DIR", dir);
  // The compiler's path is part of the cache key: a wrapper that is later made to fail.
  const fs::path wrapper = t.path() / "cxx.sh";
  write_file(wrapper, "#!/bin/sh\nexec c++ \"$@\"\n", 0700);
  ScopedEnv cxx("DNNFUSION_CXX", wrapper.string());
  const std::string src = fresh_source(kExportsF);
  std::string path;
  {
    const codegen::JitModule a = codegen::jit_compile(src, {"f"});
    EXPECT_FALSE(a.cache_hit);
    EXPECT_GT(a.compile_ms, 0);
    path = a.path;
    // Created directories 0700, source 0600, shared object 0700 (whatever the umask).
    for (const std::string& d : {(t.path() / "a").string(), dir, dir + "/kernels"})
      EXPECT_EQ(fs::status(d).permissions(), fs::perms::owner_all) << d;
    EXPECT_EQ(fs::status(a.source_path).permissions(), fs::perms::owner_read | fs::perms::owner_write);
    EXPECT_EQ(fs::status(a.path).permissions(), fs::perms::owner_all);
  }
  const fs::path ran = t.path() / "ran";
  write_file(wrapper, "#!/bin/sh\necho ran > '" + ran.string() + "'\nexit 1\n", 0700);
  const codegen::JitModule b = codegen::jit_compile(src, {"f"});
  EXPECT_TRUE(b.cache_hit);
  EXPECT_EQ(b.path, path);
  EXPECT_EQ(b.compile_ms, 0);
  EXPECT_EQ(call_int(b, "f"), 1);
  EXPECT_FALSE(fs::exists(ran));
  EXPECT_EQ(temporaries_in(dir + "/kernels"), std::vector<std::string>{});
}

TEST(JitCompiler, TwoThreadsCompilingTheSameSourceBothSucceed) {
  TempDir t;
  ScopedEnv cache("DNNFUSION_CACHE_DIR", t.path().string());
  ScopedEnv cxx("DNNFUSION_CXX", nullptr);
  const std::string src = fresh_source(kExportsF);
  codegen::JitModule m[2];
  std::string err[2];
  std::thread th[2];
  for (int i = 0; i < 2; ++i)
    th[i] = std::thread([&, i] {
      try {
        m[i] = codegen::jit_compile(src, {"f"});
      } catch (const std::exception& e) {
        err[i] = e.what();
      }
    });
  for (auto& x : th) x.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(err[i], "");
    if (m[i].handle) {
      EXPECT_EQ(call_int(m[i], "f"), 1);
    }
  }
  EXPECT_EQ(m[0].path, m[1].path);
  EXPECT_EQ(temporaries_in(t.path() / "kernels"), std::vector<std::string>{});
}

// Modules are loaded through /proc/self/fd/<n>, and dlopen returns an already loaded object whose
// name matches before it looks at the file: while one module is loaded, another must still load
// as itself, and releasing every module closes every descriptor.
TEST(JitCompiler, ModulesLoadedSideBySideStayDistinctAndReleaseTheirDescriptors) {
  TempDir t;
  ScopedEnv cache("DNNFUSION_CACHE_DIR", t.path().string());
  ScopedEnv cxx("DNNFUSION_CXX", nullptr);
  auto open_fds = [] {
    size_t n = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc/self/fd", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) ++n;
    return n;
  };
  const std::string src_x = fresh_source("extern \"C\" int x() { return 10; }\n");
  const std::string src_y = fresh_source("extern \"C\" int y() { return 20; }\n");
  const std::string src_z = fresh_source("extern \"C\" int z() { return 30; }\n");
  codegen::jit_compile(src_x, {"x"});  // compiled and released: the next loads are cache hits
  codegen::jit_compile(src_y, {"y"});
  const size_t before = open_fds();
  {
    const codegen::JitModule mx = codegen::jit_compile(src_x, {"x"});
    const codegen::JitModule my = codegen::jit_compile(src_y, {"y"});
    EXPECT_TRUE(mx.cache_hit);
    EXPECT_TRUE(my.cache_hit);
    EXPECT_NE(mx.handle.get(), my.handle.get());
    EXPECT_EQ(call_int(mx, "x"), 10);
    EXPECT_EQ(call_int(my, "y"), 20);
    {
      const codegen::JitModule mz = codegen::jit_compile(src_z, {"z"});
      EXPECT_EQ(call_int(mz, "z"), 30);
    }
    // The same file loaded twice shares one handle.
    EXPECT_EQ(codegen::jit_compile(src_x, {"x"}).handle.get(), mx.handle.get());
  }
  EXPECT_EQ(open_fds(), before);
}

TEST(JitCompiler, GroupOrWorldWritableCacheDirIsNotUsed) {
  TempDir t;
  ScopedEnv cxx("DNNFUSION_CXX", nullptr);
  RemoveModuleFiles cleanup;
  // The root itself, then (with a private root) its kernels directory.
  const fs::path shared = t.path() / "shared";
  fs::create_directories(shared);
  ::chmod(shared.c_str(), 0777);
  const fs::path root = t.path() / "root";
  fs::create_directories(root / "kernels");
  ::chmod(root.c_str(), 0700);
  ::chmod((root / "kernels").c_str(), 0770);
  for (const std::string& bad : {shared.string(), (root / "kernels").string()}) {
    ScopedEnv cache("DNNFUSION_CACHE_DIR", bad == shared.string() ? shared.string() : root.string());
    ::testing::internal::CaptureStderr();
    const codegen::JitModule m = codegen::jit_compile(fresh_source(kExportsF), {"f"});
    const std::string err = ::testing::internal::GetCapturedStderr();
    cleanup.add(m);
    EXPECT_EQ(call_int(m, "f"), 1);
    EXPECT_FALSE(starts_with(m.path, t.path().string())) << m.path;
    expect_private_dir(fs::path(m.path).parent_path().string());
    EXPECT_NE(err.find("dnnfusion: kernel cache " + bad + " is group- or world-writable; compiling into the private directory " +
                       fs::path(m.path).parent_path().string() + " instead"),
              std::string::npos)
        << err;
    EXPECT_EQ(codegen::kernel_cache_dir(), fs::path(m.path).parent_path().string());
  }
  EXPECT_FALSE(fs::exists(shared / "kernels"));  // nothing was created in the shared directory
}

TEST(JitCompiler, CacheDirOwnedByAnotherUserIsNotUsed) {
  TempDir t;
  ScopedEnv cxx("DNNFUSION_CXX", nullptr);
  RemoveModuleFiles cleanup;
  std::string theirs;
  uid_t owner;
  if (::geteuid() == 0) {
    // Root can make a directory another user owns.
    theirs = (t.path() / "theirs").string();
    fs::create_directories(theirs);
    ::chmod(theirs.c_str(), 0700);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    owner = 65534;
  } else {
    // Anyone else: a directory of root's that is neither group- nor world-writable.
    theirs = "/";
    owner = 0;
  }
  ScopedEnv cache("DNNFUSION_CACHE_DIR", theirs);
  ::testing::internal::CaptureStderr();
  const std::string dir = codegen::kernel_cache_dir();
  const codegen::JitModule m = codegen::jit_compile(fresh_source(kExportsF), {"f"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  cleanup.add(m);
  EXPECT_EQ(call_int(m, "f"), 1);
  EXPECT_FALSE(starts_with(dir, theirs == "/" ? "/kernels" : theirs)) << dir;
  EXPECT_EQ(fs::path(m.path).parent_path().string(), dir);
  expect_private_dir(dir);
  EXPECT_NE(err.find("dnnfusion: kernel cache " + theirs + " is owned by uid " + std::to_string(owner)), std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(fs::path(theirs) / "kernels"));
}

TEST(JitCompiler, CacheDirWithoutHomeComesFromThePasswdEntry) {
  ScopedEnv dir("DNNFUSION_CACHE_DIR", nullptr);
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", "");
  const struct passwd* pw = ::getpwuid(::geteuid());
  const std::string want = pw && pw->pw_dir && pw->pw_dir[0] == '/' ? std::string(pw->pw_dir) + "/.cache/dnnfusion"
                                                                    : "/tmp/dnnfusion-" + std::to_string(::geteuid());
  EXPECT_EQ(codegen::cache_dir(), want);
  ScopedEnv unset("HOME", nullptr);
  EXPECT_EQ(codegen::cache_dir(), want);
}

TEST(JitCompiler, CachedModuleLackingARequiredSymbolIsReplaced) {
  TempDir t;
  ScopedEnv cache("DNNFUSION_CACHE_DIR", t.path().string());
  ScopedEnv cxx("DNNFUSION_CXX", nullptr);
  const std::string src_a = fresh_source(kExportsFG);  // exports f and g
  std::string path_a;
  {
    const codegen::JitModule a = codegen::jit_compile(src_a, {"f"});
    const codegen::JitModule b = codegen::jit_compile(fresh_source(kExportsF), {"f"});  // exports f only
    path_a = a.path;
    ASSERT_NE(a.path, b.path);
    // Plant B's object under A's cache key (both are unloaded when this scope ends).
    ASSERT_EQ(std::rename(b.path.c_str(), a.path.c_str()), 0);
  }
  ::testing::internal::CaptureStderr();
  const codegen::JitModule a = codegen::jit_compile(src_a, {"f", "g"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(a.cache_hit);  // replaced, not loaded
  EXPECT_EQ(a.path, path_a);
  EXPECT_EQ(call_int(a, "g"), 2);
  EXPECT_NE(err.find("cached kernel module " + path_a + " is missing the required symbol g; rebuilding it"),
            std::string::npos)
      << err;
  // Now a symbol the source never defines: rebuilt once, then a clear error.
  try {
    codegen::jit_compile(src_a, {"f", "not_defined_anywhere"});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks the required symbol not_defined_anywhere"), std::string::npos) << e.what();
  }
  EXPECT_EQ(temporaries_in(t.path() / "kernels"), std::vector<std::string>{});
}

TEST(JitCompiler, CachedFileThatIsASymlinkOrWritableByOthersIsNotLoaded) {
  TempDir t;
  ScopedEnv cache("DNNFUSION_CACHE_DIR", t.path().string());
  ScopedEnv cxx("DNNFUSION_CXX", nullptr);
  const std::string src = fresh_source(kExportsF);
  const std::string path = codegen::jit_compile(src).path;

  // A symbolic link at the cached name (to a perfectly good object) is not followed.
  const fs::path real = t.path() / "elsewhere.so";
  ASSERT_EQ(std::rename(path.c_str(), real.c_str()), 0);
  ASSERT_EQ(::symlink(real.c_str(), path.c_str()), 0);
  ::testing::internal::CaptureStderr();
  codegen::JitModule m = codegen::jit_compile(src, {"f"});
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(m.cache_hit);
  EXPECT_EQ(m.path, path);
  EXPECT_FALSE(fs::is_symlink(path));
  EXPECT_NE(err.find("cached kernel module " + path + " is a symbolic link; not loading it"), std::string::npos) << err;
  m = codegen::JitModule{};

  // A group-writable cached object.
  ::chmod(path.c_str(), 0770);
  ::testing::internal::CaptureStderr();
  m = codegen::jit_compile(src, {"f"});
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(m.cache_hit);
  EXPECT_EQ(fs::status(path).permissions() & (fs::perms::group_write | fs::perms::others_write), fs::perms::none);
  EXPECT_NE(err.find("cached kernel module " + path + " is group- or world-writable; not loading it"), std::string::npos)
      << err;
  m = codegen::JitModule{};
  // Once trusted again, it is a hit.
  EXPECT_TRUE(codegen::jit_compile(src, {"f"}).cache_hit);

  if (::geteuid() == 0) {
    // Another user's file is neither loaded nor ours to remove: the kernel goes to the private dir.
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    RemoveModuleFiles cleanup;
    ::testing::internal::CaptureStderr();
    m = codegen::jit_compile(src, {"f"});
    err = ::testing::internal::GetCapturedStderr();
    cleanup.add(m);
    EXPECT_NE(m.path, path);
    EXPECT_FALSE(starts_with(m.path, t.path().string())) << m.path;
    EXPECT_EQ(call_int(m, "f"), 1);
    EXPECT_TRUE(fs::exists(path));
    EXPECT_NE(err.find("cached kernel module " + path + " is owned by uid 65534; not loading it, compiling into the private directory"),
              std::string::npos)
        << err;
  }
}

TEST(KeyedFileStoreLimits, DevZeroFifosAndHugeFilesAreNotRead) {
  TempDir t;
  auto open_store = [](const std::string& path) { return KeyedFileStore(path, "test store", "TESTSTORE", 1, 2); };
  // A character device that never ends.
  auto t0 = Clock::now();
  ::testing::internal::CaptureStderr();
  {
    const KeyedFileStore s = open_store("/dev/zero");
    EXPECT_EQ(s.size(), 0u);
  }
  { const KeyedFileStore again = open_store("/dev/zero"); }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(seconds_since(t0), 2.0);
  const std::string dz = "dnnfusion: test store /dev/zero is corrupt (not a regular file); not reading it";
  EXPECT_NE(err.find(dz), std::string::npos) << err;
  EXPECT_EQ(err.find(dz), err.rfind(dz)) << "reported once per path: " << err;

  // A FIFO without a writer: opening it must not wait; save() does not replace it.
  const fs::path fifo = t.path() / "fifo.db";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  t0 = Clock::now();
  ::testing::internal::CaptureStderr();
  {
    KeyedFileStore s = open_store(fifo.string());
    EXPECT_EQ(s.size(), 0u);
    s.store("k", {1, 2});
    EXPECT_THROW(s.save(), Error);
  }
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_NE(err.find(fifo.string() + " is corrupt (not a regular file)"), std::string::npos) << err;
  EXPECT_TRUE(fs::is_fifo(fifo));

  // A sparse file past the 64 MiB limit: not read, then rebuilt by save() like a corrupt one.
  const fs::path huge = t.path() / "huge.db";
  {
    std::ofstream f(huge);
  }
  fs::resize_file(huge, KeyedFileStore::kMaxFileBytes + 1);
  t0 = Clock::now();
  ::testing::internal::CaptureStderr();
  {
    KeyedFileStore s = open_store(huge.string());
    EXPECT_EQ(s.size(), 0u);
    s.store("k", {1, 2});
    s.save();
  }
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_NE(err.find(huge.string() + " is corrupt (larger than the 64 MiB limit)"), std::string::npos) << err;
  EXPECT_LT(fs::file_size(huge), 1000u);
  EXPECT_EQ(open_store(huge.string()).size(), 1u);
}
