// Locating CUDA tools and the archs ptxas accepts (contract in cuda_tools.h). The arch list is read
// from the tool rather than assumed from its version: toolkits drop archs (CUDA 13 dropped sm_70
// and sm_72, renamed sm_101 to sm_110), and pip's ptxas may be a different release than the
// system toolkit's.
#include "target/cuda/toolchain/cuda_tools.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace dnnfusion::cuda {

namespace {


struct ToolInfo {
  const char* name;
  const char* override_var;
  const char* pip_package;
};

const ToolInfo kTools[] = {
    {"ptxas", "DNNFUSION_PTXAS", "nvidia-cuda-nvcc"},
    {"nvdisasm", "DNNFUSION_NVDISASM", "nvidia-cuda-nvdisasm"},
    {"cuobjdump", "DNNFUSION_CUOBJDUMP", "nvidia-cuda-cuobjdump"},
};

const ToolInfo& tool_info(const std::string& tool) {
  for (const auto& t : kTools)
    if (tool == t.name) return t;
  DNNF_THROW_AS(InvalidInput, "unknown CUDA tool '", tool, "' (known: ptxas, nvdisasm, cuobjdump)");
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool is_executable_file(const std::string& p) {
  struct stat st;
  return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

std::mutex& dirs_mutex() {
  static std::mutex mu;
  return mu;
}

std::vector<std::string>& registered_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

// The directories searched after the override, in order (empty entries dropped).
std::vector<std::string> search_dirs() {
  std::vector<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(dirs_mutex());
    dirs = registered_dirs();
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const std::string v = env_or_empty(var); !v.empty()) dirs.push_back(v + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  std::stringstream path(env_or_empty("PATH"));
  for (std::string d; std::getline(path, d, ':');)
    if (!d.empty()) dirs.push_back(d);
  return dirs;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

}  // namespace

// ---- tool discovery ----

std::string find_cuda_tool(const std::string& tool) {
  const ToolInfo& info = tool_info(tool);
  if (const std::string o = env_or_empty(info.override_var); !o.empty()) return is_executable_file(o) ? o : "";
  for (const auto& dir : search_dirs())
    if (const std::string p = dir + "/" + tool; is_executable_file(p)) return p;
  return "";
}

std::string cuda_tool_search_description(const std::string& tool) {
  const ToolInfo& info = tool_info(tool);
  if (const std::string o = env_or_empty(info.override_var); !o.empty())
    return std::string("$") + info.override_var + "=" + o + " (not an executable file)";
  std::vector<std::string> where;
  for (const auto& dir : search_dirs()) where.push_back(dir + "/" + tool);
  return std::string("$") + info.override_var + " (unset), " + join(where, ", ");
}

std::string require_cuda_tool(const std::string& tool) {
  std::string p = find_cuda_tool(tool);
  if (!p.empty()) return p;
  const ToolInfo& info = tool_info(tool);
  DNNF_THROW_AS(TargetUnavailable, "the cuda target needs ", tool, ", which was not found (looked at ",
                cuda_tool_search_description(tool), "); install it with `pip install ", info.pip_package,
                "` (into the environment dnnfusion runs in) or install the CUDA toolkit and set CUDA_HOME, or point $",
                info.override_var, " at the ", tool, " executable");
}

void add_cuda_tool_dir(const std::string& dir) {
  if (dir.empty()) return;
  std::lock_guard<std::mutex> lock(dirs_mutex());
  auto& dirs = registered_dirs();
  if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
}

double tool_timeout_seconds() { return compile_timeout_seconds(); }

// ---- scratch directories and running tools ----

ScratchDir::ScratchDir() {
  std::string root = env_or_empty("TMPDIR");
  if (root.empty() || root[0] != '/') root = "/tmp";
  std::string tmpl = root + "/dnnfusion-cuda-XXXXXX";
  if (!mkdtemp(tmpl.data())) DNNF_THROW("cannot create a temporary directory (mkdtemp ", tmpl, "): ", std::strerror(errno));
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ScratchDir::write(const std::string& name, const std::string& data) const {
  const std::string p = path_ + "/" + name;
  const int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) DNNF_THROW("cannot write ", p, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      close(fd);
      DNNF_THROW("cannot write ", p, ": ", std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  close(fd);
  return p;
}

std::string ScratchDir::read(const std::string& name) const {
  const std::string p = path_ + "/" + name;
  const int fd = open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) DNNF_THROW("cannot read ", p, ": ", std::strerror(errno));
  std::string data;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      close(fd);
      DNNF_THROW("cannot read ", p, ": ", std::strerror(e));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return data;
}

ProcessResult run_cuda_tool(const std::vector<std::string>& argv, const ScratchDir& scratch, double timeout_s,
                            size_t max_output) {
  std::vector<std::string> env = current_environment({"TMPDIR"});
  env.push_back("TMPDIR=" + scratch.path());
  const std::string label = std::filesystem::path(argv.at(0)).filename().string();
  return run_process(argv, env, timeout_s, label, max_output);
}

// ---- architectures ----

const std::vector<std::string>& known_archs() {
  static const std::vector<std::string> archs = {
      "sm_70",  "sm_72",   "sm_75",   "sm_80",   "sm_86",   "sm_87",   "sm_88",   "sm_89",   "sm_90",
      "sm_90a", "sm_100",  "sm_100a", "sm_100f", "sm_101",  "sm_101a", "sm_101f", "sm_103",  "sm_103a",
      "sm_103f", "sm_110", "sm_110a", "sm_110f", "sm_120",  "sm_120a", "sm_120f", "sm_121",  "sm_121a",
      "sm_121f"};
  return archs;
}

namespace {

[[noreturn]] void throw_tool_timeout(const std::string& tool, const std::string& doing, const ProcessResult& r) {
  DNNF_THROW_AS(CompilerTimeout, tool, " did not finish ", doing, " within ", format_seconds(tool_timeout_seconds()),
                " s and was killed; raise the limit with ", kCompileTimeoutVar, "=<seconds>",
                r.output.empty() ? "" : ":\n", r.output.substr(0, 4000));
}

// The quoted values in the "Allowed values" paragraph of ptxas's --gpu-name option; empty if the
// help text has no such paragraph.
std::vector<std::string> allowed_from_help(const std::string& help) {
  std::vector<std::string> out;
  const size_t opt = help.find("--gpu-name");
  if (opt == std::string::npos) return out;
  const size_t allowed = help.find("Allowed values", opt);
  const size_t next_opt = help.find("\n--", opt);
  if (allowed == std::string::npos || (next_opt != std::string::npos && allowed > next_opt)) return out;
  size_t end = std::min(help.find("Default value", allowed), next_opt);
  if (end == std::string::npos) end = help.size();
  for (size_t q = help.find('\'', allowed); q < end;) {
    const size_t close_q = help.find('\'', q + 1);
    if (close_q == std::string::npos || close_q > end) break;
    out.push_back(help.substr(q + 1, close_q - q - 1));
    q = help.find('\'', close_q + 1);
  }
  return out;
}

// The known archs for which ptxas assembles an empty kernel (PTX for sm_70 may be assembled for
// any later arch, including the a/f variants).
std::vector<std::string> probe_archs(const std::string& ptxas) {
  ScratchDir scratch;
  const std::string ptx = scratch.write("probe.ptx", ".version 6.0\n.target sm_70\n.address_size 64\n"
                                                     ".visible .entry probe()\n{\n  ret;\n}\n");
  std::vector<std::string> ok;
  for (const auto& arch : known_archs()) {
    const ProcessResult r =
        run_cuda_tool({ptxas, "-arch=" + arch, "-o", scratch.path() + "/probe.cubin", ptx}, scratch, tool_timeout_seconds());
    if (r.timed_out) throw_tool_timeout(ptxas, "assembling a trivial kernel for " + arch, r);
    if (r.succeeded()) ok.push_back(arch);
  }
  return ok;
}

std::vector<std::string> query_archs(const std::string& ptxas) {
  ScratchDir scratch;
  const ProcessResult r = run_cuda_tool({ptxas, "--help"}, scratch, tool_timeout_seconds());
  if (r.timed_out) throw_tool_timeout(ptxas, "printing its --help", r);
  const std::vector<std::string> allowed = r.succeeded() ? allowed_from_help(r.output) : std::vector<std::string>{};
  if (allowed.empty()) return probe_archs(ptxas);
  std::vector<std::string> ok;
  for (const auto& arch : known_archs())
    if (std::find(allowed.begin(), allowed.end(), arch) != allowed.end()) ok.push_back(arch);
  return ok;
}

}  // namespace

std::vector<std::string> supported_archs() {
  const std::string ptxas = find_cuda_tool("ptxas");
  struct stat st;
  if (ptxas.empty() || stat(ptxas.c_str(), &st) != 0) return {};
  // Keyed by the file's identity too: a ptxas replaced at the same path is asked again.
  using Key = std::tuple<std::string, dev_t, ino_t, off_t, time_t, long>;
  const Key key{ptxas, st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  static std::mutex mu;
  static std::map<Key, std::vector<std::string>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  std::vector<std::string> archs = query_archs(ptxas);
  std::lock_guard<std::mutex> lock(mu);
  return cache[key] = archs;
}

void validate_arch(const std::string& arch) {
  const auto& known = known_archs();
  if (std::find(known.begin(), known.end(), arch) == known.end()) {
    const std::vector<std::string> ok = supported_archs();
    DNNF_THROW_AS(InvalidInput, "unknown GPU architecture '", arch, "' for the cuda target; allowed values: ",
                  join(ok.empty() ? known : ok, ", "),
                  ok.empty() ? " (the archs this project knows; no ptxas was found to narrow them down)" : "");
  }
  const std::string ptxas = require_cuda_tool("ptxas");
  const std::vector<std::string> ok = supported_archs();
  if (std::find(ok.begin(), ok.end(), arch) == ok.end())
    DNNF_THROW_AS(InvalidInput, "GPU architecture '", arch, "' is not supported by ", ptxas, "; allowed values: ",
                  ok.empty() ? std::string("none (this ptxas assembles for none of ") + join(known, ", ") + ")"
                             : join(ok, ", "));
}

}  // namespace dnnfusion::cuda
