// The on-disk profile database: round trips between independent instances (as two compiles in two
// processes would see it), merging of concurrent savers (threads and forked processes), corrupt
// files (warned about and rebuilt), keys that carry the machine signature, directory creation.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fusion/profile_db.h"
#include "kernels/cpu/cpu_features.h"
#include "test_env_util.h"

using dnnfusion::fusion::ProfileDb;
using dnnfusion::test_util::ScopedEnv;
namespace fs = std::filesystem;

namespace {

// This file's temporary directories: /tmp/dnnfusion_profile_db_XXXXXX.
struct TempDir : dnnfusion::test_util::TempDir {
  TempDir() : dnnfusion::test_util::TempDir("/tmp/dnnfusion_profile_db_") {}
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

const std::string kSig = ProfileDb::machine_signature(4);

std::string key(int i) { return ProfileDb::make_key(kSig, "relu", "expand", {{1, 16, 8, 8}, {1, 16, 8, i}}, "f32"); }

// Loads `path` and returns (entries, what it printed on stderr).
std::pair<size_t, std::string> load_quietly(const fs::path& path) {
  ::testing::internal::CaptureStderr();
  ProfileDb db(path.string());
  std::string err = ::testing::internal::GetCapturedStderr();
  return {db.size(), err};
}

}  // namespace

TEST(ProfileDb, RoundTripsBetweenInstances) {
  TempDir dir;
  const fs::path path = dir.path() / "db.txt";
  {
    ProfileDb db(path.string());
    EXPECT_EQ(db.size(), 0u);
    EXPECT_FALSE(db.lookup(key(1)).has_value());
    db.store(key(1), {12.25, 20.5});
    db.store(key(2), {0.1 + 0.2, 1e-7});  // not exactly representable in short decimal
    db.save();
  }
  ProfileDb again(path.string());
  ASSERT_EQ(again.size(), 2u);
  auto e1 = again.lookup(key(1));
  ASSERT_TRUE(e1.has_value());
  EXPECT_EQ(e1->fused_us, 12.25);
  EXPECT_EQ(e1->separate_us, 20.5);
  EXPECT_TRUE(e1->fused_is_faster());
  auto e2 = again.lookup(key(2));
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(e2->fused_us, 0.1 + 0.2);
  EXPECT_EQ(e2->separate_us, 1e-7);
  EXPECT_FALSE(e2->fused_is_faster());
  EXPECT_EQ(load_quietly(path).second, "");
  // The file names its format and version on the first line.
  EXPECT_EQ(slurp(path).rfind("dnnfusion-profile-db 1\n", 0), 0u);
}

TEST(ProfileDb, SaveMergesWithWhatOthersSaved) {
  TempDir dir;
  const std::string path = (dir.path() / "db.txt").string();
  ProfileDb a(path), b(path);  // both opened before either saved
  a.store(key(1), {1, 2});
  a.save();
  b.store(key(2), {3, 4});
  b.save();
  EXPECT_TRUE(b.lookup(key(1)).has_value());  // b picked up a's entry when it merged
  ProfileDb c(path);
  EXPECT_EQ(c.size(), 2u);
  // A key b never stored: the newer value on disk wins over b's stale copy.
  ProfileDb d(path);
  d.store(key(1), {5, 6});
  d.save();
  b.save();
  EXPECT_EQ(ProfileDb(path).lookup(key(1))->fused_us, 5);
  // A key b stores: b's value wins.
  b.store(key(1), {7, 8});
  b.save();
  EXPECT_EQ(ProfileDb(path).lookup(key(1))->fused_us, 7);
}

TEST(ProfileDb, CorruptFileIsReportedAndRebuilt) {
  TempDir dir;
  const fs::path path = dir.path() / "db.txt";
  write_file(path, "this is not a profile database\n\x01\x02garbage");
  ::testing::internal::CaptureStderr();
  ProfileDb db(path.string());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("dnnfusion: profile database " + path.string() + " is corrupt ("), std::string::npos) << err;
  EXPECT_NE(err.find("); rebuilding it"), std::string::npos) << err;
  EXPECT_EQ(db.size(), 0u);
  db.store(key(3), {1, 2});
  db.save();
  auto [n, err2] = load_quietly(path);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(err2, "");
}

TEST(ProfileDb, DamagedEntriesAreDetected) {
  TempDir dir;
  const fs::path path = dir.path() / "db.txt";
  {
    ProfileDb db(path.string());
    for (int i = 0; i < 5; ++i) db.store(key(i), {1.5 * i, 2.0 * i});
    db.save();
  }
  const std::string good = slurp(path);
  struct Damage {
    std::string text;
    std::string why;
  };
  std::string flipped = good;
  flipped[flipped.rfind('\t') + 1] = flipped[flipped.rfind('\t') + 1] == '9' ? '8' : '9';
  const Damage cases[] = {
      {good.substr(0, good.size() / 2), "checksum"},  // truncated by a crash of a non-atomic writer
      {flipped, "checksum"},
      {"dnnfusion-profile-db 99\nentries 0 checksum 0000000000000000\n", "unsupported version"},
      {"", "empty"},
  };
  for (const Damage& d : cases) {
    write_file(path, d.text);
    auto [n, err] = load_quietly(path);
    EXPECT_EQ(n, 0u);
    EXPECT_NE(err.find("is corrupt (" + d.why), std::string::npos) << err;
  }
  write_file(path, good);
  EXPECT_EQ(load_quietly(path), std::make_pair(size_t{5}, std::string()));
}

TEST(ProfileDb, KeysCarryTheMachineSignature) {
  const std::string s4 = ProfileDb::machine_signature(4), s8 = ProfileDb::machine_signature(8);
  EXPECT_NE(s4, s8);
  EXPECT_NE(s4.find(dnnfusion::kernels::cpu_brand()), std::string::npos) << s4;
  EXPECT_NE(s4.find(dnnfusion::kernels::isa_name(dnnfusion::kernels::active_isa())), std::string::npos) << s4;
  const auto k4 = ProfileDb::make_key(s4, "convolution", "relu", {{1, 3, 8, 8}}, "stride=1");
  const auto k8 = ProfileDb::make_key(s8, "convolution", "relu", {{1, 3, 8, 8}}, "stride=1");
  EXPECT_NE(k4, k8);
  EXPECT_EQ(k4.rfind(s4, 0), 0u);
  EXPECT_NE(k4.find("convolution -> relu"), std::string::npos) << k4;
  EXPECT_NE(k4.find("[1x3x8x8]"), std::string::npos) << k4;
  EXPECT_NE(ProfileDb::make_key(s4, "convolution", "relu", {{1, 3, 8, 9}}), ProfileDb::make_key(s4, "convolution", "relu", {{1, 3, 8, 8}}));
  // Tabs and newlines would break the line format: they never survive into a key.
  const auto odd = ProfileDb::make_key("a\tb", "x\ny", "z", {});
  EXPECT_EQ(odd.find('\t'), std::string::npos);
  EXPECT_EQ(odd.find('\n'), std::string::npos);
}

TEST(ProfileDb, SaveCreatesMissingDirectories) {
  TempDir dir;
  const fs::path path = dir.path() / "a" / "b" / "c" / "profile_db.txt";
  ProfileDb db(path.string());
  db.store(key(1), {1, 2});
  db.save();
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(ProfileDb(path.string()).size(), 1u);
  // Nothing but the database and its lock file is left behind (no temporaries).
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(path.parent_path())) {
    ++files;
    EXPECT_TRUE(e.path() == path || e.path().string() == path.string() + ".lock") << e.path();
  }
  EXPECT_EQ(files, 2u);
}

TEST(ProfileDb, DefaultPathFollowsTheEnvironment) {
  // Each scope restores what the one before it left; together they restore the test's environment.
  ScopedEnv db_env("DNNFUSION_PROFILE_DB", "/tmp/x/custom.txt");
  EXPECT_EQ(ProfileDb::default_path(), "/tmp/x/custom.txt");
  ScopedEnv no_db_env("DNNFUSION_PROFILE_DB", nullptr);
  ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/cachehome");
  EXPECT_EQ(ProfileDb::default_path(), "/tmp/cachehome/dnnfusion/profile_db.txt");
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", "/tmp/somehome");
  EXPECT_EQ(ProfileDb::default_path(), "/tmp/somehome/.cache/dnnfusion/profile_db.txt");
}

TEST(ProfileDb, ConcurrentThreadsAndObjectsLoseNothing) {
  TempDir dir;
  const std::string path = (dir.path() / "db.txt").string();
  ProfileDb shared(path);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ProfileDb own(path);
      for (int i = 0; i < 10; ++i) {
        shared.store(key(1000 + t * 10 + i), {1, 2});
        own.store(key(2000 + t * 10 + i), {3, 4});
        if (i % 3 == 0) {
          shared.save();
          own.save();
        }
        EXPECT_TRUE(shared.lookup(key(1000 + t * 10 + i)).has_value());
      }
      own.save();
    });
  }
  for (auto& th : threads) th.join();
  shared.save();
  EXPECT_EQ(ProfileDb(path).size(), 80u);
}

TEST(ProfileDb, ConcurrentProcessesLoseNothing) {
  TempDir dir;
  const std::string path = (dir.path() / "db.txt").string();
  std::vector<pid_t> kids;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        ProfileDb db(path);
        for (int i = 0; i < 15; ++i) {
          db.store(key(p * 100 + i), {static_cast<double>(p), static_cast<double>(i)});
          db.save();
        }
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(k, &status, 0), k);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto [n, err] = load_quietly(path);
  EXPECT_EQ(n, 60u);
  EXPECT_EQ(err, "");
}
