// The process runner (common/subprocess): output beyond the caller's limit is drained, dropped and
// flagged (a parser of a long listing must know it saw all of it), a timeout kills the child, and
// a failing child is reported in the result, not thrown.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "common/subprocess.h"

namespace dnnfusion {
namespace {

const std::vector<std::string> kEnv = {"PATH=/usr/bin:/bin"};

TEST(SubprocessLimits, OutputBeyondTheLimitIsFlagged) {
  const std::vector<std::string> argv = {"/bin/sh", "-c", "head -c 3000000 /dev/zero"};
  const ProcessResult small = run_process(argv, kEnv, 60, "head", size_t{1} << 20);
  EXPECT_TRUE(small.succeeded());
  EXPECT_TRUE(small.output_truncated);
  EXPECT_EQ(small.output.size(), size_t{1} << 20);
  const ProcessResult large = run_process(argv, kEnv, 60, "head", size_t{4} << 20);
  EXPECT_TRUE(large.succeeded());
  EXPECT_FALSE(large.output_truncated);
  EXPECT_EQ(large.output.size(), 3000000u);
}

TEST(SubprocessLimits, TimeoutKillsAndFailureIsReported) {
  const ProcessResult slow = run_process({"/bin/sh", "-c", "sleep 30"}, kEnv, 0.5, "sleep");
  EXPECT_TRUE(slow.timed_out);
  EXPECT_FALSE(slow.succeeded());
  const ProcessResult bad = run_process({"/bin/sh", "-c", "echo oops; exit 3"}, kEnv, 30, "sh");
  EXPECT_FALSE(bad.succeeded());
  EXPECT_EQ(describe_status(bad.status), "exited with status 3");
  EXPECT_EQ(bad.output, "oops\n");
}

TEST(SubprocessLimits, CompileTimeoutComesFromTheEnvironment) {
  setenv(kCompileTimeoutVar, "2.5", 1);
  EXPECT_EQ(compile_timeout_seconds(), 2.5);
  setenv(kCompileTimeoutVar, "soon", 1);
  EXPECT_THROW(compile_timeout_seconds(), InvalidInput);
  unsetenv(kCompileTimeoutVar);
  EXPECT_EQ(compile_timeout_seconds(), kDefaultCompileTimeoutS);
}

}  // namespace
}  // namespace dnnfusion
