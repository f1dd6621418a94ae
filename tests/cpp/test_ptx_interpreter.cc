// Tests of the PTX parser and interpreter (csrc/target/cuda/ptx): hand-written PTX for each
// instruction family (exact expected bit patterns), parse errors and bad accesses that must throw
// InvalidInput (never crash), the step limit, and a real nvcc-compiled 3x3 convolution
// (tests/cpp/data/ptx/direct_conv3x3.{cu,ptx}) against a C++ reference on random data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernel_test_util.h"
#include "target/cuda/ptx/ptx_interpreter.h"

namespace dnnfusion::cuda::ptx {
namespace {

using dnnfusion::testing::seed_note;
using dnnfusion::testing::test_seed;

uint32_t u(float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  return v;
}
float f(uint32_t v) {
  float x;
  std::memcpy(&x, &v, 4);
  return x;
}
uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// A kernel `k(out, in)` whose body starts with %rd1 = out, %rd2 = in (global pointers).
std::string wrap(const std::string& body, const std::string& module_decls = "") {
  return ".version 9.0\n.target sm_80\n.address_size 64\n" + module_decls +
         "\n.visible .entry k(.param .u64 k_out, .param .u64 k_in)\n{\n"
         "  .reg .pred %p<16>;\n  .reg .b16 %rs<16>;\n  .reg .b32 %r<64>;\n"
         "  .reg .f32 %f<64>;\n  .reg .b64 %rd<32>;\n"
         "  ld.param.u64 %rd1, [k_out];\n  ld.param.u64 %rd2, [k_in];\n" +
         body + "\n  ret;\n}\n";
}
constexpr int kBodyFirstLine = 14;  // line of the body's first statement in wrap()

struct Launch {
  Dim3 grid, block;
  size_t dynamic_shared = 0;
  int threads = 1;
  uint64_t max_instructions = kDefaultMaxInstructions;
};

// Runs wrap(body) with `in` (read-only) and returns `nout` words of out (initially 0xdeadbeef).
std::vector<uint32_t> eval(const std::string& body, std::vector<uint32_t> in = {}, size_t nout = 32,
                           const Launch& l = {}, const std::string& decls = "",
                           RunStats* stats = nullptr) {
  const Module m = parse_module(wrap(body, decls));
  std::vector<uint32_t> out(nout, 0xdeadbeefu);
  if (in.empty()) in.push_back(0);
  LaunchArgs a;
  a.grid = l.grid;
  a.block = l.block;
  a.dynamic_shared_bytes = l.dynamic_shared;
  a.threads = l.threads;
  a.max_instructions = l.max_instructions;
  a.params = {addr(out.data()), addr(in.data())};
  a.regions = {{out.data(), out.size() * 4, true}, {in.data(), in.size() * 4, false}};
  const RunStats s = run(m, "k", a);
  if (stats) *stats = s;
  return out;
}

// Expects `fn` to throw InvalidInput whose message contains every one of `parts`.
template <typename Fn>
void expect_invalid(Fn fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one mentioning " << *parts.begin();
  } catch (const InvalidInput& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
    }
  }
}

void expect_parse_error(const std::string& body, std::initializer_list<std::string> parts,
                        const std::string& decls = "") {
  expect_invalid([&] { parse_module(wrap(body, decls)); }, parts);
}

std::string line_of(int body_line) {
  return "PTX line " + std::to_string(kBodyFirstLine + body_line);
}

// ---------------------------------------------------------------------------------------------
// Integer arithmetic

TEST(PtxInterpreter, IntegerWrapAround32) {
  const auto out = eval(R"(
  mov.u32 %r1, 2147483647;
  add.s32 %r2, %r1, 1;
  st.global.u32 [%rd1], %r2;
  mov.u32 %r3, 0;
  sub.s32 %r3, %r3, 1;
  st.global.u32 [%rd1+4], %r3;
  mul.lo.s32 %r4, %r1, 3;
  st.global.u32 [%rd1+8], %r4;
  mul.hi.s32 %r5, %r1, -2;
  st.global.u32 [%rd1+12], %r5;
  mul.hi.u32 %r6, %r3, %r3;
  st.global.u32 [%rd1+16], %r6;
  mad.lo.s32 %r7, %r1, 2, %r1;
  st.global.u32 [%rd1+20], %r7;
  shl.b32 %r8, %r3, 33;
  st.global.u32 [%rd1+24], %r8;
  shr.s32 %r9, %r2, 40;
  st.global.u32 [%rd1+28], %r9;
  shr.u32 %r10, %r2, 31;
  st.global.u32 [%rd1+32], %r10;
  shr.s32 %r11, %r2, 4;
  st.global.u32 [%rd1+36], %r11;
  neg.s32 %r12, %r2;
  st.global.u32 [%rd1+40], %r12;
  abs.s32 %r13, %r2;
  st.global.u32 [%rd1+44], %r13;
  mov.u32 %r14, -7;
  div.s32 %r15, %r14, 2;
  st.global.u32 [%rd1+48], %r15;
  rem.s32 %r16, %r14, 2;
  st.global.u32 [%rd1+52], %r16;
  div.u32 %r17, %r14, 2;
  st.global.u32 [%rd1+56], %r17;
  div.s32 %r18, %r2, -1;
  st.global.u32 [%rd1+60], %r18;
  rem.s32 %r19, %r2, -1;
  st.global.u32 [%rd1+64], %r19;
  min.s32 %r20, %r3, 1;
  st.global.u32 [%rd1+68], %r20;
  min.u32 %r21, %r3, 1;
  st.global.u32 [%rd1+72], %r21;
  max.s32 %r22, %r3, 1;
  st.global.u32 [%rd1+76], %r22;
  max.u32 %r23, %r3, 1;
  st.global.u32 [%rd1+80], %r23;
  and.b32 %r24, %r1, 0xF0F0;
  or.b32 %r25, %r24, 0x0F;
  xor.b32 %r26, %r25, -1;
  not.b32 %r27, %r26;
  st.global.u32 [%rd1+84], %r24;
  st.global.u32 [%rd1+88], %r26;
  st.global.u32 [%rd1+92], %r27;
  rem.u32 %r28, %r14, 10;
  st.global.u32 [%rd1+96], %r28;
  mad.hi.u32 %r29, %r3, %r3, 5;
  st.global.u32 [%rd1+100], %r29;
  mad.hi.s32 %r30, %r14, %r1, 0;
  st.global.u32 [%rd1+104], %r30;
)");
  const std::vector<uint32_t> want = {
      0x80000000u, 0xffffffffu, 0x7ffffffdu, 0xffffffffu, 0xfffffffeu, 0x7ffffffdu,
      0u,          0xffffffffu, 1u,          0xf8000000u, 0x80000000u, 0x80000000u,
      uint32_t(-3), uint32_t(-1), 0x7ffffffcu, 0x80000000u, 0u,        uint32_t(-1),
      1u,          1u,          0xffffffffu, 0xf0f0u,     ~0xf0ffu,    0xf0ffu,
      0xfffffff9u % 10, 0xfffffffeu + 5, 0xfffffffcu};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i], want[i]) << "word " << i;
}

TEST(PtxInterpreter, IntegerWrapAround64) {
  const auto out = eval(R"(
  mov.u64 %rd3, -1;
  add.s64 %rd4, %rd3, 1;
  st.global.u64 [%rd1], %rd4;
  mul.hi.u64 %rd5, %rd3, %rd3;
  st.global.u64 [%rd1+8], %rd5;
  mul.hi.s64 %rd6, %rd3, %rd3;
  st.global.u64 [%rd1+16], %rd6;
  mov.u64 %rd7, 0x8000000000000000;
  mul.hi.s64 %rd8, %rd7, 2;
  st.global.u64 [%rd1+24], %rd8;
  shr.s64 %rd9, %rd7, 70;
  st.global.u64 [%rd1+32], %rd9;
  shl.b64 %rd10, %rd3, 64;
  st.global.u64 [%rd1+40], %rd10;
  mov.u32 %r1, -1;
  mov.u32 %r2, 2147483647;
  mul.wide.s32 %rd11, %r1, %r2;
  st.global.u64 [%rd1+48], %rd11;
  mul.wide.u32 %rd12, %r1, %r1;
  st.global.u64 [%rd1+56], %rd12;
  div.s64 %rd13, %rd7, -1;
  st.global.u64 [%rd1+64], %rd13;
  mov.u64 %rd14, -9;
  rem.s64 %rd15, %rd14, 4;
  st.global.u64 [%rd1+72], %rd15;
  div.u64 %rd16, %rd14, 4;
  st.global.u64 [%rd1+80], %rd16;
  mad.lo.s64 %rd17, %rd14, %rd14, %rd3;
  st.global.u64 [%rd1+88], %rd17;
  mad.wide.s32 %rd18, %r1, %r2, %rd4;
  st.global.u64 [%rd1+96], %rd18;
  min.s64 %rd19, %rd7, 5;
  max.u64 %rd20, %rd7, 5;
  st.global.u64 [%rd1+104], %rd19;
  st.global.u64 [%rd1+112], %rd20;
  abs.s64 %rd21, %rd14;
  neg.s64 %rd22, %rd21;
  st.global.u64 [%rd1+120], %rd22;
)");
  auto word64 = [&](size_t i) { return uint64_t(out[2 * i]) | uint64_t(out[2 * i + 1]) << 32; };
  const std::vector<uint64_t> want = {0,
                                      0xfffffffffffffffeull,
                                      0,
                                      ~0ull,
                                      ~0ull,
                                      0,
                                      uint64_t(-2147483647ll),
                                      0xfffffffe00000001ull,
                                      0x8000000000000000ull,
                                      uint64_t(-1),
                                      (~0ull - 8) / 4,
                                      80,
                                      uint64_t(-2147483647ll),
                                      0x8000000000000000ull,
                                      0x8000000000000000ull,
                                      uint64_t(-9)};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(word64(i), want[i]) << "u64 " << i;
}

TEST(PtxInterpreter, SixteenBitAndConversionsBetweenWidths) {
  std::vector<uint32_t> in = {0x000000c8u, 0x00012345u, 0x00000080u};
  const auto out = eval(R"(
  ld.global.u8 %rs1, [%rd2];
  setp.gt.u16 %p1, %rs1, 100;
  selp.u16 %rs2, 1, 0, %p1;
  cvt.u32.u16 %r1, %rs2;
  st.global.u32 [%rd1], %r1;
  ld.global.s8 %rs3, [%rd2];
  cvt.s32.s16 %r2, %rs3;
  st.global.u32 [%rd1+4], %r2;
  setp.lt.s16 %p2, %rs3, 0;
  selp.u32 %r3, 7, 9, %p2;
  st.global.u32 [%rd1+8], %r3;
  mul.lo.s16 %rs4, %rs1, 400;
  cvt.u32.u16 %r4, %rs4;
  st.global.u32 [%rd1+12], %r4;
  shr.s16 %rs5, %rs3, 2;
  cvt.u32.u16 %r5, %rs5;
  st.global.u32 [%rd1+16], %r5;
  and.b16 %rs6, %rs3, 255;
  cvt.u32.u16 %r6, %rs6;
  st.global.u32 [%rd1+20], %r6;
  ld.global.u32 %r7, [%rd2+4];
  cvt.u16.u32 %rs7, %r7;
  cvt.u32.u16 %r8, %rs7;
  st.global.u32 [%rd1+24], %r8;
  ld.global.u32 %r9, [%rd2+8];
  cvt.s8.s32 %r10, %r9;
  st.global.u32 [%rd1+28], %r10;
  cvt.u64.s32 %rd3, %r10;
  st.global.u64 [%rd1+32], %rd3;
  cvt.u64.u32 %rd4, %r10;
  st.global.u64 [%rd1+40], %rd4;
  cvt.u32.u64 %r11, %rd3;
  st.global.u32 [%rd1+48], %r11;
  mul.wide.s16 %r12, %rs3, %rs3;
  st.global.u32 [%rd1+52], %r12;
  mov.b32 %r13, {%rs1, %rs3};
  st.global.u32 [%rd1+56], %r13;
  mov.b32 {%rs8, %rs9}, %r7;
  cvt.u32.u16 %r14, %rs9;
  st.global.u32 [%rd1+60], %r14;
  ld.global.u16 %r15, [%rd2+4];
  st.global.u32 [%rd1+64], %r15;
  st.global.u8 [%rd1+68], %r7;
  add.s16 %rs10, %rs3, -56;
  st.global.u16 [%rd1+72], %rs10;
)",
                        in);
  EXPECT_EQ(out[0], 1u);             // 200 > 100 unsigned
  EXPECT_EQ(out[1], 0xffffffc8u);    // (s8)0xc8 = -56
  EXPECT_EQ(out[2], 7u);             // signed 16-bit compare
  EXPECT_EQ(out[3], (200u * 400u) & 0xffffu);
  EXPECT_EQ(out[4], uint32_t(-14) & 0xffffu);  // -56 >> 2, arithmetic
  EXPECT_EQ(out[5], 0xc8u);
  EXPECT_EQ(out[6], 0x2345u);
  EXPECT_EQ(out[7], 0xffffff80u);    // cvt.s8 sign-extends into the 32-bit register
  EXPECT_EQ(out[8], 0xffffff80u);    // cvt.u64.s32 sign-extends (source signedness)
  EXPECT_EQ(out[9], 0xffffffffu);
  EXPECT_EQ(out[10], 0xffffff80u);   // cvt.u64.u32 zero-extends
  EXPECT_EQ(out[11], 0u);
  EXPECT_EQ(out[12], 0xffffff80u);
  EXPECT_EQ(out[13], 56u * 56u);
  EXPECT_EQ(out[14], 0xffc800c8u);
  EXPECT_EQ(out[15], 0x0001u);
  EXPECT_EQ(out[16], 0x2345u);
  EXPECT_EQ(out[17] & 0xffu, 0x45u);
  EXPECT_EQ(out[17] >> 8, 0xdeadbeu);  // only one byte written
  EXPECT_EQ(out[18] & 0xffffu, uint32_t(-112) & 0xffffu);
}

TEST(PtxInterpreter, IntegerDivisionByZeroThrows) {
  expect_invalid([] { eval("  mov.u32 %r1, 0;\n  div.u32 %r2, 5, %r1;"); },
                 {"division by zero", "div.u32 %r2, 5, %r1;", "thread (0,0,0)", "block (0,0,0)"});
  expect_invalid([] { eval("  mov.u64 %rd3, 0;\n  rem.s64 %rd4, %rd2, %rd3;"); },
                 {"division by zero"});
}

// ---------------------------------------------------------------------------------------------
// Predicates and branches

TEST(PtxInterpreter, PredicatesAndCombinations) {
  const auto out = eval(R"(
  mov.u32 %r1, 5;
  setp.lt.s32 %p1|%p2, %r1, 7;
  selp.u32 %r2, 1, 0, %p1;
  selp.u32 %r3, 1, 0, %p2;
  st.global.u32 [%rd1], %r2;
  st.global.u32 [%rd1+4], %r3;
  setp.gt.and.s32 %p3, %r1, 3, %p2;
  selp.u32 %r4, 1, 0, %p3;
  st.global.u32 [%rd1+8], %r4;
  setp.gt.and.s32 %p3, %r1, 3, !%p2;
  selp.u32 %r4, 1, 0, %p3;
  st.global.u32 [%rd1+12], %r4;
  setp.eq.or.s32 %p4|%p5, %r1, 9, %p2;
  selp.u32 %r5, 1, 0, %p4;
  selp.u32 %r6, 1, 0, %p5;
  st.global.u32 [%rd1+16], %r5;
  st.global.u32 [%rd1+20], %r6;
  mov.u32 %r7, 100;
  @%p1 mov.u32 %r7, 11;
  st.global.u32 [%rd1+24], %r7;
  @!%p1 mov.u32 %r7, 22;
  st.global.u32 [%rd1+28], %r7;
  not.pred %p6, %p1;
  and.pred %p7, %p6, %p1;
  or.pred %p8, %p6, %p1;
  xor.pred %p9, %p1, %p1;
  selp.u32 %r8, 1, 0, %p7;
  selp.u32 %r9, 1, 0, %p8;
  selp.u32 %r10, 1, 0, %p9;
  st.global.u32 [%rd1+32], %r8;
  st.global.u32 [%rd1+36], %r9;
  st.global.u32 [%rd1+40], %r10;
  mov.pred %p10, -1;
  selp.u32 %r11, 1, 0, %p10;
  st.global.u32 [%rd1+44], %r11;
  mov.u32 %r12, -1;
  setp.lt.u32 %p11, %r12, 3;
  setp.lo.u32 %p12, 3, %r12;
  setp.hs.u32 %p13, %r12, %r12;
  selp.u32 %r13, 1, 0, %p11;
  selp.u32 %r14, 1, 0, %p12;
  selp.u32 %r15, 1, 0, %p13;
  st.global.u32 [%rd1+48], %r13;
  st.global.u32 [%rd1+52], %r14;
  st.global.u32 [%rd1+56], %r15;
  @%p1 setp.ne.s32 %p1, %r1, 5;
  selp.u32 %r16, 1, 0, %p1;
  st.global.u32 [%rd1+60], %r16;
)");
  const std::vector<uint32_t> want = {1, 0, 0, 1, 0, 1, 11, 11, 0, 1, 0, 1, 0, 1, 1, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i], want[i]) << "word " << i;
}

TEST(PtxInterpreter, FloatComparisonsWithNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint32_t> in = {u(nan), u(1.f), u(2.f)};
  const auto out = eval(R"(
  ld.global.f32 %f1, [%rd2];
  ld.global.f32 %f2, [%rd2+4];
  ld.global.f32 %f3, [%rd2+8];
  setp.lt.f32 %p1, %f1, %f2;
  setp.ltu.f32 %p2, %f1, %f2;
  setp.ne.f32 %p3, %f1, %f2;
  setp.neu.f32 %p4, %f1, %f2;
  setp.num.f32 %p5, %f1, %f2;
  setp.nan.f32 %p6, %f1, %f2;
  setp.equ.f32 %p7, %f2, %f2;
  setp.geu.f32 %p8, %f2, %f3;
  setp.gtu.f32 %p9, %f1, %f2;
  setp.leu.f32 %p10, %f3, %f2;
  setp.ge.f32 %p11, %f3, %f2;
  setp.eq.f32 %p12, %f1, %f1;
  setp.ne.f32 %p13, %f2, %f3;
  selp.u32 %r1, 1, 0, %p1;
  selp.u32 %r2, 1, 0, %p2;
  selp.u32 %r3, 1, 0, %p3;
  selp.u32 %r4, 1, 0, %p4;
  selp.u32 %r5, 1, 0, %p5;
  selp.u32 %r6, 1, 0, %p6;
  selp.u32 %r7, 1, 0, %p7;
  selp.u32 %r8, 1, 0, %p8;
  selp.u32 %r9, 1, 0, %p9;
  selp.u32 %r10, 1, 0, %p10;
  selp.u32 %r11, 1, 0, %p11;
  selp.u32 %r12, 1, 0, %p12;
  selp.u32 %r13, 1, 0, %p13;
  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
  st.global.v4.u32 [%rd1+16], {%r5, %r6, %r7, %r8};
  st.global.v4.u32 [%rd1+32], {%r9, %r10, %r11, %r12};
  st.global.u32 [%rd1+48], %r13;
)",
                        in);
  const std::vector<uint32_t> want = {0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i], want[i]) << "word " << i;
}

TEST(PtxInterpreter, LoopWithBranches) {
  const auto out = eval(R"(
  mov.u32 %r1, 0;
  mov.u32 %r2, 1;
$L_loop:
  add.s32 %r1, %r1, %r2;
  add.s32 %r2, %r2, 1;
  setp.le.s32 %p1, %r2, 100;
  @%p1 bra $L_loop;
  bra.uni $L_done;
  mov.u32 %r1, 777;
$L_done:
  st.global.u32 [%rd1], %r1;
)");
  EXPECT_EQ(out[0], 5050u);
}

// ---------------------------------------------------------------------------------------------
// fp32

std::vector<float> tricky_floats(std::mt19937_64& rng, size_t n) {
  std::vector<float> v = {1.f, -1.f, 0.f, -0.f, f(0x3f800001u), f(0x00000001u), f(0x807fffffu),
                          std::numeric_limits<float>::infinity(), 3.4e38f, -3.4e38f, 1e-38f,
                          std::numeric_limits<float>::quiet_NaN()};
  std::uniform_int_distribution<int> e(-40, 40);
  std::uniform_real_distribution<float> m(-2.f, 2.f);
  while (v.size() < n) v.push_back(std::ldexp(m(rng), e(rng)));
  return v;
}

TEST(PtxInterpreter, FmaRoundingMatchesStdFmaf) {
  std::mt19937_64 rng(test_seed());
  const size_t n = 512;
  const std::vector<float> vals = tricky_floats(rng, 64);
  std::vector<uint32_t> in(3 * n);
  std::uniform_int_distribution<size_t> pick(0, vals.size() - 1);
  for (size_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) in[3 * i + j] = u(vals[pick(rng)]);
  }
  // A case where the fused result differs from mul-then-add: (1 + 2^-23)^2 - (1 + 2^-22) is
  // 2^-46 fused, 0 unfused.
  in[0] = 0x3f800001u, in[1] = 0x3f800001u, in[2] = 0xbf800002u;
  const auto out = eval(R"(
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.lo.s32 %r5, %r4, 12;
  cvt.u64.u32 %rd3, %r5;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.nc.f32 %f1, [%rd4];
  ld.global.nc.f32 %f2, [%rd4+4];
  ld.global.nc.f32 %f3, [%rd4+8];
  fma.rn.f32 %f4, %f1, %f2, %f3;
  mul.rn.f32 %f5, %f1, %f2;
  add.rn.f32 %f6, %f5, %f3;
  fma.rn.f32 %f7, %f1, 0f3F8CCCCD, %f3;
  fma.rn.ftz.f32 %f8, %f1, %f2, %f3;
  mul.wide.u32 %rd5, %r4, 16;
  add.s64 %rd6, %rd1, %rd5;
  st.global.v4.f32 [%rd6], {%f4, %f6, %f7, %f8};
)",
                        in, 4 * n, Launch{{n / 64, 1, 1}, {64, 1, 1}});
  auto canon = [](float x) { return x != x ? 0x7fffffffu : u(x); };
  auto flush = [](float x) {
    return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x;
  };
  for (size_t i = 0; i < n; ++i) {
    const float a = f(in[3 * i]), b = f(in[3 * i + 1]), c = f(in[3 * i + 2]);
    SCOPED_TRACE("a=" + std::to_string(a) + " b=" + std::to_string(b) + " c=" + std::to_string(c) +
                 "; " + seed_note());
    EXPECT_EQ(out[4 * i], canon(std::fmaf(a, b, c)));
    const float p = a * b;
    EXPECT_EQ(out[4 * i + 1], canon(p + c));
    EXPECT_EQ(out[4 * i + 2], canon(std::fmaf(a, f(0x3f8ccccdu), c)));
    EXPECT_EQ(out[4 * i + 3], canon(flush(std::fmaf(flush(a), flush(b), flush(c)))));
  }
  EXPECT_NE(out[0], out[1]);  // fused != unfused for the planted case
}

// r is x rounded toward zero / -inf / +inf (x exact).
::testing::AssertionResult rounded(float r, double x, int mode) {
  const double lo = std::nextafter(r, -std::numeric_limits<float>::infinity());
  const double hi = std::nextafter(r, std::numeric_limits<float>::infinity());
  const bool down = mode == 2 || (mode == 1 && x > 0);
  const bool ok = x == 0 ? r == 0 : down ? (double(r) <= x && hi > x) : (double(r) >= x && lo < x);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "mode " << mode << ": " << r << " for exact " << x;
}

TEST(PtxInterpreter, DirectedRoundingIsExact) {
  std::mt19937_64 rng(test_seed() + 1);
  // 24-bit mantissas, exponents within 20: sums and products are exact in double. fma inputs
  // use 12-bit mantissas so a*b+c is exact in double too.
  auto value = [&](int mant_bits, int emax) {
    const int64_t lim = (1ll << mant_bits) - 1;
    const int64_t m = dnnfusion::testing::rand_int(rng, -lim, lim);
    return std::ldexp(float(m), int(dnnfusion::testing::rand_int(rng, -emax, emax)) - mant_bits);
  };
  const size_t n = 256;
  std::vector<uint32_t> in(5 * n);
  for (size_t i = 0; i < n; ++i) {
    in[5 * i] = u(value(24, 10)), in[5 * i + 1] = u(value(24, 10));
    in[5 * i + 2] = u(value(12, 6)), in[5 * i + 3] = u(value(12, 6));
    in[5 * i + 4] = u(value(24, 8));
  }
  in[0] = u(1.f), in[1] = u(-1.f);  // exact zero sums: +0, but -0 under .rm
  const auto out = eval(R"(
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 20;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  ld.global.f32 %f2, [%rd4+4];
  ld.global.f32 %f3, [%rd4+8];
  ld.global.f32 %f4, [%rd4+12];
  ld.global.f32 %f5, [%rd4+16];
  add.rz.f32 %f6, %f1, %f2;
  add.rm.f32 %f7, %f1, %f2;
  add.rp.f32 %f8, %f1, %f2;
  sub.rm.f32 %f9, %f1, %f2;
  mul.rz.f32 %f10, %f1, %f2;
  mul.rm.f32 %f11, %f1, %f2;
  mul.rp.f32 %f12, %f1, %f2;
  fma.rz.f32 %f13, %f3, %f4, %f5;
  fma.rm.f32 %f14, %f3, %f4, %f5;
  fma.rp.f32 %f15, %f3, %f4, %f5;
  mad.rn.f32 %f16, %f3, %f4, %f5;
  add.f32 %f17, %f1, %f2;
  mul.wide.u32 %rd5, %r1, 48;
  add.s64 %rd6, %rd1, %rd5;
  st.global.v4.f32 [%rd6], {%f6, %f7, %f8, %f9};
  st.global.v4.f32 [%rd6+16], {%f10, %f11, %f12, %f13};
  st.global.v4.f32 [%rd6+32], {%f14, %f15, %f16, %f17};
)",
                        in, 12 * n, Launch{{1, 1, 1}, {unsigned(n), 1, 1}});
  for (size_t i = 0; i < n; ++i) {
    const double a = f(in[5 * i]), b = f(in[5 * i + 1]);
    const double fa = f(in[5 * i + 2]), fb = f(in[5 * i + 3]), fc = f(in[5 * i + 4]);
    SCOPED_TRACE("case " + std::to_string(i) + "; " + seed_note());
    const uint32_t* o = &out[12 * i];
    EXPECT_TRUE(rounded(f(o[0]), a + b, 1));
    EXPECT_TRUE(rounded(f(o[1]), a + b, 2));
    EXPECT_TRUE(rounded(f(o[2]), a + b, 3));
    EXPECT_TRUE(rounded(f(o[3]), a - b, 2));
    EXPECT_TRUE(rounded(f(o[4]), a * b, 1));
    EXPECT_TRUE(rounded(f(o[5]), a * b, 2));
    EXPECT_TRUE(rounded(f(o[6]), a * b, 3));
    EXPECT_TRUE(rounded(f(o[7]), fa * fb + fc, 1));
    EXPECT_TRUE(rounded(f(o[8]), fa * fb + fc, 2));
    EXPECT_TRUE(rounded(f(o[9]), fa * fb + fc, 3));
    EXPECT_EQ(o[10], u(std::fmaf(float(fa), float(fb), float(fc))));
    EXPECT_EQ(o[11], u(float(a) + float(b)));
  }
  EXPECT_EQ(out[0], 0u);            // 1 + -1 = +0 toward zero
  EXPECT_EQ(out[1], 0x80000000u);   // ... but -0 toward -inf
  EXPECT_EQ(out[2], 0u);
  // overflow: toward zero gives FLT_MAX, toward +inf gives inf
  const auto big = eval(R"(
  mov.f32 %f1, 0f7F7FFFFF;
  add.rz.f32 %f2, %f1, %f1;
  add.rp.f32 %f3, %f1, %f1;
  mul.rm.f32 %f4, %f1, 0fC0000000;
  mul.rz.f32 %f5, %f1, 0fC0000000;
  st.global.v4.f32 [%rd1], {%f2, %f3, %f4, %f5};
)");
  EXPECT_EQ(big[0], 0x7f7fffffu);
  EXPECT_EQ(big[1], 0x7f800000u);
  EXPECT_EQ(big[2], 0xff800000u);
  EXPECT_EQ(big[3], 0xff7fffffu);
}

TEST(PtxInterpreter, FloatToIntAndIntToFloatConversions) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint32_t> in = {u(2.5f), u(3.5f), u(-2.5f), u(-2.7f), u(-2.2f), u(2.2f), u(3e9f),
                              u(-3e9f), u(nan), u(-5.5f), u(5e9f), u(-0.4f), u(1.5f), u(40000.f),
                              u(-40000.f), u(3e19f)};
  const auto out = eval(R"(
  ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];
  ld.global.v4.f32 {%f5, %f6, %f7, %f8}, [%rd2+16];
  ld.global.v4.f32 {%f9, %f10, %f11, %f12}, [%rd2+32];
  ld.global.v4.f32 {%f13, %f14, %f15, %f16}, [%rd2+48];
  cvt.rni.s32.f32 %r1, %f1;
  cvt.rni.s32.f32 %r2, %f2;
  cvt.rni.s32.f32 %r3, %f3;
  cvt.rzi.s32.f32 %r4, %f4;
  cvt.rmi.s32.f32 %r5, %f5;
  cvt.rpi.s32.f32 %r6, %f6;
  cvt.rzi.s32.f32 %r7, %f7;
  cvt.rzi.s32.f32 %r8, %f8;
  cvt.rzi.s32.f32 %r9, %f9;
  cvt.rzi.u32.f32 %r10, %f10;
  cvt.rzi.u32.f32 %r11, %f11;
  cvt.rni.f32.f32 %f20, %f1;
  cvt.rni.f32.f32 %f21, %f12;
  cvt.sat.f32.f32 %f22, %f13;
  cvt.sat.f32.f32 %f23, %f9;
  cvt.rzi.s16.f32 %rs1, %f14;
  cvt.rzi.s16.f32 %rs2, %f15;
  cvt.u32.u16 %r12, %rs1;
  cvt.u32.u16 %r13, %rs2;
  cvt.rni.s64.f32 %rd3, %f16;
  neg.f32 %f24, %f16;
  cvt.rni.s64.f32 %rd4, %f24;
  cvt.rmi.f32.f32 %f25, %f12;
  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
  st.global.v4.u32 [%rd1+16], {%r5, %r6, %r7, %r8};
  st.global.v4.u32 [%rd1+32], {%r9, %r10, %r11, %r12};
  st.global.u32 [%rd1+48], %r13;
  st.global.v4.f32 [%rd1+64], {%f20, %f21, %f22, %f23};
  st.global.u64 [%rd1+80], %rd3;
  st.global.u64 [%rd1+88], %rd4;
  st.global.f32 [%rd1+96], %f25;
  mov.u32 %r20, 16777217;
  cvt.rn.f32.s32 %f30, %r20;
  mov.u32 %r21, 16777219;
  cvt.rz.f32.s32 %f31, %r21;
  cvt.rn.f32.s32 %f32, %r21;
  neg.s32 %r22, %r20;
  cvt.rm.f32.s32 %f33, %r22;
  cvt.rp.f32.s32 %f34, %r22;
  mov.u64 %rd5, -1;
  cvt.rn.f32.u64 %f35, %rd5;
  cvt.rz.f32.u64 %f36, %rd5;
  cvt.rn.f32.s64 %f37, %rd5;
  cvt.rn.f32.u32 %f38, %r22;
  cvt.rn.f32.u16 %f39, %rs2;
  st.global.v4.f32 [%rd1+112], {%f30, %f31, %f32, %f33};
  st.global.v4.f32 [%rd1+128], {%f34, %f35, %f36, %f37};
  st.global.v2.f32 [%rd1+144], {%f38, %f39};
)",
                        in, 40);
  const std::vector<uint32_t> want = {2, 4, uint32_t(-2), uint32_t(-2), uint32_t(-3), 3,
                                      0x7fffffffu, 0x80000000u, 0, 0, 0xffffffffu, 0x7fff, 0x8000};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i], want[i]) << "word " << i;
  EXPECT_EQ(out[16], u(2.f));
  EXPECT_EQ(out[17], 0x80000000u);  // rni(-0.4) = -0
  EXPECT_EQ(out[18], u(1.f));       // sat(1.5)
  EXPECT_EQ(out[19], 0u);           // sat(NaN) = +0
  EXPECT_EQ(out[20], 0xffffffffu);  // s64 saturates at INT64_MAX
  EXPECT_EQ(out[21], 0x7fffffffu);
  EXPECT_EQ(out[22], 0u);           // ... and INT64_MIN
  EXPECT_EQ(out[23], 0x80000000u);
  EXPECT_EQ(out[24], 0xbf800000u);  // rmi(-0.4) = -1
  EXPECT_EQ(out[28], u(16777216.f));
  EXPECT_EQ(out[29], u(16777218.f));
  EXPECT_EQ(out[30], u(16777220.f));  // tie to even
  EXPECT_EQ(out[31], u(-16777218.f));
  EXPECT_EQ(out[32], u(-16777216.f));
  EXPECT_EQ(out[33], 0x5f800000u);  // 2^64
  EXPECT_EQ(out[34], 0x5f7fffffu);  // largest float below 2^64
  EXPECT_EQ(out[35], u(-1.f));
  EXPECT_EQ(out[36], u(float(uint32_t(-16777217))));
  EXPECT_EQ(out[37], u(32768.f));
}

TEST(PtxInterpreter, MinMaxAbsNegFtzSat) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint32_t> in = {u(nan), u(1.f), u(-0.f), u(0.f), 0x00000001u, u(0.75f), u(0.5f),
                              u(std::ldexp(1.f, -100))};
  const auto out = eval(R"(
  ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];
  ld.global.v4.f32 {%f5, %f6, %f7, %f8}, [%rd2+16];
  min.f32 %f10, %f1, %f2;
  max.f32 %f11, %f2, %f1;
  min.f32 %f12, %f4, %f3;
  max.f32 %f13, %f3, %f4;
  min.f32 %f14, %f1, %f1;
  min.NaN.f32 %f15, %f2, %f1;
  abs.f32 %f16, %f3;
  neg.f32 %f17, %f2;
  add.f32 %f18, %f5, %f4;
  add.ftz.f32 %f19, %f5, %f4;
  mul.f32 %f20, %f8, 0f30800000;
  mul.ftz.f32 %f21, %f8, 0f30800000;
  neg.ftz.f32 %f22, %f5;
  add.sat.f32 %f23, %f6, %f7;
  sub.sat.f32 %f24, %f7, %f6;
  mul.sat.f32 %f25, %f1, %f2;
  setp.gt.f32 %p1, %f5, %f4;
  setp.gt.ftz.f32 %p2, %f5, %f4;
  selp.u32 %r1, 1, 0, %p1;
  selp.u32 %r2, 1, 0, %p2;
  max.ftz.f32 %f26, %f5, %f3;
  div.rn.f32 %f27, %f2, 0f40400000;
  sqrt.rn.f32 %f28, 0f40000000;
  rcp.rn.f32 %f29, 0f40400000;
  div.rn.f32 %f30, %f2, %f4;
  st.global.v4.f32 [%rd1], {%f10, %f11, %f12, %f13};
  st.global.v4.f32 [%rd1+16], {%f14, %f15, %f16, %f17};
  st.global.v4.f32 [%rd1+32], {%f18, %f19, %f20, %f21};
  st.global.v4.f32 [%rd1+48], {%f22, %f23, %f24, %f25};
  st.global.v2.u32 [%rd1+64], {%r1, %r2};
  st.global.f32 [%rd1+72], %f26;
  st.global.v4.f32 [%rd1+80], {%f27, %f28, %f29, %f30};
)",
                        in);
  EXPECT_EQ(out[0], u(1.f));  // a NaN operand yields the other
  EXPECT_EQ(out[1], u(1.f));
  EXPECT_EQ(out[2], 0x80000000u);  // -0 < +0
  EXPECT_EQ(out[3], 0u);
  EXPECT_EQ(out[4], 0x7fffffffu);  // two NaNs: canonical NaN
  EXPECT_EQ(out[5], 0x7fffffffu);  // .NaN propagates
  EXPECT_EQ(out[6], 0u);
  EXPECT_EQ(out[7], u(-1.f));
  EXPECT_EQ(out[8], 1u);           // subnormal kept
  EXPECT_EQ(out[9], 0u);           // ... flushed with .ftz
  EXPECT_EQ(out[10], u(std::ldexp(1.f, -130)));
  EXPECT_EQ(out[11], 0u);
  EXPECT_EQ(out[12], 0x80000000u);  // -subnormal flushed to -0
  EXPECT_EQ(out[13], u(1.f));
  EXPECT_EQ(out[14], 0u);
  EXPECT_EQ(out[15], 0u);           // sat(NaN) = 0
  EXPECT_EQ(out[16], 1u);
  EXPECT_EQ(out[17], 0u);
  EXPECT_EQ(out[18], 0u);           // max.ftz(subnormal, -0) = +0 after flushing
  EXPECT_EQ(out[20], u(1.f / 3.f));
  EXPECT_EQ(out[21], u(std::sqrt(2.f)));
  EXPECT_EQ(out[22], u(1.f / 3.f));
  EXPECT_EQ(out[23], 0x7f800000u);  // 1 / +0
}

// ---------------------------------------------------------------------------------------------
// Memory: vectors, shared memory and barriers, local memory, generic addressing

TEST(PtxInterpreter, VectorLoadsAndStores) {
  std::vector<uint32_t> in = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto out = eval(R"(
  ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd2];
  ld.global.nc.v2.u32 {%r5, %r6}, [%rd2+16];
  st.global.v4.u32 [%rd1], {%r4, %r3, %r2, %r1};
  st.global.v2.u32 [%rd1+16], {%r6, %r5};
  ld.global.u64 %rd3, [%rd2+24];
  st.global.u64 [%rd1+24], %rd3;
  st.global.f32 [%rd1+32], 0f3F800000;
  st.global.v2.f32 [%rd1+40], {%f1, %f1};
)",
                        in);
  const std::vector<uint32_t> want = {4, 3, 2, 1, 6, 5, 7, 8, u(1.f)};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[i], want[i]) << "word " << i;
  expect_invalid([&] { eval("  ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd2+4];", in); },
                 {"misaligned", "16 bytes"});
}

TEST(PtxInterpreter, SharedMemoryAndBarrierAcrossThreads) {
  // Each phase reads what the neighbour wrote before the barrier: without a working barrier the
  // reads would see the 0xff poison of fresh shared memory.
  RunStats stats;
  const auto out = eval(R"(
  .shared .align 4 .b8 buf[256];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, buf;
  shl.b32 %r3, %r1, 2;
  add.s32 %r4, %r2, %r3;
  add.s32 %r5, %r1, 1;
  and.b32 %r5, %r5, 63;
  shl.b32 %r6, %r5, 2;
  add.s32 %r7, %r2, %r6;
  mov.u32 %r8, %r1;
  mov.u32 %r9, 0;
$L_phase:
  st.shared.u32 [%r4], %r8;
  bar.sync 0;
  ld.shared.u32 %r10, [%r7];
  add.s32 %r8, %r10, 1;
  barrier.sync.aligned 0;
  add.s32 %r9, %r9, 1;
  setp.lt.u32 %p1, %r9, 5;
  @%p1 bra.uni $L_phase;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r8;
  st.shared.u32 [buf+4], %r8;
)",
                        {}, 64, Launch{{2, 1, 1}, {64, 1, 1}}, "", &stats);
  for (uint32_t t = 0; t < 64; ++t) EXPECT_EQ(out[t], (t + 5) % 64 + 5) << "thread " << t;
  EXPECT_EQ(stats.shared_loads, 2u * 64 * 5);
  EXPECT_EQ(stats.shared_stores, 2u * 64 * 6);
  EXPECT_EQ(stats.global_stores, 2u * 64);
}

TEST(PtxInterpreter, ExitedThreadsDoNotBlockBarriers) {
  const auto out = eval(R"(
  .shared .align 4 .b32 buf[64];
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p1, %r1, 40;
  @%p1 bra $L_exit;
  mov.u32 %r2, buf;
  shl.b32 %r3, %r1, 2;
  add.s32 %r4, %r2, %r3;
  st.shared.u32 [%r4], %r1;
  bar.sync 0;
  add.s32 %r5, %r1, 1;
  rem.u32 %r5, %r5, 40;
  shl.b32 %r6, %r5, 2;
  add.s32 %r7, %r2, %r6;
  ld.shared.u32 %r8, [%r7];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r8;
  setp.eq.u32 %p2, %r1, 0;
  @!%p2 bra $L_exit;
  mov.u32 %r9, 0;
$L_more:
  bar.sync 0;
  add.s32 %r9, %r9, 1;
  setp.lt.u32 %p3, %r9, 3;
  @%p3 bra $L_more;
$L_exit:
  ret;
)",
                        {}, 64, Launch{{1, 1, 1}, {64, 1, 1}});
  for (uint32_t t = 0; t < 64; ++t) {
    EXPECT_EQ(out[t], t < 40 ? (t + 1) % 40 : 0xdeadbeefu) << "thread " << t;
  }
}

TEST(PtxInterpreter, MismatchedBarrierIdsThrow) {
  expect_invalid(
      [] {
        eval(R"(
  mov.u32 %r1, %tid.x;
  and.b32 %r2, %r1, 1;
  setp.eq.u32 %p1, %r2, 0;
  @%p1 bar.sync 0;
  @!%p1 bar.sync 1;
)",
             {}, 4, Launch{{1, 1, 1}, {4, 1, 1}});
      },
      {"barrier deadlock", "bar.sync 1", "thread (1,0,0)"});
}

TEST(PtxInterpreter, DynamicSharedMemory) {
  const std::string body = R"(
  mov.u32 %r1, %tid.x;
  mov.u64 %rd3, dsm;
  mul.wide.u32 %rd4, %r1, 4;
  add.s64 %rd5, %rd3, %rd4;
  st.shared.u32 [%rd5], %r1;
  bar.sync 0;
  ld.shared.u32 %r2, [%rd3+12];
  add.s64 %rd6, %rd1, %rd4;
  st.global.u32 [%rd6], %r2;
)";
  const std::string decls = ".extern .shared .align 16 .b8 dsm[];";
  const auto out = eval(body, {}, 16, Launch{{1, 1, 1}, {16, 1, 1}, 64}, decls);
  for (int t = 0; t < 16; ++t) EXPECT_EQ(out[t], 3u);
  expect_invalid([&] { eval(body, {}, 16, Launch{{1, 1, 1}, {16, 1, 1}, 32}, decls); },
                 {"out-of-bounds", "shared address 0x20", "thread (8,0,0)"});
}

TEST(PtxInterpreter, LocalMemoryAndGenericAddressing) {
  std::vector<uint32_t> in = {41};
  const auto out = eval(R"(
  .local .align 16 .b8 depot[32];
  .shared .align 4 .b32 sbuf[8];
  mov.u32 %r1, %tid.x;
  mov.u64 %rd3, depot;
  mov.u32 %r2, 0;
$L_fill:
  mad.lo.s32 %r3, %r1, 10, %r2;
  mul.wide.u32 %rd4, %r2, 4;
  add.s64 %rd5, %rd3, %rd4;
  st.local.u32 [%rd5], %r3;
  add.s32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, 8;
  @%p1 bra $L_fill;
  and.b32 %r4, %r1, 7;
  mul.wide.u32 %rd6, %r4, 4;
  add.s64 %rd7, %rd3, %rd6;
  ld.local.u32 %r5, [%rd7];
  cvta.local.u64 %rd8, %rd3;
  ld.u32 %r6, [%rd8+28];
  cvta.shared.u64 %rd9, sbuf;
  mul.wide.u32 %rd10, %r1, 4;
  add.s64 %rd11, %rd9, %rd10;
  st.u32 [%rd11], %r1;
  cvta.to.shared.u64 %rd12, %rd11;
  ld.shared.u32 %r7, [%rd12];
  ld.u32 %r8, [%rd2];
  add.s32 %r9, %r7, %r8;
  mul.wide.u32 %rd13, %r1, 12;
  add.s64 %rd14, %rd1, %rd13;
  st.u32 [%rd14], %r5;
  st.global.u32 [%rd14+4], %r6;
  st.global.u32 [%rd14+8], %r9;
)",
                        in, 24, Launch{{1, 1, 1}, {8, 1, 1}});
  for (uint32_t t = 0; t < 8; ++t) {
    EXPECT_EQ(out[3 * t], 10 * t + t) << "thread " << t;
    EXPECT_EQ(out[3 * t + 1], 10 * t + 7) << "thread " << t;
    EXPECT_EQ(out[3 * t + 2], t + 41) << "thread " << t;
  }
}

TEST(PtxInterpreter, SpecialRegistersOverA3dGrid) {
  const Dim3 grid{2, 3, 2}, block{4, 2, 3};
  const size_t n = 12 * 24;
  const auto out = eval(R"(
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %tid.y;
  mov.u32 %r3, %tid.z;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %ntid.y;
  mov.u32 %r6, %ntid.z;
  mov.u32 %r7, %ctaid.x;
  mov.u32 %r8, %ctaid.y;
  mov.u32 %r9, %ctaid.z;
  mov.u32 %r10, %nctaid.x;
  mov.u32 %r11, %nctaid.y;
  mov.u32 %r12, %nctaid.z;
  mov.u32 %r13, %laneid;
  mad.lo.s32 %r14, %r3, %r5, %r2;
  mad.lo.s32 %r14, %r14, %r4, %r1;
  mad.lo.s32 %r15, %r9, %r11, %r8;
  mad.lo.s32 %r15, %r15, %r10, %r7;
  mul.lo.s32 %r16, %r4, %r5;
  mul.lo.s32 %r16, %r16, %r6;
  mad.lo.s32 %r17, %r15, %r16, %r14;
  shl.b32 %r18, %r2, 4;
  or.b32 %r18, %r18, %r1;
  shl.b32 %r19, %r3, 8;
  or.b32 %r18, %r18, %r19;
  shl.b32 %r19, %r7, 12;
  or.b32 %r18, %r18, %r19;
  shl.b32 %r19, %r8, 16;
  or.b32 %r18, %r18, %r19;
  shl.b32 %r19, %r9, 20;
  or.b32 %r18, %r18, %r19;
  shl.b32 %r19, %r13, 24;
  or.b32 %r18, %r18, %r19;
  mul.wide.u32 %rd3, %r17, 8;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r18;
  shl.b32 %r20, %r5, 4;
  or.b32 %r20, %r20, %r4;
  shl.b32 %r21, %r6, 8;
  or.b32 %r20, %r20, %r21;
  shl.b32 %r21, %r10, 12;
  or.b32 %r20, %r20, %r21;
  shl.b32 %r21, %r11, 16;
  or.b32 %r20, %r20, %r21;
  shl.b32 %r21, %r12, 20;
  or.b32 %r20, %r20, %r21;
  st.global.u32 [%rd4+4], %r20;
)",
                        {}, 2 * n, Launch{grid, block, 0, 2});
  for (uint32_t bz = 0; bz < 2; ++bz)
    for (uint32_t by = 0; by < 3; ++by)
      for (uint32_t bx = 0; bx < 2; ++bx)
        for (uint32_t tz = 0; tz < 3; ++tz)
          for (uint32_t ty = 0; ty < 2; ++ty)
            for (uint32_t tx = 0; tx < 4; ++tx) {
              const uint32_t t = (tz * 2 + ty) * 4 + tx, b = (bz * 3 + by) * 2 + bx;
              const uint32_t gid = b * 24 + t;
              EXPECT_EQ(out[2 * gid], tx | ty << 4 | tz << 8 | bx << 12 | by << 16 | bz << 20 |
                                          (t % 32) << 24);
              EXPECT_EQ(out[2 * gid + 1], 4u | 2u << 4 | 3u << 8 | 2u << 12 | 3u << 16 | 2u << 20);
            }
}

TEST(PtxInterpreter, SixtyFourBitSharedAddressesAsNvrtcEmits) {
  const auto out = eval(R"(
  .shared .align 16 .b8 s4[256];
  mov.u32 %r1, %tid.x;
  cvt.rn.f32.u32 %f1, %r1;
  mul.wide.u32 %rd3, %r1, 16;
  mov.u64 %rd4, s4;
  add.s64 %rd5, %rd4, %rd3;
  st.shared.v4.f32 [%rd5], {%f1, %f1, %f1, %f1};
  bar.sync 0;
  ld.shared.v2.f32 {%f2, %f3}, [s4+24];
  add.f32 %f4, %f2, %f3;
  mul.wide.u32 %rd6, %r1, 4;
  add.s64 %rd7, %rd1, %rd6;
  st.global.f32 [%rd7], %f4;
)",
                        {}, 16, Launch{{1, 1, 1}, {16, 1, 1}});
  for (int t = 0; t < 16; ++t) EXPECT_EQ(out[t], u(2.f));
}

// ---------------------------------------------------------------------------------------------
// Bad kernels throw, naming what, where, which thread and block

TEST(PtxInterpreter, OutOfBoundsAndProtectionFaultsThrow) {
  std::vector<uint32_t> in = {1, 2, 3, 4};
  expect_invalid([&] { eval("  ld.global.u32 %r1, [%rd2+16];", in); },
                 {"out-of-bounds", "global", "ld.global.u32 %r1, [%rd2+16];", "line",
                  "thread (0,0,0) of block (0,0,0)"});
  expect_invalid([&] { eval("  st.global.u32 [%rd2], %r1;", in); }, {"read-only"});
  expect_invalid([&] { eval("  ld.global.u32 %r1, [%rd2+2];", in); }, {"misaligned"});
  expect_invalid([&] { eval("  mov.u64 %rd3, 0;\n  ld.global.f32 %f1, [%rd3];", in); },
                 {"out-of-bounds", "0x0"});
  expect_invalid([&] { eval("  ld.u32 %r1, [%rd2+-4];", in); }, {"out-of-bounds"});
  expect_invalid(
      [&] {
        eval("  .shared .b32 s[4];\n  mov.u32 %r1, s;\n  ld.shared.u32 %r2, [%r1+16];", in);
      },
      {"out-of-bounds", "shared address 0x10"});
  expect_invalid(
      [&] {
        eval("  .shared .b32 s[4];\n  mov.u32 %r1, s;\n  st.shared.u32 [%r1+-4], %r2;", in);
      },
      {"out-of-bounds", "shared"});
  expect_invalid([&] { eval("  .local .b32 l[2];\n  ld.local.u32 %r1, [l+8];", in); },
                 {"out-of-bounds", "local"});
  // Only block (1,0,0)'s thread 3 misbehaves: the message names it, whatever the host threads.
  for (int threads : {1, 3}) {
    expect_invalid(
        [&] {
          eval(R"(
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  setp.eq.u32 %p1, %r1, 3;
  setp.eq.and.u32 %p2, %r2, 1, %p1;
  @%p2 st.global.u32 [%rd1+4096], %r1;
)",
               in, 4, Launch{{4, 1, 1}, {8, 1, 1}, 0, threads});
        },
        {"thread (3,0,0) of block (1,0,0)", "st.global.u32 [%rd1+4096], %r1;"});
  }
}

TEST(PtxInterpreter, InfiniteLoopIsBoundedByTheStepLimit) {
  expect_invalid([] { eval("$L_spin:\n  bra.uni $L_spin;", {}, 4, Launch{{}, {}, 0, 1, 1000000}); },
                 {"instruction limit", "bra.uni $L_spin;"});
  // A total over many blocks, each under the limit, is caught too (also with parallel blocks).
  const std::string loop = R"(
  mov.u32 %r1, 0;
$L_l:
  add.s32 %r1, %r1, 1;
  setp.lt.u32 %p1, %r1, 100;
  @%p1 bra $L_l;
)";
  RunStats s;
  eval(loop, {}, 4, Launch{{10, 1, 1}, {1, 1, 1}}, "", &s);
  EXPECT_EQ(s.instructions, 10u * (2 + 1 + 3 * 100 + 1));  // ld.param x2, mov, loop, ret
  for (int threads : {1, 4}) {
    const Launch tight{{10, 1, 1}, {1, 1, 1}, 0, threads, s.instructions - 1};
    expect_invalid([&] { eval(loop, {}, 4, tight); }, {"instruction limit"});
    eval(loop, {}, 4, Launch{{10, 1, 1}, {1, 1, 1}, 0, threads, s.instructions});
  }
}

TEST(PtxInterpreter, LaunchChecks) {
  const Module m = parse_module(wrap(""));
  LaunchArgs a;
  a.params = {0};
  expect_invalid([&] { run(m, "k", a); }, {"expected 2 parameters"});
  a.params = {0, 0};
  expect_invalid([&] { run(m, "nope", a); }, {"no entry 'nope'", "k"});
  a.block = {2048, 1, 1};
  expect_invalid([&] { run(m, "k", a); }, {"1024"});
  a.block = {1, 1, 1};
  a.dynamic_shared_bytes = 1 << 20;
  expect_invalid([&] { run(m, "k", a); }, {"shared memory"});
  a.dynamic_shared_bytes = 0;
  a.threads = 0;
  expect_invalid([&] { run(m, "k", a); }, {"threads"});
  const Module bounded = parse_module(
      ".version 9.0\n.target sm_80\n.address_size 64\n.visible .entry b()\n.maxntid 64, 1, 1\n"
      "{\n ret;\n}\n");
  LaunchArgs b;
  b.block = {128, 1, 1};
  expect_invalid([&] { run(bounded, "b", b); }, {".maxntid"});
}

TEST(PtxInterpreter, ParseErrorsNameTheLine) {
  expect_parse_error("  mov.u32 %r1, 1;\n  shfl.sync.idx.b32 %r1, %r2, 0, 31, -1;",
                     {line_of(1), "unsupported instruction 'shfl.sync.idx.b32'",
                      "shfl.sync.idx.b32 %r1, %r2, 0, 31, -1;"});
  expect_parse_error("  .reg .f64 %fd<2>;\n  add.f64 %fd1, %fd0, %fd0;", {line_of(1), ".f64"});
  expect_parse_error("  add.s32 %r999, %r1, 1;", {line_of(0), "undeclared register %r999"});
  expect_parse_error("  add.s32 %rd3, %rd1, 1;", {"has 64 bits"});
  expect_parse_error("  bra.uni $L_nowhere;", {line_of(0), "unknown label $L_nowhere"});
  expect_parse_error("  div.approx.f32 %f1, %f2, %f3;", {"approximate"});
  expect_parse_error("  add.cc.u32 %r1, %r2, %r3;", {"carry"});
  expect_parse_error("  ld.const.f32 %f1, [%rd2];", {".const"});
  expect_parse_error("  ld.global.foo.f32 %f1, [%rd2];", {"unsupported modifier .foo"});
  expect_parse_error("  mov.f32 %f1, 0f3F80;", {"bad .f32 literal"});
  expect_parse_error("  mov.f32 %f1, 1;", {"bad .f32 literal"});
  expect_parse_error("  mov.u32 %r1, 1\n  mov.u32 %r2, 2;", {"cannot parse operand"});
  expect_parse_error("  fma.f32 %f1, %f2, %f3, %f4;", {"rounding modifier"});
  expect_parse_error("  cvt.s32.f32 %r1, %f1;", {".rni"});
  expect_parse_error("  mov.u32 %r1, %clock;", {"unsupported special register %clock"});
  expect_parse_error("  bar.sync 0, 64;", {"thread count"});
  expect_parse_error("  ld.global.v4.f32 {%f1, %f2}, [%rd2];", {"vector width"});
  expect_parse_error("  ld.global.u32 %r1, [%r2];", {"32-bit addresses"});
  expect_parse_error("  setp.lt.u32 %r1, %r2, %r3;", {"has 32 bits"});
  expect_invalid([] { parse_module(".visible .entry k()\n{\n ret\n}\n"); }, {"missing ';'"});
  expect_invalid([] { parse_module(".version 9.0\n.target sm_80\n.address_size 64\n"
                                ".func f()\n{\n ret;\n}\n"); },
                 {"PTX line 4", "device functions"});
  expect_invalid([] { parse_module(".version 9.0\n.global .f32 g[4];\n"); },
                 {"PTX line 2", "module-scope .global"});
  expect_invalid([] { parse_module(".version 9.0\n.target sm_80\n"); }, {"no .entry"});
  expect_invalid(
      [] { parse_module(".visible .entry k(.param .align 8 .b8 s[16])\n{\n ret;\n}\n"); },
      {"larger than 8 bytes"});
}

TEST(PtxInterpreter, DebugDirectivesAreIgnored) {
  const std::string ptx = R"(//
// Generated by NVIDIA NVVM Compiler
.version 9.0
.target sm_80
.address_size 64

	// .globl	k
.visible .entry k(
	.param .u64 .ptr.global.align 4 k_param_0
)
.maxntid 128, 1, 1
.minnctapersm 2
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<3>;
	.loc	1 12 0
$L__func_begin0:
	.loc	1 12 0, function_name $L__info_string0, inlined_at 1 30 5
	ld.param.u64 	%rd1, [k_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;  /* a block comment */
	{ // inline asm scope
	.reg .b32 %r1;
	mov.u32 %r1, 40;
	add.s32 %r2, %r1, 2;
	}
	.pragma "nounroll";
	membar.cta;
	st.global.u32 	[%rd2], %r2;
	ret;
$L__func_end0:

}
	.file	1 "/tmp/k.cu"
	.section	.debug_str
	{
$L__info_string0:
.b8 95,90,51,101,112,0
	}
)";
  const Module m = parse_module(ptx);
  ASSERT_EQ(m.entries.size(), 1u);
  EXPECT_EQ(m.entries[0].maxntid[0], 128u);
  uint32_t out = 0;
  LaunchArgs a;
  a.params = {addr(&out)};
  a.regions = {{&out, 4, true}};
  run(m, "k", a);
  EXPECT_EQ(out, 42u);
}

// ---------------------------------------------------------------------------------------------
// Register packing (live-range slot sharing) must not change results: random structured programs
// (SSA-style temporaries, if-blocks, counted loops with loop-carried registers, guarded
// redefinitions, barriers) run packed and unpacked.

class RandomProgram {
 public:
  explicit RandomProgram(std::mt19937_64& rng) : rng_(rng) {}

  std::string generate() {
    body_ = "  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
            "  ld.global.u32 %r2, [%rd4];\n  add.s64 %rd5, %rd1, %rd3;\n";
    avail_ = {1, 2};
    next_reg_ = 3;
    block(0, 14);
    const int h = fresh();
    emit("mov.u32 %r" + std::to_string(h) + ", 17;");
    // Only some registers reach the output, so others die inside loops and branches, where a
    // wrong live range would let a later register take their slot too early.
    for (int r : avail_) {
      if (pick(3) == 0 || r == avail_.back()) {
        emit("mad.lo.s32 " + reg(h) + ", " + reg(h) + ", 31, " + reg(r) + ";");
      }
    }
    emit("st.global.u32 [%rd5], " + reg(h) + ";");
    return body_;
  }

 private:
  int pick(int n) { return int(std::uniform_int_distribution<int>(0, n - 1)(rng_)); }
  int any() { return avail_[size_t(pick(int(avail_.size())))]; }
  int fresh() { return next_reg_++; }
  static std::string reg(int r) { return "%r" + std::to_string(r); }
  std::string pred() {
    const std::string p = "%p" + std::to_string(next_pred_++);
    static const char* const cmp[] = {"lt.u32", "gt.s32", "eq.u32", "ne.u32", "le.u32"};
    emit("and.b32 %r4090, " + reg(any()) + ", 7;");
    emit(std::string("setp.") + cmp[pick(5)] + " " + p + ", %r4090, " + std::to_string(pick(6)) +
         ";");
    return p;
  }
  void emit(const std::string& line) { body_ += "  " + line + "\n"; }

  void op() {
    const int d = fresh();
    const std::string a = reg(any()), b = reg(any());
    switch (pick(6)) {
      case 0: emit("add.s32 " + reg(d) + ", " + a + ", " + b + ";"); break;
      case 1: emit("mul.lo.s32 " + reg(d) + ", " + a + ", " + b + ";"); break;
      case 2: emit("xor.b32 " + reg(d) + ", " + a + ", " + std::to_string(pick(1000)) + ";"); break;
      case 3: emit("shl.b32 " + reg(d) + ", " + a + ", " + std::to_string(pick(5)) + ";"); break;
      case 4: emit("selp.b32 " + reg(d) + ", " + a + ", " + b + ", " + pred() + ";"); break;
      default: emit("sub.s32 " + reg(d) + ", " + a + ", 3;"); break;
    }
    avail_.push_back(d);
  }

  void block(int depth, int len) {
    for (int i = 0; i < len; ++i) {
      const int k = pick(10);
      if (k < 5 || depth >= 2) {
        op();
      } else if (k == 5) {  // guarded redefinition keeps the register defined
        const int x = any();
        const std::string p = pred();
        const std::string guard = "@" + std::string(pick(2) ? "!" : "") + p;
        if (pick(2)) {  // read-modify-write
          emit(guard + " add.s32 " + reg(x) + ", " + reg(x) + ", " + reg(any()) + ";");
        } else {  // plain overwrite: the old value must survive when the guard is false
          emit(guard + " mov.u32 " + reg(x) + ", " + reg(any()) + ";");
        }
      } else if (k == 6) {
        const std::string p = pred(), l = "$L_if" + std::to_string(next_label_++);
        emit("@" + p + " bra " + l + ";");
        const auto saved = avail_;
        block(depth + 1, 1 + pick(5));
        avail_ = saved;
        body_ += l + ":\n";
      } else if (k == 7 || k == 8) {
        const int c = fresh(), carried = any();
        const std::string l = "$L_loop" + std::to_string(next_label_++), p = pred();
        emit("mov.u32 " + reg(c) + ", 0;");
        body_ += l + ":\n";
        const auto saved = avail_;
        block(depth + 1, 1 + pick(5));
        emit("add.s32 " + reg(carried) + ", " + reg(carried) + ", " + reg(any()) + ";");
        avail_ = saved;
        emit("add.s32 " + reg(c) + ", " + reg(c) + ", 1;");
        emit("setp.lt.u32 " + p + ", " + reg(c) + ", " + std::to_string(1 + pick(4)) + ";");
        emit("@" + p + " bra " + l + ";");
      } else if (depth == 0) {
        emit("bar.sync 0;");
      } else {
        op();
      }
    }
  }

  std::mt19937_64& rng_;
  std::string body_;
  std::vector<int> avail_;
  int next_reg_ = 3, next_pred_ = 1, next_label_ = 0;
};

// A guarded definition does not end the old value's life: %r10 is overwritten only in the first
// iteration, and later iterations read the value that survived the back edge (while %r14/%r15,
// born after %r10's last occurrence in the body, must not take its slot).
// The second variant defines %r10 first under the guard, inside the loop.
TEST(PtxInterpreter, GuardedRedefinitionKeepsTheOldValueLive) {
  for (const char* init : {"  mov.u32 %r10, 100;\n", ""})
  for (bool pack : {true, false}) {
    ParseOptions o;
    o.pack_registers = pack;
    const Module m = parse_module(wrap(std::string(init) + R"(
  mov.u32 %r11, 0;
  mov.u32 %r12, 0;
$L_loop:
  setp.eq.u32 %p1, %r11, 0;
  @%p1 mov.u32 %r10, 7;
  add.s32 %r12, %r12, %r10;
  add.s32 %r14, %r11, 1000;
  mul.lo.s32 %r15, %r14, 3;
  add.s32 %r12, %r12, %r15;
  add.s32 %r11, %r11, 1;
  setp.lt.u32 %p2, %r11, 3;
  @%p2 bra $L_loop;
  st.global.u32 [%rd1], %r12;
)"), o);
    uint32_t out = 0;
    LaunchArgs a;
    a.params = {addr(&out), 0};
    a.regions = {{&out, 4, true}};
    run(m, "k", a);
    EXPECT_EQ(out, 3u * 7 + 3000 + 3003 + 3006) << "pack_registers=" << pack << " " << init;
  }
}

std::vector<uint32_t> run_program(const std::string& ptx, bool pack,
                                  const std::vector<uint32_t>& in) {
  ParseOptions o;
  o.pack_registers = pack;
  const Module m = parse_module(ptx, o);
  std::vector<uint32_t> out(in.size(), 0);
  LaunchArgs a;
  a.block = {32, 1, 1};
  a.params = {addr(out.data()), addr(in.data())};
  a.regions = {{out.data(), out.size() * 4, true},
               {const_cast<uint32_t*>(in.data()), in.size() * 4, false}};
  run(m, "k", a);
  return out;
}

TEST(PtxInterpreter, RegisterPackingPreservesResults) {
  std::mt19937_64 rng(test_seed() + 3);
  std::vector<uint32_t> in(32);
  for (auto& v : in) v = uint32_t(rng());
  for (int prog = 0; prog < 150; ++prog) {
    const std::string body = RandomProgram(rng).generate();
    std::string ptx = wrap(body);
    const std::string decl = ".reg .b32 %r<64>;";
    ptx.replace(ptx.find(decl), decl.size(), ".reg .b32 %r<4096>;");
    ptx.replace(ptx.find(".reg .pred %p<16>;"), 18, ".reg .pred %p<4096>;");
    SCOPED_TRACE("program " + std::to_string(prog) + "; " + seed_note() + "\n" + body);
    const Module packed = parse_module(ptx);
    const Module plain = parse_module(ptx, ParseOptions{false});
    EXPECT_LE(packed.entries[0].num_slots, plain.entries[0].num_slots);
    ASSERT_EQ(run_program(ptx, true, in), run_program(ptx, false, in));
  }
}

// ---------------------------------------------------------------------------------------------
// A real nvcc-compiled direct 3x3 convolution

std::string fixture_path(const std::string& name) {
  const std::string here = __FILE__;
  return here.substr(0, here.find_last_of('/')) + "/data/ptx/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr int kN = 2, kC = 5, kH = 10, kW = 10, kK = 8;

// The fixture's weight formula (see direct_conv3x3.cu).
float conv_weight(int k, int c, int r, int s) {
  const int h = (k * 7 + c * 5 + r * 3 + s * 11) % 19;
  if (h == 9 || (k + 2 * c + r + s) % 5 == 0) return 0.f;
  return float(h - 9) / 16.f;
}

struct ConvRun {
  std::vector<float> y;
  RunStats stats;
};

ConvRun run_conv(const Module& m, const std::vector<float>& x, const std::vector<float>& bias,
                 const std::vector<float>& res, int threads) {
  ConvRun r;
  r.y.assign(size_t(kN) * kK * kH * kW, std::numeric_limits<float>::quiet_NaN());
  LaunchArgs a;
  a.grid = {4, 2, 2};
  a.block = {8, 4, 1};
  a.threads = threads;
  a.params = {addr(x.data()), addr(bias.data()), addr(res.data()), addr(r.y.data())};
  a.regions = {{const_cast<float*>(x.data()), x.size() * 4, false},
               {const_cast<float*>(bias.data()), bias.size() * 4, false},
               {const_cast<float*>(res.data()), res.size() * 4, false},
               {r.y.data(), r.y.size() * 4, true}};
  r.stats = run(m, "conv", a);
  return r;
}

TEST(PtxInterpreter, NvccDirectConv3x3MatchesReference) {
  const std::string text = read_file(fixture_path("direct_conv3x3.ptx"));
  ASSERT_FALSE(text.empty()) << "missing fixture " << fixture_path("direct_conv3x3.ptx");
  const Module m = parse_module(text);
  std::mt19937_64 rng(test_seed() + 2);
  const auto x = dnnfusion::testing::random_vec(rng, size_t(kN) * kC * kH * kW, -2.f, 2.f);
  const auto bias = dnnfusion::testing::random_vec(rng, kK);
  const auto res = dnnfusion::testing::random_vec(rng, size_t(kN) * kK * kH * kW, -2.f, 2.f);
  const ConvRun got = run_conv(m, x, bias, res, 1);

  std::vector<float> ref(got.y.size()), exact(got.y.size());
  int nnz = 0;
  for (int k = 0; k < kK; ++k)
    for (int c = 0; c < kC; ++c)
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) nnz += conv_weight(k, c, r, s) != 0.f;
  for (int n = 0; n < kN; ++n)
    for (int k = 0; k < kK; ++k)
      for (int oh = 0; oh < kH; ++oh)
        for (int ow = 0; ow < kW; ++ow) {
          double acc = 0;
          float facc = 0.f;  // the kernel's own order: channel, row, column, one fmaf each
          for (int c = 0; c < kC; ++c)
            for (int r = 0; r < 3; ++r)
              for (int s = 0; s < 3; ++s) {
                const int ih = oh + r - 1, iw = ow + s - 1;
                const float w = conv_weight(k, c, r, s);
                if (ih < 0 || ih >= kH || iw < 0 || iw >= kW || w == 0.f) continue;
                const float xv = x[((size_t(n) * kC + c) * kH + ih) * kW + iw];
                acc += double(xv) * w;
                facc = std::fmaf(xv, w, facc);
              }
          const size_t i = ((size_t(n) * kK + k) * kH + oh) * kW + ow;
          ref[i] = float(std::min(std::max(acc + bias[k] + res[i], 0.0), 6.0));
          exact[i] = std::fmin(std::fmax(facc + bias[k] + res[i], 0.f), 6.f);
        }
  EXPECT_TRUE(dnnfusion::testing::all_close(got.y.data(), ref.data(), ref.size(), 1e-5f, 1e-6f))
      << seed_note();
  size_t differ = 0;
  for (size_t i = 0; i < ref.size(); ++i) differ += u(got.y[i]) != u(exact[i]);
  EXPECT_EQ(differ, 0u) << "same-order fmaf reference must match bit for bit; " << seed_note();

  // 16 blocks of 32 threads each run their group's FMA chain for two output rows.
  EXPECT_EQ(got.stats.fma, uint64_t(4 * 2 * 32 * 2) * nnz);
  EXPECT_EQ(got.stats.global_stores, got.y.size());
  EXPECT_EQ(got.stats.shared_stores, 16u * 2 * 300);
  EXPECT_GT(got.stats.instructions, got.stats.fma);
  std::printf("[ direct_conv3x3 ] %llu PTX instructions (%llu fma) in %.4f s: %.1f M "
              "instructions/s\n",
              static_cast<unsigned long long>(got.stats.instructions),
              static_cast<unsigned long long>(got.stats.fma), got.stats.seconds,
              got.stats.instructions / got.stats.seconds / 1e6);

  const Module plain = parse_module(text, ParseOptions{false});
  EXPECT_LT(m.entries[0].num_slots * 4, plain.entries[0].num_slots);  // packing pays off
  const ConvRun unpacked = run_conv(plain, x, bias, res, 1);
  EXPECT_EQ(std::memcmp(unpacked.y.data(), got.y.data(), got.y.size() * 4), 0);

  const ConvRun par = run_conv(m, x, bias, res, 3);
  EXPECT_EQ(std::memcmp(par.y.data(), got.y.data(), got.y.size() * 4), 0);
  EXPECT_EQ(par.stats.instructions, got.stats.instructions);
  EXPECT_EQ(par.stats.fma, got.stats.fma);
  EXPECT_EQ(par.stats.shared_loads, got.stats.shared_loads);
}

// Mutants of the real kernel (lines dropped, duplicated or swapped, registers and literals
// changed, characters garbled) either fail to parse or run; any failure must be an InvalidInput,
// never a crash, a hang or another exception.
TEST(PtxInterpreter, MutatedKernelsThrowOrRunButNeverCrash) {
  const std::string text = read_file(fixture_path("direct_conv3x3.ptx"));
  ASSERT_FALSE(text.empty());
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  std::mt19937_64 rng(test_seed() + 4);
  auto pick = [&](size_t n) {
    return size_t(dnnfusion::testing::rand_int(rng, 0, int64_t(n) - 1));
  };
  const std::vector<float> x(size_t(kN) * kC * kH * kW, 0.5f), bias(kK, 0.25f),
      res(size_t(kN) * kK * kH * kW, -0.5f);
  constexpr int kTrials = 200;
  int parsed = 0, ran = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<std::string> m = lines;
    for (int edits = 1 + int(pick(3)); edits > 0; --edits) {
      const size_t i = pick(m.size()), j = pick(m.size());
      std::string& l = m[i];
      switch (pick(6)) {
        case 0: m.erase(m.begin() + long(i)); break;
        case 1: m.insert(m.begin() + long(i), m[j]); break;
        case 2: std::swap(m[i], m[j]); break;
        case 3:  // another register or literal digit
          for (char& c : l) {
            if (c >= '0' && c <= '9' && pick(4) == 0) c = char('0' + pick(10));
          }
          break;
        case 4:
          if (!l.empty()) l[pick(l.size())] = "%.;,[]{}+-0f$ "[pick(14)];
          break;
        default:
          if (!l.empty()) l.erase(pick(l.size()), 1 + pick(4));
          break;
      }
    }
    std::string t;
    for (const std::string& l : m) t += l + "\n";
    try {
      const Module mod = parse_module(t);
      ++parsed;
      ConvRun r;
      r.y.assign(size_t(kN) * kK * kH * kW, 0.f);
      LaunchArgs a;
      a.grid = {4, 2, 2};
      a.block = {8, 4, 1};
      a.threads = int(1 + pick(2));
      a.max_instructions = 4000000;
      std::vector<uint64_t> params = {addr(x.data()), addr(bias.data()), addr(res.data()),
                                      addr(r.y.data())};
      a.params = params;
      a.regions = {{const_cast<float*>(x.data()), x.size() * 4, false},
                   {const_cast<float*>(bias.data()), bias.size() * 4, false},
                   {const_cast<float*>(res.data()), res.size() * 4, false},
                   {r.y.data(), r.y.size() * 4, true}};
      run(mod, mod.entries[0].name, a);
      ++ran;
    } catch (const InvalidInput&) {
    }
  }
  std::printf("[ mutants ] %d mutants: %d parsed, %d ran to completion\n", kTrials, parsed, ran);
  EXPECT_GT(parsed, 10);
}

}  // namespace
}  // namespace dnnfusion::cuda::ptx
