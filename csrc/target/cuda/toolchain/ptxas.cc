// ptxas driver and -v report parser (contract in ptxas.h). The report is parsed item by item
// ("24 registers", "1024 bytes smem", ...) rather than by fixed line layouts: ptxas releases add,
// drop and reorder items (barriers, cumulative stack size, cmem banks only before sm_90), and an
// unknown item must not make the known ones unreadable.
#include "target/cuda/toolchain/ptxas.h"

#include <sys/wait.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/subprocess.h"
#include "target/cuda/toolchain/cuda_tools.h"

namespace dnnfusion::cuda {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The message of a "ptxas info    : message" line, or the trimmed line when it has no prefix.
std::string message_of(const std::string& line) {
  if (line.rfind("ptxas", 0) == 0) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) return trim(line.substr(colon + 2));
  }
  return trim(line);
}

// "used 0 barriers" -> {"barriers", 0}; "2048+0 bytes smem" -> {"bytes smem", 2048}. The label is
// empty when the item does not start with a number.
std::pair<std::string, long> parse_item(std::string item) {
  item = trim(item);
  if (item.rfind("used ", 0) == 0 || item.rfind("Used ", 0) == 0) item = trim(item.substr(5));
  size_t i = 0;
  long value = 0, part = 0;
  bool digits = false;
  for (; i < item.size() && (std::isdigit(static_cast<unsigned char>(item[i])) || item[i] == '+'); ++i) {
    if (item[i] == '+') {
      value += part;
      part = 0;
      continue;
    }
    digits = true;
    part = part * 10 + (item[i] - '0');
    if (part > (1L << 40)) return {"", 0};  // not a resource size: ignore, do not overflow
  }
  if (!digits) return {"", 0};
  return {trim(item.substr(i)), value + part};
}

// Applies the comma-separated items of a "Used ..." or stack-frame line to `k`.
void apply_items(const std::string& items, KernelResources* k) {
  std::stringstream ss(items);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto [label, value] = parse_item(item);
    if (label == "registers") k->registers = static_cast<int>(value);
    else if (label == "barriers") k->barriers = static_cast<int>(value);
    else if (label == "bytes smem") k->shared_bytes = value;
    else if (label.rfind("bytes cmem[", 0) == 0) k->const_bytes += value;
    else if (label == "bytes stack frame") k->stack_frame_bytes = value;
    else if (label == "bytes spill stores") k->spill_store_bytes = value;
    else if (label == "bytes spill loads") k->spill_load_bytes = value;
  }
}

// The text between `open` and the next `close` after it in s, or "" if absent.
std::string between(const std::string& s, const std::string& open, const std::string& close) {
  const size_t a = s.find(open);
  if (a == std::string::npos) return "";
  const size_t b = s.find(close, a + open.size());
  return b == std::string::npos ? "" : s.substr(a + open.size(), b - a - open.size());
}

std::string format_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

}  // namespace

PtxasReport parse_ptxas_verbose(const std::string& log) {
  PtxasReport report;
  std::map<std::string, KernelResources> props;  // "Function properties for X" blocks, by name
  std::string props_for;                          // the function the next stack-frame line describes
  int current = -1;                               // the entry the next "Used" line describes
  std::stringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const std::string msg = message_of(line);
    if (msg.rfind("Compiling entry function '", 0) == 0) {
      report.kernels.push_back({});
      report.kernels.back().name = between(msg, "Compiling entry function '", "' for '");
      if (report.kernels.back().name.empty()) report.kernels.back().name = between(msg, "'", "'");
      current = static_cast<int>(report.kernels.size()) - 1;
    } else if (msg.rfind("Compiling ", 0) == 0) {
      current = -1;  // a non-entry function's "Used" line must not land on the last entry
    } else if (msg.rfind("Function properties for ", 0) == 0) {
      props_for = trim(msg.substr(24));
    } else if (msg.find("bytes stack frame") != std::string::npos && !props_for.empty()) {
      apply_items(msg, &props[props_for]);
      props_for.clear();
    } else if (msg.rfind("Used ", 0) == 0 && current >= 0) {
      apply_items(msg, &report.kernels[static_cast<size_t>(current)]);
    } else if (msg.find("bytes gmem") != std::string::npos) {
      std::stringstream items(msg);
      for (std::string item; std::getline(items, item, ',');)
        if (const auto [label, value] = parse_item(item); label == "bytes gmem") report.global_bytes += value;
    }
  }
  for (auto& k : report.kernels) {
    auto it = props.find(k.name);
    if (it == props.end()) continue;
    k.stack_frame_bytes = it->second.stack_frame_bytes;
    k.spill_store_bytes = it->second.spill_store_bytes;
    k.spill_load_bytes = it->second.spill_load_bytes;
  }
  return report;
}

const KernelResources& Cubin::kernel(const std::string& name) const {
  std::string names;
  for (const auto& k : kernels) {
    if (k.name == name) return k;
    names += (names.empty() ? "" : ", ") + k.name;
  }
  DNNF_THROW_AS(InvalidInput, "the cubin for ", arch, " has no entry function '", name, "' (entries: ",
                names.empty() ? "none" : names, ")");
}

bool Cubin::spills() const {
  for (const auto& k : kernels)
    if (k.spills()) return true;
  return false;
}

namespace {

// The PTX line a "ptxas <file>, line N; error" message points at, as "\nline N: <text>", or "".
std::string ptx_context(const std::string& log, const std::string& ptx) {
  const size_t at = log.find(", line ");
  if (at == std::string::npos) return "";
  const long n = std::strtol(log.c_str() + at + 7, nullptr, 10);
  if (n <= 0) return "";
  std::stringstream ss(ptx);
  std::string text;
  for (long i = 0; i < n; ++i)
    if (!std::getline(ss, text)) return "";
  return "\nline " + std::to_string(n) + ": " + trim(text).substr(0, 300);
}

void check_options(const AssembleOptions& o) {
  if (!(o.timeout_s >= 0) || !std::isfinite(o.timeout_s))
    DNNF_THROW_AS(InvalidInput, "AssembleOptions.timeout_s must be a non-negative number of seconds (0: the default), got ",
                  o.timeout_s);
  if (o.max_registers < 0 || o.max_registers > 255)
    DNNF_THROW_AS(InvalidInput, "AssembleOptions.max_registers must be 0 (no limit) to 255, got ", o.max_registers);
}

std::vector<std::string> ptxas_argv(const std::string& ptxas, const std::string& arch, const AssembleOptions& o,
                                    const std::string& out, const std::string& in) {
  std::vector<std::string> argv{ptxas, "-arch=" + arch, "-O3", "-v", "--warn-on-spills"};
  if (o.max_registers > 0) argv.push_back("-maxrregcount=" + std::to_string(o.max_registers));
  argv.insert(argv.end(), {"-o", out, in});
  return argv;
}

// Throws for a ptxas run that did not produce a cubin.
void check_run(const ProcessResult& r, const std::string& arch, double timeout_s, const std::vector<std::string>& argv,
               const std::string& ptx) {
  if (r.timed_out)
    DNNF_THROW_AS(CompilerTimeout, "ptxas did not finish assembling generated PTX for ", arch, " within ",
                  format_seconds(timeout_s), " s and was killed (", display_command(argv),
                  "); raise the limit with DNNFUSION_COMPILE_TIMEOUT=<seconds> (default 300)",
                  r.output.empty() ? "" : ":\n", r.output.substr(0, 4000));
  if (!r.succeeded())
    DNNF_THROW("ptxas failed on generated PTX for ", arch, " (", describe_status(r.status), "; ", display_command(argv),
               "):\n", r.output.substr(0, 8000), ptx_context(r.output, ptx));
}

}  // namespace

Cubin assemble_ptx(const std::string& ptx, const std::string& arch, const AssembleOptions& options) {
  check_options(options);
  const std::string ptxas = require_cuda_tool("ptxas");
  validate_arch(arch);
  const double timeout_s = options.timeout_s > 0 ? options.timeout_s : tool_timeout_seconds();
  ScratchDir scratch;
  const std::string in = scratch.write("kernel.ptx", ptx);
  const std::vector<std::string> argv = ptxas_argv(ptxas, arch, options, scratch.path() + "/kernel.cubin", in);
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult r = run_cuda_tool(argv, scratch, timeout_s);
  Cubin c;
  c.ptxas_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check_run(r, arch, timeout_s, argv, ptx);
  c.arch = arch;
  c.log = r.output;
  c.bytes = scratch.read("kernel.cubin");
  PtxasReport report = parse_ptxas_verbose(r.output);
  if (report.kernels.empty() && ptx.find(".entry") != std::string::npos)
    DNNF_THROW("ptxas assembled PTX with entry functions for ", arch, " but its -v report names none (",
               display_command(argv), "); output:\n", r.output.substr(0, 4000));
  c.kernels = std::move(report.kernels);
  c.global_bytes = report.global_bytes;
  return c;
}

}  // namespace dnnfusion::cuda
