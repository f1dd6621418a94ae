// The fpga target's OpenCL host runtime (target/fpga/opencl/opencl_runtime.h) on PoCL's CPU device:
// platform listing and choice (argument, $DNNFUSION_OPENCL_PLATFORM), int8 kernels checked bit for
// bit against C++ loops, programs from source and from binaries, every error path the host driver
// relies on (build log, bad binary, bad sizes and arguments), event profiling, and the fork rule.
//
// Tests that need an OpenCL device FAIL when there is none: CI installs PoCL (scripts/setup.sh),
// and a skipped test would hide a missing install step. DNNFUSION_SKIP_OPENCL_TESTS=1 turns those
// failures into skips on a machine that cannot have OpenCL. The loader's own start-up (missing
// library, PoCL without a writable cache, the private cache directory) happens once per process,
// so it is checked in fresh processes: this binary re-executed with DNNFUSION_OPENCL_TEST_PROBE=1
// prints what it found and exits before any test runs. Random inputs print their seed
// ($DNNFUSION_TEST_SEED replays one); every environment variable a test sets is restored.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/subprocess.h"
#include "target/fpga/opencl/opencl_runtime.h"
#include "test_env_util.h"
#include "opencl_test_util.h"

#if __has_include(<CL/cl.h>)
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#if __has_include(<CL/cl_ext.h>)
#include <CL/cl_ext.h>
#endif
#define DNNF_TEST_HAVE_CL_HEADERS 1
#endif

namespace fs = std::filesystem;
namespace ocl = dnnfusion::fpga::opencl;
using dnnfusion::Error;
using dnnfusion::InvalidInput;
using dnnfusion::TargetUnavailable;
using dnnfusion::test_util::error_of;
using dnnfusion::test_util::ScopedEnv;

namespace {

constexpr const char* kPocl = "Portable Computing Language";

// The probe mode: runs before main in a re-executed copy of this binary (see the file comment).
// Prints the loader's verdict, the POCL_CACHE_DIR it leaves, and what a Context() throws.
[[maybe_unused]] const bool kProbeDone = [] {
  const char* probe = std::getenv("DNNFUSION_OPENCL_TEST_PROBE");
  if (!probe || std::string(probe) != "1") return false;
  std::string out = "REASON[" + ocl::opencl_unavailable_reason() + "]\n";
  const char* cache = std::getenv("POCL_CACHE_DIR");
  out += "POCL_CACHE_DIR[" + std::string(cache ? cache : "(unset)") + "]\n";
  try {
    ocl::Context ctx;
    out += "CONTEXT[ok " + ctx.platform().name + "]\n";
  } catch (const TargetUnavailable& e) {
    out += "CONTEXT[TargetUnavailable " + std::string(e.what()) + "]\n";
  } catch (const std::exception& e) {
    out += "CONTEXT[other " + std::string(e.what()) + "]\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  _exit(0);  // no gtest, and no OpenCL teardown at exit
  return true;
}();

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// This file's temporary directories: $TMPDIR/dnnf_opencl_test_XXXXXX.
struct TempDir : dnnfusion::test_util::TempDir {
  TempDir() : dnnfusion::test_util::TempDir("dnnf_opencl_test_") {}
};

uint32_t test_seed() {
  if (const char* s = std::getenv("DNNFUSION_TEST_SEED")) return static_cast<uint32_t>(std::stoul(s));
  return static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::vector<int8_t> random_int8(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// out[i] = saturate_int8(a[i] + b[i] + bias + BIAS), the sum in int32; BIAS is a build option.
const char* kAddSource = R"CL(
__kernel void add_sat_i8(__global const char* a, __global const char* b, __global char* out,
                         const uint n, const int bias) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const int acc = (int)a[i] + (int)b[i] + bias + BIAS;
  out[i] = (char)clamp(acc, -128, 127);
}

// out[g] = offset + sum of a[i] * b[i] over work-group g (int32 products, reduced in local memory).
__kernel void dot_i8(__global const char* a, __global const char* b, __global long* out, const uint n,
                     const long offset, __local int* scratch) {
  const uint i = get_global_id(0), l = get_local_id(0), size = get_local_size(0);
  scratch[l] = i < n ? (int)a[i] * (int)b[i] : 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = size / 2; s > 0; s /= 2) {
    if (l < s) scratch[l] += scratch[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) out[get_group_id(0)] = offset + (long)scratch[0];
}

// out[(z * H + y) * W + x] = x + 1000 * y + 1000000 * z over a W x H x D grid.
__kernel void coords(__global int* out) {
  const size_t x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  const size_t w = get_global_size(0), h = get_global_size(1);
  out[(z * h + y) * w + x] = (int)(x + 1000 * y + 1000000 * z);
}
)CL";

int8_t add_sat_reference(int8_t a, int8_t b, int32_t bias) {
  const int32_t acc = int32_t{a} + int32_t{b} + bias;
  return static_cast<int8_t>(acc < -128 ? -128 : acc > 127 ? 127 : acc);
}

// Runs add_sat_i8 from `program` over a and b; the result read back with a blocking read.
std::vector<int8_t> run_add(const ocl::Context& ctx, const ocl::Program& program, const std::vector<int8_t>& a,
                            const std::vector<int8_t>& b, int32_t bias) {
  const size_t n = a.size();
  ocl::Buffer da(ctx, n, ocl::Buffer::Access::ReadOnly), db(ctx, n, ocl::Buffer::Access::ReadOnly);
  ocl::Buffer dout(ctx, n, ocl::Buffer::Access::WriteOnly);
  da.write(a.data(), n);
  db.write(b.data(), n);
  ocl::Kernel k(program, "add_sat_i8");
  k.set_arg(0, da);
  k.set_arg(1, db);
  k.set_arg(2, dout);
  k.set_arg(3, static_cast<uint32_t>(n));
  k.set_arg(4, bias);
  ctx.enqueue(k, {round_up(n, 64)}, {64}).wait();
  std::vector<int8_t> out(n);
  dout.read(out.data(), n);
  return out;
}

// This binary's path, for re-executing it in probe mode.
std::string self_path() { return fs::read_symlink("/proc/self/exe").string(); }

// Runs this binary in probe mode with `env_changes` ("NAME=value", or "NAME" to drop it).
std::string probe(const std::vector<std::string>& set, const std::vector<std::string>& drop) {
  std::vector<std::string> dropped = drop;
  for (const std::string& s : set) dropped.push_back(s.substr(0, s.find('=')));
  std::vector<std::string> env = dnnfusion::current_environment(dropped);
  env.insert(env.end(), set.begin(), set.end());
  env.push_back("DNNFUSION_OPENCL_TEST_PROBE=1");
  const dnnfusion::ProcessResult r = dnnfusion::run_process({self_path()}, env, 120, "the probe");
  EXPECT_TRUE(r.succeeded()) << dnnfusion::describe_status(r.status) << "\n" << r.output;
  return r.output;
}

// What between `tag[` and the next "]\n" the probe printed.
std::string field(const std::string& out, const std::string& tag) {
  const size_t at = out.find(tag + "[");
  if (at == std::string::npos) return "(missing " + tag + ")";
  const size_t from = at + tag.size() + 1;
  return out.substr(from, out.find("]\n", from) - from);
}

}  // namespace

// ---- without a device ----

TEST(OpenClRuntime, ErrorCodesHaveTheirSymbolicNames) {
  for (int code = -1; code >= -72; --code) {
    if (code <= -20 && code >= -29) continue;  // unassigned by the standard
    const std::string name = ocl::opencl_error_name(code);
    EXPECT_EQ(name.rfind("CL_", 0), 0u) << code << " -> " << name;
    EXPECT_FALSE(ocl::opencl_error_meaning(code).empty()) << code;
  }
  EXPECT_EQ(ocl::opencl_error_name(0), "CL_SUCCESS");
  EXPECT_EQ(ocl::opencl_error_name(-5), "CL_OUT_OF_RESOURCES");
  EXPECT_EQ(ocl::opencl_error_name(-11), "CL_BUILD_PROGRAM_FAILURE");
  EXPECT_EQ(ocl::opencl_error_name(-52), "CL_INVALID_KERNEL_ARGS");
  EXPECT_EQ(ocl::opencl_error_name(-72), "CL_MAX_SIZE_RESTRICTION_EXCEEDED");
  EXPECT_EQ(ocl::opencl_error_name(-25), "unknown OpenCL error");
  EXPECT_EQ(ocl::opencl_error_name(12345), "unknown OpenCL error");
  EXPECT_TRUE(contains(ocl::opencl_error_meaning(-9999), "not a standard")) << ocl::opencl_error_meaning(-9999);
}

#ifdef DNNF_TEST_HAVE_CL_HEADERS
// The runtime declares its own constants (no OpenCL headers in the build): they must be Khronos's.
TEST(OpenClRuntime, ErrorCodesAgreeWithTheKhronosHeaders) {
#define DNNF_CODE(c) {c, #c}
  const std::pair<int, const char*> codes[] = {
      DNNF_CODE(CL_SUCCESS), DNNF_CODE(CL_DEVICE_NOT_FOUND), DNNF_CODE(CL_DEVICE_NOT_AVAILABLE),
      DNNF_CODE(CL_COMPILER_NOT_AVAILABLE), DNNF_CODE(CL_MEM_OBJECT_ALLOCATION_FAILURE), DNNF_CODE(CL_OUT_OF_RESOURCES),
      DNNF_CODE(CL_OUT_OF_HOST_MEMORY), DNNF_CODE(CL_PROFILING_INFO_NOT_AVAILABLE), DNNF_CODE(CL_MEM_COPY_OVERLAP),
      DNNF_CODE(CL_IMAGE_FORMAT_MISMATCH), DNNF_CODE(CL_IMAGE_FORMAT_NOT_SUPPORTED), DNNF_CODE(CL_BUILD_PROGRAM_FAILURE),
      DNNF_CODE(CL_MAP_FAILURE), DNNF_CODE(CL_MISALIGNED_SUB_BUFFER_OFFSET),
      DNNF_CODE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST), DNNF_CODE(CL_COMPILE_PROGRAM_FAILURE),
      DNNF_CODE(CL_LINKER_NOT_AVAILABLE), DNNF_CODE(CL_LINK_PROGRAM_FAILURE), DNNF_CODE(CL_DEVICE_PARTITION_FAILED),
      DNNF_CODE(CL_KERNEL_ARG_INFO_NOT_AVAILABLE), DNNF_CODE(CL_INVALID_VALUE), DNNF_CODE(CL_INVALID_DEVICE_TYPE),
      DNNF_CODE(CL_INVALID_PLATFORM), DNNF_CODE(CL_INVALID_DEVICE), DNNF_CODE(CL_INVALID_CONTEXT),
      DNNF_CODE(CL_INVALID_QUEUE_PROPERTIES), DNNF_CODE(CL_INVALID_COMMAND_QUEUE), DNNF_CODE(CL_INVALID_HOST_PTR),
      DNNF_CODE(CL_INVALID_MEM_OBJECT), DNNF_CODE(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR), DNNF_CODE(CL_INVALID_IMAGE_SIZE),
      DNNF_CODE(CL_INVALID_SAMPLER), DNNF_CODE(CL_INVALID_BINARY), DNNF_CODE(CL_INVALID_BUILD_OPTIONS),
      DNNF_CODE(CL_INVALID_PROGRAM), DNNF_CODE(CL_INVALID_PROGRAM_EXECUTABLE), DNNF_CODE(CL_INVALID_KERNEL_NAME),
      DNNF_CODE(CL_INVALID_KERNEL_DEFINITION), DNNF_CODE(CL_INVALID_KERNEL), DNNF_CODE(CL_INVALID_ARG_INDEX),
      DNNF_CODE(CL_INVALID_ARG_VALUE), DNNF_CODE(CL_INVALID_ARG_SIZE), DNNF_CODE(CL_INVALID_KERNEL_ARGS),
      DNNF_CODE(CL_INVALID_WORK_DIMENSION), DNNF_CODE(CL_INVALID_WORK_GROUP_SIZE), DNNF_CODE(CL_INVALID_WORK_ITEM_SIZE),
      DNNF_CODE(CL_INVALID_GLOBAL_OFFSET), DNNF_CODE(CL_INVALID_EVENT_WAIT_LIST), DNNF_CODE(CL_INVALID_EVENT),
      DNNF_CODE(CL_INVALID_OPERATION), DNNF_CODE(CL_INVALID_GL_OBJECT), DNNF_CODE(CL_INVALID_BUFFER_SIZE),
      DNNF_CODE(CL_INVALID_MIP_LEVEL), DNNF_CODE(CL_INVALID_GLOBAL_WORK_SIZE), DNNF_CODE(CL_INVALID_PROPERTY),
      DNNF_CODE(CL_INVALID_IMAGE_DESCRIPTOR), DNNF_CODE(CL_INVALID_COMPILER_OPTIONS), DNNF_CODE(CL_INVALID_LINKER_OPTIONS),
      DNNF_CODE(CL_INVALID_DEVICE_PARTITION_COUNT), DNNF_CODE(CL_INVALID_PIPE_SIZE), DNNF_CODE(CL_INVALID_DEVICE_QUEUE),
      DNNF_CODE(CL_INVALID_SPEC_ID), DNNF_CODE(CL_MAX_SIZE_RESTRICTION_EXCEEDED),
#ifdef CL_PLATFORM_NOT_FOUND_KHR
      DNNF_CODE(CL_PLATFORM_NOT_FOUND_KHR),
#endif
  };
#undef DNNF_CODE
  for (const auto& [code, name] : codes) EXPECT_EQ(ocl::opencl_error_name(code), name) << code;
}
#endif

TEST(OpenClRuntime, AMissingLoaderIsTargetUnavailableWithTheReason) {
  const std::string out = probe({"DNNFUSION_OPENCL_LIBRARY=/nonexistent/libOpenCL.so.1"}, {});
  const std::string why = field(out, "REASON");
  EXPECT_TRUE(contains(why, "/nonexistent/libOpenCL.so.1") && contains(why, "could not be loaded") &&
              contains(why, "pocl-opencl-icd"))
      << out;
  EXPECT_TRUE(contains(field(out, "CONTEXT"), "TargetUnavailable the fpga target cannot run on this machine: " + why))
      << out;
}

// ---- the loader on this machine ----

TEST(OpenClRuntime, SetsAPrivatePoclCacheDirWhenUnset) {
  REQUIRE_OPENCL();
  TempDir dir;
  const std::string out = probe({"DNNFUSION_CACHE_DIR=" + dir.path().string()}, {"POCL_CACHE_DIR"});
  EXPECT_EQ(field(out, "POCL_CACHE_DIR"), dir.file("pocl")) << out;
  EXPECT_EQ(field(out, "REASON"), "") << out;
  EXPECT_TRUE(fs::is_directory(dir.file("pocl"))) << out;
  // The caller's own setting is kept.
  const std::string mine = probe({"POCL_CACHE_DIR=" + dir.file("mine")}, {});
  EXPECT_EQ(field(mine, "POCL_CACHE_DIR"), dir.file("mine")) << mine;
}

TEST(OpenClRuntime, PoclWithoutAWritableCacheSaysSo) {
  REQUIRE_OPENCL();
  bool pocl = false;
  for (const auto& p : ocl::list_platforms()) pocl = pocl || p.name == kPocl;
  ASSERT_TRUE(pocl) << "PoCL is not installed (pocl-opencl-icd)";
  // /proc refuses new directories, even to root.
  const std::string out = probe({"POCL_CACHE_DIR=/proc/dnnfusion-no-such-dir"}, {});
  const std::string why = field(out, "REASON");
  EXPECT_TRUE(contains(why, "no OpenCL platform has a device") && contains(why, kPocl) &&
              contains(why, "POCL_CACHE_DIR is '/proc/dnnfusion-no-such-dir'"))
      << out;
  EXPECT_TRUE(contains(field(out, "CONTEXT"), "TargetUnavailable")) << out;
}

TEST(OpenClRuntime, ListsPoclAndItsDevice) {
  REQUIRE_OPENCL();
  const std::vector<ocl::PlatformInfo> platforms = ocl::list_platforms();
  const ocl::PlatformInfo* pocl = nullptr;
  for (const auto& p : platforms) {
    std::cout << "platform '" << p.name << "' (" << p.vendor << ", " << p.version << ")\n";
    for (const auto& d : p.devices)
      std::cout << "  device '" << d.name << "' " << d.type << ", " << d.global_mem_bytes << " bytes, work-groups up to "
                << d.max_work_group_size << "\n";
    if (p.name == kPocl) pocl = &p;
  }
  ASSERT_NE(pocl, nullptr) << "PoCL is not installed (pocl-opencl-icd)";
  EXPECT_TRUE(contains(pocl->version, "OpenCL")) << pocl->version;
  ASSERT_GE(pocl->devices.size(), 1u);
  EXPECT_EQ(pocl->devices[0].type, "CPU");
  EXPECT_GT(pocl->devices[0].global_mem_bytes, 0u);
  EXPECT_GE(pocl->devices[0].max_work_group_size, 64u);
  EXPECT_FALSE(pocl->devices[0].name.empty());
}

TEST(OpenClRuntime, ChoosesThePlatformByNameOrEnvironment) {
  REQUIRE_OPENCL();
  ScopedEnv unset("DNNFUSION_OPENCL_PLATFORM", nullptr);
  EXPECT_EQ(ocl::Context().platform().name, kPocl);  // the default where PoCL is installed
  EXPECT_EQ(ocl::Context("pocl").platform().name, kPocl);  // its vendor, "The pocl project"
  EXPECT_EQ(ocl::Context("PORTABLE computing").platform().name, kPocl);
  const ocl::Context ctx("Portable Computing Language");
  EXPECT_EQ(ctx.device().name, ctx.platform().devices.at(0).name);
  {
    ScopedEnv env("DNNFUSION_OPENCL_PLATFORM", "Pocl");
    EXPECT_EQ(ocl::Context().platform().name, kPocl);
  }
  {
    ScopedEnv env("DNNFUSION_OPENCL_PLATFORM", "no-such-platform");
    const std::string msg = error_of<InvalidInput>([] { ocl::Context(); });
    EXPECT_TRUE(contains(msg, "no OpenCL platform matches 'no-such-platform'") &&
                contains(msg, "$DNNFUSION_OPENCL_PLATFORM") && contains(msg, kPocl))
        << msg;
    EXPECT_EQ(ocl::Context("pocl").platform().name, kPocl);  // the argument wins over the variable
  }
  const std::string msg = error_of<InvalidInput>([] { ocl::Context("Xilinx"); });
  EXPECT_TRUE(contains(msg, "'Xilinx'") && contains(msg, "platforms found: '" + std::string(kPocl) + "'")) << msg;
  const std::string dev = error_of<InvalidInput>([] { ocl::Context("pocl", 99); });
  EXPECT_TRUE(contains(dev, "device 99 does not exist")) << dev;
}

// ---- kernels ----

TEST(OpenClRuntime, Int8SaturatingAddMatchesTheCppLoopBitForBit) {
  REQUIRE_OPENCL();
  const uint32_t seed = test_seed();
  std::cout << "seed " << seed << " (DNNFUSION_TEST_SEED replays it)\n";
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ocl::Context ctx("pocl");
  const ocl::Program program = ocl::Program::from_source(ctx, kAddSource, "-cl-std=CL1.2 -D BIAS=3");
  EXPECT_EQ(program.kernel_names().size(), 3u);
  const size_t n = 10007;  // not a multiple of the work-group size: the kernel's bound check runs
  const std::vector<int8_t> a = random_int8(rng, n), b = random_int8(rng, n);
  for (const int32_t bias : {0, -77, 100}) {
    const std::vector<int8_t> out = run_add(ctx, program, a, b, bias);
    size_t saturated = 0;
    for (size_t i = 0; i < n; ++i) {
      const int8_t want = add_sat_reference(a[i], b[i], bias + 3);
      ASSERT_EQ(out[i], want) << "i=" << i << " a=" << int{a[i]} << " b=" << int{b[i]} << " bias=" << bias;
      saturated += want == 127 || want == -128;
    }
    EXPECT_GT(saturated, 0u);  // the clamp was exercised
  }
}

TEST(OpenClRuntime, Int8DotWithLocalMemoryAndInt64MatchesTheCppLoop) {
  REQUIRE_OPENCL();
  const uint32_t seed = test_seed();
  std::cout << "seed " << seed << " (DNNFUSION_TEST_SEED replays it)\n";
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const ocl::Context ctx("pocl");
  const ocl::Program program = ocl::Program::from_source(ctx, kAddSource, "-D BIAS=0");
  const size_t n = 5000, group = 128, groups = round_up(n, group) / group;
  const int64_t offset = (int64_t{1} << 40) + 12345;  // only a 64-bit argument carries it
  const std::vector<int8_t> a = random_int8(rng, n), b = random_int8(rng, n);
  ocl::Buffer da(ctx, n), db(ctx, n), dout(ctx, groups * sizeof(int64_t));
  ocl::Event wa = da.write_async(a.data(), n), wb = db.write_async(b.data(), n);
  ocl::Kernel k(program, "dot_i8");
  EXPECT_EQ(k.num_args(), 6u);
  k.set_arg(0, da);
  k.set_arg(1, db);
  k.set_arg(2, dout);
  k.set_arg(3, static_cast<uint32_t>(n));
  k.set_arg(4, offset);
  k.set_local_arg(5, group * sizeof(int32_t));
  ocl::Event run = ctx.enqueue(k, {groups * group}, {group});
  std::vector<int64_t> out(groups, -1);
  ocl::Event rd = dout.read_async(out.data(), groups * sizeof(int64_t));
  rd.wait();
  EXPECT_EQ(rd.status(), ocl::EventStatus::Complete);
  for (size_t g = 0; g < groups; ++g) {
    int32_t sum = 0;
    for (size_t i = g * group; i < std::min(n, (g + 1) * group); ++i) sum += int32_t{a[i]} * int32_t{b[i]};
    ASSERT_EQ(out[g], offset + sum) << "group " << g;
  }
}

TEST(OpenClRuntime, EnqueuesInThreeDimensions) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  const ocl::Program program = ocl::Program::from_source(ctx, kAddSource, "-D BIAS=0");
  ocl::Kernel k(program, "coords");
  const size_t w = 16, h = 6, d = 3;
  ocl::Buffer out(ctx, w * h * d * sizeof(int32_t));
  k.set_arg(0, out);
  ctx.enqueue(k, {w, h, d}, {8, 2, 1});
  ctx.finish();
  std::vector<int32_t> got(w * h * d);
  out.read(got.data(), got.size() * sizeof(int32_t));
  for (size_t z = 0; z < d; ++z)
    for (size_t y = 0; y < h; ++y)
      for (size_t x = 0; x < w; ++x)
        ASSERT_EQ(got[(z * h + y) * w + x], static_cast<int32_t>(x + 1000 * y + 1000000 * z)) << x << "," << y << "," << z;
  ctx.enqueue(k, {w, h}, {}).wait();  // 2-D, work-groups chosen by the implementation
  out.read(got.data(), w * h * sizeof(int32_t));
  EXPECT_EQ(got[w * h - 1], static_cast<int32_t>(w - 1 + 1000 * (h - 1)));
}

TEST(OpenClRuntime, RunsAProgramLoadedFromItsBinary) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  const ocl::Program built = ocl::Program::from_source(ctx, kAddSource, "-D BIAS=-5");
  const std::vector<unsigned char> bin = built.binary();
  ASSERT_FALSE(bin.empty());
  TempDir dir;
  const std::string path = dir.file("add.bin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bin.data()), static_cast<std::streamsize>(bin.size()));
  std::mt19937 rng(7);
  const std::vector<int8_t> a = random_int8(rng, 300), b = random_int8(rng, 300);
  for (const ocl::Program& loaded : {ocl::Program::from_binary(ctx, bin), ocl::Program::from_binary_file(ctx, path)}) {
    const std::vector<int8_t> out = run_add(ctx, loaded, a, b, 1);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out[i], add_sat_reference(a[i], b[i], 1 - 5)) << i;
  }
}

// ---- errors ----

TEST(OpenClRuntime, ABuildFailureCarriesTheBuildLog) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  const std::string msg = error_of<Error>([&] {
    ocl::Program::from_source(ctx, "__kernel void broken(__global int* p) { p[0] = undeclared_thing + ; }");
  });
  EXPECT_TRUE(contains(msg, "clBuildProgram") && contains(msg, "CL_BUILD_PROGRAM_FAILURE") &&
              contains(msg, "build log") && contains(msg, "undeclared_thing") && contains(msg, "error"))
      << msg;
  // The kernel source relies on its BIAS option: without it the log names the missing identifier.
  const std::string no_option = error_of<Error>([&] { ocl::Program::from_source(ctx, kAddSource); });
  EXPECT_TRUE(contains(no_option, "BIAS")) << no_option;
  EXPECT_THROW(ocl::Program::from_source(ctx, ""), InvalidInput);
  const std::string option = error_of<InvalidInput>([&] { ocl::Program::from_source(ctx, kAddSource, "-D BIAS=1 -no-such-option"); });
  EXPECT_TRUE(contains(option, "CL_INVALID_BUILD_OPTIONS") && contains(option, "-no-such-option")) << option;
}

TEST(OpenClRuntime, ABadBinaryIsRefusedNamingTheCall) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  std::vector<unsigned char> junk(4096);
  std::mt19937 rng(11);
  for (auto& c : junk) c = static_cast<unsigned char>(rng());
  std::string msg;
  try {
    ocl::Program::from_binary(ctx, junk);
    ADD_FAILURE() << "a random binary was accepted";
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "clCreateProgramWithBinary") || contains(msg, "clBuildProgram")) << msg;
  EXPECT_TRUE(contains(msg, "CL_INVALID_") || contains(msg, "CL_BUILD_PROGRAM_FAILURE")) << msg;
  EXPECT_THROW(ocl::Program::from_binary(ctx, {}), InvalidInput);
  // Containers whose declared sizes run past their end are refused before OpenCL parses them.
  std::ifstream self_file("/proc/self/exe", std::ios::binary);
  const std::vector<unsigned char> elf((std::istreambuf_iterator<char>(self_file)), std::istreambuf_iterator<char>());
  ASSERT_GT(elf.size(), 1000u);
  const std::string whole = error_of<InvalidInput>([&] { ocl::Program::from_binary(ctx, elf); });  // an ELF, not a kernel
  EXPECT_TRUE(contains(whole, "clCreateProgramWithBinary") && contains(whole, "CL_INVALID_BINARY")) << whole;
  for (const size_t keep : {elf.size() - 1, elf.size() / 2, size_t{40}}) {
    const std::vector<unsigned char> cut(elf.begin(), elf.begin() + static_cast<std::ptrdiff_t>(keep));
    const std::string m = error_of<InvalidInput>([&] { ocl::Program::from_binary(ctx, cut); });
    EXPECT_TRUE(contains(m, "malformed (an ELF image") && contains(m, "clCreateProgramWithBinary")) << keep << ": " << m;
  }
  std::vector<unsigned char> xclbin(400, 0);
  std::copy(std::begin("xclbin2"), std::end("xclbin2"), xclbin.begin());
  xclbin[304] = 400 % 256;  // the declared length, little-endian, at byte 304
  xclbin[305] = 400 / 256;
  const std::string whole_x = error_of<InvalidInput>([&] { ocl::Program::from_binary(ctx, xclbin); });
  EXPECT_TRUE(contains(whole_x, "CL_INVALID_BINARY")) << whole_x;  // PoCL's verdict: not for this device
  xclbin[306] = 1;  // declares 65936 bytes
  const std::string cut_x = error_of<InvalidInput>([&] { ocl::Program::from_binary(ctx, xclbin); });
  EXPECT_TRUE(contains(cut_x, "an xclbin of 400 bytes whose header declares 65936")) << cut_x;
  const std::string missing = error_of<InvalidInput>([&] { ocl::Program::from_binary_file(ctx, "/nonexistent/x.aocx"); });
  EXPECT_TRUE(contains(missing, "/nonexistent/x.aocx")) << missing;
  TempDir dir;
  std::ofstream(dir.file("empty.xclbin")).close();
  EXPECT_THROW(ocl::Program::from_binary_file(ctx, dir.file("empty.xclbin")), InvalidInput);
}

TEST(OpenClRuntime, BufferSizesAreChecked) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  ocl::Buffer buf(ctx, 64);
  EXPECT_EQ(buf.size(), 64u);
  std::vector<char> host(128, 1);
  const std::string msg = error_of<InvalidInput>([&] { buf.write(host.data(), 65); });
  EXPECT_TRUE(contains(msg, "65 bytes") && contains(msg, "64-byte buffer")) << msg;
  EXPECT_THROW(buf.read(host.data(), 64, 1), InvalidInput);
  EXPECT_THROW(buf.read(host.data(), 1, SIZE_MAX), InvalidInput);  // offset + bytes would wrap
  EXPECT_THROW(buf.write_async(host.data(), 0), InvalidInput);
  EXPECT_THROW(buf.write(nullptr, 8), InvalidInput);
  EXPECT_THROW(ocl::Buffer(ctx, 0), InvalidInput);
  buf.write(host.data(), 32, 32);  // the last 32 bytes: allowed
  std::vector<char> back(32, 0);
  buf.read(back.data(), 32, 32);
  EXPECT_EQ(back, std::vector<char>(32, 1));
}

TEST(OpenClRuntime, BadKernelArgumentsAndLaunchesNameTheOpenClError) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  const ocl::Program program = ocl::Program::from_source(ctx, kAddSource, "-D BIAS=0");
  ocl::Kernel k(program, "add_sat_i8");
  ocl::Buffer buf(ctx, 256);
  // Arguments 3 and 4 never set.
  k.set_arg(0, buf);
  k.set_arg(1, buf);
  k.set_arg(2, buf);
  const std::string unset = error_of<Error>([&] { ctx.enqueue(k, {256}, {64}); });
  EXPECT_TRUE(contains(unset, "clEnqueueNDRangeKernel") && contains(unset, "CL_INVALID_KERNEL_ARGS") &&
              contains(unset, "add_sat_i8"))
      << unset;
  // A 64-bit value for a 32-bit parameter.
  const std::string size = error_of<Error>([&] { k.set_arg(3, int64_t{5}); });
  EXPECT_TRUE(contains(size, "clSetKernelArg(kernel 'add_sat_i8', argument 3, int64)") && contains(size, "CL_INVALID_ARG_SIZE"))
      << size;
  const std::string index = error_of<InvalidInput>([&] { k.set_arg(5, int32_t{1}); });
  EXPECT_TRUE(contains(index, "takes 5 arguments")) << index;
  const std::string name = error_of<InvalidInput>([&] { ocl::Kernel(program, "no_such_kernel"); });
  EXPECT_TRUE(contains(name, "CL_INVALID_KERNEL_NAME") && contains(name, "dot_i8")) << name;
  k.set_arg(3, uint32_t{256});
  k.set_arg(4, int32_t{0});
  EXPECT_THROW(ctx.enqueue(k, {100}, {64}), InvalidInput);     // 64 does not divide 100
  EXPECT_THROW(ctx.enqueue(k, {}, {}), InvalidInput);          // no dimension
  EXPECT_THROW(ctx.enqueue(k, {4, 4, 4, 4}), InvalidInput);    // four
  EXPECT_THROW(ctx.enqueue(k, {256}, {64, 1}), InvalidInput);  // mismatched ranks
  const size_t too_big = ctx.device().max_work_group_size * 2;
  const std::string wg = error_of<Error>([&] { ctx.enqueue(k, {too_big}, {too_big}); });
  EXPECT_TRUE(contains(wg, "clEnqueueNDRangeKernel") && contains(wg, "CL_INVALID_WORK_GROUP_SIZE")) << wg;
  ctx.enqueue(k, {256}, {64}).wait();  // all set now
  // Objects of another context are refused before OpenCL sees them.
  const ocl::Context other("pocl");
  ocl::Buffer foreign(other, 256);
  EXPECT_THROW(k.set_arg(0, foreign), InvalidInput);
  EXPECT_THROW(other.enqueue(k, {256}), InvalidInput);
}

TEST(OpenClRuntime, EventProfilingTimesAreOrdered) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  const ocl::Program program = ocl::Program::from_source(ctx, kAddSource, "-D BIAS=0");
  const size_t n = 1 << 16;
  std::vector<int8_t> a(n, 3), out(n, 0);
  ocl::Buffer da(ctx, n), dout(ctx, n);
  ocl::Kernel k(program, "add_sat_i8");
  k.set_arg(0, da);
  k.set_arg(1, da);
  k.set_arg(2, dout);
  k.set_arg(3, static_cast<uint32_t>(n));
  k.set_arg(4, int32_t{1});
  ocl::Event w = da.write_async(a.data(), n);
  ocl::Event run = ctx.enqueue(k, {n}, {64});
  ocl::Event r = dout.read_async(out.data(), n);
  ctx.finish();
  const ocl::Event* in_order[] = {&w, &run, &r};
  uint64_t last_end = 0;
  for (const ocl::Event* e : in_order) {
    EXPECT_EQ(e->status(), ocl::EventStatus::Complete);
    EXPECT_LE(e->queued_ns(), e->submit_ns());
    EXPECT_LE(e->submit_ns(), e->start_ns());
    EXPECT_LE(e->start_ns(), e->end_ns());
    EXPECT_LE(last_end, e->start_ns());  // an in-order queue: each starts after the previous ended
    last_end = e->end_ns();
  }
  EXPECT_EQ(out, std::vector<int8_t>(n, 7));
  const ocl::Event empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.wait(), InvalidInput);
  EXPECT_THROW(empty.start_ns(), InvalidInput);
}

TEST(OpenClRuntime, ObjectsOutliveTheirContextAndMove) {
  REQUIRE_OPENCL();
  std::optional<ocl::Context> ctx(std::in_place, "pocl");
  ocl::Program program = ocl::Program::from_source(*ctx, kAddSource, "-D BIAS=0");
  std::vector<int8_t> a(64, 100), b(64, 100);
  const ocl::Context moved(std::move(*ctx));
  EXPECT_THROW(ctx->platform(), InvalidInput);  // moved from
  ctx.reset();
  ocl::Program program2(std::move(program));
  const std::vector<int8_t> out = run_add(moved, program2, a, b, 0);
  EXPECT_EQ(out, std::vector<int8_t>(64, 127));
}

TEST(OpenClRuntime, ContextsInSeveralThreadsRunIndependently) {
  REQUIRE_OPENCL();
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < failures.size(); ++t)
    threads.emplace_back([t, &failures] {
      try {
        const ocl::Context ctx("pocl");
        const ocl::Program program = ocl::Program::from_source(ctx, kAddSource, "-D BIAS=" + std::to_string(t));
        std::mt19937 rng(static_cast<uint32_t>(100 + t));
        const std::vector<int8_t> a = random_int8(rng, 1000), b = random_int8(rng, 1000);
        const std::vector<int8_t> out = run_add(ctx, program, a, b, 0);
        for (size_t i = 0; i < a.size(); ++i)
          if (out[i] != add_sat_reference(a[i], b[i], static_cast<int32_t>(t)))
            failures[t] = "thread " + std::to_string(t) + ": wrong value at " + std::to_string(i);
      } catch (const std::exception& e) {
        failures[t] = "thread " + std::to_string(t) + ": " + e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (const std::string& f : failures) EXPECT_EQ(f, "");
}

// ---- processes ----

TEST(OpenClRuntime, AForkedChildGetsAnErrorInsteadOfUsingOpenCl) {
  REQUIRE_OPENCL();
  const ocl::Context ctx("pocl");
  std::optional<ocl::Buffer> buf(std::in_place, ctx, 64);
  std::vector<char> host(64, 5);
  buf->write(host.data(), 64);
  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) {
    // The child: any hang is turned into a failure by the alarm; it leaves with _exit, so no
    // destructor or atexit handler of OpenCL runs.
    alarm(30);
    int code = 0;
    try {
      ctx.finish();
      code = 10;
    } catch (const Error& e) {
      if (!contains(e.what(), "cannot be used in process") || !contains(e.what(), "fork")) code = 11;
    }
    try {
      ocl::Buffer again(ctx, 16);
      code = code ? code : 12;
    } catch (const Error& e) {
      if (!contains(e.what(), "fork")) code = code ? code : 13;
    }
    if (!contains(ocl::opencl_unavailable_reason(), "fork")) code = code ? code : 14;
    buf.reset();  // the destructor must release nothing here
    _exit(code);
  }
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {
    done = waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forked child hung";
  }
  ASSERT_TRUE(WIFEXITED(status)) << dnnfusion::describe_status(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: the child used OpenCL; 11: wrong message; 12/13: Buffer; 14: reason";
  // The parent is unaffected.
  std::vector<char> back(64, 0);
  buf->read(back.data(), 64);
  EXPECT_EQ(back, host);
  ctx.finish();
}
