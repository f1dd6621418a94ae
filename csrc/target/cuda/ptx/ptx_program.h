// The decoded form of a PTX module, as the PTX interpreter (ptx_interpreter.h) runs it, and the
// parser that builds it from nvcc/NVRTC-emitted PTX text.
//
// Precondition: the text is PTX of the subset that nvcc/NVRTC emit for fp32 direct-convolution
// kernels (integer index arithmetic, predicates and branches, .shared/.local arrays, global and
// shared loads/stores, fp32 arithmetic, conversions, bar.sync). parse_module() accepts nothing
// else: any other instruction, modifier, type or directive is an InvalidInput naming the line.
// Postcondition: every entry is decoded into a flat array of micro-ops over one per-thread array
// of 64-bit slots. Registers, immediates, special registers, parameter values and symbol addresses
// all live in that slot array (constants are pre-filled), so the executor never asks "register or
// immediate?"; labels are resolved to instruction indices; operand widths have been checked.
//
// Slot values are canonical: an N-bit register slot holds its value zero-extended to 64 bits
// (predicates hold 0 or 1), which lets one 64-bit compare or bitwise op serve several widths.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dnnfusion::cuda::ptx {

// One micro-op kind. A PTX instruction becomes one or more micro-ops (e.g. an .ftz add flushes
// its inputs into scratch slots first); exactly one micro-op per PTX instruction has count = 1.
// Operand slots are r[0..4]; unless noted r[0] is the destination and r[1..3] the sources.
enum class Op : uint8_t {
  // control
  Nop,   // membar and friends: nothing to do when one thread runs at a time
  Bra,   // pc = imm
  Exit,  // ret / exit
  Bar,   // bar.sync imm (barrier id)
  // moves and width changes
  Mov,     // r0 = r1
  Selp,    // r0 = r3 ? r1 : r2
  Pack,    // r0 = r1 | r2 << aux (aux = half width in bits)
  Unpack,  // r0 = low aux bits of r2, r1 = the next aux bits of r2
  CvtInt,  // integer -> integer conversion; aux packs the widths (cvt_int_aux)
  NotP,    // predicate not
  // integer, 32-bit (reads the low 32 bits, writes zero-extended)
  Add32, Sub32, MulLo32, MulHiS32, MulHiU32, MulWideS32, MulWideU32, MadLo32, MadHiS32, MadHiU32,
  MadWideS32, MadWideU32, DivS32, DivU32, RemS32, RemU32, MinS32, MaxS32, AbsS32, Neg32, Not32,
  Shl32, ShrU32, ShrS32,
  // integer, 64-bit
  Add64, Sub64, MulLo64, MulHiS64, MulHiU64, MadLo64, DivS64, DivU64, RemS64, RemU64, MinS64,
  MaxS64, AbsS64, Neg64, Not64, Shl64, ShrU64, ShrS64,
  // width-free on canonical values: unsigned min/max, bitwise logic (also on predicates)
  MinU, MaxU, And, Or, Xor,
  // comparisons: r0 = compare(r1, r2) ^ aux (aux = 1 negates); gt/ge are lt/le with swapped
  // operands, unordered float compares are negated ordered ones
  SetpEq, SetpNe, SetpLtU, SetpLeU, SetpLtS32, SetpLeS32, SetpLtS64, SetpLeS64,
  SetpEqF, SetpNeF, SetpLtF, SetpLeF, SetpNumF,
  // fp32, round to nearest even unless noted
  AddF, SubF, MulF, FmaF,
  ArithDirF,  // add/sub/mul/fma with .rz/.rm/.rp; aux = (kind << 4) | rounding mode
  DivF, SqrtF, RcpF, MinF, MaxF, MinNanF, MaxNanF, AbsF, NegF,
  FtzF,  // flush a subnormal to sign-preserving zero (lowering of .ftz)
  SatF,  // clamp to [0, 1], NaN -> +0 (lowering of .sat)
  CvtFI,  // r0 (f32) = integer r1; aux = cvt_fi_aux
  CvtIF,  // r0 (integer) = f32 r1 rounded to an integer, saturated; aux = cvt_if_aux
  CvtFF,  // r0 = f32 r1 rounded to an integral f32; aux = rounding mode
  // address spaces: generic addresses of shared/local memory live in fixed windows
  CvtaShared, CvtaToShared, CvtaLocal, CvtaToLocal,
  // memory: address = r[addr] + imm; aux = mem_aux (element bytes, vector width, extension)
  // loads: destinations r0..r3, address r4; stores: address r0, values r1..r4
  LdGlobal, LdShared, LdLocal, LdGeneric, StGlobal, StShared, StLocal, StGeneric,
  // fast paths for the common unvectorized 32-bit access (global: 64-bit address; shared: 32-
  // or 64-bit address register)
  LdGlobal32, LdShared32, StGlobal32, StShared32,
  kCount
};

// Rounding modes as decoded from .rn/.rz/.rm/.rp (float results) and .rni/.rzi/.rmi/.rpi
// (integral results).
enum Round : uint8_t { kRn = 0, kRz = 1, kRm = 2, kRp = 3 };
// ArithDirF kinds.
enum ArithKind : uint8_t { kArithAdd = 0, kArithSub = 1, kArithMul = 2, kArithFma = 3 };

// Packing of Instr::aux for memory ops.
struct MemInfo {
  uint32_t bytes;     // element size: 1, 2, 4, 8
  uint32_t vec;       // 1, 2, 4
  bool sign_extend;   // .s8/.s16/.s32 loads into wider registers
  uint32_t reg_bits;  // width of the data registers (loads mask to it)
};
uint32_t mem_aux(const MemInfo& m);
MemInfo mem_info(uint32_t aux);

// Packing of Instr::aux for conversions.
struct IntConv {
  uint32_t src_bits;
  bool src_signed;
  uint32_t dst_bits;   // the type's width (may be narrower than the register)
  bool dst_signed;
  uint32_t reg_bits;   // the destination register's width
  Round round;         // float conversions only
};
uint32_t conv_aux(const IntConv& c);
IntConv conv_info(uint32_t aux);

// One decoded micro-op (48 bytes).
struct Instr {
  Op op = Op::Nop;
  uint8_t gneg = 0;   // 1: execute when the guard predicate is false
  uint8_t count = 0;  // 1 on the one micro-op that stands for the PTX instruction in statistics
  uint8_t pad = 0;
  uint32_t guard = 0;  // slot of the guard predicate (kTrueSlot when unguarded)
  uint32_t r[5] = {0, 0, 0, 0, 0};
  uint32_t aux = 0;
  uint32_t src = 0;    // index into Entry::source
  uint32_t pad2 = 0;
  int64_t imm = 0;     // memory offset, branch target, barrier id
};

// Slot 0 always holds 1 (the guard of unguarded micro-ops).
constexpr uint32_t kTrueSlot = 0;

// Base of the generic-address windows for shared and local memory. Both lie in the upper half of
// the 64-bit space, which no host user-space pointer can reach, so a generic address is never
// ambiguous between a window and host (global) memory.
constexpr uint64_t kSharedWindow = 0xFFFF800000000000ull;
constexpr uint64_t kLocalWindow = 0xFFFFC00000000000ull;

struct Param {
  std::string name;
  uint32_t offset = 0, bytes = 0, align = 0;
};

// A launch-time constant: `bytes` bytes of the parameter buffer at `offset`, extended to 64 bits.
struct ParamLoad {
  uint32_t slot = 0, offset = 0, bytes = 0;
  bool sign_extend = false;
  uint32_t reg_bits = 0;
};

struct SharedVar {
  std::string name;
  uint64_t offset = 0, bytes = 0, align = 1;
  bool dynamic = false;  // .extern ... name[]: starts at Entry::dynamic_shared_offset
};

struct SourceLine {
  uint32_t line = 0;  // 1-based line in the PTX text
  std::string text;   // the statement as written (whitespace squeezed)
};

// Where a launch fills per-block / per-thread values into the slot array.
struct SpecialSlots {
  uint32_t tid[3] = {0, 0, 0}, ntid[3] = {0, 0, 0}, ctaid[3] = {0, 0, 0}, nctaid[3] = {0, 0, 0};
  uint32_t laneid = 0;
};

struct Entry {
  std::string name;
  std::vector<Param> params;
  uint32_t param_bytes = 0;
  std::vector<ParamLoad> param_loads;
  std::vector<SharedVar> shared;
  uint64_t static_shared_bytes = 0;
  uint64_t dynamic_shared_offset = 0;  // where .extern shared arrays start
  uint64_t local_bytes = 0;            // per-thread .local memory
  uint32_t maxntid[3] = {0, 0, 0};     // 0: not declared
  uint32_t reqntid[3] = {0, 0, 0};
  // Slots [0, num_const_slots) are launch constants, the same for every thread (slot_init holds
  // them; parameter values and %ntid/%nctaid are filled in at launch); slots
  // [num_const_slots, num_slots) are one thread's state: %tid/%ctaid/%laneid, scratch, and the
  // registers packed by live range (num_registers PTX registers share them).
  uint32_t num_const_slots = 0;
  uint32_t num_slots = 0;
  uint32_t num_registers = 0;
  std::vector<uint64_t> slot_init;
  SpecialSlots special;
  std::vector<Instr> code;
  std::vector<SourceLine> source;      // one per PTX instruction, for error messages
  uint32_t num_ptx_instructions = 0;
};

struct Module {
  std::string version;  // .version
  std::string target;   // .target
  std::vector<Entry> entries;
  // The entry named `name`, or an InvalidInput listing the entries.
  const Entry& entry(const std::string& name) const;
};

struct ParseOptions {
  // Share slots between registers whose live ranges do not overlap (see layout_slots in
  // ptx_program.cc). Off only to cross-check the packing in tests.
  bool pack_registers = true;
};

// Parses and decodes PTX text; throws dnnfusion::InvalidInput naming the line and the statement
// for anything outside the supported subset.
Module parse_module(std::string_view text, const ParseOptions& options = {});

// "line N: `text`" for the micro-op's PTX instruction (error messages).
std::string describe(const Entry& e, const Instr& in);

}  // namespace dnnfusion::cuda::ptx
