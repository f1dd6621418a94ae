// SASS statistics (contract in sass_stats.h). The ELF reader trusts nothing in the image: every
// offset and count is checked against the buffer (with overflow-free arithmetic) before it is
// used, and fields are copied out with memcpy (the buffer has no alignment guarantee).
#include "target/cuda/toolchain/sass_stats.h"

#include <elf.h>

#include <cctype>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/subprocess.h"
#include "target/cuda/toolchain/cuda_tools.h"

namespace dnnfusion::cuda {

namespace {

constexpr uint64_t kSassInstructionBytes = 16;  // sm_70 and newer

[[noreturn]] void corrupt(const std::string& why) {
  DNNF_THROW_AS(InvalidInput, "not a valid cubin: ", why);
}

// True if [offset, offset + size) lies within a buffer of `total` bytes.
bool within(uint64_t offset, uint64_t size, uint64_t total) { return offset <= total && size <= total - offset; }

template <typename T>
T load(const std::string& image, uint64_t offset) {
  if (!within(offset, sizeof(T), image.size())) corrupt("truncated (a header lies past the end of the file)");
  T v;
  std::memcpy(&v, image.data() + offset, sizeof(T));
  return v;
}

Elf64_Ehdr read_header(const std::string& image) {
  if (image.size() < sizeof(Elf64_Ehdr)) corrupt("only " + std::to_string(image.size()) + " bytes, shorter than an ELF header");
  const auto eh = load<Elf64_Ehdr>(image, 0);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) corrupt("no ELF magic");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) corrupt("not a 64-bit little-endian ELF");
  if (eh.e_machine != EM_CUDA) corrupt("an ELF for machine " + std::to_string(eh.e_machine) + ", not CUDA (190)");
  if (eh.e_shentsize < sizeof(Elf64_Shdr)) corrupt("section header entries of " + std::to_string(eh.e_shentsize) + " bytes");
  return eh;
}

// Section headers, with the extended numbering (e_shnum / e_shstrndx in section 0) resolved.
std::vector<Elf64_Shdr> read_section_headers(const std::string& image, const Elf64_Ehdr& eh, uint32_t* strndx) {
  if (eh.e_shoff == 0) corrupt("no section table");
  const auto first = load<Elf64_Shdr>(image, eh.e_shoff);
  const uint64_t count = eh.e_shnum != 0 ? eh.e_shnum : first.sh_size;
  if (count == 0 || count > image.size() / eh.e_shentsize || !within(eh.e_shoff, count * eh.e_shentsize, image.size()))
    corrupt("the section table (" + std::to_string(count) + " entries at offset " + std::to_string(eh.e_shoff) +
            ") lies outside the " + std::to_string(image.size()) + "-byte file");
  std::vector<Elf64_Shdr> shdrs;
  for (uint64_t i = 0; i < count; ++i) shdrs.push_back(load<Elf64_Shdr>(image, eh.e_shoff + i * eh.e_shentsize));
  *strndx = eh.e_shstrndx == SHN_XINDEX ? first.sh_link : eh.e_shstrndx;
  if (*strndx >= count) corrupt("the section name table index " + std::to_string(*strndx) + " is out of range");
  return shdrs;
}

// SM version from e_flags: bits 8-15 in the ABI-version-8 layout (CUDA 12.8+), bits 0-7 before.
int decode_sm(const Elf64_Ehdr& eh) {
  return static_cast<int>(eh.e_ident[EI_ABIVERSION] >= 8 ? (eh.e_flags >> 8) & 0xff : eh.e_flags & 0xff);
}

// The program header table and the file extent of every segment must lie within the file (ptxas
// puts the table at the very end: a truncated cubin loses it first).
void check_segments(const std::string& image, const Elf64_Ehdr& eh) {
  if (eh.e_phnum == 0) return;
  if (eh.e_phentsize < sizeof(Elf64_Phdr) || !within(eh.e_phoff, uint64_t{eh.e_phnum} * eh.e_phentsize, image.size()))
    corrupt("the program header table (" + std::to_string(eh.e_phnum) + " entries at offset " +
            std::to_string(eh.e_phoff) + ") lies outside the " + std::to_string(image.size()) + "-byte file");
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    const auto ph = load<Elf64_Phdr>(image, eh.e_phoff + i * eh.e_phentsize);
    if (!within(ph.p_offset, ph.p_filesz, image.size()))
      corrupt("a segment (" + std::to_string(ph.p_filesz) + " bytes at offset " + std::to_string(ph.p_offset) +
              ") lies outside the " + std::to_string(image.size()) + "-byte file");
  }
}

bool occupies_file(const Elf64_Shdr& s) { return s.sh_type != SHT_NOBITS && s.sh_type != SHT_NULL; }

std::string section_name(const std::string& image, const Elf64_Shdr& strtab, uint32_t offset) {
  if (offset >= strtab.sh_size) corrupt("a section name lies outside the name table");
  const char* begin = image.data() + strtab.sh_offset + offset;
  const void* nul = std::memchr(begin, '\0', strtab.sh_size - offset);
  if (!nul) corrupt("a section name is not terminated");
  return std::string(begin, static_cast<const char*>(nul));
}

}  // namespace

std::vector<ElfSection> cubin_sections(const std::string& image, int* sm) {
  const Elf64_Ehdr eh = read_header(image);
  check_segments(image, eh);
  uint32_t strndx = 0;
  const std::vector<Elf64_Shdr> shdrs = read_section_headers(image, eh, &strndx);
  const Elf64_Shdr& strtab = shdrs[strndx];
  if (strtab.sh_type != SHT_STRTAB || !within(strtab.sh_offset, strtab.sh_size, image.size()))
    corrupt("the section name table lies outside the file");
  std::vector<ElfSection> out;
  for (const auto& s : shdrs) {
    if (occupies_file(s) && !within(s.sh_offset, s.sh_size, image.size()))
      corrupt("a section (" + std::to_string(s.sh_size) + " bytes at offset " + std::to_string(s.sh_offset) +
              ") lies outside the " + std::to_string(image.size()) + "-byte file");
    out.push_back({section_name(image, strtab, s.sh_name), s.sh_type, s.sh_offset, s.sh_size});
  }
  if (sm) *sm = decode_sm(eh);
  return out;
}

namespace {

// The base mnemonic of an nvdisasm instruction line's text ("@!P0 FFMA.FTZ R0, ..." -> "FFMA").
std::string opcode_of(const std::string& text) {
  std::stringstream ss(text);
  std::string tok;
  ss >> tok;
  if (tok == "{") ss >> tok;          // a dual-issue pair's opening brace
  if (!tok.empty() && tok[0] == '@') ss >> tok;  // predicate guard
  return tok.substr(0, tok.find_first_of(".;"));  // "NOP;" has no space before the ';'
}

// Counts instructions in the .text.* sections of `nvdisasm -c` output into `stats`.
void count_instructions(const std::string& listing, SassStats* stats) {
  bool in_text = false;
  long total = 0;
  std::stringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    if (line.compare(b, 8, ".section") == 0 && b + 8 < line.size() && std::isspace(static_cast<unsigned char>(line[b + 8]))) {
      std::stringstream ss(line.substr(b + 8));  // not .sectioninfo / .sectionflags
      std::string name;
      ss >> name;
      in_text = name.rfind(".text.", 0) == 0;
      continue;
    }
    // An instruction: "/*0080*/  FFMA R0, R0, R5, 1 ;" (data directives start with '.').
    if (!in_text || line.compare(b, 2, "/*") != 0) continue;
    const size_t end = line.find("*/", b);
    if (end == std::string::npos) continue;
    const std::string text = line.substr(end + 2);
    const size_t t = text.find_first_not_of(" \t");
    if (t == std::string::npos || text[t] == '.' || text.find(';') == std::string::npos) continue;
    ++total;
    ++stats->opcodes[opcode_of(text)];
  }
  stats->disassembled_instructions = total;
  stats->ffma = stats->opcodes.count("FFMA") ? stats->opcodes["FFMA"] : 0;
}

// Runs nvdisasm on the cubin and fills the nvdisasm fields, or says why it could not.
void disassemble(const std::string& cubin, SassStats* stats) {
  const std::string nvdisasm = find_cuda_tool("nvdisasm");
  if (nvdisasm.empty()) {
    stats->nvdisasm_unavailable_reason = "nvdisasm was not found (looked at " + cuda_tool_search_description("nvdisasm") +
                                         "); pip install nvidia-cuda-nvdisasm";
    return;
  }
  ScratchDir scratch;
  const std::string file = scratch.write("kernel.cubin", cubin);
  const double timeout_s = tool_timeout_seconds();
  // A listing is ~70 bytes per instruction: a large kernel's is tens of megabytes, all of it counted.
  const size_t max_listing = size_t{1} << 30;
  const ProcessResult r =
      run_cuda_tool({nvdisasm, "-c", "-ndf", file}, scratch, timeout_s, max_listing);  // -ndf: no branch-target analysis, a third faster
  if (!r.succeeded()) {
    stats->nvdisasm_unavailable_reason =
        nvdisasm + (r.timed_out ? " did not finish within " + std::to_string(timeout_s) + " s" : " " + describe_status(r.status)) +
        ": " + r.output.substr(0, 2000);
    return;
  }
  if (r.output_truncated) {
    stats->nvdisasm_unavailable_reason = "the nvdisasm listing exceeded " + std::to_string(max_listing >> 20) + " MiB";
    return;
  }
  count_instructions(r.output, stats);
}

}  // namespace

SassStats sass_stats(const std::string& cubin) {
  SassStats stats;
  for (const auto& s : cubin_sections(cubin, &stats.sm)) {
    if (s.name.rfind(".text.", 0) != 0) continue;
    if (s.size % kSassInstructionBytes != 0)
      corrupt("code section " + s.name + " has " + std::to_string(s.size) + " bytes, not a whole number of instructions");
    stats.text_bytes += static_cast<long>(s.size);
    stats.kernel_text_bytes[s.name.substr(6)] += static_cast<long>(s.size);
  }
  if (stats.sm < 70)
    DNNF_THROW_AS(InvalidInput, "SASS statistics need an sm_70 or newer cubin (16-byte instructions); this one is for sm_",
                  stats.sm);
  stats.instructions = stats.text_bytes / static_cast<long>(kSassInstructionBytes);
  disassemble(cubin, &stats);
  return stats;
}

}  // namespace dnnfusion::cuda
