// Assembles PTX into a cubin for one GPU architecture with ptxas, and reports what each kernel
// costs (registers, spills, shared/constant memory, stack) from ptxas's -v output.
//
// Precondition: ptxas is findable (cuda_tools.h) and `arch` is one it accepts, else
// TargetUnavailable / InvalidInput. Postcondition of assemble_ptx: the returned cubin is what ptxas
// wrote, with a resource entry for every entry function ptxas reported; ptxas ran in a private
// temporary directory that is gone when the call returns (also after a timeout or an error); a
// ptxas still running at the deadline was killed with its process group (CompilerTimeout); a
// rejected PTX is a dnnfusion::Error carrying ptxas's log.
#pragma once
#include <string>
#include <vector>

namespace dnnfusion::cuda {

// One entry function (kernel) as ptxas reported it.
struct KernelResources {
  std::string name;
  int registers = 0;
  int barriers = 0;
  long stack_frame_bytes = 0;
  long spill_store_bytes = 0;
  long spill_load_bytes = 0;
  long shared_bytes = 0;  // static shared memory ("smem"); dynamic shared memory is chosen at launch
  long const_bytes = 0;   // sum of the cmem[N] banks on ptxas's "Used" line (ptxas 13 lists none for sm_90+)
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

// What ptxas -v says about a module.
struct PtxasReport {
  std::vector<KernelResources> kernels;  // entry functions, in the order ptxas compiled them
  long global_bytes = 0;                 // module-scope .global variables ("gmem")
};

struct Cubin {
  std::string arch;                      // the -arch it was assembled for, e.g. "sm_90"
  std::string bytes;                     // the ELF image, as cuModuleLoadData takes it
  std::vector<KernelResources> kernels;  // see PtxasReport
  long global_bytes = 0;
  double ptxas_seconds = 0;              // wall time of the ptxas run
  std::string log;                       // ptxas's output (-v report and warnings)
  // The entry named `name`; InvalidInput listing the entries if there is none.
  const KernelResources& kernel(const std::string& name) const;
  bool spills() const;  // any entry spills registers to local memory
};

struct AssembleOptions {
  double timeout_s = 0;   // ptxas's time limit; 0: tool_timeout_seconds() ($DNNFUSION_COMPILE_TIMEOUT, 300 s)
  int max_registers = 0;  // 0: no limit beyond the hardware's; else -maxrregcount (ptxas raises values below its ABI minimum)
};

// Assembles `ptx` with `ptxas -arch=<arch> -O3 -v --warn-on-spills`.
Cubin assemble_ptx(const std::string& ptx, const std::string& arch, const AssembleOptions& options = {});

// Parses the -v output of ptxas (the releases 11 to 13 format; lines it does not recognize are
// skipped). An entry named without a "Used N registers" line keeps zeros.
PtxasReport parse_ptxas_verbose(const std::string& log);

}  // namespace dnnfusion::cuda
