// CUDA C -> PTX through NVRTC, loaded at run time with dlopen: the project builds, imports and
// runs its CPU paths on machines without CUDA, and only a caller that generates GPU code needs
// the library.
//
// Search order (first that loads and exports every needed symbol wins): the file named by
// $DNNFUSION_NVRTC, then libnvrtc.so.13 / .so.12 / .so in each directory registered with
// add_nvrtc_search_dir (in registration order; Python registers the nvidia/cu13/lib folder of its
// site-packages), then the sonames libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so through the
// dynamic loader's own path.
//
// Precondition: none. Postconditions: the library is loaded at most once per process (loading is
// serialized by a mutex; a failed search is retried on the next call, so a directory registered
// later still counts) and stays loaded; no NVRTC anywhere is TargetUnavailable listing every path
// tried and why it failed; a source NVRTC rejects is a dnnfusion::Error carrying NVRTC's log.
#pragma once
#include <string>
#include <vector>

namespace dnnfusion::cuda {

// Adds a directory to search for libnvrtc (after $DNNFUSION_NVRTC, before the sonames). Takes
// effect for the next load attempt; a library already loaded stays.
void add_nvrtc_search_dir(const std::string& dir);

// The candidates the next load attempt tries, in order (paths or bare sonames).
std::vector<std::string> nvrtc_search_candidates();

// Tries `candidates` in order, as the process-wide search does, and unloads the one that loaded
// (the process-wide NVRTC is neither set nor changed; a builtins library preloaded beside a
// candidate stays): its name, or TargetUnavailable listing every candidate and why it failed.
// For diagnostics and tests.
std::string probe_nvrtc(const std::vector<std::string>& candidates);

struct NvrtcInfo {
  std::string path;  // the candidate that loaded
  int major = 0, minor = 0;
};
// Loads NVRTC if needed; throws TargetUnavailable when no candidate loads.
NvrtcInfo nvrtc_info();

struct PtxCompileResult {
  std::string ptx;
  std::string log;       // NVRTC's warnings (empty when none)
  double seconds = 0;    // wall time of nvrtcCompileProgram
};
// Compiles one CUDA C translation unit (no headers) to PTX with the given NVRTC options, e.g.
// {"--gpu-architecture=compute_80", "-std=c++17"}. `name` appears in NVRTC's diagnostics.
PtxCompileResult compile_cuda_to_ptx(const std::string& source, const std::string& name,
                                     const std::vector<std::string>& options);

}  // namespace dnnfusion::cuda
