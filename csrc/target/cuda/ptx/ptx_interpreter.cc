// The PTX executor: a switch over decoded micro-ops (ptx_program.h) on one thread's slot array at
// a time, a phase-barrier block scheduler, and a pool of host threads over the grid's blocks.
//
// Precondition: an Entry from parse_module() and LaunchArgs as ptx_interpreter.h describes.
// Postcondition: the grid has run to completion (stores are in host memory) or an InvalidInput
// names the instruction, thread and block that failed; every memory access is bounds-, alignment-
// and permission-checked before it touches host memory, and no operation can raise SIGFPE or
// invoke C++ undefined behaviour (integer arithmetic is done in unsigned types).
#include "target/cuda/ptx/ptx_interpreter.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "common/error.h"

namespace dnnfusion::cuda::ptx {
namespace {

static_assert(std::numeric_limits<float>::is_iec559, "the interpreter needs IEEE binary32 floats");

constexpr uint64_t kWindowBytes = 1ull << 46;  // extent of each generic-address window
constexpr uint64_t kMaxSharedBytes = 227 * 1024;  // the most any sm_80+ device gives a block
constexpr uint64_t kMaxLocalBytesPerBlock = 64ull << 20;  // register spills, not bulk storage
constexpr int kMaxHostThreads = 256;
constexpr uint32_t kCanonicalNaN = 0x7fffffffu;

// ---------------------------------------------------------------------------------------------
// fp32 helpers

inline float as_f(uint64_t s) {
  const uint32_t u = uint32_t(s);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint64_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return f != f ? kCanonicalNaN : u;
}

float flush(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0) u &= 0x80000000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// PTX min/max: a NaN operand yields the other one (two NaNs the canonical NaN), and -0 < +0.
float ptx_min(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
float ptx_max(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

// s + err == a + b exactly (Knuth's two-sum; valid for any doubles without overflow).
void two_sum(double a, double b, double& s, double& err) {
  s = a + b;
  const double bb = s - a;
  err = (a - (s - bb)) + (b - bb);
}

// The value hi + lo (exact, |lo| <= ulp(hi) / 2) rounded to f32 toward zero / -inf / +inf.
// nearest(hi) is the floor or the ceiling of the exact value on the f32 grid, so at most one step
// fixes it; overflow is handled by the same step (inf -> FLT_MAX when rounding inward).
float round_directed(double hi, double lo, Round m) {
  float f = static_cast<float>(hi);
  if (!std::isfinite(hi)) return f;
  const double fd = f;
  const bool f_above = fd > hi || (fd == hi && lo < 0);
  const bool f_below = fd < hi || (fd == hi && lo > 0);
  const bool negative = hi < 0 || (hi == 0 && lo < 0);
  const bool up = m == kRp || (m == kRz && negative);
  if (up && f_below) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  if (!up && f_above) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

// An exact-zero sum is +0 except under round-toward-negative, where it is -0 unless both addends
// were +0 (IEEE 754 §6.3).
float directed_sum(double p, double c, Round m) {
  double s, err;
  two_sum(p, c, s, err);
  if (s == 0 && err == 0) {
    const bool both_plus_zero = p == 0 && c == 0 && !std::signbit(p) && !std::signbit(c);
    return m == kRm && !both_plus_zero ? -0.0f : static_cast<float>(s);
  }
  return round_directed(s, err, m);
}

float arith_directed(ArithKind k, float a, float b, float c, Round m) {
  switch (k) {
    case kArithAdd: return directed_sum(a, b, m);
    case kArithSub: return directed_sum(a, -double(b), m);
    case kArithMul: {
      const double p = double(a) * double(b);  // exact: 24 + 24 bits fit in 53
      return p == 0 || !std::isfinite(p) ? static_cast<float>(p) : round_directed(p, 0, m);
    }
    case kArithFma: {
      const double p = double(a) * double(b);
      if (!std::isfinite(p) || !std::isfinite(c)) return std::fmaf(a, b, c);
      return directed_sum(p, c, m);
    }
  }
  return 0;
}

// Rounds to an integral value (ties to even for kRn) without depending on the FP environment.
float round_integral(float x, Round m) {
  switch (m) {
    case kRz: return std::trunc(x);
    case kRm: return std::floor(x);
    case kRp: return std::ceil(x);
    case kRn: break;
  }
  if (!(std::fabs(x) < 8388608.0f)) return x;  // already integral, or NaN/inf
  const float t = std::trunc(x);
  const float d = std::fabs(x - t);  // exact
  float r = t;
  if (d > 0.5f || (d == 0.5f && std::fmod(t, 2.0f) != 0)) r = t + (x < 0 ? -1.0f : 1.0f);
  return std::copysign(r, x);
}

// Integer -> f32 with a rounding mode, exactly (64-bit magnitudes included).
float int_to_f32(uint64_t mag, bool negative, Round m) {
  float f;
  if (m == kRn) {
    f = static_cast<float>(mag);  // correctly rounded, ties to even
  } else {
    int shift = 0;
    while ((mag >> shift) >= (1ull << 24)) ++shift;
    uint64_t kept = mag >> shift;
    const bool inexact = shift > 0 && (mag & ((1ull << shift) - 1)) != 0;
    if (inexact && ((m == kRp && !negative) || (m == kRm && negative))) ++kept;
    f = std::ldexp(static_cast<float>(kept), shift);
  }
  return negative ? -f : f;
}

uint64_t mask_of(uint32_t bits) { return bits >= 64 ? ~0ull : (1ull << bits) - 1; }
uint64_t sext(uint64_t v, uint32_t from_bits) {
  if (from_bits >= 64) return v;
  const uint64_t sign = 1ull << (from_bits - 1);
  v &= mask_of(from_bits);
  return (v ^ sign) - sign;
}

// f32 -> integer of `bits` bits: rounded, saturated to the type's range, NaN -> 0.
uint64_t f32_to_int(float x, const IntConv& c) {
  if (x != x) return 0;
  const double v = round_integral(x, c.round);
  uint64_t out;
  if (c.dst_signed) {
    const double lim = std::ldexp(1.0, int(c.dst_bits) - 1);  // 2^(N-1)
    const uint64_t max = (1ull << (c.dst_bits - 1)) - 1;      // two's complement patterns
    if (v <= -lim) out = ~max;
    else if (v >= lim) out = max;
    else out = uint64_t(int64_t(v));
  } else {
    const double lim = std::ldexp(1.0, int(c.dst_bits));
    if (!(v > 0)) out = 0;
    else if (v >= lim) out = mask_of(c.dst_bits);
    else out = uint64_t(v);
  }
  return out & mask_of(c.reg_bits);
}

uint64_t convert_int(uint64_t v, const IntConv& c) {
  v = c.src_signed ? sext(v, c.src_bits) : v & mask_of(c.src_bits);
  v = c.dst_signed ? sext(v, c.dst_bits) : v & mask_of(c.dst_bits);
  return v & mask_of(c.reg_bits);
}

// ---------------------------------------------------------------------------------------------
// 64-bit high products without a 128-bit type.

uint64_t mulhi_u64(uint64_t a, uint64_t b) {
  const uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  const uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  const uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
  return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}
uint64_t mulhi_s64(uint64_t a, uint64_t b) {
  uint64_t h = mulhi_u64(a, b);
  if (a >> 63) h -= b;
  if (b >> 63) h -= a;
  return h;
}

// The 64-bit product of the low 32 bits of a and b as signed values (cannot overflow).
inline uint64_t mul_wide_s32(uint64_t a, uint64_t b) {
  return uint64_t(int64_t(int32_t(uint32_t(a))) * int64_t(int32_t(uint32_t(b))));
}

inline uint32_t shr_s32(uint32_t a, uint64_t n) {
  if (n >= 32) return (a >> 31) ? 0xffffffffu : 0;
  const uint32_t r = a >> n;
  return (a >> 31) && n ? r | ~(0xffffffffu >> n) : r;
}
inline uint64_t shr_s64(uint64_t a, uint64_t n) {
  if (n >= 64) return (a >> 63) ? ~0ull : 0;
  const uint64_t r = a >> n;
  return (a >> 63) && n ? r | ~(~0ull >> n) : r;
}

// ---------------------------------------------------------------------------------------------
// Execution context of one block on one worker.

struct Counters {
  uint64_t instructions = 0, fma = 0, gld = 0, gst = 0, sld = 0, sst = 0;
  void add(const Counters& o) {
    instructions += o.instructions, fma += o.fma, gld += o.gld, gst += o.gst, sld += o.sld,
        sst += o.sst;
  }
};

struct Ctx {
  const Entry* e = nullptr;
  const MemoryRegion* regions = nullptr;
  size_t nregions = 0;
  size_t last_region = 0;
  uint8_t* shared = nullptr;
  uint64_t shared_bytes = 0;
  uint8_t* local = nullptr;  // the running thread's local memory
  uint64_t local_bytes = 0;
  uint32_t tid[3] = {0, 0, 0}, ctaid[3] = {0, 0, 0};
  uint64_t budget = 0;  // instructions this block may still issue
  Counters c;
};

enum class Stop { Exit, Barrier };

[[noreturn]] [[gnu::noinline]] void fault(const Ctx& ctx, const Instr& in,
                                                  const std::string& what) {
  DNNF_THROW_AS(InvalidInput, "PTX kernel ", ctx.e->name, ": ", what, " at ", describe(*ctx.e, in),
                " (thread (", ctx.tid[0], ",", ctx.tid[1], ",", ctx.tid[2], ") of block (",
                ctx.ctaid[0], ",", ctx.ctaid[1], ",", ctx.ctaid[2], "))");
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

[[noreturn]] [[gnu::noinline]] void bad_access(const Ctx& ctx, const Instr& in,
                                                       const char* space, uint64_t addr,
                                                       uint32_t bytes, const char* why) {
  fault(ctx, in, std::string(why) + " (" + space + " address " + hex(addr) + ", " +
                     std::to_string(bytes) + " bytes)");
}

[[gnu::noinline]] uint8_t* global_slow(Ctx& ctx, const Instr& in, uint64_t addr,
                                               uint32_t bytes, bool write) {
  if (addr & (bytes - 1)) bad_access(ctx, in, "global", addr, bytes, "misaligned access");
  for (size_t i = 0; i < ctx.nregions; ++i) {
    const MemoryRegion& g = ctx.regions[i];
    const uint64_t base = reinterpret_cast<uint64_t>(g.data);
    if (g.bytes < bytes || addr - base > g.bytes - bytes) continue;
    if (write && !g.writable) {
      bad_access(ctx, in, "global", addr, bytes, "store to read-only memory");
    }
    ctx.last_region = i;
    return static_cast<uint8_t*>(g.data) + (addr - base);
  }
  bad_access(ctx, in, "global", addr, bytes, "out-of-bounds access");
}

// Host pointer for a checked global access (the last region hit is tried first).
inline uint8_t* global_ptr(Ctx& ctx, const Instr& in, uint64_t addr, uint32_t bytes, bool write) {
  if (ctx.nregions != 0) {
    const MemoryRegion& g = ctx.regions[ctx.last_region];
    const uint64_t off = addr - reinterpret_cast<uint64_t>(g.data);
    if (g.bytes >= bytes && off <= g.bytes - bytes && (addr & (bytes - 1)) == 0 &&
        (!write || g.writable)) {
      return static_cast<uint8_t*>(g.data) + off;
    }
  }
  return global_slow(ctx, in, addr, bytes, write);
}

inline uint8_t* window_ptr(const Ctx& ctx, const Instr& in, uint8_t* mem, uint64_t size,
                           const char* space, uint64_t addr, uint32_t bytes) {
  if (size < bytes || addr > size - bytes) {
    bad_access(ctx, in, space, addr, bytes, "out-of-bounds access");
  }
  if (addr & (bytes - 1)) bad_access(ctx, in, space, addr, bytes, "misaligned access");
  return mem + addr;
}

enum class Space { Global, Shared, Local };

// Resolves an address of `space` (or a generic one) to host memory, counting the access.
uint8_t* resolve(Ctx& ctx, const Instr& in, Op op, uint64_t addr, uint32_t bytes, bool write) {
  Space s;
  switch (op) {
    case Op::LdShared: case Op::StShared: s = Space::Shared; break;
    case Op::LdLocal: case Op::StLocal: s = Space::Local; break;
    case Op::LdGeneric: case Op::StGeneric:
      if (addr - kSharedWindow < kWindowBytes) {
        s = Space::Shared, addr -= kSharedWindow;
      } else if (addr - kLocalWindow < kWindowBytes) {
        s = Space::Local, addr -= kLocalWindow;
      } else {
        s = Space::Global;
      }
      break;
    default: s = Space::Global; break;
  }
  if (s == Space::Global) {
    ++(write ? ctx.c.gst : ctx.c.gld);
    return global_ptr(ctx, in, addr, bytes, write);
  }
  if (s == Space::Shared) {
    ++(write ? ctx.c.sst : ctx.c.sld);
    return window_ptr(ctx, in, ctx.shared, ctx.shared_bytes, "shared", addr, bytes);
  }
  return window_ptr(ctx, in, ctx.local, ctx.local_bytes, "local", addr, bytes);
}

inline uint64_t effective_address(const uint64_t* r, const Instr& in, uint32_t base_slot) {
  const uint64_t a = r[base_slot] + uint64_t(in.imm);
  return (in.aux >> 31) ? a & 0xffffffffu : a;  // 32-bit (shared/local) address registers wrap
}

void load(Ctx& ctx, uint64_t* r, const Instr& in) {
  const MemInfo mi = mem_info(in.aux & 0x7fffffffu);
  const uint64_t a = effective_address(r, in, in.r[4]);
  const uint8_t* p = resolve(ctx, in, in.op, a, mi.bytes * mi.vec, false);
  for (uint32_t i = 0; i < mi.vec; ++i) {
    uint64_t v = 0;
    std::memcpy(&v, p + i * mi.bytes, mi.bytes);  // little-endian host, as the GPU
    if (mi.sign_extend) v = sext(v, mi.bytes * 8);
    r[in.r[i]] = v & mask_of(mi.reg_bits);
  }
}

void store(Ctx& ctx, const uint64_t* r, const Instr& in) {
  const MemInfo mi = mem_info(in.aux & 0x7fffffffu);
  uint8_t* p = resolve(ctx, in, in.op, effective_address(r, in, in.r[0]), mi.bytes * mi.vec, true);
  for (uint32_t i = 0; i < mi.vec; ++i) {
    const uint64_t v = r[in.r[1 + i]];
    std::memcpy(p + i * mi.bytes, &v, mi.bytes);
  }
}

[[noreturn]] void div_by_zero(const Ctx& ctx, const Instr& in) {
  fault(ctx, in, "integer division by zero");
}

// The slow, rarely executed micro-ops, kept out of the hot switch.
void exec_rare(Ctx& ctx, uint64_t* r, const Instr& in) {
  uint64_t& d = r[in.r[0]];
  const uint64_t a = r[in.r[1]], b = r[in.r[2]];
  switch (in.op) {
    case Op::Pack: d = (a & mask_of(in.aux)) | (b << in.aux); break;
    case Op::Unpack:
      r[in.r[0]] = r[in.r[2]] & mask_of(in.aux);
      r[in.r[1]] = (r[in.r[2]] >> in.aux) & mask_of(in.aux);
      break;
    case Op::CvtInt: d = convert_int(a, conv_info(in.aux)); break;
    case Op::CvtFI: {
      const IntConv c = conv_info(in.aux);
      const uint64_t v = c.src_signed ? sext(a, c.src_bits) : a & mask_of(c.src_bits);
      const bool neg = c.src_signed && (v >> 63);
      d = bits_of(int_to_f32(neg ? 0 - v : v, neg, c.round));
      break;
    }
    case Op::CvtIF: d = f32_to_int(as_f(a), conv_info(in.aux)); break;
    case Op::CvtFF: d = bits_of(round_integral(as_f(a), Round(in.aux))); break;
    case Op::ArithDirF:
      d = bits_of(arith_directed(ArithKind(in.aux >> 4), as_f(a), as_f(b), as_f(r[in.r[3]]),
                                 Round(in.aux & 15)));
      break;
    case Op::DivF: d = bits_of(as_f(a) / as_f(b)); break;
    case Op::SqrtF: d = bits_of(std::sqrt(as_f(a))); break;
    case Op::RcpF: d = bits_of(1.0f / as_f(a)); break;
    case Op::MinNanF: case Op::MaxNanF: {  // .NaN: any NaN operand gives the canonical NaN
      const float x = as_f(a), y = as_f(b);
      const float m = in.op == Op::MinNanF ? ptx_min(x, y) : ptx_max(x, y);
      d = x != x || y != y ? kCanonicalNaN : bits_of(m);
      break;
    }
    case Op::SatF: {
      const float x = as_f(a);
      d = bits_of(!(x > 0.0f) ? 0.0f : x > 1.0f ? 1.0f : x);
      break;
    }
    case Op::DivS32: case Op::RemS32: {
      const uint32_t x = uint32_t(a), y = uint32_t(b);
      if (y == 0) div_by_zero(ctx, in);
      const bool div = in.op == Op::DivS32;
      if (x == 0x80000000u && y == 0xffffffffu) { d = div ? x : 0; break; }
      const int32_t sx = int32_t(x), sy = int32_t(y);
      d = uint32_t(div ? sx / sy : sx % sy);
      break;
    }
    case Op::DivU32: case Op::RemU32: {
      const uint32_t x = uint32_t(a), y = uint32_t(b);
      if (y == 0) div_by_zero(ctx, in);
      d = in.op == Op::DivU32 ? x / y : x % y;
      break;
    }
    case Op::DivS64: case Op::RemS64: {
      if (b == 0) div_by_zero(ctx, in);
      const bool div = in.op == Op::DivS64;
      if (a == 0x8000000000000000ull && b == ~0ull) { d = div ? a : 0; break; }
      const int64_t sx = int64_t(a), sy = int64_t(b);
      d = uint64_t(div ? sx / sy : sx % sy);
      break;
    }
    case Op::DivU64: case Op::RemU64:
      if (b == 0) div_by_zero(ctx, in);
      d = in.op == Op::DivU64 ? a / b : a % b;
      break;
    case Op::MulHiS64: d = mulhi_s64(a, b); break;
    case Op::MulHiU64: d = mulhi_u64(a, b); break;
    case Op::MadHiS32:
      d = uint32_t((mul_wide_s32(a, b) >> 32) + uint32_t(r[in.r[3]]));
      break;
    case Op::MadHiU32:
      d = uint32_t(((uint64_t(uint32_t(a)) * uint32_t(b)) >> 32) + uint32_t(r[in.r[3]]));
      break;
    case Op::CvtaShared: d = a + kSharedWindow; break;
    case Op::CvtaToShared: d = a - kSharedWindow; break;
    case Op::CvtaLocal: d = a + kLocalWindow; break;
    case Op::CvtaToLocal: d = a - kLocalWindow; break;
    case Op::LdGlobal: case Op::LdShared: case Op::LdLocal: case Op::LdGeneric:
      load(ctx, r, in);
      break;
    case Op::StGlobal: case Op::StShared: case Op::StLocal: case Op::StGeneric:
      store(ctx, r, in);
      break;
    default:
      fault(ctx, in, "internal error: micro-op " + std::to_string(int(in.op)) + " has no executor");
  }
}

// Runs the current thread from `pc` until it exits or reaches a barrier. The hot micro-ops are
// inline cases; everything else goes through exec_rare.
Stop exec(Ctx& ctx, uint64_t* r, uint32_t& pc_io, uint32_t& bar_id) {
  const Instr* const code = ctx.e->code.data();
  uint32_t pc = pc_io;
  uint64_t n = 0, fma = 0;
  Stop stop;
  for (;;) {
    const Instr& in = code[pc];
    n += in.count;
    if (((r[in.guard] ^ in.gneg) & 1) == 0) {
      ++pc;
      continue;
    }
    uint64_t& d = r[in.r[0]];
    const uint64_t a = r[in.r[1]], b = r[in.r[2]];
    switch (in.op) {
      case Op::Nop: break;
      case Op::Bra:
        pc = uint32_t(in.imm);
        if (n > ctx.budget) {
          fault(ctx, in, "instruction limit exceeded (" + std::to_string(ctx.budget) +
                             " left for this block; raise LaunchArgs::max_instructions or look "
                             "for an infinite loop)");
        }
        continue;
      case Op::Exit: stop = Stop::Exit; goto done;
      case Op::Bar:
        bar_id = uint32_t(in.imm);
        ++pc;
        stop = Stop::Barrier;
        goto done;
      case Op::Mov: d = a; break;
      case Op::Selp: d = (r[in.r[3]] & 1) ? a : b; break;
      case Op::NotP: d = a ^ 1; break;
      case Op::Add32: d = uint32_t(a + b); break;
      case Op::Sub32: d = uint32_t(a - b); break;
      case Op::MulLo32: d = uint32_t(uint32_t(a) * uint32_t(b)); break;
      case Op::MulHiS32: d = uint32_t(mul_wide_s32(a, b) >> 32); break;
      case Op::MulHiU32: d = uint32_t((uint64_t(uint32_t(a)) * uint32_t(b)) >> 32); break;
      case Op::MulWideS32: d = mul_wide_s32(a, b); break;
      case Op::MulWideU32: d = uint64_t(uint32_t(a)) * uint32_t(b); break;
      case Op::MadLo32: d = uint32_t(uint32_t(a) * uint32_t(b) + uint32_t(r[in.r[3]])); break;
      case Op::MadWideS32: d = mul_wide_s32(a, b) + r[in.r[3]]; break;
      case Op::MadWideU32: d = uint64_t(uint32_t(a)) * uint32_t(b) + r[in.r[3]]; break;
      case Op::MinS32: d = int32_t(a) < int32_t(b) ? a : b; break;
      case Op::MaxS32: d = int32_t(a) > int32_t(b) ? a : b; break;
      case Op::AbsS32: d = (a & 0x80000000u) ? uint32_t(0u - uint32_t(a)) : uint32_t(a); break;
      case Op::Neg32: d = uint32_t(0u - uint32_t(a)); break;
      case Op::Not32: d = uint32_t(~a); break;
      case Op::Shl32: d = b >= 32 ? 0 : uint32_t(uint32_t(a) << b); break;
      case Op::ShrU32: d = b >= 32 ? 0 : uint32_t(a) >> b; break;
      case Op::ShrS32: d = shr_s32(uint32_t(a), uint32_t(b)); break;
      case Op::Add64: d = a + b; break;
      case Op::Sub64: d = a - b; break;
      case Op::MulLo64: d = a * b; break;
      case Op::MadLo64: d = a * b + r[in.r[3]]; break;
      case Op::MinS64: d = int64_t(a) < int64_t(b) ? a : b; break;
      case Op::MaxS64: d = int64_t(a) > int64_t(b) ? a : b; break;
      case Op::AbsS64: d = (a >> 63) ? 0 - a : a; break;
      case Op::Neg64: d = 0 - a; break;
      case Op::Not64: d = ~a; break;
      case Op::Shl64: d = uint32_t(b) >= 64 ? 0 : a << uint32_t(b); break;
      case Op::ShrU64: d = uint32_t(b) >= 64 ? 0 : a >> uint32_t(b); break;
      case Op::ShrS64: d = shr_s64(a, uint32_t(b)); break;
      case Op::MinU: d = a < b ? a : b; break;
      case Op::MaxU: d = a > b ? a : b; break;
      case Op::And: d = a & b; break;
      case Op::Or: d = a | b; break;
      case Op::Xor: d = a ^ b; break;
      case Op::SetpEq: d = (a == b) ^ in.aux; break;
      case Op::SetpNe: d = (a != b) ^ in.aux; break;
      case Op::SetpLtU: d = (a < b) ^ in.aux; break;
      case Op::SetpLeU: d = (a <= b) ^ in.aux; break;
      case Op::SetpLtS32: d = (int32_t(a) < int32_t(b)) ^ in.aux; break;
      case Op::SetpLeS32: d = (int32_t(a) <= int32_t(b)) ^ in.aux; break;
      case Op::SetpLtS64: d = (int64_t(a) < int64_t(b)) ^ in.aux; break;
      case Op::SetpLeS64: d = (int64_t(a) <= int64_t(b)) ^ in.aux; break;
      case Op::SetpEqF: d = (as_f(a) == as_f(b)) ^ in.aux; break;
      case Op::SetpNeF: {
        const float x = as_f(a), y = as_f(b);
        d = (x != y && x == x && y == y) ^ in.aux;
        break;
      }
      case Op::SetpLtF: d = (as_f(a) < as_f(b)) ^ in.aux; break;
      case Op::SetpLeF: d = (as_f(a) <= as_f(b)) ^ in.aux; break;
      case Op::SetpNumF: d = (as_f(a) == as_f(a) && as_f(b) == as_f(b)) ^ in.aux; break;
      case Op::AddF: d = bits_of(as_f(a) + as_f(b)); break;
      case Op::SubF: d = bits_of(as_f(a) - as_f(b)); break;
      case Op::MulF: d = bits_of(as_f(a) * as_f(b)); break;
      case Op::FmaF:
        d = bits_of(std::fmaf(as_f(a), as_f(b), as_f(r[in.r[3]])));
        ++fma;
        break;
      case Op::MinF: d = bits_of(ptx_min(as_f(a), as_f(b))); break;
      case Op::MaxF: d = bits_of(ptx_max(as_f(a), as_f(b))); break;
      case Op::AbsF: d = uint32_t(a) & 0x7fffffffu; break;
      case Op::NegF: d = uint32_t(a) ^ 0x80000000u; break;
      case Op::FtzF: d = bits_of(flush(as_f(a))); break;
      case Op::LdShared32: {
        const uint64_t addr = effective_address(r, in, in.r[4]);
        uint32_t v;
        std::memcpy(&v, window_ptr(ctx, in, ctx.shared, ctx.shared_bytes, "shared", addr, 4), 4);
        r[in.r[0]] = v;
        ++ctx.c.sld;
        break;
      }
      case Op::StShared32: {
        const uint64_t addr = effective_address(r, in, in.r[0]);
        const uint32_t v = uint32_t(r[in.r[1]]);
        std::memcpy(window_ptr(ctx, in, ctx.shared, ctx.shared_bytes, "shared", addr, 4), &v, 4);
        ++ctx.c.sst;
        break;
      }
      case Op::LdGlobal32: {
        uint32_t v;
        std::memcpy(&v, global_ptr(ctx, in, r[in.r[4]] + uint64_t(in.imm), 4, false), 4);
        r[in.r[0]] = v;
        ++ctx.c.gld;
        break;
      }
      case Op::StGlobal32: {
        const uint32_t v = uint32_t(r[in.r[1]]);
        std::memcpy(global_ptr(ctx, in, r[in.r[0]] + uint64_t(in.imm), 4, true), &v, 4);
        ++ctx.c.gst;
        break;
      }
      default:
        exec_rare(ctx, r, in);
        break;
    }
    ++pc;
  }
done:
  pc_io = pc;
  ctx.c.instructions += n;
  ctx.c.fma += fma;
  ctx.budget -= std::min(n, ctx.budget);
  return stop;
}

// ---------------------------------------------------------------------------------------------
// Blocks and the grid

struct Launch {
  const Entry* e = nullptr;
  const LaunchArgs* args = nullptr;
  std::vector<uint64_t> consts;  // slots [0, num_const_slots): parameters and %ntid/%nctaid in
  uint32_t nthreads = 0;
  uint64_t shared_bytes = 0;
};

// One host thread's state for running blocks. The slot array the executor sees is `work_`: the
// launch constants followed by the running thread's state; the other threads' states wait in
// `saved_` and are swapped in and out at barriers.
class Worker {
 public:
  explicit Worker(const Launch& l)
      : l_(l),
        tslots_(l.e->num_slots - l.e->num_const_slots),
        work_(l.e->num_slots),
        saved_(size_t(l.nthreads) * tslots_),
        pcs_(l.nthreads),
        bar_(l.nthreads),
        state_(l.nthreads),
        shared_(l.shared_bytes),
        local_(size_t(l.nthreads) * l.e->local_bytes) {
    std::copy(l.consts.begin(), l.consts.end(), work_.begin());
  }

  // Runs block `linear` within `budget` instructions; returns the instructions it issued.
  uint64_t run_block(uint64_t linear, uint64_t budget);
  Counters counters;

 private:
  enum State : uint8_t { kFresh, kReady, kWaiting, kExited };
  void run_thread(Ctx& ctx, uint32_t t);
  void release_barrier(Ctx& ctx);
  void thread_index(uint32_t t, uint32_t tid[3]) const {
    const Dim3& b = l_.args->block;
    tid[0] = t % b.x, tid[1] = (t / b.x) % b.y, tid[2] = t / (b.x * b.y);
  }

  const Launch& l_;
  const size_t tslots_;
  std::vector<uint64_t> work_, saved_;
  std::vector<uint32_t> pcs_, bar_;
  std::vector<State> state_;
  std::vector<uint8_t> shared_, local_;
  uint32_t ctaid_[3] = {0, 0, 0};
};

// Runs thread t until it exits or waits at a barrier (then its state is saved).
void Worker::run_thread(Ctx& ctx, uint32_t t) {
  const Entry& e = *l_.e;
  uint64_t* const ts = work_.data() + e.num_const_slots;
  thread_index(t, ctx.tid);
  if (state_[t] == kFresh) {
    std::fill(ts, ts + tslots_, 0);  // registers start at 0 (deterministic, never stale)
    for (int i = 0; i < 3; ++i) {
      work_[e.special.tid[i]] = ctx.tid[i];
      work_[e.special.ctaid[i]] = ctaid_[i];
    }
    work_[e.special.laneid] = t % 32;
  } else {
    std::copy_n(saved_.data() + size_t(t) * tslots_, tslots_, ts);
  }
  ctx.local = local_.data() + size_t(t) * e.local_bytes;
  const Stop s = exec(ctx, work_.data(), pcs_[t], bar_[t]);
  if (s == Stop::Exit) {
    state_[t] = kExited;
  } else {
    state_[t] = kWaiting;
    std::copy_n(ts, tslots_, saved_.data() + size_t(t) * tslots_);
  }
}

// Every live thread waits at a barrier: they must agree on its id (else the block would hang on
// the GPU), then all run on.
void Worker::release_barrier(Ctx& ctx) {
  uint32_t first = l_.nthreads;
  for (uint32_t t = 0; t < l_.nthreads; ++t) {
    if (state_[t] != kWaiting) continue;
    if (first == l_.nthreads) first = t;
    if (bar_[t] != bar_[first]) {
      thread_index(t, ctx.tid);
      fault(ctx, l_.e->code[pcs_[t] - 1],
            "barrier deadlock: this thread waits on barrier " + std::to_string(bar_[t]) +
                " while thread " + std::to_string(first) + " waits on barrier " +
                std::to_string(bar_[first]));
    }
    state_[t] = kReady;
  }
}

uint64_t Worker::run_block(uint64_t linear, uint64_t budget) {
  const LaunchArgs& a = *l_.args;
  const Entry& e = *l_.e;
  ctaid_[0] = uint32_t(linear % a.grid.x);
  ctaid_[1] = uint32_t(linear / a.grid.x % a.grid.y);
  ctaid_[2] = uint32_t(linear / (uint64_t(a.grid.x) * a.grid.y));
  std::fill(shared_.begin(), shared_.end(), uint8_t(0xff));
  std::fill(local_.begin(), local_.end(), uint8_t(0xff));
  std::fill(state_.begin(), state_.end(), kFresh);
  std::fill(pcs_.begin(), pcs_.end(), 0);
  Ctx ctx;
  ctx.e = &e;
  ctx.regions = a.regions.data();
  ctx.nregions = a.regions.size();
  ctx.shared = shared_.data();
  ctx.shared_bytes = shared_.size();
  ctx.local_bytes = e.local_bytes;
  ctx.budget = budget;
  std::copy(ctaid_, ctaid_ + 3, ctx.ctaid);
  for (;;) {
    bool waiting = false;
    for (uint32_t t = 0; t < l_.nthreads; ++t) {
      if (state_[t] != kFresh && state_[t] != kReady) continue;
      run_thread(ctx, t);
      waiting |= state_[t] == kWaiting;
    }
    if (!waiting) break;
    release_barrier(ctx);
  }
  counters.add(ctx.c);
  return ctx.c.instructions;
}

void check_launch(const Entry& e, const LaunchArgs& a) {
  const auto bad = [&](const std::string& msg) {
    DNNF_THROW_AS(InvalidInput, "PTX launch of ", e.name, ": ", msg);
  };
  if (a.params.size() != e.params.size()) {
    bad("expected " + std::to_string(e.params.size()) + " parameters, got " +
        std::to_string(a.params.size()));
  }
  const Dim3 &g = a.grid, &b = a.block;
  if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z) bad("grid and block dimensions must be >= 1");
  if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    bad("grid dimensions exceed the device limits");
  }
  const uint64_t nt = uint64_t(b.x) * b.y * b.z;
  if (b.x > 1024 || b.y > 1024 || b.z > 64 || nt > 1024) {
    bad("block exceeds 1024 threads (or 1024x1024x64)");
  }
  if (e.maxntid[0] && nt > uint64_t(e.maxntid[0]) * e.maxntid[1] * e.maxntid[2]) {
    bad("block has more threads than the entry's .maxntid");
  }
  if (e.reqntid[0] && (b.x != e.reqntid[0] || b.y != e.reqntid[1] || b.z != e.reqntid[2])) {
    bad("block shape differs from the entry's .reqntid");
  }
  const uint64_t shared = e.dynamic_shared_offset + a.dynamic_shared_bytes;
  if (a.dynamic_shared_bytes > kMaxSharedBytes || shared > kMaxSharedBytes) {
    bad("shared memory " + std::to_string(shared) + " bytes exceeds " +
        std::to_string(kMaxSharedBytes));
  }
  if (e.local_bytes * uint64_t(nt) > kMaxLocalBytesPerBlock) {
    bad("local memory " + std::to_string(e.local_bytes) + " bytes per thread is more than this "
        "interpreter gives a block (" + std::to_string(kMaxLocalBytesPerBlock) + " bytes in all)");
  }
  if (a.threads < 1) bad("LaunchArgs::threads must be >= 1");
  for (const MemoryRegion& r : a.regions) {
    if (!r.data && r.bytes) bad("a memory region with bytes but no data");
  }
}

Launch make_launch(const Entry& e, const LaunchArgs& a) {
  Launch l;
  l.e = &e;
  l.args = &a;
  l.nthreads = a.block.x * a.block.y * a.block.z;
  l.shared_bytes = e.dynamic_shared_offset + a.dynamic_shared_bytes;
  l.consts = e.slot_init;
  std::vector<uint8_t> pbuf(e.param_bytes + 8, 0);
  for (size_t i = 0; i < e.params.size(); ++i) {
    const uint64_t v = a.params[i];
    std::memcpy(pbuf.data() + e.params[i].offset, &v, e.params[i].bytes);  // little-endian
  }
  for (const ParamLoad& p : e.param_loads) {
    uint64_t v = 0;
    std::memcpy(&v, pbuf.data() + p.offset, p.bytes);
    if (p.sign_extend) v = sext(v, p.bytes * 8);
    l.consts[p.slot] = v & mask_of(p.reg_bits);
  }
  const uint32_t ntid[3] = {a.block.x, a.block.y, a.block.z};
  const uint32_t nctaid[3] = {a.grid.x, a.grid.y, a.grid.z};
  for (int i = 0; i < 3; ++i) {
    l.consts[e.special.ntid[i]] = ntid[i];
    l.consts[e.special.nctaid[i]] = nctaid[i];
  }
  return l;
}

// Runs the blocks on `threads` host threads. Blocks are claimed in order; after a failure no
// block with a larger index starts, and the failure of the smallest block index is reported,
// which is the error a serial run reports.
Counters run_parallel(const Launch& l, uint64_t nblocks, int threads, uint64_t max) {
  std::atomic<uint64_t> next{0}, used{0}, failed{~0ull};
  std::mutex mu;
  std::exception_ptr error;
  std::vector<Counters> counts(static_cast<size_t>(threads));
  auto work = [&](int w) {
    Worker worker(l);
    for (;;) {
      const uint64_t b = next.fetch_add(1);
      if (b >= nblocks || b > failed.load()) break;
      try {
        const uint64_t u = used.load();
        used += worker.run_block(b, max - std::min(u, max));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (b < failed.load()) failed = b, error = std::current_exception();
      }
    }
    counts[size_t(w)] = worker.counters;
  };
  std::vector<std::thread> pool;
  try {
    for (int w = 1; w < threads; ++w) pool.emplace_back(work, w);
  } catch (...) {  // no more threads to be had: stop the started ones before reporting
    failed = 0;
    for (std::thread& t : pool) t.join();
    throw;
  }
  work(0);
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  Counters total;
  for (const Counters& c : counts) total.add(c);
  return total;
}

}  // namespace

RunStats run(const Module& m, const std::string& entry, const LaunchArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const Entry& e = m.entry(entry);
  check_launch(e, args);
  const Launch l = make_launch(e, args);
  const uint64_t nblocks = uint64_t(args.grid.x) * args.grid.y * args.grid.z;
  const int threads = int(std::min<uint64_t>({uint64_t(args.threads), nblocks, kMaxHostThreads}));
  Counters c;
  if (threads == 1) {
    Worker w(l);
    uint64_t used = 0;
    for (uint64_t b = 0; b < nblocks; ++b) {
      used += w.run_block(b, args.max_instructions - std::min(used, args.max_instructions));
    }
    c = w.counters;
  } else {
    c = run_parallel(l, nblocks, threads, args.max_instructions);
  }
  if (c.instructions > args.max_instructions) {
    DNNF_THROW_AS(InvalidInput, "PTX kernel ", e.name, ": instruction limit exceeded (",
                  c.instructions, " > ", args.max_instructions, ")");
  }
  RunStats s;
  s.instructions = c.instructions;
  s.fma = c.fma;
  s.global_loads = c.gld, s.global_stores = c.gst, s.shared_loads = c.sld, s.shared_stores = c.sst;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace dnnfusion::cuda::ptx
