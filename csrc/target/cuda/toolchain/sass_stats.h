// Size and instruction mix of the SASS in a cubin: code bytes and instruction count from the ELF
// section table (read here, no tool needed), FFMA count and opcode histogram from nvdisasm when it
// is installed.
//
// Precondition: `cubin` is untrusted bytes. Postcondition: sass_stats either returns figures read
// within the bounds of the image or throws InvalidInput naming what is wrong (not an ELF64
// little-endian CUDA image, truncated, a section, segment or header table outside the file, a
// pre-Volta cubin whose instructions are not 16 bytes); it never reads outside the buffer. nvdisasm trouble (absent,
// failing, timing out) is not an error: its figures are -1 and the reason says why.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dnnfusion::cuda {

struct ElfSection {
  std::string name;
  uint32_t type = 0;  // SHT_*
  uint64_t offset = 0;
  uint64_t size = 0;
};

// The section table of a 64-bit little-endian CUDA ELF image, after checking that it, the program
// header table and every section and segment lie within the image (InvalidInput if not). `sm` receives the SM version in the header (e.g. 90), 0 if it is not one we decode.
std::vector<ElfSection> cubin_sections(const std::string& image, int* sm = nullptr);

struct SassStats {
  int sm = 0;                                  // from the ELF header
  long text_bytes = 0;                         // sum of the .text.<kernel> sections
  long instructions = 0;                       // text_bytes / 16 (every sm_70+ instruction is 16 bytes),
                                               // including the trailing BRA-to-self and alignment NOPs
  std::map<std::string, long> kernel_text_bytes;  // per .text.<kernel> section, by kernel name
  // From nvdisasm; -1 / empty when it is unavailable (see nvdisasm_unavailable_reason).
  long disassembled_instructions = -1;
  long ffma = -1;                              // FFMA (any modifiers: .FTZ, .SAT, ...), not FFMA2 etc.
  std::map<std::string, long> opcodes;         // instructions per base mnemonic (FFMA.FTZ counts as FFMA)
  std::string nvdisasm_unavailable_reason;     // "" when nvdisasm ran
};

SassStats sass_stats(const std::string& cubin);

}  // namespace dnnfusion::cuda
