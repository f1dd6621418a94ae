// The convolution tuning database: round trip between instances, keys that separate workloads,
// blocks, thread counts and machines, invalid entries refused, corrupt files warned about and
// rebuilt (the storage is common/keyed_file_store, whose merging is tested through ProfileDb).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "target/cpu/layout/tuning_db.h"
#include "test_env_util.h"

using dnnfusion::kernels::Conv2dShape;
using dnnfusion::layout::TuningDb;
namespace fs = std::filesystem;

namespace {

// A database path two levels inside a fresh directory /tmp/dnnfusion_tuning_db_XXXXXX (the
// subdirectory is not created), removed with the object.
struct TempFile {
  dnnfusion::test_util::TempDir dir{"/tmp/dnnfusion_tuning_db_"};
  fs::path path = dir.path() / "sub" / "tuning_db.txt";
};

Conv2dShape conv3x3(int64_t C, int64_t K, int64_t HW) { return Conv2dShape{1, C, HW, HW, K, 3, 3, 1, 1, 1, 1, 1, 1, 1}; }

TEST(TuningDb, RoundTripsBetweenInstances) {
  TempFile f;
  const std::string k = TuningDb::make_key(conv3x3(64, 64, 56), 16, 16, 2);
  {
    TuningDb db(f.path.string());
    EXPECT_FALSE(db.lookup(k));
    db.store(k, {14, true, 123.5});
    db.save();  // creates the missing directory
  }
  TuningDb again(f.path.string());
  auto e = again.lookup(k);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reg_n, 14);
  EXPECT_TRUE(e->unroll_ker);
  EXPECT_DOUBLE_EQ(e->us, 123.5);
}

TEST(TuningDb, KeysSeparateWorkloadsBlocksThreadsAndMachines) {
  const std::string k = TuningDb::make_key(conv3x3(64, 64, 56), 16, 16, 2);
  EXPECT_NE(k, TuningDb::make_key(conv3x3(64, 64, 28), 16, 16, 2));
  EXPECT_NE(k, TuningDb::make_key(conv3x3(64, 128, 56), 16, 16, 2));
  EXPECT_NE(k, TuningDb::make_key(conv3x3(64, 64, 56), 8, 16, 2));
  EXPECT_NE(k, TuningDb::make_key(conv3x3(64, 64, 56), 16, 8, 2));
  EXPECT_NE(k, TuningDb::make_key(conv3x3(64, 64, 56), 16, 16, 1));
  EXPECT_EQ(k.rfind(dnnfusion::kernels::cpu_brand(), 0), 0u) << k;
  EXPECT_NE(k.find(std::string("isa ") + dnnfusion::kernels::isa_name(dnnfusion::kernels::active_isa())), std::string::npos);
  EXPECT_EQ(k.find('\t'), std::string::npos);
}

TEST(TuningDb, InvalidEntriesAreRefused) {
  TempFile f;
  TuningDb db(f.path.string());
  const std::string k = TuningDb::make_key(conv3x3(8, 8, 8), 8, 8, 1);
  EXPECT_THROW(db.store(k, {0, false, 1.0}), dnnfusion::Error);
  EXPECT_THROW(db.store(k, {4, false, -1.0}), dnnfusion::Error);
  EXPECT_THROW(db.store("", {4, false, 1.0}), dnnfusion::Error);
  EXPECT_EQ(db.size(), 0u);
}

TEST(TuningDb, CorruptFileIsReportedAndRebuilt) {
  TempFile f;
  const std::string k = TuningDb::make_key(conv3x3(32, 32, 14), 16, 16, 2);
  {
    TuningDb db(f.path.string());
    db.store(k, {7, false, 10});
    db.save();
  }
  std::string text;
  {
    std::ifstream in(f.path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    std::ofstream out(f.path, std::ios::trunc);
    out << text.substr(0, text.size() - 3);  // a writer that crashed mid-line
  }
  ::testing::internal::CaptureStderr();
  TuningDb damaged(f.path.string());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(damaged.size(), 0u);
  EXPECT_NE(err.find("dnnfusion: tuning database " + f.path.string() + " is corrupt ("), std::string::npos) << err;
  damaged.store(k, {9, true, 8});
  damaged.save();
  ::testing::internal::CaptureStderr();
  TuningDb rebuilt(f.path.string());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(rebuilt.lookup(k));
  EXPECT_EQ(rebuilt.lookup(k)->reg_n, 9);
}

TEST(TuningDb, NonsenseKnobsInAWellFormedFileAreAMiss) {
  TempFile f;
  fs::create_directories(f.path.parent_path());
  dnnfusion::KeyedFileStore raw(f.path.string(), "tuning database", "dnnfusion-tuning-db", TuningDb::kVersion, 3);
  raw.store("a", {2.5, 0, 1});
  raw.store("b", {4, 3, 1});
  raw.store("c", {4, 1, 1});
  raw.save();
  TuningDb db(f.path.string());
  EXPECT_FALSE(db.lookup("a"));
  EXPECT_FALSE(db.lookup("b"));
  EXPECT_TRUE(db.lookup("c"));
}

}  // namespace
