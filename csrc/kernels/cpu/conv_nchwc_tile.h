// Internal to the NCHW[x]c convolution family: the register-blocked tiles, written once against a
// vector-ops class O and instantiated by each ISA file (conv_nchwc_avx2.cc, conv_nchwc_avx512.cc)
// with its own O declared in an anonymous namespace. That keeps every instantiation internal to
// its translation unit, so code built with -mavx512* can never be merged with another ISA's copy.
// O provides: type V (L floats), zero(), load(p), store(p, v), bcast(float), fma(a, b, c) = a*b+c,
// add(a, b), relu(v), relu6(v) (NaN-propagating like PyTorch).
// Contract of the tiles: see NchwcTile in conv_nchwc_ukernel.h.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv_nchwc_ukernel.h"

namespace dnnfusion::kernels::nchwc_detail {

// acc + bias + residual, activation, one store per vector.
template <class O, int NV, int RN, int OCB>
__attribute__((always_inline)) inline void tile_store(const NchwcTile& t,
                                                      typename O::V (&acc)[RN][NV]) {
  using V = typename O::V;
  constexpr int L = O::L;
  V b[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) b[v] = t.bias ? O::load(t.bias + v * L) : O::zero();
#pragma GCC unroll 32
  for (int j = 0; j < RN; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      V r = O::add(acc[j][v], b[v]);
      if (t.res) r = O::add(r, O::load(t.res + j * OCB + v * L));
      if (t.act == Activation::Relu) r = O::relu(r);
      if (t.act == Activation::Relu6) r = O::relu6(r);
      O::store(t.y + j * OCB + v * L, r);
    }
  }
}

// NchwcTile::res_pf and y_pf: issued at the tile's start, so the lines arrive while it computes.
__attribute__((always_inline)) inline void prefetch_residual(const NchwcTile& t) {
  for (int k = 0; k < 2; ++k)
    for (int64_t i = 0; i < t.res_pf_lines[k]; ++i) __builtin_prefetch(t.res_pf[k] + i * 64, 0, 3);
  for (int64_t i = 0; i < t.y_pf_lines; ++i) __builtin_prefetch(t.y_pf + i * 64, 1, 3);
}

// The tile's prefetch stream (NchwcTile::pf): one line every `every` input-channel steps, so the
// fetches never crowd out the tile's own loads in the line-fill buffers.
struct PrefetchStream {
  const char* p;
  int64_t left, every, count;
};

// A template over O only so that, like the tiles, each ISA file gets its own internal copy.
template <class O>
__attribute__((always_inline)) inline void prefetch_step(PrefetchStream& pf) {
  if (pf.left > 0 && --pf.count == 0) {
    __builtin_prefetch(pf.p, 0, 2);
    pf.p += 64;
    --pf.left;
    pf.count = pf.every;
  }
}

// One kernel tap (kh, kw) of a broadcast conv: for each input channel of the chunk, one weight
// vector (NV registers) is reused by RN broadcast-FMAs, so weight loads are amortized over RN.
// H > 0: a two-row tile (NchwcTile::row_len == H), positions j >= H read x_row further on.
// XP > 0: x_pos is XP, known at compile time, so every broadcast addresses off one base register.
// x_next (1x1 convs): the strip the next tap reads, RN positions; its lines are prefetched into
// L1, one per input channel step (1x1 convs 1-6% faster, kernels alone; resnet50 2-3% and
// mobilenet_v3_large 1-4% whole, interleaved in one process).
template <class O, int NV, int RN, int H, int XP, int OCB>
__attribute__((always_inline)) inline void conv_tap(const float* __restrict xk,
                                                    const float* __restrict wk, int64_t ic_bn,
                                                    int64_t x_pos_rt, int64_t x_row,
                                                    typename O::V (&acc)[RN][NV], PrefetchStream& pf,
                                                    const float* x_next = nullptr) {
  using V = typename O::V;
  constexpr int L = O::L;
  const int64_t x_pos = XP > 0 ? XP : x_pos_rt;
  const int64_t next_lines = x_next ? (RN * x_pos + 15) / 16 : 0;
  for (int64_t ic = 0; ic < ic_bn; ++ic) {
    prefetch_step<O>(pf);
    if (ic < next_lines) __builtin_prefetch(x_next + ic * 16, 0, 3);
    V wv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) wv[v] = O::load(wk + ic * OCB + v * L);
    const float* xp = xk + ic;
    const float* xp2 = xp + x_row;
#pragma GCC unroll 32
    for (int j = 0; j < RN; ++j) {
      const V xb = O::bcast(H > 0 && j >= H ? xp2[(j - H) * x_pos] : xp[j * x_pos]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[j][v] = O::fma(xb, wv[v], acc[j][v]);
    }
  }
}

// Loop order per tile: ic_chunk, kh, kw, ic, position (unrolled), oc lane vector. H > 0: the
// tile is two output rows of H positions each (RN == 2 * H). XP: see conv_tap.
template <class O, int NV, int RN, bool K1, bool UNROLL, int H, int XP, int OCB>
__attribute__((always_inline)) inline void conv_tile_body(const NchwcTile& t) {
  using V = typename O::V;
  V acc[RN][NV];
#pragma GCC unroll 32
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[j][v] = O::zero();
  const int64_t ic_bn = t.ic_bn, x_pos = t.x_pos, x_row = t.x_row, w_kw = ic_bn * OCB;
  const int64_t steps = t.n_cb * t.n_kh * t.n_kw * ic_bn;
  const int64_t every = t.pf_lines > 0 && steps > t.pf_lines ? steps / t.pf_lines : 1;
  PrefetchStream pf{t.pf, t.pf_lines, every, every};
  prefetch_residual(t);
  const float* xc = t.x;
  const float* wc = t.w;
  for (int64_t cb = 0; cb < t.n_cb; ++cb, xc += t.x_cb, wc += t.w_cb) {
    const int64_t icn = cb + 1 == t.n_cb ? t.ic_last : ic_bn;
    if constexpr (K1) {
      // The next channel block's strip of this tile's positions is a separate plane (H*W
      // positions on), too short for the hardware prefetcher to pick up before it is read.
      conv_tap<O, NV, RN, H, XP, OCB>(xc, wc, icn, x_pos, x_row, acc, pf, cb + 1 < t.n_cb ? xc + t.x_cb : nullptr);
    } else {
      const float* xr = xc;
      const float* wr = wc;
      for (int64_t kh = 0; kh < t.n_kh; ++kh, xr += t.x_kh, wr += t.w_kh) {
        if constexpr (UNROLL) {
#pragma GCC unroll 8
          for (int64_t kw = 0; kw < t.n_kw; ++kw)
            conv_tap<O, NV, RN, H, XP, OCB>(xr + kw * t.x_kw, wr + kw * w_kw, icn, x_pos, x_row, acc, pf);
        } else {
#pragma GCC unroll 1
          for (int64_t kw = 0; kw < t.n_kw; ++kw)
            conv_tap<O, NV, RN, H, XP, OCB>(xr + kw * t.x_kw, wr + kw * w_kw, icn, x_pos, x_row, acc, pf);
        }
      }
    }
  }
  tile_store<O, NV, RN, OCB>(t, acc);
}

// With a run-time position stride, a tile of RN >= 8 positions needs RN address registers next to
// its accumulators: the compiler spilled them and reloaded ~8 from the stack per input channel.
// The common strides, one or two vectors (16- or 32-channel input blocks at stride 1, 16 at
// stride 2), get their own copies with the stride built in: 1x1 convs of the mobile networks
// 3-14% faster, depthwise 3x3 3-8% (kernels alone, 2 threads, interleaved with the run-time
// stride version).
// OCB: the lanes of the output block (weights' and outputs' stride per position and channel);
// more than NV * L for a tile over only the first NV vectors of a wider block (see
// conv_tile_half_avx512).
template <class O, int NV, int RN, bool K1, bool UNROLL, int H = 0, int OCB = NV * O::L>
void conv_tile(const NchwcTile& t) {
  if constexpr (RN >= 8) {
    if (t.x_pos == O::L) return conv_tile_body<O, NV, RN, K1, UNROLL, H, O::L, OCB>(t);
    if (t.x_pos == 2 * O::L) return conv_tile_body<O, NV, RN, K1, UNROLL, H, 2 * O::L, OCB>(t);
  }
  conv_tile_body<O, NV, RN, K1, UNROLL, H, 0, OCB>(t);
}

// Depthwise: lane c of the block only sees input channel c, so each tap is a vector FMA of the
// input vector at each position with the tap's weight vector (one weight load per RN FMAs).
// XP: as in conv_tap.
template <class O, int NV, int RN, int XP, int OCB>
__attribute__((always_inline)) inline void dw_tile_body(const NchwcTile& t) {
  using V = typename O::V;
  constexpr int L = O::L;
  V acc[RN][NV];
#pragma GCC unroll 32
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[j][v] = O::zero();
  prefetch_residual(t);
  const int64_t x_pos = XP > 0 ? XP : t.x_pos;
  const float* xr = t.x;
  const float* wr = t.w;
  for (int64_t kh = 0; kh < t.n_kh; ++kh, xr += t.x_kh, wr += t.w_kh) {
    for (int64_t kw = 0; kw < t.n_kw; ++kw) {
      const float* xk = xr + kw * t.x_kw;
      V wv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) wv[v] = O::load(wr + kw * OCB + v * L);
#pragma GCC unroll 32
      for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
          acc[j][v] = O::fma(O::load(xk + j * x_pos + v * L), wv[v], acc[j][v]);
    }
  }
  tile_store<O, NV, RN, OCB>(t, acc);
}

// As conv_tile: the stride-1 and stride-2 position steps (one and two blocks) built in for wide tiles.
template <class O, int NV, int RN, int OCB = NV * O::L>
void dw_tile(const NchwcTile& t) {
  if constexpr (RN >= 8) {
    if (t.x_pos == OCB) return dw_tile_body<O, NV, RN, OCB, OCB>(t);
    if (t.x_pos == 2 * OCB) return dw_tile_body<O, NV, RN, 2 * OCB, OCB>(t);
  }
  dw_tile_body<O, NV, RN, 0, OCB>(t);
}

// Run-time rn -> the instantiation for it (rn in [1, N]); nullptr outside.
template <class O, int NV, bool K1, bool UNROLL, int N, int OCB = NV * O::L>
NchwcTileFn pick_conv_tile(int rn) {
  if constexpr (N == 0) {
    return nullptr;
  } else {
    return rn == N ? &conv_tile<O, NV, N, K1, UNROLL, 0, OCB> : pick_conv_tile<O, NV, K1, UNROLL, N - 1, OCB>(rn);
  }
}

template <class O, int NV, int N, int OCB = NV * O::L>
NchwcTileFn pick_dw_tile(int rn) {
  if constexpr (N == 0) {
    return nullptr;
  } else {
    return rn == N ? &dw_tile<O, NV, N, OCB> : pick_dw_tile<O, NV, N - 1, OCB>(rn);
  }
}

// Two-row tile of 2 * h positions (h in [1, N]); nullptr outside.
template <class O, int NV, int N>
NchwcTileFn pick_conv_tile_rows2(int h) {
  if constexpr (N == 0) {
    return nullptr;
  } else {
    return h == N ? &conv_tile<O, NV, 2 * N, false, true, N> : pick_conv_tile_rows2<O, NV, N - 1>(h);
  }
}

template <class O, int NV, int N, int OCB = NV * O::L>
NchwcTileFn pick_conv_any(int rn, bool k1, bool unroll) {
  if (k1) return pick_conv_tile<O, NV, true, false, N, OCB>(rn);
  return unroll ? pick_conv_tile<O, NV, false, true, N, OCB>(rn)
                : pick_conv_tile<O, NV, false, false, N, OCB>(rn);
}

// sums[l] += sum over the row's `positions` of lane l, for a block b of whole vectors; four
// positions in flight per vector so the adds do not wait on one chain (row_channel_sums_*).
template <class O>
void row_channel_sums(const float* row, int64_t positions, int64_t b, float* sums) {
  using V = typename O::V;
  for (int64_t l0 = 0; l0 < b; l0 += O::L) {
    const float* r = row + l0;
    V a0 = O::zero(), a1 = a0, a2 = a0, a3 = a0;
    int64_t p = 0;
    for (; p + 4 <= positions; p += 4, r += 4 * b) {
      a0 = O::add(a0, O::load(r));
      a1 = O::add(a1, O::load(r + b));
      a2 = O::add(a2, O::load(r + 2 * b));
      a3 = O::add(a3, O::load(r + 3 * b));
    }
    for (; p < positions; ++p, r += b) a0 = O::add(a0, O::load(r));
    O::store(sums + l0, O::add(O::load(sums + l0), O::add(O::add(a0, a1), O::add(a2, a3))));
  }
}

}  // namespace dnnfusion::kernels::nchwc_detail
