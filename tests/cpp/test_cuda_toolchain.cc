// The cuda target's toolchain glue: the process runner (common/subprocess.h), finding CUDA tools
// and the archs ptxas accepts (cuda_tools.h), assembling PTX and reading ptxas's resource report
// (ptxas.h), SASS statistics from the cubin's ELF and nvdisasm (sass_stats.h), and the driver
// wrapper (cuda_driver.h): its no-driver path everywhere, a real launch where a GPU is present.
//
// Tests that need the real ptxas or nvdisasm skip (with the reason) when they are not installed;
// nvdisasm is taken from $DNNFUSION_NVDISASM or pip's nvidia/cu13/bin in the project venv. Fake
// tools are shell scripts in a per-test temporary directory; every environment variable a test sets
// is restored when it ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/subprocess.h"
#include "target/cuda/toolchain/cuda_driver.h"
#include "target/cuda/toolchain/cuda_tools.h"
#include "target/cuda/toolchain/ptxas.h"
#include "target/cuda/toolchain/sass_stats.h"
#include "test_env_util.h"

namespace fs = std::filesystem;
namespace cuda = dnnfusion::cuda;
using dnnfusion::CompilerTimeout;
using dnnfusion::Error;
using dnnfusion::InvalidInput;
using dnnfusion::TargetUnavailable;
using dnnfusion::test_util::error_of;
using dnnfusion::test_util::ScopedEnv;

namespace {

// This file's temporary directories: $TMPDIR/dnnf_cuda_test_XXXXXX.
struct TempDir : dnnfusion::test_util::TempDir {
  TempDir() : dnnfusion::test_util::TempDir("dnnf_cuda_test_") {}
};

// Makes nvdisasm findable the way the Python package will (a registered directory), unless the
// environment names one already.
// The venv is $DNNFUSION_VENV, else ~/.venvs/dnnfusion (scripts/setup.sh); its wheels' tools are in
// lib/python3.*/site-packages/nvidia/*/bin.
void register_venv_tools() {
  const char* v = std::getenv("DNNFUSION_VENV");
  const char* home = std::getenv("HOME");
  const fs::path venv = v && *v ? fs::path(v) : fs::path(home ? home : "/") / ".venvs" / "dnnfusion";
  std::error_code ec;
  for (const auto& py : fs::directory_iterator(venv / "lib", ec)) {
    const fs::path nvidia = py.path() / "site-packages" / "nvidia";
    for (const auto& pkg : fs::directory_iterator(nvidia, ec))
      if (fs::is_directory(pkg.path() / "bin")) cuda::add_cuda_tool_dir((pkg.path() / "bin").string());
  }
}

#define REQUIRE_PTXAS()                                                                       \
  do {                                                                                        \
    if (cuda::find_cuda_tool("ptxas").empty()) GTEST_SKIP() << "no ptxas installed (pip install nvidia-cuda-nvcc)"; \
  } while (0)

#define REQUIRE_NVDISASM()                                                                        \
  do {                                                                                            \
    register_venv_tools();                                                                        \
    if (cuda::find_cuda_tool("nvdisasm").empty()) GTEST_SKIP() << "no nvdisasm installed (pip install nvidia-cuda-nvdisasm)"; \
  } while (0)

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The major release of the ptxas found ("13" for CUDA 13.x), "" if unknown.
std::string ptxas_release() {
  const std::string ptxas = cuda::find_cuda_tool("ptxas");
  if (ptxas.empty()) return "";
  const auto r = dnnfusion::run_process({ptxas, "--version"}, dnnfusion::current_environment(), 60, "ptxas");
  const size_t at = r.output.find("release ");
  return at == std::string::npos ? "" : r.output.substr(at + 8, r.output.find('.', at) - at - 8);
}

const char* kPtxHeader = ".version 7.0\n.target sm_75\n.address_size 64\n";

// A kernel writing n dependent FMAs of the thread index (each with immediate operands: the
// multiplier, and the addend too when both_immediate) to out[tid].
std::string fma_chain_ptx(const std::string& name, int n, bool both_immediate) {
  std::ostringstream p;
  p << kPtxHeader << ".visible .entry " << name << "(.param .u64 out, .param .f32 y)\n{\n"
    << "  .reg .f32 %f<4>;\n  .reg .u64 %rd<4>;\n  .reg .u32 %r<2>;\n"
    << "  ld.param.u64 %rd1, [out];\n  ld.param.f32 %f2, [y];\n  mov.u32 %r1, %tid.x;\n"
    << "  cvt.rn.f32.u32 %f1, %r1;\n";
  for (int i = 0; i < n; ++i)
    p << "  fma.rn.f32 %f1, %f1, 0f3F000000, " << (both_immediate ? "0f3F800000" : "%f2") << ";\n";
  p << "  cvta.to.global.u64 %rd1, %rd1;\n  mul.wide.u32 %rd2, %r1, 4;\n  add.u64 %rd3, %rd1, %rd2;\n"
    << "  st.global.f32 [%rd3], %f1;\n  ret;\n}\n";
  return p.str();
}

// y[i] = a * x[i] + 1 for i < n: the kernel the GPU test launches.
std::string axpb_ptx() {
  return std::string(kPtxHeader) +
         ".visible .entry axpb(.param .u64 y, .param .u64 x, .param .f32 a, .param .u32 n)\n{\n"
         "  .reg .pred %p<2>;\n  .reg .f32 %f<4>;\n  .reg .u32 %r<6>;\n  .reg .u64 %rd<8>;\n"
         "  ld.param.u64 %rd1, [y];\n  ld.param.u64 %rd2, [x];\n  ld.param.f32 %f1, [a];\n  ld.param.u32 %r1, [n];\n"
         "  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %tid.x;\n"
         "  mad.lo.u32 %r5, %r2, %r3, %r4;\n  setp.ge.u32 %p1, %r5, %r1;\n  @%p1 bra DONE;\n"
         "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;\n  mul.wide.u32 %rd3, %r5, 4;\n"
         "  add.u64 %rd4, %rd2, %rd3;\n  add.u64 %rd5, %rd1, %rd3;\n  ld.global.f32 %f2, [%rd4];\n"
         "  fma.rn.f32 %f3, %f2, %f1, 0f3F800000;\n  st.global.f32 [%rd5], %f3;\nDONE:\n  ret;\n}\n";
}

// Twenty-four values live across a call to a non-inlined function with a dynamically indexed
// local array: spills under a tight register limit; uses 1 KiB of static shared memory.
std::string spilling_ptx() {
  std::ostringstream p;
  p << kPtxHeader << ".shared .align 4 .b8 sbuf[1024];\n"
    << ".func (.reg .f32 r) helper(.reg .f32 a)\n{\n  .local .align 4 .b8 arr[256];\n"
    << "  .reg .u64 %rd<4>;\n  .reg .u32 %r<2>;\n  mov.u64 %rd1, arr;\n  cvt.rzi.u32.f32 %r1, a;\n"
    << "  and.b32 %r1, %r1, 63;\n  mul.wide.u32 %rd2, %r1, 4;\n  add.u64 %rd3, %rd1, %rd2;\n"
    << "  st.local.f32 [%rd3], a;\n  ld.local.f32 r, [arr+8];\n  ret;\n}\n"
    << ".visible .entry big(.param .u64 out)\n{\n  .reg .f32 %f<40>;\n  .reg .u64 %rd<2>;\n"
    << "  ld.param.u64 %rd1, [out];\n  cvta.to.global.u64 %rd1, %rd1;\n";
  for (int i = 1; i <= 24; ++i) p << "  ld.global.f32 %f" << i << ", [%rd1+" << 4 * (i - 1) << "];\n";
  p << "  st.shared.f32 [sbuf], %f24;\n";
  for (int i = 2; i <= 23; ++i) p << "  mul.f32 %f" << i << ", %f" << i << ", %f" << i + 1 << ";\n";
  p << "  { .param .f32 a0; .param .f32 r0;\n    st.param.f32 [a0], %f1;\n"
    << "    call.uni (r0), helper, (a0);\n    ld.param.f32 %f30, [r0]; }\n  st.global.f32 [%rd1], %f30;\n";
  for (int i = 2; i <= 23; ++i) p << "  st.global.f32 [%rd1+" << 4 * (i - 1) << "], %f" << i << ";\n";
  p << "  ret;\n}\n";
  return p.str();
}

}  // namespace

// ---- common/subprocess.h ----

TEST(Subprocess, CapturesOutputAndExitStatus) {
  TempDir dir;
  const std::string s = dir.script("tool", "echo out; echo err 1>&2; exit 3\n");
  const auto r = dnnfusion::run_process({s}, dnnfusion::current_environment(), 30, "the tool");
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.succeeded());
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 3);
  EXPECT_EQ(dnnfusion::describe_status(r.status), "exited with status 3");
  EXPECT_TRUE(contains(r.output, "out\n") && contains(r.output, "err\n")) << r.output;
}

TEST(Subprocess, EnvironmentIsExactlyWhatIsGiven) {
  TempDir dir;
  const std::string s = dir.script("tool", "echo \"[$DNNF_A][$DNNF_B]\"\n");
  ScopedEnv b("DNNF_B", "dropped");
  std::vector<std::string> env = dnnfusion::current_environment({"DNNF_B"});
  env.push_back("DNNF_A=given");
  const auto r = dnnfusion::run_process({s}, env, 30);
  EXPECT_TRUE(r.succeeded());
  EXPECT_EQ(r.output, "[given][]\n");
}

TEST(Subprocess, TimeoutKillsTheWholeProcessGroup) {
  TempDir dir;
  const std::string pidfile = dir.file("pid");
  const std::string s = dir.script("tool", "sleep 60 &\necho $! > " + pidfile + "\nwait\n");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = dnnfusion::run_process({s}, dnnfusion::current_environment(), 0.5);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL);
  int child = 0;
  std::ifstream(pidfile) >> child;
  ASSERT_GT(child, 0);
  // The grandchild is reparented and reaped by init: gone, or a zombie for a moment.
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    std::string state;
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    if (!stat) gone = true;
    else {
      std::string line;
      std::getline(stat, line);
      gone = line.find(") Z") != std::string::npos;
    }
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "the sleep started by the timed-out script survived";
}

TEST(Subprocess, AProgramThatCannotStartIsAnErrorNamingIt) {
  const std::string msg = error_of<Error>(
      [] { dnnfusion::run_process({"/nonexistent/dnnf-tool"}, dnnfusion::current_environment(), 5, "the frobnicator"); });
  EXPECT_TRUE(contains(msg, "cannot run the frobnicator /nonexistent/dnnf-tool")) << msg;
  EXPECT_THROW(dnnfusion::run_process({}, {}, 5), InvalidInput);
}

TEST(Subprocess, DisplayCommandQuotesWhatAShellWouldSplit) {
  EXPECT_EQ(dnnfusion::display_command({"/bin/ptxas", "-arch=sm_80", "a b", "it's"}),
            "/bin/ptxas -arch=sm_80 'a b' 'it'\\''s'");
}

// ---- cuda_tools.h: discovery ----

TEST(CudaTools, ExplicitOverrideIsTheOnlyCandidate) {
  TempDir dir;
  const std::string fake = dir.script("my-ptxas", "exit 0\n");
  {
    ScopedEnv e("DNNFUSION_PTXAS", fake);
    EXPECT_EQ(cuda::find_cuda_tool("ptxas"), fake);
  }
  const std::string missing = dir.file("no-such-ptxas");
  ScopedEnv e("DNNFUSION_PTXAS", missing);
  EXPECT_EQ(cuda::find_cuda_tool("ptxas"), "");  // not bypassed by /usr/local/cuda/bin or PATH
  const std::string msg = error_of<TargetUnavailable>([] { cuda::require_cuda_tool("ptxas"); });
  EXPECT_TRUE(contains(msg, "$DNNFUSION_PTXAS=" + missing + " (not an executable file)")) << msg;
  EXPECT_TRUE(contains(msg, "pip install nvidia-cuda-nvcc")) << msg;
  EXPECT_TRUE(contains(msg, "CUDA toolkit")) << msg;
  // A directory or a non-executable file is not a tool.
  ScopedEnv d("DNNFUSION_PTXAS", dir.path().string());
  EXPECT_EQ(cuda::find_cuda_tool("ptxas"), "");
}

TEST(CudaTools, SearchOrderRegisteredDirThenCudaHomeThenPath) {
  TempDir reg, home, path;
  fs::create_directories(home.file("bin"));
  const std::string in_home = home.script("bin/cuobjdump", "exit 0\n");
  const std::string in_path = path.script("cuobjdump", "exit 0\n");
  ScopedEnv o("DNNFUSION_CUOBJDUMP", nullptr);
  ScopedEnv p("PATH", path.path().string());
  ScopedEnv cp("CUDA_PATH", nullptr);
  const bool system_one = fs::exists("/usr/local/cuda/bin/cuobjdump");
  {
    ScopedEnv h("CUDA_HOME", nullptr);
    EXPECT_EQ(cuda::find_cuda_tool("cuobjdump"), system_one ? "/usr/local/cuda/bin/cuobjdump" : in_path);
  }
  ScopedEnv h("CUDA_HOME", home.path().string());
  EXPECT_EQ(cuda::find_cuda_tool("cuobjdump"), in_home);
  const std::string in_reg = reg.script("cuobjdump", "exit 0\n");
  cuda::add_cuda_tool_dir(reg.path().string());
  cuda::add_cuda_tool_dir(reg.path().string());  // a duplicate is ignored
  EXPECT_EQ(cuda::find_cuda_tool("cuobjdump"), in_reg);
  const std::string where = cuda::cuda_tool_search_description("cuobjdump");
  EXPECT_LT(where.find(reg.path().string()), where.find(home.path().string())) << where;
  EXPECT_LT(where.find(home.path().string()), where.find("/usr/local/cuda/bin/cuobjdump")) << where;
  EXPECT_LT(where.find("/usr/local/cuda/bin/cuobjdump"), where.find(path.path().string())) << where;
}

TEST(CudaTools, AnAbsentToolIsEmptyAndItsErrorSaysWhereAndHow) {
  if (fs::exists("/usr/local/cuda/bin/cuobjdump")) GTEST_SKIP() << "this machine has /usr/local/cuda/bin/cuobjdump";
  TempDir empty;
  ScopedEnv o("DNNFUSION_CUOBJDUMP", nullptr);
  ScopedEnv h("CUDA_HOME", empty.path().string());
  ScopedEnv cp("CUDA_PATH", nullptr);
  ScopedEnv p("PATH", empty.path().string());
  ASSERT_EQ(cuda::find_cuda_tool("cuobjdump"), "");
  const std::string msg = error_of<TargetUnavailable>([] { cuda::require_cuda_tool("cuobjdump"); });
  EXPECT_TRUE(contains(msg, "cuobjdump, which was not found")) << msg;
  EXPECT_TRUE(contains(msg, "$DNNFUSION_CUOBJDUMP (unset)")) << msg;
  EXPECT_TRUE(contains(msg, empty.file("bin/cuobjdump"))) << msg;
  EXPECT_TRUE(contains(msg, "/usr/local/cuda/bin/cuobjdump")) << msg;
  EXPECT_TRUE(contains(msg, "pip install nvidia-cuda-cuobjdump")) << msg;
}

TEST(CudaTools, UnknownToolIsInvalidInput) {
  EXPECT_THROW(cuda::find_cuda_tool("nvcc"), InvalidInput);
  EXPECT_THROW(cuda::require_cuda_tool(""), InvalidInput);
}

TEST(CudaTools, CompileTimeoutVariable) {
  {
    ScopedEnv t("DNNFUSION_COMPILE_TIMEOUT", nullptr);
    EXPECT_EQ(cuda::tool_timeout_seconds(), 300);
  }
  {
    ScopedEnv t("DNNFUSION_COMPILE_TIMEOUT", "2.5");
    EXPECT_EQ(cuda::tool_timeout_seconds(), 2.5);
  }
  for (const char* bad : {"0", "-1", "soon", "1e999", "nan"}) {
    ScopedEnv t("DNNFUSION_COMPILE_TIMEOUT", bad);
    const std::string msg = error_of<InvalidInput>([] { cuda::tool_timeout_seconds(); });
    EXPECT_TRUE(contains(msg, "DNNFUSION_COMPILE_TIMEOUT")) << bad << ": " << msg;
  }
}

// ---- cuda_tools.h: architectures ----

TEST(CudaArchs, TheInstalledPtxasAcceptsTheCommonArchs) {
  REQUIRE_PTXAS();
  const auto archs = cuda::supported_archs();
  for (const char* a : {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90"}) EXPECT_TRUE(has(archs, a)) << a;
  if (ptxas_release() == "13") {
    // CUDA 13 dropped Volta and renamed sm_101 to sm_110.
    for (const char* a : {"sm_75", "sm_88", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_103", "sm_110", "sm_120",
                          "sm_121"})
      EXPECT_TRUE(has(archs, a)) << a;
    for (const char* a : {"sm_70", "sm_72", "sm_101"}) EXPECT_FALSE(has(archs, a)) << a;
  }
  for (const auto& a : archs) EXPECT_TRUE(has(cuda::known_archs(), a)) << a;
}

TEST(CudaArchs, ValidateArchListsTheAllowedValues) {
  REQUIRE_PTXAS();
  EXPECT_NO_THROW(cuda::validate_arch("sm_80"));
  for (const char* bad : {"sm_91", "", "sm80", "compute_80", "SM_80"}) {
    const std::string msg = error_of<InvalidInput>([&] { cuda::validate_arch(bad); });
    EXPECT_TRUE(contains(msg, "allowed values: ") && contains(msg, "sm_80, sm_86")) << msg;
  }
  if (ptxas_release() == "13") {
    const std::string msg = error_of<InvalidInput>([] { cuda::validate_arch("sm_70"); });
    EXPECT_TRUE(contains(msg, "'sm_70' is not supported by")) << msg;
    EXPECT_TRUE(contains(msg, "sm_75, sm_80")) << msg;
  }
}

TEST(CudaArchs, ReadFromTheHelpTextOfAnotherPtxas) {
  TempDir dir;
  const std::string fake = dir.script("ptxas",
                                      "cat <<'EOF'\n"
                                      "--fmad <true|false>  (-fmad)\n        Allowed values:  'true','false'.\n"
                                      "--gpu-name <gpu name>                               (-arch)\n"
                                      "        Specify name of NVIDIA GPU to generate code for.\n"
                                      "        Allowed values for this option:  'compute_86','lto_86','sm_86',\n"
                                      "        'sm_90a','sm_999'.\n        Default value:  'sm_86'.\n\n"
                                      "--help                                              (-h)\n"
                                      "        Allowed values for this option:  'sm_120'.\n"
                                      "EOF\n");
  ScopedEnv e("DNNFUSION_PTXAS", fake);
  EXPECT_EQ(cuda::supported_archs(), (std::vector<std::string>{"sm_86", "sm_90a"}));
  const std::string msg = error_of<InvalidInput>([] { cuda::validate_arch("sm_80"); });
  EXPECT_TRUE(contains(msg, "allowed values: sm_86, sm_90a")) << msg;
  EXPECT_NO_THROW(cuda::validate_arch("sm_90a"));
}

TEST(CudaArchs, ProbedWhenTheHelpTextHasNoList) {
  TempDir dir;
  // Accepts -arch=sm_80 and -arch=sm_120 (writing the -o file), refuses the rest.
  const std::string fake = dir.script("ptxas",
                                      "[ \"$1\" = --help ] && { echo 'usage: ptxas [options] file'; exit 0; }\n"
                                      "case \"$1\" in -arch=sm_80|-arch=sm_120) ;; *) exit 1 ;; esac\n"
                                      ": > \"$3\"\n");
  ScopedEnv e("DNNFUSION_PTXAS", fake);
  EXPECT_EQ(cuda::supported_archs(), (std::vector<std::string>{"sm_80", "sm_120"}));
}

TEST(CudaArchs, WithoutPtxasOnlyTheSpellingIsChecked) {
  TempDir dir;
  ScopedEnv e("DNNFUSION_PTXAS", dir.file("absent"));
  EXPECT_TRUE(cuda::supported_archs().empty());
  const std::string missing = error_of<TargetUnavailable>([] { cuda::validate_arch("sm_90"); });
  EXPECT_TRUE(contains(missing, "pip install nvidia-cuda-nvcc")) << missing;
  const std::string typo = error_of<InvalidInput>([] { cuda::validate_arch("sm_9O"); });
  EXPECT_TRUE(contains(typo, "sm_75") && contains(typo, "no ptxas was found")) << typo;
}

// ---- ptxas.h ----

TEST(Ptxas, AssemblesAnFmaKernelForEachCommonArch) {
  REQUIRE_PTXAS();
  const std::string ptx = fma_chain_ptx("chain", 8, true) + axpb_ptx().substr(std::strlen(kPtxHeader));
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    SCOPED_TRACE(arch);
    const cuda::Cubin c = cuda::assemble_ptx(ptx, arch);
    EXPECT_EQ(c.arch, arch);
    ASSERT_GT(c.bytes.size(), 64u);
    EXPECT_EQ(c.bytes.substr(0, 4), "\x7f" "ELF");
    ASSERT_EQ(c.kernels.size(), 2u) << c.log;
    for (const char* k : {"chain", "axpb"}) {
      const cuda::KernelResources& r = c.kernel(k);
      EXPECT_GE(r.registers, 4) << k << "\n" << c.log;
      EXPECT_LE(r.registers, 32) << k << "\n" << c.log;
      EXPECT_FALSE(r.spills()) << c.log;
      EXPECT_EQ(r.stack_frame_bytes, 0) << c.log;
      EXPECT_EQ(r.shared_bytes, 0) << c.log;
    }
    EXPECT_FALSE(c.spills());
    EXPECT_GT(c.ptxas_seconds, 0);
    EXPECT_TRUE(contains(c.log, "Used ")) << c.log;
    const std::string msg = error_of<InvalidInput>([&] { c.kernel("nope"); });
    EXPECT_TRUE(contains(msg, "chain") && contains(msg, "axpb")) << msg;
  }
}

TEST(Ptxas, ATightRegisterLimitIsReportedAsSpilling) {
  REQUIRE_PTXAS();
  for (const char* arch : {"sm_80", "sm_90"}) {
    SCOPED_TRACE(arch);
    const cuda::Cubin free = cuda::assemble_ptx(spilling_ptx(), arch);
    const cuda::KernelResources& f = free.kernel("big");
    EXPECT_FALSE(f.spills()) << free.log;
    EXPECT_GE(f.stack_frame_bytes, 256) << free.log;  // the helper's local array
    EXPECT_EQ(f.shared_bytes, 1024) << free.log;

    cuda::AssembleOptions tight;
    tight.max_registers = 16;  // ptxas raises it to its ABI minimum (24)
    const cuda::Cubin c = cuda::assemble_ptx(spilling_ptx(), arch, tight);
    const cuda::KernelResources& k = c.kernel("big");
    EXPECT_TRUE(c.spills()) << c.log;
    EXPECT_GT(k.spill_store_bytes, 0) << c.log;
    EXPECT_GT(k.spill_load_bytes, 0) << c.log;
    EXPECT_LE(k.registers, 24) << c.log;
    EXPECT_GT(k.stack_frame_bytes, f.stack_frame_bytes) << c.log;
    EXPECT_TRUE(contains(c.log, "spilled")) << c.log;  // --warn-on-spills
  }
}

TEST(Ptxas, RejectedPtxIsAnErrorWithTheLogAndTheLine) {
  REQUIRE_PTXAS();
  const std::string ptx = std::string(kPtxHeader) + ".visible .entry k()\n{\n  frobnicate.f32 %f1;\n  ret;\n}\n";
  try {
    cuda::assemble_ptx(ptx, "sm_80");
    ADD_FAILURE() << "assembled invalid PTX";
  } catch (const CompilerTimeout& e) {
    ADD_FAILURE() << "not a timeout: " << e.what();
  } catch (const InvalidInput& e) {
    ADD_FAILURE() << "not the caller's input: " << e.what();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "ptxas failed on generated PTX for sm_80")) << msg;
    EXPECT_TRUE(contains(msg, "line 6")) << msg;                             // ptxas's own log
    EXPECT_TRUE(contains(msg, "line 6: frobnicate.f32 %f1;")) << msg;  // the offending PTX line
  }
}

TEST(Ptxas, AHangingPtxasIsKilledAtTheTimeout) {
  TempDir dir, tmp;
  const std::string pidfile = dir.file("pid");
  const std::string fake = dir.script(
      "ptxas", "[ \"$1\" = --help ] && { echo \"--gpu-name (-arch)\n  Allowed values for this option: 'sm_80'.\"; exit 0; }\n"
               "sleep 60 &\necho $! > " + pidfile + "\nwait\n");
  ScopedEnv e("DNNFUSION_PTXAS", fake);
  ScopedEnv t("TMPDIR", tmp.path().string());
  cuda::AssembleOptions o;
  o.timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of<CompilerTimeout>([&] { cuda::assemble_ptx(fma_chain_ptx("k", 1, false), "sm_80", o); });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  EXPECT_TRUE(contains(msg, "within 1 s") && contains(msg, "DNNFUSION_COMPILE_TIMEOUT")) << msg;
  EXPECT_TRUE(fs::is_empty(tmp.path())) << "the scratch directory was left behind";
  int child = 0;
  std::ifstream(pidfile) >> child;
  ASSERT_GT(child, 0);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    gone = !stat || (std::getline(stat, line), line.find(") Z") != std::string::npos);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "ptxas's child survived the timeout";
}

TEST(Ptxas, MissingPtxasAndBadOptions) {
  TempDir dir;
  {
    ScopedEnv e("DNNFUSION_PTXAS", dir.file("absent"));
    const std::string msg = error_of<TargetUnavailable>([] { cuda::assemble_ptx(fma_chain_ptx("k", 1, false), "sm_80"); });
    EXPECT_TRUE(contains(msg, "pip install nvidia-cuda-nvcc")) << msg;
  }
  cuda::AssembleOptions o;
  o.max_registers = 300;
  EXPECT_THROW(cuda::assemble_ptx("", "sm_80", o), InvalidInput);
  o.max_registers = 0;
  o.timeout_s = -1;
  EXPECT_THROW(cuda::assemble_ptx("", "sm_80", o), InvalidInput);
  REQUIRE_PTXAS();
  EXPECT_THROW(cuda::assemble_ptx(fma_chain_ptx("k", 1, false), "sm_91"), InvalidInput);
}

TEST(Ptxas, ParsesReportsOfOtherReleasesAndLayouts) {
  // Older ptxas: no barriers item, cmem banks on the Used line, "A+B bytes smem"; a non-entry
  // function's properties between entries; unrelated lines anywhere.
  const std::string log =
      "ptxas info    : 16 bytes gmem, 8 bytes cmem[3]\n"
      "ptxas info    : Compiling entry function '_Z1fPf' for 'sm_52'\n"
      "ptxas info    : Function properties for _Z1fPf\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 30 registers, 2048+16 bytes smem, 352 bytes cmem[0], 8 bytes cmem[2]\n"
      "ptxas info    : Function properties for helper\n"
      "    64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas warning : something unrelated, 99 registers\n"
      "ptxas info    : Compiling entry function 'g' for 'sm_90'\n"
      "ptxas info    : Function properties for g\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 32 bytes cumulative stack size, 49152 bytes smem\n"
      "ptxas info    : Compile time = 1.000 ms\n";
  const cuda::PtxasReport r = cuda::parse_ptxas_verbose(log);
  ASSERT_EQ(r.kernels.size(), 2u);
  EXPECT_EQ(r.global_bytes, 16);
  const auto& f = r.kernels[0];
  EXPECT_EQ(f.name, "_Z1fPf");
  EXPECT_EQ(f.registers, 30);
  EXPECT_EQ(f.barriers, 0);
  EXPECT_EQ(f.shared_bytes, 2064);
  EXPECT_EQ(f.const_bytes, 360);
  EXPECT_EQ(f.stack_frame_bytes, 8);
  EXPECT_EQ(f.spill_store_bytes, 4);
  EXPECT_EQ(f.spill_load_bytes, 12);
  const auto& g = r.kernels[1];
  EXPECT_EQ(g.name, "g");
  EXPECT_EQ(g.registers, 255);
  EXPECT_EQ(g.barriers, 1);
  EXPECT_EQ(g.shared_bytes, 49152);
  EXPECT_EQ(g.const_bytes, 0);
  EXPECT_FALSE(g.spills());
  EXPECT_TRUE(cuda::parse_ptxas_verbose("").kernels.empty());
  EXPECT_TRUE(cuda::parse_ptxas_verbose("garbage\nUsed lots of registers\n    bytes stack frame\n").kernels.empty());
}

// ---- sass_stats.h ----

TEST(SassStats, TextBytesOverSixteenIsWhatNvdisasmCounts) {
  REQUIRE_PTXAS();
  REQUIRE_NVDISASM();
  const std::string ptx = fma_chain_ptx("chain", 8, false) + axpb_ptx().substr(std::strlen(kPtxHeader));
  for (const char* arch : {"sm_80", "sm_89", "sm_90", "sm_120"}) {
    SCOPED_TRACE(arch);
    const cuda::Cubin c = cuda::assemble_ptx(ptx, arch);
    const cuda::SassStats s = cuda::sass_stats(c.bytes);
    EXPECT_EQ(s.sm, std::stoi(std::string(arch).substr(3)));
    EXPECT_GT(s.text_bytes, 0);
    EXPECT_EQ(s.text_bytes % 128, 0);  // each kernel's code is padded with NOPs to 128 bytes
    EXPECT_EQ(s.instructions, s.text_bytes / 16);
    EXPECT_EQ(s.disassembled_instructions, s.instructions) << s.nvdisasm_unavailable_reason;
    EXPECT_EQ(s.kernel_text_bytes.size(), 2u);
    EXPECT_EQ(s.kernel_text_bytes.at("chain") + s.kernel_text_bytes.at("axpb"), s.text_bytes);
    EXPECT_EQ(s.nvdisasm_unavailable_reason, "");
    EXPECT_GE(s.opcodes.at("EXIT"), 2);
    EXPECT_GE(s.opcodes.at("NOP"), 1);  // the padding is counted as instructions
  }
}

TEST(SassStats, CountsTheDependentFmasOfAChain) {
  REQUIRE_PTXAS();
  REQUIRE_NVDISASM();
  // One FFMA per PTX fma: a dependent chain cannot be folded. An FFMA has one 32-bit immediate
  // slot; with two immediate operands the other is first moved into a register (once: the whole
  // chain reuses it).
  const std::string one = fma_chain_ptx("one_immediate", 16, false);
  const std::string two = fma_chain_ptx("two_immediates", 16, true).substr(std::strlen(kPtxHeader));
  for (const char* arch : {"sm_80", "sm_86", "sm_90", "sm_120"}) {
    SCOPED_TRACE(arch);
    const cuda::SassStats s1 = cuda::sass_stats(cuda::assemble_ptx(one, arch).bytes);
    EXPECT_EQ(s1.ffma, 16);
    const cuda::SassStats s2 = cuda::sass_stats(cuda::assemble_ptx(one + two, arch).bytes);
    EXPECT_EQ(s2.ffma, 32);
    EXPECT_EQ(s2.opcodes.at("FFMA"), 32);
  }
}

TEST(SassStats, WithoutNvdisasmTheElfFiguresRemain) {
  REQUIRE_PTXAS();
  const cuda::Cubin c = cuda::assemble_ptx(fma_chain_ptx("chain", 4, false), "sm_80");
  TempDir dir;
  ScopedEnv e("DNNFUSION_NVDISASM", dir.file("absent"));
  const cuda::SassStats s = cuda::sass_stats(c.bytes);
  EXPECT_GT(s.instructions, 0);
  EXPECT_EQ(s.ffma, -1);
  EXPECT_EQ(s.disassembled_instructions, -1);
  EXPECT_TRUE(s.opcodes.empty());
  EXPECT_TRUE(contains(s.nvdisasm_unavailable_reason, "nvdisasm was not found")) << s.nvdisasm_unavailable_reason;
  EXPECT_TRUE(contains(s.nvdisasm_unavailable_reason, "pip install nvidia-cuda-nvdisasm")) << s.nvdisasm_unavailable_reason;
  // A failing nvdisasm is a reason too, not an error.
  const std::string broken = dir.script("nvdisasm", "echo 'nvdisasm fatal: cannot decode' >&2; exit 2\n");
  ScopedEnv b("DNNFUSION_NVDISASM", broken);
  const cuda::SassStats f = cuda::sass_stats(c.bytes);
  EXPECT_EQ(f.ffma, -1);
  EXPECT_TRUE(contains(f.nvdisasm_unavailable_reason, "exited with status 2: nvdisasm fatal: cannot decode"))
      << f.nvdisasm_unavailable_reason;
}

namespace {

// Patches `bytes` at `offset` of a copy of `image`.
template <typename T>
std::string patched(std::string image, size_t offset, T value) {
  std::memcpy(image.data() + offset, &value, sizeof value);
  return image;
}

}  // namespace

TEST(SassStats, TruncatedOrCorruptCubinsAreInvalidInputNeverACrash) {
  REQUIRE_PTXAS();
  const std::string good = cuda::assemble_ptx(fma_chain_ptx("chain", 4, false), "sm_90").bytes;
  ASSERT_NO_THROW(cuda::cubin_sections(good));
  // Every truncation: the section table sits at the end of a cubin, so all of them lose it.
  for (size_t n = 0; n < good.size(); n += (n < 128 ? 1 : 13))
    EXPECT_THROW(cuda::cubin_sections(good.substr(0, n)), InvalidInput) << n << " bytes";
  EXPECT_THROW(cuda::sass_stats(good.substr(0, good.size() / 2)), InvalidInput);
  EXPECT_THROW(cuda::sass_stats(""), InvalidInput);
  EXPECT_THROW(cuda::sass_stats(std::string(4096, '\0')), InvalidInput);
  // Header fields pointing outside the file (offsets as in Elf64_Ehdr).
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"class", patched<uint8_t>(good, 4, 1)},
      {"machine", patched<uint16_t>(good, 18, 62)},
      {"shoff", patched<uint64_t>(good, 40, ~0ull - 8)},
      {"shentsize", patched<uint16_t>(good, 58, 8)},
      {"shnum", patched<uint16_t>(good, 60, 0xfff0)},
      {"shstrndx", patched<uint16_t>(good, 62, 0xfff0)},
  };
  for (const auto& [what, image] : bad) {
    const std::string msg = error_of<InvalidInput>([&] { cuda::sass_stats(image); });
    EXPECT_TRUE(contains(msg, "not a valid cubin")) << what << ": " << msg;
  }
  // Section headers: a name offset, a size and an offset out of range.
  uint64_t shoff = 0;
  std::memcpy(&shoff, good.data() + 40, 8);
  const size_t sh1 = shoff + 64;  // section 1
  EXPECT_THROW(cuda::cubin_sections(patched<uint32_t>(good, sh1, 0x7fffffff)), InvalidInput);
  EXPECT_THROW(cuda::cubin_sections(patched<uint64_t>(good, sh1 + 32, ~0ull)), InvalidInput);
  EXPECT_THROW(cuda::cubin_sections(patched<uint64_t>(good, sh1 + 24, good.size())), InvalidInput);
  // Random byte flips: a valid answer or InvalidInput, nothing else (run under ASan too).
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string image = good;
    for (int k = 0; k < 4; ++k) image[rng() % image.size()] = static_cast<char>(rng());
    try {
      cuda::cubin_sections(image);
    } catch (const InvalidInput&) {
    }
  }
}

// ---- cuda_driver.h ----

TEST(CudaDriver, WithoutADriverEveryEntryPointSaysWhy) {
  const std::string why = cuda::driver_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a CUDA driver and device are present";
  EXPECT_TRUE(contains(why, "libcuda.so.1") || contains(why, "cuInit") || contains(why, "no CUDA device")) << why;
  const std::string msg = error_of<TargetUnavailable>([] { cuda::require_driver(); });
  EXPECT_TRUE(contains(msg, "the cuda target cannot run on this machine: " + why)) << msg;
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_THROW(cuda::device_arch(0), TargetUnavailable);
  EXPECT_THROW(cuda::CudaModule("\x7f" "ELF", 0), TargetUnavailable);
  EXPECT_THROW(cuda::DeviceBuffer(16, 0), TargetUnavailable);
  EXPECT_THROW(cuda::stream_synchronize(nullptr, 0), TargetUnavailable);
  EXPECT_EQ(cuda::driver_unavailable_reason(), why);  // decided once
}

TEST(CudaDriver, LaunchesAnAssembledKernelOnTheGpu) {
  if (const std::string why = cuda::driver_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  REQUIRE_PTXAS();
  ASSERT_GE(cuda::device_count(), 1);
  const std::string arch = cuda::device_arch(0);
  if (!has(cuda::supported_archs(), arch)) GTEST_SKIP() << "the installed ptxas does not assemble for " << arch;
  EXPECT_THROW(cuda::device_arch(cuda::device_count()), InvalidInput);
  const cuda::Cubin cubin = cuda::assemble_ptx(axpb_ptx(), arch);
  cuda::CudaModule module(cubin.bytes, 0);
  const cuda::CudaFunction f = module.function("axpb");
  const std::string missing = error_of<Error>([&] { module.function("nope"); });
  EXPECT_TRUE(contains(missing, "cuModuleGetFunction(\"nope\")") && contains(missing, "CUDA_ERROR_NOT_FOUND")) << missing;
  const cuda::FuncAttributes attr = module.func_attributes(f);
  EXPECT_EQ(attr.registers, cubin.kernel("axpb").registers);
  EXPECT_EQ(attr.local_bytes, 0);
  EXPECT_GE(attr.max_threads_per_block, 256);
  EXPECT_EQ(attr.binary_version, std::stoi(arch.substr(3)));

  const unsigned n = 1000;
  std::vector<float> x(n), y(n, -1);
  for (unsigned i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  cuda::DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  dx.copy_from_host(x.data(), n * sizeof(float));
  dy.copy_from_host(y.data(), n * sizeof(float));
  uint64_t py = dy.address(), px = dx.address();
  float a = 0.5f;
  unsigned count = n;
  // 64 KiB of dynamic shared memory: above the 48 KiB default, so launch must opt in.
  module.launch(f, {(n + 255) / 256, 1, 1}, {256, 1, 1}, 64 * 1024, nullptr, {&py, &px, &a, &count});
  cuda::stream_synchronize(nullptr, 0);
  dy.copy_to_host(y.data(), n * sizeof(float));
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.5f * static_cast<float>(i) + 1.0f) << i;

  if (f.param_count >= 0) {
    EXPECT_EQ(f.param_count, 4);
    EXPECT_THROW(module.launch(f, {1, 1, 1}, {1, 1, 1}, 0, nullptr, {&py, &px}), InvalidInput);
  }
  EXPECT_THROW(module.launch(f, {0, 1, 1}, {1, 1, 1}, 0, nullptr, {&py, &px, &a, &count}), InvalidInput);
  EXPECT_THROW(dy.copy_to_host(y.data(), (n + 1) * sizeof(float)), InvalidInput);
  EXPECT_THROW(cuda::CudaModule("not a cubin", 0), InvalidInput);
  EXPECT_THROW(cuda::CudaModule(cubin.bytes.substr(0, cubin.bytes.size() - 1), 0), InvalidInput);
  // SASS runs only on its own SM major version.
  const std::string other = arch.rfind("sm_9", 0) == 0 ? "sm_80" : "sm_90";
  if (has(cuda::supported_archs(), other)) {
    const std::string foreign = cuda::assemble_ptx(axpb_ptx(), other).bytes;
    const std::string msg = error_of<Error>([&] { cuda::CudaModule(foreign, 0); });
    EXPECT_TRUE(contains(msg, "cuModuleLoadData") && contains(msg, "CUDA_ERROR_")) << msg;
  }
}
