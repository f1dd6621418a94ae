// Finds the CUDA command-line tools the cuda target runs (ptxas, nvdisasm, cuobjdump) and says
// which GPU architectures the ptxas found can assemble for. Nothing here needs CUDA to build or a
// GPU to run: a missing tool is an empty path (find_cuda_tool) or a TargetUnavailable error that
// names every place searched and how to install the tool (require_cuda_tool).
//
// Search order for a tool, first executable file wins:
//   1. $DNNFUSION_PTXAS / $DNNFUSION_NVDISASM / $DNNFUSION_CUOBJDUMP: an explicit file path; when
//      set (non-empty) it is the only candidate, so a wrong override is reported, never bypassed;
//   2. directories registered with add_cuda_tool_dir, in registration order (the Python package
//      registers site-packages/nvidia/cu13/bin, where pip's nvidia-cuda-* wheels put them);
//   3. $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin;
//   4. the directories of $PATH.
//
// Precondition: none (all functions are thread-safe). Postcondition: find_cuda_tool returns an
// absolute or caller-given path to an executable file, or ""; supported_archs is a subset of
// known_archs(), cached per ptxas binary.
#pragma once
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace dnnfusion::cuda {

// Returns the path of `tool` ("ptxas", "nvdisasm" or "cuobjdump"; others are InvalidInput), or "".
std::string find_cuda_tool(const std::string& tool);
// Like find_cuda_tool, but a missing tool is TargetUnavailable naming the places searched and the
// package that provides it.
std::string require_cuda_tool(const std::string& tool);
// Where find_cuda_tool(tool) looks, in order, as one line for messages.
std::string cuda_tool_search_description(const std::string& tool);
// Adds a directory searched after the $DNNFUSION_* overrides (duplicates are ignored).
void add_cuda_tool_dir(const std::string& dir);

// The GPU architectures this project knows how to treat (all Volta, sm_70, or newer: 16-byte SASS
// instructions), oldest first.
const std::vector<std::string>& known_archs();
// The known archs that the ptxas find_cuda_tool("ptxas") returns accepts for -arch, oldest first;
// empty when there is no ptxas. Read from `ptxas --help` (its list of allowed -arch values), or,
// when the help text has no such list, by assembling a trivial kernel for each known arch.
std::vector<std::string> supported_archs();
// Throws InvalidInput listing the allowed values unless `arch` is one of supported_archs();
// TargetUnavailable when there is no ptxas to ask (a syntactically unknown arch is InvalidInput
// even then).
void validate_arch(const std::string& arch);

// $DNNFUSION_COMPILE_TIMEOUT in seconds (default 300, the same variable and rule as the C++ JIT):
// the limit for each run of a CUDA tool. A value that is not a positive number is InvalidInput.
double tool_timeout_seconds();

// ---- shared by the toolchain files ----

// A private directory (mkdtemp, 0700) for a tool's inputs, outputs and temporaries, removed with
// everything in it on destruction: a killed tool leaves nothing behind.
class ScratchDir {
 public:
  ScratchDir();  // under $TMPDIR, else /tmp; Error if it cannot be created
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `data` to path()/name (a plain file name) and returns the full path.
  std::string write(const std::string& name, const std::string& data) const;
  // The bytes of path()/name; Error if it cannot be read.
  std::string read(const std::string& name) const;

 private:
  std::string path_;
};

// Runs a CUDA tool (argv[0] a path) with this process's environment, TMPDIR pointing into
// `scratch`, for at most timeout_s seconds.
ProcessResult run_cuda_tool(const std::vector<std::string>& argv, const ScratchDir& scratch, double timeout_s,
                            size_t max_output = kMaxProcessOutput);

}  // namespace dnnfusion::cuda
