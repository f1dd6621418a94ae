// PTX text -> decoded Module (ptx_program.h): a lexer, a statement parser for module and entry
// scopes, and a decoder that lowers each instruction to micro-ops over the entry's slot array.
//
// Precondition: PTX as nvcc/NVRTC emit it for fp32 kernels (see ptx_program.h for the subset).
// Postcondition: a Module whose entries are ready to run, or an InvalidInput naming the line and
// statement of the first thing outside the subset. Every modifier of an instruction is either
// acted on or rejected (Mods::finish), so nothing the text asks for is silently ignored; the only
// accepted no-ops are cache/eviction hints, .volatile, .uni and memory fences, whose meaning is
// vacuous when one thread runs at a time.
#include "target/cuda/ptx/ptx_program.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <queue>
#include <unordered_map>

#include "common/error.h"

namespace dnnfusion::cuda::ptx {

// ---------------------------------------------------------------------------------------------
// Packing helpers shared with the executor.

uint32_t mem_aux(const MemInfo& m) {
  return m.bytes | (m.vec << 4) | (uint32_t(m.sign_extend) << 8) | (m.reg_bits << 9);
}
MemInfo mem_info(uint32_t aux) {
  return MemInfo{aux & 15u, (aux >> 4) & 15u, ((aux >> 8) & 1u) != 0, aux >> 9};
}
uint32_t conv_aux(const IntConv& c) {
  return c.src_bits | (uint32_t(c.src_signed) << 7) | (c.dst_bits << 8) |
         (uint32_t(c.dst_signed) << 15) | (c.reg_bits << 16) | (uint32_t(c.round) << 24);
}
IntConv conv_info(uint32_t aux) {
  return IntConv{aux & 127u,         ((aux >> 7) & 1u) != 0, (aux >> 8) & 127u,
                 ((aux >> 15) & 1u) != 0, (aux >> 16) & 255u, Round((aux >> 24) & 3u)};
}

const Entry& Module::entry(const std::string& name) const {
  std::string names;
  for (const Entry& e : entries) {
    if (e.name == name) return e;
    names += (names.empty() ? "" : ", ") + e.name;
  }
  DNNF_THROW_AS(InvalidInput, "PTX module has no entry '", name, "' (entries: ",
                names.empty() ? "none" : names, ")");
}

std::string describe(const Entry& e, const Instr& in) {
  if (in.src >= e.source.size()) return "<implicit exit at the end of " + e.name + ">";
  const SourceLine& s = e.source[in.src];
  return "line " + std::to_string(s.line) + ": `" + s.text + "`";
}

namespace {

// ---------------------------------------------------------------------------------------------
// Lexer

enum class Tok : uint8_t { Ident, Number, String, Punct, End };

struct Token {
  Tok kind = Tok::End;
  std::string_view text;
  uint32_t line = 0;
};

bool ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%' ||
         c == '.';
}
bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$' || c == '.';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

[[noreturn]] void fail_at(uint32_t line, const std::string& msg) {
  DNNF_THROW_AS(InvalidInput, "PTX line ", line, ": ", msg);
}

// Numbers: decimal/hex/octal/binary integers (optional U suffix), 0f/0d hex floats and decimal
// floats with an exponent. The sign is a separate '-' token.
size_t lex_number(std::string_view s, size_t i) {
  const size_t start = i;
  const bool prefixed = s[i] == '0' && i + 1 < s.size() && std::strchr("xXfFdDbB", s[i + 1]);
  while (i < s.size()) {
    const char c = s[i];
    if (ident_char(c) && c != '$') {
      ++i;
    } else if (!prefixed && (c == '+' || c == '-') && i > start &&
               (s[i - 1] == 'e' || s[i - 1] == 'E')) {
      ++i;
    } else {
      break;
    }
  }
  return i;
}

std::vector<Token> lex(std::string_view s) {
  std::vector<Token> out;
  uint32_t line = 1;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      ++line, ++i;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const uint32_t open = line;
      i += 2;
      while (i + 1 < s.size() && !(s[i] == '*' && s[i + 1] == '/')) line += s[i++] == '\n';
      if (i + 1 >= s.size()) fail_at(open, "unterminated /* comment");
      i += 2;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != '"' && s[j] != '\n') ++j;
      if (j >= s.size() || s[j] != '"') fail_at(line, "unterminated string");
      out.push_back({Tok::String, s.substr(i, j + 1 - i), line});
      i = j + 1;
    } else if (is_digit(c)) {
      const size_t j = lex_number(s, i);
      out.push_back({Tok::Number, s.substr(i, j - i), line});
      i = j;
    } else if (ident_start(c)) {
      size_t j = i + 1;
      while (j < s.size()) {
        if (ident_char(s[j])) {
          ++j;
        } else if (s[j] == ':' && j + 2 < s.size() && s[j + 1] == ':' && ident_char(s[j + 2])) {
          j += 2;  // cache-hint qualifiers such as .L1::evict_last
        } else {
          break;
        }
      }
      out.push_back({Tok::Ident, s.substr(i, j - i), line});
      i = j;
    } else if (std::strchr(",;:{}[]()+-!|<>@=", c)) {
      out.push_back({Tok::Punct, s.substr(i, 1), line});
      ++i;
    } else {
      fail_at(line, std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Tok::End, std::string_view(), line});
  return out;
}

// ---------------------------------------------------------------------------------------------
// Literals

bool parse_uint(std::string_view t, uint64_t& v) {
  if (!t.empty() && (t.back() == 'U' || t.back() == 'u')) t.remove_suffix(1);
  if (t.empty()) return false;
  int base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    base = 16, t.remove_prefix(2);
  } else if (t.size() > 2 && t[0] == '0' && (t[1] == 'b' || t[1] == 'B')) {
    base = 2, t.remove_prefix(2);
  } else if (t.size() > 1 && t[0] == '0') {
    base = 8, t.remove_prefix(1);
  }
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v, base);
  return r.ec == std::errc() && r.ptr == t.data() + t.size();
}

bool parse_hex_bits(std::string_view t, size_t digits, uint64_t& v) {
  if (t.size() != digits) return false;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v, 16);
  return r.ec == std::errc() && r.ptr == t.data() + t.size();
}

uint32_t f2bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// An f32 literal's bit pattern: 0fXXXXXXXX, 0dXXXXXXXXXXXXXXXX or a decimal float (both rounded
// to nearest f32). Integer literals are not f32 operands.
bool parse_f32(std::string_view t, bool negative, uint32_t& bits) {
  uint64_t v = 0;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'f' || t[1] == 'F')) {
    if (!parse_hex_bits(t.substr(2), 8, v)) return false;
    bits = uint32_t(v);
  } else if (t.size() > 2 && t[0] == '0' && (t[1] == 'd' || t[1] == 'D')) {
    if (!parse_hex_bits(t.substr(2), 16, v)) return false;
    double d;
    std::memcpy(&d, &v, 8);
    bits = f2bits(static_cast<float>(d));
  } else if (t.find_first_of(".eE") != std::string_view::npos) {
    double d = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), d);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return false;
    bits = f2bits(static_cast<float>(d));
  } else {
    return false;
  }
  if (negative) bits ^= 0x80000000u;
  return true;
}

uint64_t mask_bits(uint32_t bits) { return bits >= 64 ? ~0ull : (1ull << bits) - 1; }

// ---------------------------------------------------------------------------------------------
// Types

struct Type {
  char kind = 0;  // 'b', 'u', 's', 'f', 'p' (predicate)
  uint32_t bits = 0;
  bool is_int() const { return kind == 'b' || kind == 'u' || kind == 's'; }
  bool is_signed() const { return kind == 's'; }
  bool is_f32() const { return kind == 'f'; }
  bool is_pred() const { return kind == 'p'; }
};

// Parses a type suffix ("f32", "u16", "pred"); false if the word is not a type at all.
bool parse_type_word(std::string_view w, Type& t) {
  if (w == "pred") {
    t = Type{'p', 1};
    return true;
  }
  if (w.size() < 2 || !std::strchr("busf", w[0])) return false;
  if (w == "bf16" || w == "bf16x2" || w == "f16x2" || w == "tf32") {
    t = Type{'x', 0};
    return true;
  }
  uint64_t bits = 0;
  if (!parse_uint(w.substr(1), bits) || w[1] == '0') return false;
  if (bits != 8 && bits != 16 && bits != 32 && bits != 64) return false;
  t = Type{w[0], uint32_t(bits)};
  return true;
}

// ---------------------------------------------------------------------------------------------
// Operands

struct Operand {
  enum Kind { kReg, kImm, kSym, kAddr, kVec } kind = kReg;
  std::string_view name;   // register or symbol; address base (may be empty)
  std::string_view pipe;   // second register of "%p|%q"
  bool neg = false;        // "!%p"
  bool minus = false;      // immediate sign
  std::string_view imm;    // immediate literal (without sign)
  int64_t offset = 0;      // address offset
  std::vector<std::string_view> elems;  // vector elements
};

struct Stmt {
  uint32_t line = 0;
  std::string text;
  std::string_view guard;
  bool guard_neg = false;
  std::string_view opcode;
  std::vector<Operand> ops;
};

// The modifiers of an opcode ("ld.global.nc.f32" -> base "ld", rest {global, nc, f32}).
// Handlers take what they understand; finish() rejects whatever is left.
class Mods {
 public:
  Mods(std::string_view opcode, const Stmt& st) : st_(st) {
    size_t p = opcode.find('.');
    base_ = opcode.substr(0, p);
    while (p != std::string_view::npos) {
      const size_t q = opcode.find('.', p + 1);
      words_.push_back(opcode.substr(p + 1, q == std::string_view::npos ? q : q - p - 1));
      p = q;
    }
  }
  std::string_view base() const { return base_; }
  bool take(std::string_view w) {
    auto it = std::find(words_.begin(), words_.end(), w);
    if (it == words_.end()) return false;
    words_.erase(it);
    return true;
  }
  // The first remaining word that is one of `options`, or "".
  std::string_view take_one(std::initializer_list<std::string_view> options) {
    for (auto it = words_.begin(); it != words_.end(); ++it) {
      if (std::find(options.begin(), options.end(), *it) != options.end()) {
        const std::string_view w = *it;
        words_.erase(it);
        return w;
      }
    }
    return {};
  }
  bool take_prefixed(std::string_view prefix, std::string_view reject) {
    for (auto it = words_.begin(); it != words_.end(); ++it) {
      if (it->substr(0, prefix.size()) == prefix && *it != reject) {
        words_.erase(it);
        return true;
      }
    }
    return false;
  }
  // Types are the trailing words; `n` of them are required.
  std::vector<Type> take_types(size_t n) {
    std::vector<Type> out(n);
    if (words_.size() < n) fail("expected " + std::to_string(n) + " type suffix(es)");
    for (size_t i = 0; i < n; ++i) {
      const std::string_view w = words_[words_.size() - n + i];
      if (!parse_type_word(w, out[i])) fail("expected a type, got ." + std::string(w));
      if (out[i].kind == 'x' || (out[i].kind == 'f' && out[i].bits != 32)) {
        fail("type ." + std::string(w) + " is not supported (fp32 only)");
      }
    }
    words_.resize(words_.size() - n);
    return out;
  }
  void finish() const {
    if (!words_.empty()) fail("unsupported modifier ." + std::string(words_.front()));
  }
  [[noreturn]] void fail(const std::string& msg) const {
    fail_at(st_.line, msg + " in `" + st_.text + "`");
  }

 private:
  const Stmt& st_;
  std::string_view base_;
  std::vector<std::string_view> words_;
};

// ---------------------------------------------------------------------------------------------
// Entry-level decoder

struct RegInfo {
  uint32_t slot = 0;
  uint32_t bits = 0;  // 1 = predicate
};

struct RegRange {
  std::string prefix;
  uint32_t count = 0, first_slot = 0, bits = 0;
};

struct Scope {
  std::unordered_map<std::string, RegInfo> names;
  std::vector<RegRange> ranges;
};

struct Symbol {
  enum Space { kShared, kLocal, kParam } space = kShared;
  uint32_t slot = 0;  // slot holding its address in its state space (shared/local)
  size_t index = 0;   // into Entry::shared / locals / params
};

constexpr uint32_t kScratchCount = 8;

// Launch constants (shared by all threads), fixed per-thread slots (special registers, scratch),
// and PTX registers (renumbered by layout_slots()).
enum SlotKind : uint8_t { kConst, kThread, kReg };

class Decoder {
 public:
  Decoder(Entry& e, const std::vector<SharedVar>& module_shared, bool pack)
      : e_(e), pack_(pack) {
    new_slot(kConst);
    e_.slot_init[kTrueSlot] = 1;
    auto special = [&](uint32_t* dst, const char* name, SlotKind kind) {
      for (int i = 0; i < 3; ++i) {
        dst[i] = new_slot(kind);
        specials_[std::string(name) + "." + "xyz"[i]] = dst[i];
      }
    };
    special(e_.special.tid, "%tid", kThread);
    special(e_.special.ntid, "%ntid", kConst);
    special(e_.special.ctaid, "%ctaid", kThread);
    special(e_.special.nctaid, "%nctaid", kConst);
    e_.special.laneid = new_slot(kThread);
    specials_["%laneid"] = e_.special.laneid;
    for (uint32_t i = 0; i < kScratchCount; ++i) scratch_[i] = new_slot(kThread);
    guard_copy_ = new_slot(kThread);
    scopes_.emplace_back();
    for (const SharedVar& v : module_shared) add_shared(v, 0);
  }

  // ---- declarations ----
  void add_param(Param p, uint32_t line) {
    if (symbols_.count(p.name)) fail_at(line, "duplicate parameter " + p.name);
    p.offset = uint32_t((e_.param_bytes + p.align - 1) / p.align * p.align);
    e_.param_bytes = p.offset + p.bytes;
    symbols_[p.name] = Symbol{Symbol::kParam, 0, e_.params.size()};
    e_.params.push_back(std::move(p));
  }
  void add_shared(const SharedVar& v, uint32_t line) {
    if (symbols_.count(v.name)) fail_at(line, "duplicate variable " + v.name);
    symbols_[v.name] = Symbol{Symbol::kShared, new_slot(kConst), e_.shared.size()};
    e_.shared.push_back(v);
  }
  void add_local(const std::string& name, uint64_t bytes, uint64_t align, uint32_t line) {
    if (symbols_.count(name)) fail_at(line, "duplicate variable " + name);
    symbols_[name] = Symbol{Symbol::kLocal, new_slot(kConst), locals_.size()};
    locals_.push_back({name, 0, bytes, align, false});
  }
  void add_regs(const std::string& name, Type t, uint64_t count, bool ranged, uint32_t line) {
    const uint32_t bits = t.is_pred() ? 1 : t.bits;
    if (bits == 8) fail_at(line, "8-bit registers are not supported");
    Scope& s = scopes_.back();
    if (!ranged) {
      if (s.names.count(name)) fail_at(line, "duplicate register " + name);
      s.names[name] = RegInfo{new_slot(kReg), bits};
      return;
    }
    if (count > 1000000) fail_at(line, "register range too large");
    RegRange r{name, uint32_t(count), uint32_t(e_.slot_init.size()), bits};
    e_.slot_init.resize(e_.slot_init.size() + count, 0);
    kind_.resize(e_.slot_init.size(), kReg);
    s.ranges.push_back(std::move(r));
  }
  void push_scope() { scopes_.emplace_back(); }
  void pop_scope() { scopes_.pop_back(); }

  void define_label(std::string_view name, uint32_t line) {
    if (!labels_.emplace(std::string(name), uint32_t(e_.code.size())).second) {
      fail_at(line, "duplicate label " + std::string(name));
    }
  }

  void decode(const Stmt& st);
  void finish(uint32_t line);
  static void layout_slots(Entry& e, const std::vector<SlotKind>& kind, bool pack);

 private:
  uint32_t new_slot(SlotKind k) {
    e_.slot_init.push_back(0);
    kind_.push_back(k);
    return uint32_t(e_.slot_init.size() - 1);
  }
  uint32_t const_slot(uint64_t v) {
    auto it = consts_.find(v);
    if (it != consts_.end()) return it->second;
    const uint32_t s = new_slot(kConst);
    e_.slot_init[s] = v;
    consts_[v] = s;
    return s;
  }
  uint32_t scratch() {
    if (scratch_used_ >= kScratchCount) fail("instruction needs too many temporaries");
    return scratch_[scratch_used_++];
  }

  bool lookup_reg(std::string_view name, RegInfo& out) const;
  RegInfo reg(std::string_view name) const;
  uint32_t src(const Operand& o, Type t);
  uint32_t src_reg_atleast(const Operand& o, uint32_t bits);
  uint32_t dst(const Operand& o, Type t);
  uint32_t dst_atleast(const Operand& o, uint32_t bits, uint32_t& reg_bits);
  uint64_t imm_value(const Operand& o, Type t);
  uint32_t sym_addr_slot(std::string_view name, Symbol::Space want);

  void emit(Op op, std::initializer_list<uint32_t> r, uint32_t aux = 0, int64_t imm = 0) {
    Instr in;
    in.op = op;
    size_t i = 0;
    for (uint32_t x : r) in.r[i++] = x;
    in.aux = aux;
    in.imm = imm;
    pending_.push_back(in);
  }
  void expect_ops(size_t n) const {
    if (st_->ops.size() != n) {
      fail("expected " + std::to_string(n) + " operands, got " + std::to_string(st_->ops.size()));
    }
  }
  [[noreturn]] void fail(const std::string& msg) const {
    fail_at(st_->line, msg + " in `" + st_->text + "`");
  }
  uint32_t ftz_in(uint32_t slot, bool ftz) {
    if (!ftz) return slot;
    const uint32_t t = scratch();
    emit(Op::FtzF, {t, slot});
    return t;
  }
  uint32_t sext16(uint32_t slot) {
    const uint32_t t = scratch();
    emit(Op::CvtInt, {t, slot}, conv_aux({16, true, 64, true, 64, kRn}));
    return t;
  }
  void mask16(uint32_t d) { emit(Op::And, {d, d, const_slot(0xFFFF)}); }

  // instruction families
  void do_mov(Mods& m);
  void do_int_or_float_arith(Mods& m);
  void do_float_arith(Mods& m, Type t, const std::string& base);
  void do_mul_mad(Mods& m);
  void do_div_rem(Mods& m);
  void do_unary(Mods& m);
  void do_minmax(Mods& m);
  void do_logic(Mods& m);
  void do_shift(Mods& m);
  void do_setp(Mods& m);
  void do_selp(Mods& m);
  void do_cvt(Mods& m);
  void do_cvta(Mods& m);
  void do_ld(Mods& m);
  void do_st(Mods& m);
  void do_bar(Mods& m);
  void do_sqrt_rcp(Mods& m);
  uint32_t address(const Operand& o, std::string_view space, int64_t& offset, bool& addr32);

  Entry& e_;
  const bool pack_;
  const Stmt* st_ = nullptr;
  std::vector<Scope> scopes_;
  std::unordered_map<std::string, uint32_t> specials_;
  std::unordered_map<std::string, Symbol> symbols_;
  std::vector<SharedVar> locals_;
  std::unordered_map<uint64_t, uint32_t> consts_;
  std::unordered_map<std::string, uint32_t> labels_;
  struct Fixup {
    size_t index;
    std::string label;
    uint32_t line;
  };
  std::vector<Fixup> fixups_;
  std::vector<Instr> pending_;
  std::vector<SlotKind> kind_;  // per slot
  uint32_t scratch_[kScratchCount] = {};
  uint32_t scratch_used_ = 0;
  uint32_t guard_copy_ = 0;
};

bool Decoder::lookup_reg(std::string_view name, RegInfo& out) const {
  const std::string key(name);
  for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
    auto it = s->names.find(key);
    if (it != s->names.end()) {
      out = it->second;
      return true;
    }
    size_t p = name.size();
    while (p > 0 && is_digit(name[p - 1])) --p;
    if (p == name.size() || p == 0) continue;
    uint64_t idx = 0;
    if (!parse_uint(name.substr(p), idx) && name.substr(p) != "0") continue;
    if (name.size() - p > 1 && name[p] == '0') continue;  // "%r01" is not "%r1"
    for (const RegRange& r : s->ranges) {
      if (r.prefix == name.substr(0, p) && idx < r.count) {
        out = RegInfo{uint32_t(r.first_slot + idx), r.bits};
        return true;
      }
    }
  }
  return false;
}

bool is_special_register_name(std::string_view name) {
  static const char* const kSpecial[] = {
      "%tid", "%ntid", "%ctaid", "%nctaid", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid",
      "%gridid", "%clock", "%clock64", "%globaltimer", "%lanemask", "%total_smem_size",
      "%dynamic_smem_size", "%aggr_smem_size", "%cluster", "%is_explicit_cluster", "%envreg",
      "%pm", "%current_graph_exec", "%reserved_smem"};
  for (const char* s : kSpecial) {
    const std::string_view p(s);
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

RegInfo Decoder::reg(std::string_view name) const {
  RegInfo r;
  if (lookup_reg(name, r)) return r;
  if (is_special_register_name(name)) fail("unsupported special register " + std::string(name));
  fail("undeclared register " + std::string(name));
}

uint64_t Decoder::imm_value(const Operand& o, Type t) {
  if (t.is_f32()) {
    uint32_t bits = 0;
    if (!parse_f32(o.imm, o.minus, bits)) {
      fail("bad .f32 literal " + std::string(o.imm) + " (integer literals are not f32 operands)");
    }
    return bits;
  }
  uint64_t v = 0;
  if (!parse_uint(o.imm, v)) fail("bad integer literal " + std::string(o.imm));
  if (o.minus) v = 0 - v;
  if (t.is_pred()) return v != 0;
  return v & mask_bits(t.bits);
}

// A source operand of type t: a register of t's width, a special register (32-bit types), an
// immediate, or a negated predicate (lowered to a NotP into a temporary).
uint32_t Decoder::src(const Operand& o, Type t) {
  if (o.kind == Operand::kImm) return const_slot(imm_value(o, t));
  if (o.kind != Operand::kReg || !o.pipe.empty()) fail("expected a register or immediate operand");
  auto sp = specials_.find(std::string(o.name));
  if (sp != specials_.end()) {
    if (t.bits != 32 || t.is_pred() || o.neg) fail(std::string(o.name) + " is a 32-bit value");
    return sp->second;
  }
  const RegInfo r = reg(o.name);
  const uint32_t want = t.is_pred() ? 1 : t.bits;
  if (r.bits != want) {
    fail("register " + std::string(o.name) + " has " + std::to_string(r.bits) +
         " bits, the instruction needs " + std::to_string(want));
  }
  if (!o.neg) return r.slot;
  if (!t.is_pred()) fail("'!' applies to predicates only");
  const uint32_t s = scratch();
  emit(Op::NotP, {s, r.slot});
  return s;
}

// A register at least `bits` wide (ld/st data, cvt sources): the low bits are used.
uint32_t Decoder::src_reg_atleast(const Operand& o, uint32_t bits) {
  if (o.kind != Operand::kReg || o.neg || !o.pipe.empty()) fail("expected a register operand");
  if (specials_.count(std::string(o.name))) {
    if (bits > 32) fail(std::string(o.name) + " is a 32-bit value");
    return specials_[std::string(o.name)];
  }
  const RegInfo r = reg(o.name);
  if (r.bits == 1 || r.bits < bits) {
    fail("register " + std::string(o.name) + " is narrower than the " + std::to_string(bits) +
         "-bit type");
  }
  return r.slot;
}

uint32_t Decoder::dst(const Operand& o, Type t) {
  if (o.kind != Operand::kReg || o.neg || !o.pipe.empty()) fail("expected a destination register");
  if (specials_.count(std::string(o.name))) fail("cannot write " + std::string(o.name));
  const RegInfo r = reg(o.name);
  const uint32_t want = t.is_pred() ? 1 : t.bits;
  if (r.bits != want) {
    fail("register " + std::string(o.name) + " has " + std::to_string(r.bits) +
         " bits, the instruction writes " + std::to_string(want));
  }
  return r.slot;
}

uint32_t Decoder::dst_atleast(const Operand& o, uint32_t bits, uint32_t& reg_bits) {
  if (o.kind != Operand::kReg || o.neg || !o.pipe.empty()) fail("expected a destination register");
  if (specials_.count(std::string(o.name))) fail("cannot write " + std::string(o.name));
  const RegInfo r = reg(o.name);
  if (r.bits == 1 || r.bits < bits) {
    fail("register " + std::string(o.name) + " is narrower than the " + std::to_string(bits) +
         "-bit type");
  }
  reg_bits = r.bits;
  return r.slot;
}

uint32_t Decoder::sym_addr_slot(std::string_view name, Symbol::Space want) {
  auto it = symbols_.find(std::string(name));
  if (it == symbols_.end()) fail("unknown symbol " + std::string(name));
  if (it->second.space != want) fail("symbol " + std::string(name) + " is in another state space");
  return it->second.slot;
}

// ---------------------------------------------------------------------------------------------
// Instruction families

void Decoder::do_mov(Mods& m) {
  const Type t = m.take_types(1)[0];
  m.finish();
  expect_ops(2);
  const Operand& d = st_->ops[0];
  const Operand& a = st_->ops[1];
  if (t.bits == 8) fail("8-bit mov is not supported");
  if (d.kind == Operand::kVec || a.kind == Operand::kVec) {
    if (t.is_pred() || t.bits < 32) fail("vector mov needs .b32 or .b64");
    const Type half{'b', t.bits / 2};
    const Operand& v = d.kind == Operand::kVec ? d : a;
    if (v.elems.size() != 2) fail("vector mov with other than two elements is not supported");
    Operand lo, hi;
    lo.name = v.elems[0];
    hi.name = v.elems[1];
    if (d.kind == Operand::kVec) {
      emit(Op::Unpack, {dst(lo, half), dst(hi, half), src(a, t)}, half.bits);
    } else {
      emit(Op::Pack, {dst(d, t), src(lo, half), src(hi, half)}, half.bits);
    }
    return;
  }
  if (a.kind == Operand::kSym) {
    if (t.is_pred() || t.bits < 32) fail("a variable's address needs a 32- or 64-bit register");
    auto it = symbols_.find(std::string(a.name));
    if (it == symbols_.end()) fail("unknown symbol " + std::string(a.name));
    if (it->second.space == Symbol::kParam) fail("taking the address of a parameter");
    emit(Op::Mov, {dst(d, t), it->second.slot});
    return;
  }
  emit(Op::Mov, {dst(d, t), src(a, t)});
}

void Decoder::do_float_arith(Mods& m, Type t, const std::string& base) {
  const std::string_view rnd = m.take_one({"rn", "rz", "rm", "rp"});
  const bool ftz = m.take("ftz");
  const bool sat = m.take("sat");
  m.finish();
  const bool is_fma = base == "fma" || base == "mad";
  if (is_fma && rnd.empty()) fail(base + ".f32 needs a rounding modifier");
  expect_ops(is_fma ? 4 : 3);
  uint32_t a = ftz_in(src(st_->ops[1], t), ftz);
  uint32_t b = ftz_in(src(st_->ops[2], t), ftz);
  uint32_t c = is_fma ? ftz_in(src(st_->ops[3], t), ftz) : 0;
  const uint32_t d = dst(st_->ops[0], t);
  const Round r = rnd == "rz" ? kRz : rnd == "rm" ? kRm : rnd == "rp" ? kRp : kRn;
  const ArithKind k = is_fma ? kArithFma : base == "add" ? kArithAdd : base == "sub" ? kArithSub
                                                                                   : kArithMul;
  if (r != kRn) {
    emit(Op::ArithDirF, {d, a, b, c}, (uint32_t(k) << 4) | r);
  } else {
    const Op op = k == kArithFma ? Op::FmaF : k == kArithAdd ? Op::AddF
                                           : k == kArithSub ? Op::SubF : Op::MulF;
    emit(op, {d, a, b, c});
  }
  if (ftz) emit(Op::FtzF, {d, d});
  if (sat) emit(Op::SatF, {d, d});
}

void Decoder::do_int_or_float_arith(Mods& m) {
  const std::string base(m.base());
  const Type t = m.take_types(1)[0];
  if (t.is_f32()) return do_float_arith(m, t, base);
  if (!t.is_int() || t.bits == 8) fail("unsupported type for " + base);
  if (m.take("cc") || m.take("sat")) fail("carry/saturating integer arithmetic is not supported");
  m.finish();
  expect_ops(3);
  const uint32_t a = src(st_->ops[1], t), b = src(st_->ops[2], t), d = dst(st_->ops[0], t);
  const bool add = base == "add";
  emit(t.bits == 64 ? (add ? Op::Add64 : Op::Sub64) : (add ? Op::Add32 : Op::Sub32), {d, a, b});
  if (t.bits == 16) mask16(d);
}

void Decoder::do_mul_mad(Mods& m) {
  const std::string base(m.base());
  const bool mad = base == "mad";
  const Type t = m.take_types(1)[0];
  if (t.is_f32()) {
    if (!mad) return do_float_arith(m, t, base);
    return do_float_arith(m, t, "mad");
  }
  if (!t.is_int() || t.bits == 8) fail("unsupported type for " + base);
  const std::string_view mode = m.take_one({"lo", "hi", "wide"});
  if (mode.empty()) fail(base + " on integers needs .lo, .hi or .wide");
  m.finish();
  expect_ops(mad ? 4 : 3);
  const bool s = t.is_signed();
  const Type wide{t.kind, t.bits * 2};
  const uint32_t a = src(st_->ops[1], t), b = src(st_->ops[2], t);
  if (t.bits == 16) {
    if (mode == "hi" || mad) {
      fail(base + "." + std::string(mode) + " on 16-bit types is not supported");
    }
    if (mode == "lo") {
      const uint32_t d = dst(st_->ops[0], t);
      emit(Op::MulLo32, {d, a, b});
      mask16(d);
    } else {
      const uint32_t d = dst(st_->ops[0], wide);
      emit(Op::MulLo32, {d, s ? sext16(a) : a, s ? sext16(b) : b});
    }
    return;
  }
  const bool w64 = t.bits == 64;
  if (mode == "wide") {
    if (w64) fail(base + ".wide on 64-bit types is not supported");
    const uint32_t d = dst(st_->ops[0], wide);
    if (mad) {
      emit(s ? Op::MadWideS32 : Op::MadWideU32, {d, a, b, src(st_->ops[3], wide)});
    } else {
      emit(s ? Op::MulWideS32 : Op::MulWideU32, {d, a, b});
    }
    return;
  }
  const uint32_t d = dst(st_->ops[0], t);
  const bool hi = mode == "hi";
  if (mad) {
    if (w64 && hi) fail("mad.hi on 64-bit types is not supported");
    const Op op = w64 ? Op::MadLo64 : hi ? (s ? Op::MadHiS32 : Op::MadHiU32) : Op::MadLo32;
    emit(op, {d, a, b, src(st_->ops[3], t)});
    return;
  }
  Op op;
  if (w64) op = hi ? (s ? Op::MulHiS64 : Op::MulHiU64) : Op::MulLo64;
  else op = hi ? (s ? Op::MulHiS32 : Op::MulHiU32) : Op::MulLo32;
  emit(op, {d, a, b});
}

void Decoder::do_div_rem(Mods& m) {
  const std::string base(m.base());
  const Type t = m.take_types(1)[0];
  if (t.is_f32()) {
    if (base != "div") fail("rem on .f32 does not exist");
    if (m.take("approx") || m.take("full")) {
      fail("approximate division is not supported (its result is implementation-defined)");
    }
    if (!m.take("rn")) fail("only div.rn.f32 is supported");
    const bool ftz = m.take("ftz");
    m.finish();
    expect_ops(3);
    const uint32_t a = ftz_in(src(st_->ops[1], t), ftz), b = ftz_in(src(st_->ops[2], t), ftz);
    const uint32_t d = dst(st_->ops[0], t);
    emit(Op::DivF, {d, a, b});
    if (ftz) emit(Op::FtzF, {d, d});
    return;
  }
  if (!t.is_int() || t.bits < 32) fail(base + " is supported on 32- and 64-bit integers only");
  m.finish();
  expect_ops(3);
  const bool s = t.is_signed(), div = base == "div", w64 = t.bits == 64;
  Op op = div ? (s ? Op::DivS32 : Op::DivU32) : (s ? Op::RemS32 : Op::RemU32);
  if (w64) op = div ? (s ? Op::DivS64 : Op::DivU64) : (s ? Op::RemS64 : Op::RemU64);
  emit(op, {dst(st_->ops[0], t), src(st_->ops[1], t), src(st_->ops[2], t)});
}

void Decoder::do_unary(Mods& m) {
  const std::string base(m.base());  // abs, neg
  const Type t = m.take_types(1)[0];
  const bool ftz = t.is_f32() && m.take("ftz");
  m.finish();
  expect_ops(2);
  if (t.is_f32()) {
    const uint32_t a = ftz_in(src(st_->ops[1], t), ftz), d = dst(st_->ops[0], t);
    emit(base == "abs" ? Op::AbsF : Op::NegF, {d, a});
    return;
  }
  if (!t.is_int() || t.bits == 8 || (base == "abs" && !t.is_signed())) {
    fail("unsupported type for " + base);
  }
  uint32_t a = src(st_->ops[1], t);
  const uint32_t d = dst(st_->ops[0], t);
  if (t.bits == 16) {
    emit(base == "abs" ? Op::AbsS32 : Op::Neg32, {d, sext16(a)});
    mask16(d);
  } else if (t.bits == 32) {
    emit(base == "abs" ? Op::AbsS32 : Op::Neg32, {d, a});
  } else {
    emit(base == "abs" ? Op::AbsS64 : Op::Neg64, {d, a});
  }
}

void Decoder::do_minmax(Mods& m) {
  const bool mn = m.base() == "min";
  const Type t = m.take_types(1)[0];
  if (t.is_f32()) {
    const bool ftz = m.take("ftz"), nan = m.take("NaN");
    m.finish();
    expect_ops(3);
    const uint32_t a = ftz_in(src(st_->ops[1], t), ftz), b = ftz_in(src(st_->ops[2], t), ftz);
    const uint32_t d = dst(st_->ops[0], t);
    emit(nan ? (mn ? Op::MinNanF : Op::MaxNanF) : (mn ? Op::MinF : Op::MaxF), {d, a, b});
    if (ftz) emit(Op::FtzF, {d, d});
    return;
  }
  if (!t.is_int() || t.bits == 8) fail("unsupported type for min/max");
  m.finish();
  expect_ops(3);
  uint32_t a = src(st_->ops[1], t), b = src(st_->ops[2], t);
  const uint32_t d = dst(st_->ops[0], t);
  if (!t.is_signed()) {
    emit(mn ? Op::MinU : Op::MaxU, {d, a, b});
  } else if (t.bits == 64) {
    emit(mn ? Op::MinS64 : Op::MaxS64, {d, a, b});
  } else if (t.bits == 32) {
    emit(mn ? Op::MinS32 : Op::MaxS32, {d, a, b});
  } else {
    emit(mn ? Op::MinS32 : Op::MaxS32, {d, sext16(a), sext16(b)});
    mask16(d);
  }
}

void Decoder::do_logic(Mods& m) {
  const std::string base(m.base());  // and, or, xor, not
  const Type t = m.take_types(1)[0];
  m.finish();
  if (!(t.is_pred() || (t.kind == 'b' && t.bits >= 16))) fail(base + " needs .pred or .b16/32/64");
  if (base == "not") {
    expect_ops(2);
    const uint32_t a = src(st_->ops[1], t), d = dst(st_->ops[0], t);
    if (t.is_pred()) {
      emit(Op::NotP, {d, a});
    } else if (t.bits == 64) {
      emit(Op::Not64, {d, a});
    } else {
      emit(Op::Not32, {d, a});
      if (t.bits == 16) mask16(d);
    }
    return;
  }
  expect_ops(3);
  const uint32_t a = src(st_->ops[1], t), b = src(st_->ops[2], t), d = dst(st_->ops[0], t);
  emit(base == "and" ? Op::And : base == "or" ? Op::Or : Op::Xor, {d, a, b});
}

void Decoder::do_shift(Mods& m) {
  const bool left = m.base() == "shl";
  const Type t = m.take_types(1)[0];
  m.finish();
  if (!t.is_int() || t.bits == 8 || (left && t.kind != 'b')) fail("unsupported type for shift");
  expect_ops(3);
  const uint32_t a = src(st_->ops[1], t), b = src(st_->ops[2], Type{'u', 32});
  const uint32_t d = dst(st_->ops[0], t);
  if (t.bits == 64) {
    emit(left ? Op::Shl64 : t.is_signed() ? Op::ShrS64 : Op::ShrU64, {d, a, b});
  } else if (left) {
    emit(Op::Shl32, {d, a, b});
    if (t.bits == 16) mask16(d);
  } else if (!t.is_signed()) {
    emit(Op::ShrU32, {d, a, b});  // canonical zero-extended 16-bit values shift as 32-bit ones
  } else {
    emit(Op::ShrS32, {d, t.bits == 16 ? sext16(a) : a, b});
    if (t.bits == 16) mask16(d);
  }
}

void Decoder::do_setp(Mods& m) {
  const Type t = m.take_types(1)[0];
  const bool ftz = t.is_f32() && m.take("ftz");
  const std::string_view bop = m.take_one({"and", "or", "xor"});
  const std::string_view cmp =
      m.take_one({"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu",
                  "leu", "gtu", "geu", "num", "nan"});
  if (cmp.empty()) fail("setp needs a comparison");
  m.finish();
  if (t.is_pred() || t.bits == 8) fail("unsupported type for setp");
  expect_ops(bop.empty() ? 3 : 4);
  uint32_t a = src(st_->ops[1], t), b = src(st_->ops[2], t);
  Op op = Op::SetpEq;
  bool swap = false, neg = false;
  if (t.is_f32()) {
    a = ftz_in(a, ftz), b = ftz_in(b, ftz);
    // unordered X = not(ordered complement of X)
    if (cmp == "eq") op = Op::SetpEqF;
    else if (cmp == "ne") op = Op::SetpNeF;
    else if (cmp == "lt") op = Op::SetpLtF;
    else if (cmp == "le") op = Op::SetpLeF;
    else if (cmp == "gt") op = Op::SetpLtF, swap = true;
    else if (cmp == "ge") op = Op::SetpLeF, swap = true;
    else if (cmp == "equ") op = Op::SetpNeF, neg = true;
    else if (cmp == "neu") op = Op::SetpEqF, neg = true;
    else if (cmp == "ltu") op = Op::SetpLeF, swap = true, neg = true;  // !(a >= b)
    else if (cmp == "leu") op = Op::SetpLtF, swap = true, neg = true;  // !(a > b)
    else if (cmp == "gtu") op = Op::SetpLeF, neg = true;                // !(a <= b)
    else if (cmp == "geu") op = Op::SetpLtF, neg = true;                // !(a < b)
    else if (cmp == "num") op = Op::SetpNumF;
    else if (cmp == "nan") op = Op::SetpNumF, neg = true;
    else fail("comparison ." + std::string(cmp) + " is not for floats");
  } else {
    const bool uns_only = cmp == "lo" || cmp == "ls" || cmp == "hi" || cmp == "hs";
    const bool ordered = cmp == "lt" || cmp == "le" || cmp == "gt" || cmp == "ge";
    if (!uns_only && !ordered && cmp != "eq" && cmp != "ne") {
      fail("comparison ." + std::string(cmp) + " is for floats only");
    }
    if (t.kind == 'b' && !(cmp == "eq" || cmp == "ne")) fail(".b types compare with eq/ne only");
    if (uns_only && t.is_signed()) fail("." + std::string(cmp) + " needs an unsigned type");
    const bool sgn = t.is_signed();
    const bool lt = cmp == "lt" || cmp == "gt" || cmp == "lo" || cmp == "hi";
    swap = cmp == "gt" || cmp == "ge" || cmp == "hi" || cmp == "hs";
    if (cmp == "eq") op = Op::SetpEq;
    else if (cmp == "ne") op = Op::SetpNe;
    else if (!sgn) op = lt ? Op::SetpLtU : Op::SetpLeU;
    else if (t.bits == 64) op = lt ? Op::SetpLtS64 : Op::SetpLeS64;
    else op = lt ? Op::SetpLtS32 : Op::SetpLeS32;
    if (sgn && t.bits == 16 && op != Op::SetpEq && op != Op::SetpNe) a = sext16(a), b = sext16(b);
  }
  if (swap) std::swap(a, b);
  const Operand& pd = st_->ops[0];
  if (pd.kind != Operand::kReg || pd.neg) fail("setp writes a predicate register");
  Operand p = pd, q;
  p.pipe = {};
  q.name = pd.pipe;
  const Type pred{'p', 1};
  const uint32_t ps = dst(p, pred);
  const uint32_t qs = pd.pipe.empty() ? 0 : dst(q, pred);
  if (bop.empty()) {
    emit(op, {ps, a, b}, neg);
    if (!pd.pipe.empty()) emit(Op::NotP, {qs, ps});
    return;
  }
  const uint32_t c = src(st_->ops[3], pred);
  const uint32_t t0 = scratch();
  emit(op, {t0, a, b}, neg);
  const Op bo = bop == "and" ? Op::And : bop == "or" ? Op::Or : Op::Xor;
  if (!pd.pipe.empty()) {
    const uint32_t t1 = scratch();
    emit(Op::NotP, {t1, t0});
    emit(bo, {qs, t1, c});
  }
  emit(bo, {ps, t0, c});
}

void Decoder::do_selp(Mods& m) {
  const Type t = m.take_types(1)[0];
  m.finish();
  if (t.is_pred() || t.bits == 8) fail("unsupported type for selp");
  expect_ops(4);
  const uint32_t a = src(st_->ops[1], t), b = src(st_->ops[2], t);
  const uint32_t c = src(st_->ops[3], Type{'p', 1});
  emit(Op::Selp, {dst(st_->ops[0], t), a, b, c});
}

void Decoder::do_cvt(Mods& m) {
  const std::vector<Type> ts = m.take_types(2);
  const Type dt = ts[0], at = ts[1];
  const std::string_view irnd = m.take_one({"rni", "rzi", "rmi", "rpi"});
  const std::string_view frnd = m.take_one({"rn", "rz", "rm", "rp"});
  const bool ftz = m.take("ftz"), sat = m.take("sat");
  m.finish();
  expect_ops(2);
  if (dt.is_pred() || at.is_pred()) fail("cvt of predicates does not exist");
  auto round_of = [](std::string_view w) {
    return (w == "rz" || w == "rzi") ? kRz : (w == "rm" || w == "rmi") ? kRm
                                   : (w == "rp" || w == "rpi") ? kRp : kRn;
  };
  if (dt.is_int() && at.is_int()) {
    if (!irnd.empty() || !frnd.empty() || ftz || sat) fail("unsupported modifier on integer cvt");
    uint32_t reg_bits = 0;
    const uint32_t d = dst_atleast(st_->ops[0], dt.bits, reg_bits);
    const uint32_t a = st_->ops[1].kind == Operand::kImm ? src(st_->ops[1], at)
                                                         : src_reg_atleast(st_->ops[1], at.bits);
    emit(Op::CvtInt, {d, a},
         conv_aux({at.bits, at.is_signed(), dt.bits, dt.is_signed(), reg_bits, kRn}));
    return;
  }
  if (dt.is_f32() && at.is_f32()) {
    if (!frnd.empty() && frnd != "rn") fail("cvt.f32.f32 takes an integer rounding (.rni ...)");
    const uint32_t a = ftz_in(src(st_->ops[1], at), ftz), d = dst(st_->ops[0], dt);
    emit(irnd.empty() ? Op::Mov : Op::CvtFF, {d, a}, round_of(irnd));
    if (ftz) emit(Op::FtzF, {d, d});
    if (sat) emit(Op::SatF, {d, d});
    return;
  }
  if (dt.is_f32()) {  // integer -> f32
    if (frnd.empty() || !irnd.empty()) fail("int-to-float cvt needs .rn/.rz/.rm/.rp");
    const uint32_t a = st_->ops[1].kind == Operand::kImm ? src(st_->ops[1], at)
                                                         : src_reg_atleast(st_->ops[1], at.bits);
    const uint32_t d = dst(st_->ops[0], dt);
    emit(Op::CvtFI, {d, a}, conv_aux({at.bits, at.is_signed(), 32, false, 32, round_of(frnd)}));
    if (sat) emit(Op::SatF, {d, d});  // an integer never converts to a subnormal: .ftz is moot
    return;
  }
  // f32 -> integer: always saturating; NaN -> 0
  if (irnd.empty() || !frnd.empty()) fail("float-to-int cvt needs .rni/.rzi/.rmi/.rpi");
  uint32_t reg_bits = 0;
  const uint32_t a = ftz_in(src(st_->ops[1], at), ftz);
  const uint32_t d = dst_atleast(st_->ops[0], dt.bits, reg_bits);
  emit(Op::CvtIF, {d, a}, conv_aux({32, false, dt.bits, dt.is_signed(), reg_bits, round_of(irnd)}));
}

void Decoder::do_cvta(Mods& m) {
  const bool to = m.take("to");
  const std::string_view space = m.take_one({"global", "shared", "local", "const", "param"});
  if (space.empty() || space == "const" || space == "param") fail("unsupported cvta state space");
  const Type t = m.take_types(1)[0];
  m.finish();
  if (t.bits != 64 || !t.is_int()) fail("cvta is supported with .u64 only");
  expect_ops(2);
  const uint32_t d = dst(st_->ops[0], t);
  uint32_t a;
  if (st_->ops[1].kind == Operand::kSym) {
    if (to || space == "global") fail("cvta of a variable name needs .shared or .local");
    a = sym_addr_slot(st_->ops[1].name, space == "shared" ? Symbol::kShared : Symbol::kLocal);
  } else {
    a = src(st_->ops[1], t);
  }
  Op op = Op::Mov;  // global addresses are host addresses: generic == global
  if (space == "shared") op = to ? Op::CvtaToShared : Op::CvtaShared;
  if (space == "local") op = to ? Op::CvtaToLocal : Op::CvtaLocal;
  emit(op, {d, a});
}

// The slot holding an address's base, its offset, and whether the base is a 32-bit register.
uint32_t Decoder::address(const Operand& o, std::string_view space, int64_t& offset,
                          bool& addr32) {
  if (o.kind != Operand::kAddr) fail("expected an [address] operand");
  offset = o.offset;
  addr32 = false;
  if (o.name.empty()) return const_slot(0);
  if (o.name[0] != '%') {
    if (space == "shared") return sym_addr_slot(o.name, Symbol::kShared);
    if (space == "local") return sym_addr_slot(o.name, Symbol::kLocal);
    fail("a variable name as a " + std::string(space.empty() ? "generic" : space) + " address");
  }
  const RegInfo r = reg(o.name);
  if (r.bits != 32 && r.bits != 64) fail("an address register must be 32- or 64-bit");
  if (r.bits == 32 && (space.empty() || space == "global")) {
    fail("32-bit addresses are for .shared/.local only");
  }
  addr32 = r.bits == 32;
  return r.slot;
}

void Decoder::do_ld(Mods& m) {
  std::string_view space =
      m.take_one({"global", "shared", "shared::cta", "local", "param", "const"});
  if (space == "shared::cta") space = "shared";
  const bool nc = m.take("nc");
  m.take("volatile"), m.take("weak");
  m.take_one({"ca", "cg", "cs", "lu", "cv"});
  while (m.take_prefixed("L1::", "") || m.take_prefixed("L2::", "L2::cache_hint")) {
  }
  const std::string_view vec = m.take_one({"v2", "v4"});
  const Type t = m.take_types(1)[0];
  m.finish();
  if (space == "const") fail(".const memory is not supported");
  if (nc && space != "global") fail(".nc applies to .global loads only");
  if (t.is_pred()) fail("ld of predicates does not exist");
  expect_ops(2);
  const Operand& d = st_->ops[0];
  const Operand& a = st_->ops[1];
  if (space == "param") {
    if (!vec.empty() || d.kind == Operand::kVec) fail("vector ld.param is not supported");
    if (a.kind != Operand::kAddr || a.name.empty() || a.name[0] == '%') {
      fail("ld.param takes [parameter+offset]");
    }
    auto it = symbols_.find(std::string(a.name));
    if (it == symbols_.end() || it->second.space != Symbol::kParam) {
      fail("unknown parameter " + std::string(a.name));
    }
    const Param& p = e_.params[it->second.index];
    const uint32_t bytes = t.bits / 8;
    if (a.offset < 0 || uint64_t(a.offset) + bytes > p.bytes) fail("ld.param past the parameter");
    uint32_t reg_bits = t.bits;
    const uint32_t ds = t.is_f32() ? dst(d, t) : dst_atleast(d, t.bits, reg_bits);
    const uint32_t slot = new_slot(kConst);
    e_.param_loads.push_back(
        {slot, uint32_t(p.offset + a.offset), bytes, t.is_signed(), reg_bits});
    emit(Op::Mov, {ds, slot});
    return;
  }
  const uint32_t n = vec.empty() ? 1 : vec == "v2" ? 2 : 4;
  if (n * t.bits > 128) fail("vector access wider than 128 bits");
  if ((d.kind == Operand::kVec) != (n > 1) || (n > 1 && d.elems.size() != n)) {
    fail("destination does not match the vector width");
  }
  int64_t offset = 0;
  bool addr32 = false;
  const uint32_t base = address(a, space, offset, addr32);
  uint32_t dsts[4] = {0, 0, 0, 0};
  uint32_t reg_bits = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Operand e = d;
    if (n > 1) {
      e = Operand();
      e.name = d.elems[i];
    }
    uint32_t rb = t.bits;
    dsts[i] = t.is_f32() ? dst(e, t) : dst_atleast(e, t.bits, rb);
    if (i > 0 && rb != reg_bits) fail("vector elements of different widths");
    reg_bits = rb;
  }
  const MemInfo mi{t.bits / 8, n, t.is_signed() && reg_bits > t.bits, reg_bits};
  Op op = space == "global" ? Op::LdGlobal : space == "shared" ? Op::LdShared
          : space == "local" ? Op::LdLocal : Op::LdGeneric;
  if (n == 1 && t.bits == 32) {
    if (op == Op::LdGlobal) op = Op::LdGlobal32;
    if (op == Op::LdShared) op = Op::LdShared32;
  }
  emit(op, {dsts[0], dsts[1], dsts[2], dsts[3], base}, mem_aux(mi) | (uint32_t(addr32) << 31),
       offset);
}

void Decoder::do_st(Mods& m) {
  std::string_view space =
      m.take_one({"global", "shared", "shared::cta", "local", "param", "const"});
  if (space == "shared::cta") space = "shared";
  m.take("volatile"), m.take("weak");
  m.take_one({"wb", "cg", "cs", "wt"});
  while (m.take_prefixed("L1::", "") || m.take_prefixed("L2::", "L2::cache_hint")) {
  }
  const std::string_view vec = m.take_one({"v2", "v4"});
  const Type t = m.take_types(1)[0];
  m.finish();
  if (space == "param" || space == "const") fail("st." + std::string(space) + " is not supported");
  if (t.is_pred()) fail("st of predicates does not exist");
  expect_ops(2);
  const Operand& a = st_->ops[0];
  const Operand& v = st_->ops[1];
  const uint32_t n = vec.empty() ? 1 : vec == "v2" ? 2 : 4;
  if (n * t.bits > 128) fail("vector access wider than 128 bits");
  if ((v.kind == Operand::kVec) != (n > 1) || (n > 1 && v.elems.size() != n)) {
    fail("source does not match the vector width");
  }
  int64_t offset = 0;
  bool addr32 = false;
  const uint32_t base = address(a, space, offset, addr32);
  uint32_t vals[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < n; ++i) {
    Operand e = v;
    if (n > 1) {
      e = Operand();
      e.name = v.elems[i];
    }
    if (e.kind == Operand::kImm || t.is_f32()) {
      vals[i] = src(e, t);
    } else {
      vals[i] = src_reg_atleast(e, t.bits);
    }
  }
  const MemInfo mi{t.bits / 8, n, false, t.bits};
  Op op = space == "global" ? Op::StGlobal : space == "shared" ? Op::StShared
          : space == "local" ? Op::StLocal : Op::StGeneric;
  if (n == 1 && t.bits == 32) {
    if (op == Op::StGlobal) op = Op::StGlobal32;
    if (op == Op::StShared) op = Op::StShared32;
  }
  emit(op, {base, vals[0], vals[1], vals[2], vals[3]}, mem_aux(mi) | (uint32_t(addr32) << 31),
       offset);
}

void Decoder::do_bar(Mods& m) {
  m.take("cta");
  if (!m.take("sync")) fail("only bar.sync / barrier.sync are supported");
  m.take("aligned");
  m.finish();
  if (st_->ops.size() != 1) fail("barriers with a thread count are not supported");
  const Operand& id = st_->ops[0];
  if (id.kind != Operand::kImm) fail("the barrier id must be an immediate");
  uint64_t v = 0;
  if (id.minus || !parse_uint(id.imm, v) || v > 15) fail("barrier id must be 0..15");
  emit(Op::Bar, {}, 0, int64_t(v));
}

void Decoder::do_sqrt_rcp(Mods& m) {
  const std::string base(m.base());
  const Type t = m.take_types(1)[0];
  if (!t.is_f32()) fail(base + " is supported on .f32 only");
  if (m.take("approx")) fail("approximate " + base + " is not supported (implementation-defined)");
  if (!m.take("rn")) fail("only " + base + ".rn.f32 is supported");
  const bool ftz = m.take("ftz");
  m.finish();
  expect_ops(2);
  const uint32_t a = ftz_in(src(st_->ops[1], t), ftz), d = dst(st_->ops[0], t);
  emit(base == "sqrt" ? Op::SqrtF : Op::RcpF, {d, a});
  if (ftz) emit(Op::FtzF, {d, d});
}

// ---------------------------------------------------------------------------------------------

void Decoder::decode(const Stmt& st) {
  st_ = &st;
  scratch_used_ = 0;
  pending_.clear();
  Mods m(st.opcode, st);
  const std::string_view b = m.base();
  std::string label;
  if (b == "mov") {
    do_mov(m);
  } else if (b == "add" || b == "sub") {
    do_int_or_float_arith(m);
  } else if (b == "mul" || b == "mad") {
    do_mul_mad(m);
  } else if (b == "fma") {
    const Type t = m.take_types(1)[0];
    if (!t.is_f32()) fail("fma is supported on .f32 only");
    do_float_arith(m, t, "fma");
  } else if (b == "div" || b == "rem") {
    do_div_rem(m);
  } else if (b == "abs" || b == "neg") {
    do_unary(m);
  } else if (b == "min" || b == "max") {
    do_minmax(m);
  } else if (b == "and" || b == "or" || b == "xor" || b == "not") {
    do_logic(m);
  } else if (b == "shl" || b == "shr") {
    do_shift(m);
  } else if (b == "setp") {
    do_setp(m);
  } else if (b == "selp") {
    do_selp(m);
  } else if (b == "cvt") {
    do_cvt(m);
  } else if (b == "cvta") {
    do_cvta(m);
  } else if (b == "ld") {
    do_ld(m);
  } else if (b == "st") {
    do_st(m);
  } else if (b == "bar" || b == "barrier") {
    do_bar(m);
  } else if (b == "sqrt" || b == "rcp") {
    do_sqrt_rcp(m);
  } else if (b == "bra") {
    m.take("uni");
    m.finish();
    expect_ops(1);
    if (st.ops[0].kind != Operand::kSym) fail("bra needs a label");
    label = std::string(st.ops[0].name);
    emit(Op::Bra, {});
  } else if (b == "ret" || b == "exit") {
    m.take("uni");
    m.finish();
    expect_ops(0);
    emit(Op::Exit, {});
  } else if (b == "membar" || b == "fence") {
    if (b == "membar") m.take_one({"cta", "gl", "sys"});
    else m.take_one({"sc", "acq_rel"}), m.take_one({"cta", "gpu", "sys"});
    m.finish();
    expect_ops(0);
    emit(Op::Nop, {});
  } else {
    fail("unsupported instruction '" + std::string(st.opcode) + "'");
  }
  // Guard: a multi-micro-op instruction may overwrite its own guard predicate part-way (setp into
  // the guarding register), so it tests a copy taken before its first micro-op.
  uint32_t guard = kTrueSlot;
  uint8_t gneg = 0;
  if (!st.guard.empty()) {
    const RegInfo g = reg(st.guard);
    if (g.bits != 1) fail("guard " + std::string(st.guard) + " is not a predicate");
    guard = g.slot;
    gneg = st.guard_neg;
  }
  const bool copy_guard = guard != kTrueSlot && pending_.size() > 1;
  if (copy_guard) {
    Instr copy;
    copy.op = Op::Mov;
    copy.r[0] = guard_copy_;
    copy.r[1] = guard;
    pending_.insert(pending_.begin(), copy);
  }
  const uint32_t src_index = uint32_t(e_.source.size());
  e_.source.push_back({st.line, st.text});
  for (size_t i = 0; i < pending_.size(); ++i) {
    Instr in = pending_[i];
    in.src = src_index;
    in.count = i == 0;
    const bool unguarded = copy_guard && i == 0;
    in.guard = unguarded ? kTrueSlot : copy_guard ? guard_copy_ : guard;
    in.gneg = unguarded ? 0 : gneg;
    if (in.op == Op::Bra) fixups_.push_back({e_.code.size(), label, st.line});
    e_.code.push_back(in);
  }
  ++e_.num_ptx_instructions;
}


uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Resolves branch targets and lays out shared and local memory; the symbol-address slots get
// their offsets only now, so a declaration may follow an instruction that names it.
void Decoder::finish(uint32_t line) {
  for (const Fixup& f : fixups_) {
    auto it = labels_.find(f.label);
    if (it == labels_.end()) fail_at(f.line, "unknown label " + f.label);
    e_.code[f.index].imm = it->second;
  }
  Instr end;  // falling off the end of the body exits, as `ret` would
  end.op = Op::Exit;
  end.src = uint32_t(e_.source.size());
  e_.code.push_back(end);
  uint64_t off = 0, dyn_align = 16;
  for (SharedVar& v : e_.shared) {
    if (v.dynamic) {
      dyn_align = std::max(dyn_align, v.align);
      continue;
    }
    v.offset = align_up(off, v.align);
    off = v.offset + v.bytes;
  }
  e_.static_shared_bytes = off;
  e_.dynamic_shared_offset = align_up(off, dyn_align);
  for (SharedVar& v : e_.shared) {
    if (v.dynamic) v.offset = e_.dynamic_shared_offset;
  }
  uint64_t loff = 0;
  for (SharedVar& v : locals_) {
    v.offset = align_up(loff, v.align);
    loff = v.offset + v.bytes;
  }
  e_.local_bytes = loff;
  for (const auto& [name, sym] : symbols_) {
    if (sym.space == Symbol::kShared) e_.slot_init[sym.slot] = e_.shared[sym.index].offset;
    if (sym.space == Symbol::kLocal) e_.slot_init[sym.slot] = locals_[sym.index].offset;
  }
  if (e_.slot_init.size() > 0xFFFFFFF0u) fail_at(line, "entry too large");
  layout_slots(e_, kind_, pack_);
}

// ---------------------------------------------------------------------------------------------
// Slot layout and register compaction
//
// nvcc emits SSA-like PTX: a fresh virtual register per value, so a large kernel declares tens of
// thousands of registers of which a few hundred are live at once. Giving each its own slot would
// make every thread's state (saved and restored at each barrier) huge. Registers are therefore
// packed by live range: a register whose occurrences all lie in one basic block, the first being
// an unguarded definition, lives exactly from that definition to its last use; the few others
// (live across blocks) get a live range from a backward dataflow liveness analysis, widened to
// the hull of the blocks they are live in. Registers whose ranges do not overlap share a slot.

// The register slots an instruction writes (defs) and reads (uses; the guard included).
void operand_roles(const Instr& in, std::vector<uint32_t>& defs, std::vector<uint32_t>& uses) {
  defs.clear();
  uses.clear();
  uses.push_back(in.guard);
  switch (in.op) {
    case Op::Nop: case Op::Bra: case Op::Exit: case Op::Bar:
      return;
    case Op::StGlobal: case Op::StShared: case Op::StLocal: case Op::StGeneric:
    case Op::StGlobal32: case Op::StShared32:
      uses.insert(uses.end(), in.r, in.r + 5);
      return;
    case Op::LdGlobal: case Op::LdShared: case Op::LdLocal: case Op::LdGeneric:
    case Op::LdGlobal32: case Op::LdShared32: {
      const uint32_t vec = in.op == Op::LdGlobal32 || in.op == Op::LdShared32
                               ? 1 : mem_info(in.aux & 0x7fffffffu).vec;
      defs.insert(defs.end(), in.r, in.r + vec);
      uses.push_back(in.r[4]);
      return;
    }
    case Op::Unpack:
      defs.push_back(in.r[0]), defs.push_back(in.r[1]);
      uses.push_back(in.r[2]);
      return;
    default:
      defs.push_back(in.r[0]);
      uses.insert(uses.end(), in.r + 1, in.r + 4);
      return;
  }
}

struct Bitset {
  std::vector<uint64_t> w;
  explicit Bitset(size_t n = 0) : w((n + 63) / 64, 0) {}
  bool get(size_t i) const { return (w[i >> 6] >> (i & 63)) & 1; }
  void set(size_t i) { w[i >> 6] |= 1ull << (i & 63); }
  void reset(size_t i) { w[i >> 6] &= ~(1ull << (i & 63)); }
};

struct Block {
  uint32_t begin = 0, end = 0;  // [begin, end) micro-op indices
  std::vector<uint32_t> succ;
};

std::vector<Block> basic_blocks(const std::vector<Instr>& code, std::vector<uint32_t>& block_of) {
  std::vector<uint8_t> leader(code.size() + 1, 0);
  leader[0] = 1;
  for (size_t i = 0; i < code.size(); ++i) {
    if (code[i].op == Op::Bra) leader[size_t(code[i].imm)] = 1;
    if (code[i].op == Op::Bra || code[i].op == Op::Exit) leader[i + 1] = 1;
  }
  std::vector<Block> blocks;
  block_of.assign(code.size(), 0);
  for (uint32_t i = 0; i < code.size(); ++i) {
    if (leader[i]) blocks.push_back({i, i, {}});
    blocks.back().end = i + 1;
    block_of[i] = uint32_t(blocks.size() - 1);
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    const Instr& last = code[blocks[b].end - 1];
    const bool always = last.guard == kTrueSlot && last.gneg == 0;
    if (last.op == Op::Bra) blocks[b].succ.push_back(block_of[size_t(last.imm)]);
    const bool falls = !(always && (last.op == Op::Bra || last.op == Op::Exit));
    if (falls && blocks[b].end < code.size()) blocks[b].succ.push_back(block_of[blocks[b].end]);
  }
  return blocks;
}

bool is_guarded(const Instr& in) { return !(in.guard == kTrueSlot && in.gneg == 0); }

// Sets [first, last] to each register's occurrence hull and returns the registers that are not
// block-local: those occurring in several blocks, or read (or defined under a guard) before an
// unconditional definition in their block. A block-local register is live exactly over its hull.
std::vector<uint32_t> occurrence_hulls(const std::vector<Instr>& code,
                                       const std::vector<uint32_t>& block_of,
                                       const std::vector<int64_t>& reg_index, size_t nregs,
                                       std::vector<uint32_t>& first, std::vector<uint32_t>& last) {
  first.assign(nregs, UINT32_MAX);
  last.assign(nregs, 0);
  std::vector<uint32_t> home(nregs, UINT32_MAX);  // block of the first definition
  std::vector<uint8_t> global(nregs, 0);
  std::vector<uint32_t> defs, uses;
  auto touch = [&](size_t r, uint32_t i) {
    first[r] = std::min(first[r], i);
    last[r] = std::max(last[r], i);
  };
  for (uint32_t i = 0; i < code.size(); ++i) {
    operand_roles(code[i], defs, uses);
    for (uint32_t s : uses) {  // uses first: an instruction reading its own destination
      if (reg_index[s] < 0) continue;
      const size_t r = size_t(reg_index[s]);
      if (home[r] != block_of[i]) global[r] = 1;  // read before any definition, or elsewhere
      touch(r, i);
    }
    for (uint32_t s : defs) {
      if (reg_index[s] < 0) continue;
      const size_t r = size_t(reg_index[s]);
      if (home[r] == UINT32_MAX) {
        home[r] = block_of[i];
        if (is_guarded(code[i])) global[r] = 1;  // the old value may flow through
      } else if (home[r] != block_of[i]) {
        global[r] = 1;
      }
      touch(r, i);
    }
  }
  std::vector<uint32_t> out;
  for (size_t r = 0; r < nregs; ++r) {
    if (global[r] && first[r] != UINT32_MAX) out.push_back(uint32_t(r));
  }
  return out;
}

// Widens the hulls of the cross-block registers `gregs` over every block they are live into or
// out of (backward dataflow; a guarded definition does not end a live range).
void widen_by_liveness(const std::vector<Instr>& code, const std::vector<Block>& blocks,
                       const std::vector<int64_t>& reg_index, const std::vector<uint32_t>& gregs,
                       std::vector<uint32_t>& first, std::vector<uint32_t>& last) {
  std::vector<uint32_t> gid(reg_index.size(), UINT32_MAX);  // slot -> index into gregs
  std::vector<uint8_t> is_g(first.size(), 0);
  for (uint32_t r : gregs) is_g[r] = 1;
  for (size_t s = 0; s < reg_index.size(); ++s) {
    if (reg_index[s] >= 0 && is_g[size_t(reg_index[s])]) {
      const auto it = std::lower_bound(gregs.begin(), gregs.end(), uint32_t(reg_index[s]));
      gid[s] = uint32_t(it - gregs.begin());
    }
  }
  const size_t nb = blocks.size(), ng = gregs.size();
  std::vector<Bitset> gen(nb, Bitset(ng)), kill(nb, Bitset(ng));
  std::vector<Bitset> in(nb, Bitset(ng)), out(nb, Bitset(ng));
  std::vector<uint32_t> defs, uses;
  for (size_t b = 0; b < nb; ++b) {
    for (uint32_t i = blocks[b].end; i-- > blocks[b].begin;) {
      operand_roles(code[i], defs, uses);
      for (uint32_t s : defs) {
        if (gid[s] == UINT32_MAX || is_guarded(code[i])) continue;
        kill[b].set(gid[s]);
        gen[b].reset(gid[s]);
      }
      for (uint32_t s : uses) {
        if (gid[s] != UINT32_MAX) gen[b].set(gid[s]);
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t b = nb; b-- > 0;) {
      Bitset o(ng);
      for (uint32_t s : blocks[b].succ) {
        for (size_t k = 0; k < o.w.size(); ++k) o.w[k] |= in[s].w[k];
      }
      for (size_t k = 0; k < o.w.size(); ++k) {
        const uint64_t ni = gen[b].w[k] | (o.w[k] & ~kill[b].w[k]);
        if (ni != in[b].w[k]) changed = true, in[b].w[k] = ni;
      }
      out[b] = std::move(o);
    }
  }
  for (size_t b = 0; b < nb; ++b) {
    for (size_t k = 0; k < ng; ++k) {
      if (in[b].get(k) || out[b].get(k)) {
        first[gregs[k]] = std::min(first[gregs[k]], blocks[b].begin);
        last[gregs[k]] = std::max(last[gregs[k]], blocks[b].end - 1);
      }
    }
  }
}

// Live ranges [first, last] (micro-op indices) of the registers (indexed by reg_index); a
// register that never occurs has first == UINT32_MAX.
void live_ranges(const std::vector<Instr>& code, const std::vector<int64_t>& reg_index,
                 size_t nregs, std::vector<uint32_t>& first, std::vector<uint32_t>& last) {
  std::vector<uint32_t> block_of;
  const std::vector<Block> blocks = basic_blocks(code, block_of);
  const std::vector<uint32_t> gregs =
      occurrence_hulls(code, block_of, reg_index, nregs, first, last);
  if (!gregs.empty()) widen_by_liveness(code, blocks, reg_index, gregs, first, last);
}

// Renumbers the slots: launch constants first (kTrueSlot stays 0), then the fixed per-thread
// slots, then the registers packed by live range.
void Decoder::layout_slots(Entry& e, const std::vector<SlotKind>& kind, bool pack) {
  const size_t n = kind.size();
  std::vector<int64_t> reg_index(n, -1);
  size_t nregs = 0;
  for (size_t s = 0; s < n; ++s) {
    if (kind[s] == kReg) reg_index[s] = int64_t(nregs++);
  }
  std::vector<uint32_t> first, last;
  if (pack) {
    live_ranges(e.code, reg_index, nregs, first, last);
  } else {  // one slot each: ranges that all overlap
    first.assign(nregs, 0);
    last.assign(nregs, UINT32_MAX - 1);
  }
  std::vector<uint32_t> map(n, 0);
  std::vector<uint64_t> consts;
  for (size_t s = 0; s < n; ++s) {
    if (kind[s] == kConst) map[s] = uint32_t(consts.size()), consts.push_back(e.slot_init[s]);
  }
  uint32_t next = uint32_t(consts.size());
  for (size_t s = 0; s < n; ++s) {
    if (kind[s] == kThread) map[s] = next++;
  }
  // Interval colouring: by start; a slot is free again after its register's last occurrence.
  std::vector<uint32_t> order;
  for (uint32_t r = 0; r < nregs; ++r) {
    if (first[r] != UINT32_MAX) order.push_back(r);
  }
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return first[a] < first[b]; });
  std::vector<uint32_t> reg_slot(nregs, 0), free_slots;
  using Active = std::pair<uint32_t, uint32_t>;  // (last, slot)
  std::priority_queue<Active, std::vector<Active>, std::greater<Active>> active;
  uint32_t packed = 0;
  for (uint32_t r : order) {
    while (!active.empty() && active.top().first < first[r]) {
      free_slots.push_back(active.top().second);
      active.pop();
    }
    uint32_t slot;
    if (free_slots.empty()) {
      slot = packed++;
    } else {
      slot = free_slots.back();
      free_slots.pop_back();
    }
    reg_slot[r] = slot;
    active.push({last[r], slot});
  }
  for (size_t s = 0; s < n; ++s) {
    if (kind[s] == kReg) map[s] = next + reg_slot[size_t(reg_index[s])];
  }
  for (Instr& in : e.code) {
    in.guard = map[in.guard];
    for (uint32_t& r : in.r) r = map[r];
  }
  for (ParamLoad& p : e.param_loads) p.slot = map[p.slot];
  for (int i = 0; i < 3; ++i) {
    e.special.tid[i] = map[e.special.tid[i]];
    e.special.ntid[i] = map[e.special.ntid[i]];
    e.special.ctaid[i] = map[e.special.ctaid[i]];
    e.special.nctaid[i] = map[e.special.nctaid[i]];
  }
  e.special.laneid = map[e.special.laneid];
  e.num_const_slots = uint32_t(consts.size());
  e.num_slots = next + packed;
  e.num_registers = uint32_t(nregs);
  e.slot_init = std::move(consts);
}

// ---------------------------------------------------------------------------------------------
// Statement parser

struct VarDecl {
  std::string name;
  uint64_t bytes = 0, align = 0;
  bool dynamic = false;
};

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& options)
      : text_(text), toks_(lex(text)), options_(options) {}
  Module parse();

 private:
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is(const Token& t, std::string_view s) const { return t.text == s && t.kind != Tok::End; }
  bool accept(std::string_view s) {
    if (!is(peek(), s)) return false;
    next();
    return true;
  }
  const Token& expect(std::string_view s) {
    if (!is(peek(), s)) fail(peek(), "expected '" + std::string(s) + "'");
    return next();
  }
  [[noreturn]] void fail(const Token& t, const std::string& msg) const {
    fail_at(t.line, msg + (t.kind == Tok::End ? " at the end of the text"
                                              : ", got '" + std::string(t.text) + "'"));
  }
  void skip_line(uint32_t line) {
    while (peek().kind != Tok::End && peek().line == line) next();
  }
  void skip_past(std::string_view s) {
    while (peek().kind != Tok::End && !is(peek(), s)) next();
    expect(s);
  }
  uint64_t expect_uint() {
    uint64_t v = 0;
    if (peek().kind != Tok::Number || !parse_uint(peek().text, v)) {
      fail(peek(), "expected an integer");
    }
    next();
    return v;
  }
  Type expect_type() {
    const Token& t = peek();
    Type ty;
    if (t.kind != Tok::Ident || t.text[0] != '.' || !parse_type_word(t.text.substr(1), ty) ||
        ty.kind == 'x') {
      fail(t, "expected a type");
    }
    next();
    return ty;
  }
  std::string stmt_text(size_t first, size_t last) const;
  void skip_section();
  VarDecl parse_var(bool is_extern);
  void parse_entry();
  void parse_params(Decoder& d);
  void parse_entry_directives(Entry& e);
  void parse_body(Decoder& d);
  void parse_regs(Decoder& d);
  Stmt parse_instruction();
  Operand parse_operand(size_t b, size_t e, uint32_t line);

  std::string_view text_;
  std::vector<Token> toks_;
  ParseOptions options_;
  size_t pos_ = 0;
  Module mod_;
  std::vector<SharedVar> module_shared_;
};

std::string Parser::stmt_text(size_t first, size_t last) const {
  const char* b = toks_[first].text.data();
  const char* e = toks_[last].text.data() + toks_[last].text.size();
  std::string out;
  bool space = false;
  for (const char* p = b; p < e; ++p) {
    const bool ws = *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r';
    if (ws) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += *p;
  }
  return out;
}

void Parser::skip_section() {
  skip_past("{");
  int depth = 1;
  while (depth > 0) {
    const Token& t = next();
    if (t.kind == Tok::End) fail(t, "unterminated .section");
    if (is(t, "{")) ++depth;
    if (is(t, "}")) --depth;
  }
}

// [.align N] .type name[dims...] ;   (`name[]` only with .extern: dynamic shared memory)
VarDecl Parser::parse_var(bool is_extern) {
  VarDecl v;
  uint64_t align = 0;
  if (accept(".align")) align = expect_uint();
  const Type t = expect_type();
  if (t.is_pred()) fail(peek(), "predicate variables are not supported");
  const Token& name = next();
  if (name.kind != Tok::Ident || name.text[0] == '.' || name.text[0] == '%') {
    fail(name, "expected a variable name");
  }
  v.name = std::string(name.text);
  uint64_t n = 1;
  while (accept("[")) {
    if (accept("]")) {
      if (!is_extern) fail(peek(), "an array without size must be .extern");
      v.dynamic = true;
      continue;
    }
    const uint64_t dim = expect_uint();
    expect("]");
    if (dim == 0 || dim > (1ull << 32) || n > (1ull << 32) / dim) fail(name, "bad array size");
    n *= dim;
  }
  if (is(peek(), "=")) fail(peek(), "initialized variables are not supported");
  expect(";");
  if (is_extern && !v.dynamic) fail(name, ".extern variables must be unsized arrays");
  v.bytes = v.dynamic ? 0 : n * (t.bits / 8);
  v.align = align ? align : t.bits / 8;
  if (v.align == 0 || (v.align & (v.align - 1)) != 0) {
    fail(name, "alignment must be a power of two");
  }
  return v;
}

Module Parser::parse() {
  bool is_extern = false;
  while (peek().kind != Tok::End) {
    const Token& t = peek();
    if (t.kind != Tok::Ident || t.text[0] != '.') fail(t, "expected a directive");
    const std::string_view w = t.text;
    if (w == ".version" || w == ".target") {
      next();
      std::string& out = w == ".version" ? mod_.version : mod_.target;
      while (peek().kind != Tok::End && peek().line == t.line) out += std::string(next().text);
    } else if (w == ".address_size") {
      next();
      if (expect_uint() != 64) fail(t, "only .address_size 64 is supported");
    } else if (w == ".file" || w == ".loc" || w == ".globl") {
      next();
      skip_line(t.line);
      accept(";");
    } else if (w == ".section") {
      skip_section();
    } else if (w == ".pragma") {
      skip_past(";");
    } else if (w == ".visible" || w == ".weak" || w == ".extern" || w == ".common") {
      is_extern |= w == ".extern";
      next();
      continue;
    } else if (w == ".entry") {
      if (is_extern) fail(t, ".extern entries (declarations only) are not supported");
      next();
      parse_entry();
    } else if (w == ".func") {
      fail(t, "device functions (.func) are not supported: inline them into the kernel");
    } else if (w == ".shared") {
      next();
      const VarDecl v = parse_var(is_extern);
      module_shared_.push_back({v.name, 0, v.bytes, v.align, v.dynamic});
    } else if (w == ".global" || w == ".const" || w == ".local") {
      fail(t, "module-scope " + std::string(w) + " variables are not supported");
    } else {
      fail(t, "unsupported directive");
    }
    is_extern = false;
  }
  if (mod_.entries.empty()) fail_at(toks_.back().line, "the PTX text has no .entry");
  return std::move(mod_);
}

void Parser::parse_entry() {
  const Token& name = next();
  if (name.kind != Tok::Ident || name.text[0] == '.' || name.text[0] == '%') {
    fail(name, "expected the entry's name");
  }
  for (const Entry& e : mod_.entries) {
    if (e.name == name.text) fail(name, "duplicate entry");
  }
  mod_.entries.emplace_back();
  Entry& e = mod_.entries.back();
  e.name = std::string(name.text);
  Decoder d(e, module_shared_, options_.pack_registers);
  if (accept("(")) parse_params(d);
  parse_entry_directives(e);
  const uint32_t line = expect("{").line;
  parse_body(d);
  d.finish(line);
}

void Parser::parse_params(Decoder& d) {
  if (accept(")")) return;
  while (true) {
    const Token& start = expect(".param");
    uint64_t align = 0;
    Type t;
    bool typed = false;
    while (peek().kind == Tok::Ident && peek().text[0] == '.') {
      const std::string_view w = peek().text;
      if (w == ".align") {
        next();
        align = expect_uint();
      } else if (w.substr(0, 4) == ".ptr") {  // pointer attributes: .ptr[.space][.align N]
        next();
        const size_t a = w.find(".align");
        if (a != std::string_view::npos) {
          if (a + 6 != w.size()) fail(peek(), "bad .ptr attribute");
          expect_uint();
        } else if (accept(".align")) {
          expect_uint();
        }
      } else if (w == ".global" || w == ".shared" || w == ".const" || w == ".local") {
        next();
      } else {
        t = expect_type();
        typed = true;
      }
    }
    if (!typed || t.is_pred()) fail(start, "parameter without a data type");
    const Token& name = next();
    if (name.kind != Tok::Ident || name.text[0] == '.' || name.text[0] == '%') {
      fail(name, "expected a parameter name");
    }
    uint64_t n = 1;
    if (accept("[")) {
      n = expect_uint();
      expect("]");
    }
    const uint64_t bytes = n * (t.bits / 8);
    if (bytes == 0 || bytes > 8) {
      fail(name, "parameters larger than 8 bytes are not supported (pass a pointer)");
    }
    const uint64_t al = align ? align : t.bits / 8;
    if (al == 0 || al > 8 || (al & (al - 1)) != 0) fail(name, "bad parameter alignment");
    d.add_param(Param{std::string(name.text), 0, uint32_t(bytes), uint32_t(al)}, name.line);
    if (accept(")")) return;
    expect(",");
  }
}

void Parser::parse_entry_directives(Entry& e) {
  while (peek().kind == Tok::Ident && peek().text[0] == '.') {
    const Token& t = next();
    if (t.text == ".maxntid" || t.text == ".reqntid") {
      uint32_t* dst = t.text == ".maxntid" ? e.maxntid : e.reqntid;
      dst[0] = uint32_t(expect_uint());
      dst[1] = dst[2] = 1;
      if (accept(",")) dst[1] = uint32_t(expect_uint());
      if (accept(",")) dst[2] = uint32_t(expect_uint());
    } else if (t.text == ".minnctapersm" || t.text == ".maxnreg") {
      expect_uint();  // occupancy hints: no effect on results
    } else if (t.text == ".pragma") {
      skip_past(";");
    } else {
      fail(t, "unsupported entry directive");
    }
  }
}

void Parser::parse_regs(Decoder& d) {
  const Token& start = peek();
  if (is(start, ".v2") || is(start, ".v4")) fail(start, "vector registers are not supported");
  const Type t = expect_type();
  while (true) {
    const Token& name = next();
    if (name.kind != Tok::Ident || name.text[0] != '%') fail(name, "expected a register name");
    if (accept("<")) {
      const uint64_t n = expect_uint();
      expect(">");
      d.add_regs(std::string(name.text), t, n, true, name.line);
    } else {
      d.add_regs(std::string(name.text), t, 1, false, name.line);
    }
    if (accept(";")) return;
    expect(",");
  }
}

void Parser::parse_body(Decoder& d) {
  int depth = 0;
  while (true) {
    const Token& t = peek();
    if (t.kind == Tok::End) fail(t, "unterminated entry body");
    if (is(t, "}")) {
      next();
      if (depth-- == 0) return;
      d.pop_scope();
    } else if (is(t, "{")) {
      next();
      ++depth;
      d.push_scope();
    } else if (t.kind == Tok::Ident && t.text[0] == '.') {
      next();
      if (t.text == ".reg") {
        parse_regs(d);
      } else if (t.text == ".shared" || (t.text == ".extern" && is(peek(), ".shared"))) {
        const bool ext = t.text == ".extern";
        if (ext) next();
        const VarDecl v = parse_var(ext);
        d.add_shared({v.name, 0, v.bytes, v.align, v.dynamic}, t.line);
      } else if (t.text == ".local") {
        const VarDecl v = parse_var(false);
        d.add_local(v.name, v.bytes, v.align, t.line);
      } else if (t.text == ".loc" || t.text == ".file") {
        skip_line(t.line);
      } else if (t.text == ".pragma") {
        skip_past(";");
      } else {
        fail(t, "unsupported directive in an entry body");
      }
    } else if (t.kind == Tok::Ident && is(peek(1), ":")) {
      d.define_label(t.text, t.line);
      next(), next();
    } else if (is(t, "@") || t.kind == Tok::Ident) {
      d.decode(parse_instruction());
    } else {
      fail(t, "expected an instruction");
    }
  }
}

Stmt Parser::parse_instruction() {
  const size_t first = pos_;
  size_t end = pos_;
  int braces = 0;  // only vector operands open braces inside an instruction
  while (true) {
    const Token& t = toks_[end];
    if (t.kind == Tok::End || (is(t, "}") && braces == 0)) fail(t, "missing ';' after instruction");
    if (is(t, ";")) break;
    braces += is(t, "{") - is(t, "}");
    ++end;
  }
  Stmt st;
  st.line = toks_[first].line;
  st.text = stmt_text(first, end);
  size_t i = first;
  if (is(toks_[i], "@")) {
    ++i;
    if (is(toks_[i], "!")) st.guard_neg = true, ++i;
    if (toks_[i].kind != Tok::Ident || toks_[i].text[0] != '%') {
      fail_at(st.line, "expected a guard predicate in `" + st.text + "`");
    }
    st.guard = toks_[i++].text;
  }
  if (i >= end || toks_[i].kind != Tok::Ident) {
    fail_at(st.line, "expected an opcode in `" + st.text + "`");
  }
  st.opcode = toks_[i++].text;
  while (i < end) {
    size_t j = i;
    int nest = 0;
    while (j < end && !(nest == 0 && is(toks_[j], ","))) {
      if (is(toks_[j], "[") || is(toks_[j], "{")) ++nest;
      if (is(toks_[j], "]") || is(toks_[j], "}")) --nest;
      ++j;
    }
    if (j == i) fail_at(st.line, "empty operand in `" + st.text + "`");
    Operand o = parse_operand(i, j, st.line);
    st.ops.push_back(std::move(o));
    i = j + (j < end ? 1 : 0);
    if (j < end && i == end) fail_at(st.line, "trailing ',' in `" + st.text + "`");
  }
  pos_ = end + 1;
  return st;
}

Operand Parser::parse_operand(size_t b, size_t e, uint32_t line) {
  Operand o;
  const auto bad = [&]() {
    fail_at(line, "cannot parse operand '" + stmt_text(b, e - 1) + "'");
  };
  const auto ident = [&](size_t k) { return k < e && toks_[k].kind == Tok::Ident; };
  if (is(toks_[b], "[")) {
    if (!is(toks_[e - 1], "]")) bad();
    o.kind = Operand::kAddr;
    size_t k = b + 1;
    if (ident(k)) o.name = toks_[k++].text;
    bool neg = false;
    bool has_sign = false;
    if (!o.name.empty() && k < e - 1) {
      if (!is(toks_[k], "+") && !is(toks_[k], "-")) bad();
      neg = is(toks_[k++], "-");
      has_sign = true;
    }
    if (k < e - 1 && is(toks_[k], "-")) neg = !neg, ++k;
    if (k < e - 1) {
      uint64_t v = 0;
      if (toks_[k].kind != Tok::Number || !parse_uint(toks_[k].text, v) || v > (1ull << 62)) bad();
      o.offset = neg ? -int64_t(v) : int64_t(v);
      ++k;
    } else if (has_sign || (o.name.empty())) {
      bad();
    }
    if (k != e - 1) bad();
    return o;
  }
  if (is(toks_[b], "{")) {
    if (!is(toks_[e - 1], "}")) bad();
    o.kind = Operand::kVec;
    for (size_t k = b + 1; k < e - 1; k += 2) {
      if (!ident(k) || toks_[k].text[0] != '%') bad();
      o.elems.push_back(toks_[k].text);
      if (k + 1 < e - 1 && !is(toks_[k + 1], ",")) bad();
    }
    if (o.elems.empty()) bad();
    return o;
  }
  size_t k = b;
  if (is(toks_[k], "!")) o.neg = true, ++k;
  if (is(toks_[k], "-") && k + 1 < e && toks_[k + 1].kind == Tok::Number && !o.neg) {
    o.minus = true, ++k;
  }
  if (k < e && toks_[k].kind == Tok::Number) {
    if (k + 1 != e || o.neg) bad();
    o.kind = Operand::kImm;
    o.imm = toks_[k].text;
    return o;
  }
  if (!ident(k) || o.minus) bad();
  o.name = toks_[k++].text;
  o.kind = o.name[0] == '%' ? Operand::kReg : Operand::kSym;
  if (k < e && is(toks_[k], "|")) {
    if (!ident(k + 1) || k + 2 != e || o.kind != Operand::kReg) bad();
    o.pipe = toks_[k + 1].text;
    k += 2;
  }
  if (k != e || (o.neg && o.kind != Operand::kReg)) bad();
  return o;
}

}  // namespace

Module parse_module(std::string_view text, const ParseOptions& options) {
  return Parser(text, options).parse();
}

}  // namespace dnnfusion::cuda::ptx
