// The per-weight-set step of the sparse PTX method (the ICT paper's algorithm 2):
// one pass over a template's PTX that substitutes every template literal by the real weight and
// deletes the instructions of zero weights, so the kernel executes no instruction for them.
//
// For a zero weight, `mov.f32 %fW, <literal>` is deleted, and so is each
// `fma.rn.f32 %fD, x, w, %fC` (w the literal or %fW): %fD is recorded as an alias of its addend
// (a register or an immediate such as 0f00000000) and every later use of %fD, the epilogue and
// the stores included, reads the addend instead (chains resolve: an alias always names a live
// value). An output whose every weight is zero thus stores bias (or 0). When an alias would be
// unsound (the FMA predicated, %fD defined more than once or read before its definition, or %fC a
// register written more than once or after the FMA) the FMA becomes `mov.f32 %fD, %fC` instead. An immediate substituted where ptxas might refuse one (an
// opcode outside those checked with ptxas 13: fma add sub mul min max mov selp setp set st neg abs
// cvt) is first moved into a fresh register. Loads stay: ptxas drops the dead ones.
//
// Precondition: `t` came from make_template (its weight table matches its PTX); `weights` holds
// K*C*R*S floats in KCRS order. Postconditions: the PTX keeps the entry and ABI of the template;
// fma_kept == nonzero weights * t.fmas_per_weight for a template from make_template; no template
// literal is left. Errors: a NaN/Inf weight is InvalidInput (naming its index); a template
// literal missing from the PTX, or one in an instruction form this pass does not understand, is
// dnnfusion::Error: never a silently wrong kernel. Linear in the PTX length.
#pragma once
#include <cstdint>
#include <string>

#include "target/cuda/sparse_conv/conv_template.h"

namespace dnnfusion::cuda {

struct RewriteResult {
  std::string ptx;
  int64_t nonzero_weights = 0;
  int64_t fma_kept = 0;        // template FMAs left (their literal replaced by the real weight)
  int64_t fma_deleted = 0;     // template FMAs of zero weights removed (aliased or turned into a mov)
  int64_t mov_deleted = 0;     // `mov.f32 %fW, <literal>` of zero weights removed
  int64_t fma_to_mov = 0;      // of fma_deleted, those kept as `mov.f32 d, addend` (alias unsound)
  int64_t materialized = 0;    // immediates moved into a fresh register before an instruction
  int64_t outputs_all_zero = 0;  // accumulators none of whose weights survived that something other
                                 // than the FMA chain reads: the thread outputs that became bias / 0
  double seconds = 0;
};

RewriteResult rewrite_ptx(const TemplateKernel& t, const float* weights);

}  // namespace dnnfusion::cuda
