// The PTX rewrite of ptx_rewrite.h: a pre-pass that records, per register, how often it is
// defined and where it is first read (what decides whether aliasing a deleted FMA's destination is
// sound), then the rewriting pass. Both are single scans; registers live in dense per-prefix
// tables (%f123 -> table "f", slot 123), so the work is linear in the PTX length.
//
// Precondition/postcondition: see the header.
#include "target/cuda/sparse_conv/ptx_rewrite.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"

namespace dnnfusion::cuda {
namespace {

using sv = std::string_view;
constexpr int32_t kNever = INT32_MAX;

// What the rewriting pass knows about a register.
enum class Kind : uint8_t {
  other,
  weight_nonzero,  // defined by `mov.f32 %fW, <literal>` of a non-zero weight
  weight_zero,     // ditto for a zero weight: its mov is deleted, nothing may read it but FMAs
  acc_live,        // an accumulator holding at least one surviving product
  acc_zero,        // an accumulator none of whose products survived (its value is the chain's start)
};

struct RegInfo {
  int32_t defs = 0;
  int32_t first_def = kNever;  // line number of the first write
  int32_t first_use = kNever;  // line number of the first read
  Kind kind = Kind::other;
  bool counted = false;        // acc_zero registers: already counted in outputs_all_zero
  int64_t weight = -1;         // weight_* registers: the weight index
  sv alias;                    // non-empty: this register was deleted; read this instead
};

// Registers by name. NVVM names them %<prefix><number>; those go to dense tables, anything else
// to a hash map.
class RegTable {
 public:
  RegInfo& at(sv name) {
    size_t d = name.size();
    while (d > 1 && name[d - 1] >= '0' && name[d - 1] <= '9') --d;
    const sv digits = name.substr(d);
    if (digits.empty() || digits.size() > 7 || (digits.size() > 1 && digits[0] == '0')) return other_[name];
    size_t slot = 0;
    for (char c : digits) slot = slot * 10 + static_cast<size_t>(c - '0');
    auto& table = prefixes_[name.substr(0, d)];
    if (slot >= table.size()) table.resize(std::max(slot + 1, table.size() * 2));
    return table[slot];
  }

 private:
  std::unordered_map<sv, std::vector<RegInfo>> prefixes_;
  std::unordered_map<sv, RegInfo> other_;
};

struct Instr {
  sv indent, guard, opcode, tail;
  std::vector<sv> ops;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

sv trim(sv s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// An instruction line: [guard] opcode operands ; [tail]. Labels, directives, comments and braces
// are not instructions.
bool parse_instruction(sv line, Instr& in) {
  size_t p = 0;
  while (p < line.size() && is_space(line[p])) ++p;
  in.indent = line.substr(0, p);
  in.guard = {};
  if (p < line.size() && line[p] == '@') {
    size_t q = p;
    while (q < line.size() && !is_space(line[q])) ++q;
    in.guard = line.substr(p, q - p);
    for (p = q; p < line.size() && is_space(line[p]);) ++p;
  }
  if (p >= line.size() || line[p] < 'a' || line[p] > 'z') return false;
  size_t q = p;
  while (q < line.size() && (std::isalnum(static_cast<unsigned char>(line[q])) || line[q] == '.' || line[q] == '_')) ++q;
  in.opcode = line.substr(p, q - p);
  const size_t semi = line.find(';', q);
  if (semi == sv::npos) return false;
  in.tail = line.substr(semi + 1);
  in.ops.clear();
  const sv body = line.substr(q, semi - q);
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    const char c = i < body.size() ? body[i] : ',';
    if (c == '{' || c == '[' || c == '(') ++depth;
    if (c == '}' || c == ']' || c == ')') --depth;
    if (c == ',' && depth == 0) {
      const sv op = trim(body.substr(start, i - start));
      if (!op.empty() || i < body.size()) in.ops.push_back(op);
      start = i + 1;
    }
  }
  return true;
}

sv opcode_base(sv opcode) { return opcode.substr(0, opcode.find('.')); }

// Whether the instruction's first operand is written (a destination) rather than read.
bool writes_first_operand(const Instr& in) {
  static const sv kNoDest[] = {"st", "red", "bar", "barrier", "bra", "brx", "ret", "exit", "trap",
                               "membar", "fence", "prefetch", "prefetchu", "cp"};
  const sv base = opcode_base(in.opcode);
  for (sv b : kNoDest) {
    if (base == b) return false;
  }
  return !in.ops.empty() && !in.ops[0].empty() && in.ops[0][0] != '[';
}

// Opcodes where ptxas 13 accepts an f32 immediate in every source position (checked one by one).
bool accepts_immediate(sv opcode) {
  static const sv kOk[] = {"fma", "add", "sub", "mul", "min", "max", "mov", "selp",
                           "setp", "set", "st", "neg", "abs", "cvt"};
  const sv base = opcode_base(opcode);
  for (sv b : kOk) {
    if (base == b) return true;
  }
  return false;
}

// Calls f(name) for each register token (%name) of the text.
template <typename F>
void for_each_register(sv text, F&& f) {
  for (size_t p = text.find('%'); p != sv::npos; p = text.find('%', p + 1)) {
    size_t q = p + 1;
    while (q < text.size() && (std::isalnum(static_cast<unsigned char>(text[q])) || text[q] == '_' || text[q] == '$')) ++q;
    if (q > p + 1) f(text.substr(p, q - p));
  }
}

bool is_immediate(sv op) { return op.size() == 10 && op[0] == '0' && (op[1] == 'f' || op[1] == 'F'); }

std::string imm_text(float w) {
  uint32_t bits;
  std::memcpy(&bits, &w, 4);
  char b[16];
  std::snprintf(b, sizeof b, "0f%08X", bits);
  return b;
}

std::string weight_name(const ConvShape& s, int64_t i) {
  return detail::str_cat("weight ", i, " (k=", i / (s.c * s.r * s.s), " c=", i / (s.r * s.s) % s.c,
                         " r=", i / s.s % s.r, " s=", i % s.s, ")");
}

class Rewriter {
 public:
  Rewriter(const TemplateKernel& t, const float* w) : t_(t), w_(w), seen_(t.weights.bits.size(), 0),
                                                      fmas_(t.weights.bits.size(), 0) {}

  RewriteResult run() {
    split_lines();
    prepass();
    res_.ptx.reserve(t_.ptx.size() + 1024);
    for (size_t i = 0; i < lines_.size(); ++i) rewrite_line(static_cast<int32_t>(i), lines_[i]);
    insert_declarations();
    check_all_seen();
    return std::move(res_);
  }

 private:
  void split_lines() {
    const sv text = t_.ptx;
    for (size_t p = 0; p < text.size();) {
      size_t e = text.find('\n', p);
      if (e == sv::npos) e = text.size();
      lines_.push_back(text.substr(p, e - p));
      p = e + 1;
    }
  }

  void prepass() {
    int functions = 0;
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (!parse_instruction(lines_[i], in_)) {
        if (lines_[i].find(".entry ") != sv::npos || lines_[i].find(".func ") != sv::npos) ++functions;
        continue;
      }
      const bool writes = writes_first_operand(in_);
      for (size_t k = 0; k < in_.ops.size(); ++k) {
        for_each_register(in_.ops[k], [&](sv r) {
          RegInfo& info = regs_.at(r);
          if (k == 0 && writes) {
            if (info.defs++ == 0) info.first_def = static_cast<int32_t>(i);
          } else if (info.first_use == kNever) {
            info.first_use = static_cast<int32_t>(i);
          }
        });
      }
      // The guard reads a predicate.
      for_each_register(in_.guard, [&](sv r) {
        RegInfo& info = regs_.at(r);
        if (info.first_use == kNever) info.first_use = static_cast<int32_t>(i);
      });
    }
    if (functions != 1) {
      DNNF_THROW("sparse conv rewrite of ", t_.entry, ": expected one function in the PTX, found ", functions);
    }
  }

  // The weight a multiplicand names (a template literal or a weight register), or -1.
  int64_t weight_of(sv op, bool* literal) {
    *literal = false;
    if (is_immediate(op)) {
      uint32_t bits = 0;
      for (char c : op.substr(2)) bits = bits << 4 | static_cast<uint32_t>(ptx_detail::hex_digit(c));
      auto it = t_.weights.index.find(bits);
      if (it == t_.weights.index.end()) return -1;
      *literal = true;
      return it->second;
    }
    if (op.empty() || op[0] != '%') return -1;
    const RegInfo& info = regs_.at(op);
    return info.kind == Kind::weight_nonzero || info.kind == Kind::weight_zero ? info.weight : -1;
  }

  int count_literals(sv line) {
    int n = 0;
    for_each_f32_immediate(line, [&](uint32_t bits) { n += t_.weights.index.count(bits) ? 1 : 0; });
    return n;
  }

  [[noreturn]] void not_understood(int32_t line_no, const char* why) {
    DNNF_THROW("sparse conv rewrite of ", t_.entry, ": PTX line ", line_no + 1, " (", trim(lines_[line_no]), "): ", why,
               "; refusing to generate a kernel that might be wrong");
  }

  void rewrite_line(int32_t line_no, sv line) {
    scratch_.clear();  // operand text made for the previous line (aliases point into t_.ptx)
    if (!parse_instruction(line, in_)) {
      if (count_literals(line)) not_understood(line_no, "a template literal outside an instruction");
      copy_line(line);
      if (trim(line) == "{" && decl_at_ == std::string::npos) decl_at_ = res_.ptx.size();
      return;
    }
    const int literals = count_literals(line);
    if (in_.opcode == "mov.f32" && in_.ops.size() == 2 && literals == 1 && is_immediate(in_.ops[1])) {
      return weight_mov(line_no);
    }
    if (in_.opcode == "fma.rn.f32" && in_.ops.size() == 4) {
      bool lit1, lit2, lit3;
      const int64_t w1 = weight_of(in_.ops[1], &lit1), w2 = weight_of(in_.ops[2], &lit2);
      const int64_t w3 = weight_of(in_.ops[3], &lit3);
      if (w3 >= 0) not_understood(line_no, "a template weight as an FMA addend");
      if (w1 >= 0 && w2 >= 0) not_understood(line_no, "an FMA of two template weights");
      if (w1 >= 0 || w2 >= 0) {
        if (literals != (lit1 ? 1 : 0) + (lit2 ? 1 : 0)) not_understood(line_no, "a template literal in an unexpected operand");
        return weight_fma(line_no, w1 >= 0 ? 1 : 2, w1 >= 0 ? w1 : w2, w1 >= 0 ? lit1 : lit2);
      }
    }
    if (literals) not_understood(line_no, "a template literal in an instruction the rewriter does not handle");
    ordinary(line_no);
  }

  void weight_mov(int32_t line_no) {
    bool literal;
    const int64_t wi = weight_of(in_.ops[1], &literal);
    RegInfo& dest = regs_.at(in_.ops[0]);
    if (!in_.guard.empty() || dest.defs != 1 || dest.first_use < line_no) {
      not_understood(line_no, "a template literal moved into a register that is predicated, redefined or read early");
    }
    seen_[static_cast<size_t>(wi)] = 1;
    dest.weight = wi;
    if (w_[wi] == 0.0f) {
      dest.kind = Kind::weight_zero;
      ++res_.mov_deleted;
      return;
    }
    dest.kind = Kind::weight_nonzero;
    in_.ops[1] = store(imm_text(w_[wi]));
    emit_instruction(line_no, false);
  }

  // `fma.rn.f32 d, x, w, c` (or `d, w, x, c`); w is operand `wpos`.
  void weight_fma(int32_t line_no, int wpos, int64_t wi, bool literal) {
    if (literal) seen_[static_cast<size_t>(wi)] = 1;
    ++fmas_[static_cast<size_t>(wi)];
    const sv d = in_.ops[0];
    if (d.empty() || d[0] != '%') not_understood(line_no, "an FMA whose destination is not a register");
    RegInfo& dest = regs_.at(d);
    if (w_[wi] != 0.0f) {
      if (literal) in_.ops[static_cast<size_t>(wpos)] = store(imm_text(w_[wi]));
      dest.kind = Kind::acc_live;
      ++res_.fma_kept;
      return emit_instruction(line_no, true);
    }
    const sv addend = resolve(in_.ops[3]);
    const bool live = addend[0] == '%' && regs_.at(addend).kind == Kind::acc_live;
    if (dest.kind != Kind::acc_live) dest.kind = live ? Kind::acc_live : Kind::acc_zero;
    ++res_.fma_deleted;
    if (alias_is_sound(line_no, dest, addend)) {
      dest.alias = addend;
      return;
    }
    // Not provably the only definition before every read: keep the assignment as a move.
    ++res_.fma_to_mov;
    res_.ptx.append(in_.indent);
    if (!in_.guard.empty()) res_.ptx.append(in_.guard).append(" ");
    res_.ptx.append("mov.f32 \t").append(d).append(", ").append(addend).append(";\n");
  }

  // Reading `addend` wherever the FMA's destination is read gives the FMA's value when the FMA
  // always runs (no guard), its destination is written nowhere else and read nowhere before, and
  // the addend is an immediate or a register written once, before the FMA (so never rewritten
  // between the FMA and a read of the destination).
  bool alias_is_sound(int32_t line_no, const RegInfo& dest, sv addend) {
    if (!in_.guard.empty() || dest.defs != 1 || dest.first_use <= line_no) return false;
    if (addend[0] != '%') return true;
    const RegInfo& a = regs_.at(addend);
    return a.defs == 1 && a.first_def < line_no;
  }

  sv resolve(sv op) {
    if (op.empty() || op[0] != '%') return op;
    const RegInfo& info = regs_.at(op);
    return info.alias.empty() ? op : info.alias;
  }

  // Any other instruction: reads of deleted registers go to their aliases.
  void ordinary(int32_t line_no) {
    if (substitute(line_no, false)) emit_instruction_text();
    else copy_line(lines_[static_cast<size_t>(line_no)]);
  }

  void emit_instruction(int32_t line_no, bool template_fma) {
    substitute(line_no, template_fma);
    emit_instruction_text();
  }

  // Replaces, in the operands read, every deleted register by its alias; counts the reads of
  // all-zero accumulators outside the FMA chains. Returns whether an operand changed.
  bool substitute(int32_t line_no, bool template_fma) {
    bool changed = false;
    for (size_t k = writes_first_operand(in_) ? 1 : 0; k < in_.ops.size(); ++k) {
      const sv op = in_.ops[k];
      if (op.find('%') == sv::npos) continue;
      std::string out;
      size_t last = 0;
      for_each_register(op, [&](sv r) {
        RegInfo& info = regs_.at(r);
        if (info.kind == Kind::weight_zero) not_understood(line_no, "a zero weight's register read outside an FMA");
        if (info.kind == Kind::acc_zero && !template_fma && !info.counted) {
          info.counted = true;
          ++res_.outputs_all_zero;
        }
        if (info.alias.empty()) return;
        const size_t at = static_cast<size_t>(r.data() - op.data());
        out.append(op.substr(last, at - last)).append(replacement(info.alias, template_fma));
        last = at + r.size();
      });
      if (last == 0) continue;
      out.append(op.substr(last));
      in_.ops[k] = store(std::move(out));
      changed = true;
    }
    return changed;
  }

  // An alias to substitute; an immediate where the opcode might refuse one goes through a mov.
  std::string replacement(sv alias, bool template_fma) {
    if (alias[0] == '%' || template_fma || accepts_immediate(in_.opcode)) return std::string(alias);
    const std::string reg = detail::str_cat("%dnnf_m", res_.materialized++);
    res_.ptx.append(in_.indent).append("mov.f32 \t").append(reg).append(", ").append(alias).append(";\n");
    return reg;
  }

  void emit_instruction_text() {
    res_.ptx.append(in_.indent);
    if (!in_.guard.empty()) res_.ptx.append(in_.guard).append(" ");
    res_.ptx.append(in_.opcode);
    for (size_t k = 0; k < in_.ops.size(); ++k) res_.ptx.append(k ? ", " : " \t").append(in_.ops[k]);
    res_.ptx.append(";").append(in_.tail).append("\n");
  }

  void copy_line(sv line) { res_.ptx.append(line).append("\n"); }

  // Keeps generated operand text alive for the string_views of the current line.
  sv store(std::string s) {
    scratch_.push_back(std::move(s));
    return scratch_.back();
  }

  void insert_declarations() {
    if (res_.materialized == 0) return;
    if (decl_at_ == std::string::npos) DNNF_THROW("sparse conv rewrite of ", t_.entry, ": no function body in the PTX");
    res_.ptx.insert(decl_at_, detail::str_cat("\t.reg .f32 \t%dnnf_m<", res_.materialized, ">;\n"));
  }

  // Every literal present, and each weight in exactly fmas_per_weight FMAs (the template
  // computes every output, so a weight in fewer FMAs means PTX this pass did not recognize).
  void check_all_seen() {
    for (size_t i = 0; i < seen_.size(); ++i) {
      if (!seen_[i]) {
        DNNF_THROW("sparse conv rewrite of ", t_.entry, ": the template literal of ",
                   weight_name(t_.shape, static_cast<int64_t>(i)),
                   " is missing from the PTX (not the PTX of this template, or edited)");
      }
      if (fmas_[i] != t_.fmas_per_weight) {
        DNNF_THROW("sparse conv rewrite of ", t_.entry, ": ", weight_name(t_.shape, static_cast<int64_t>(i)), " is in ",
                   fmas_[i], " FMAs of the PTX, expected ", t_.fmas_per_weight,
                   " (FMAs in a form this pass does not recognize); refusing to generate a kernel that might be wrong");
      }
    }
  }

  const TemplateKernel& t_;
  const float* w_;
  std::vector<char> seen_;     // per weight: its literal was found
  std::vector<int64_t> fmas_;  // per weight: template FMAs found
  std::vector<sv> lines_;
  RegTable regs_;
  Instr in_;
  std::deque<std::string> scratch_;
  RewriteResult res_;
  size_t decl_at_ = std::string::npos;
};

}  // namespace

RewriteResult rewrite_ptx(const TemplateKernel& t, const float* weights) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t count = t.shape.weight_count();
  if (static_cast<int64_t>(t.weights.bits.size()) != count || t.ptx.empty()) {
    DNNF_THROW("sparse conv rewrite: the template kernel is incomplete (", t.weights.bits.size(), " literals for ",
               count, " weights)");
  }
  if (!weights) DNNF_THROW_AS(InvalidInput, "sparse conv rewrite: weights is null");
  int64_t nonzero = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(weights[i])) {
      DNNF_THROW_AS(InvalidInput, "sparse conv rewrite: ", weight_name(t.shape, i), " is ", weights[i],
                    "; weights must be finite");
    }
    nonzero += weights[i] != 0.0f;
  }
  RewriteResult r = Rewriter(t, weights).run();
  r.nonzero_weights = nonzero;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dnnfusion::cuda
