// Reductions. Axes are collapsed into alternating kept/reduced groups; anything that is not
// [O][R][I] (one reduced group) is first permuted so the reduced axes are innermost. [O][R][1]
// reduces contiguous rows with 8 independent accumulators (so GCC can vectorise without
// -ffast-math and so long sums keep double accuracy); [O][R][I] accumulates whole inner rows at
// a time (vectorises along I). Results are computed into an accumulator-typed buffer and
// converted to out_dtype at the end.
// Floating-point exceptions are never inspected, and with -ftrapping-math (GCC's default) the
// compiler will not if-convert selects whose arms contain FP arithmetic, which keeps loops such
// as exp_f32, leaky_relu or NaN-propagating max scalar. Set before any include so every
// function in this file (std:: ones included) shares the option and inlining is unaffected.
#pragma GCC optimize("no-trapping-math")
#include "kernels/cpu/reduction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/data_movement.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/reduction_ukernel.h"

namespace dnnfusion::kernels {
namespace {

constexpr int64_t kRowBlock = 1 << 16;  // fixed split of long rows: thread-count independent sums
constexpr int64_t kInnerTile = 1024;

template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Bool: return f(bool{});
    case DType::UInt8: return f(uint8_t{});
    case DType::Int8: return f(int8_t{});
    default: break;
  }
  DNNF_THROW("unsupported dtype ", dtype_name(t), " in reduction; supported: float32, float64, int64, int32, bool, ",
             "uint8, int8");
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  else if constexpr (std::is_same_v<T, double>) return DType::Float64;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::Int64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::Int32;
  else if constexpr (std::is_same_v<T, bool>) return DType::Bool;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::UInt8;
  else return DType::Int8;
}

// ---- combiners: init / step / merge, all branch-free selects so loops vectorise

template <class In, class A>
struct SumC {
  using Acc = A;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, In x) {
    if constexpr (std::is_integral_v<Acc>) return static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(static_cast<Acc>(x)));
    else return a + static_cast<Acc>(x);
  }
  static Acc merge(Acc a, Acc b) {
    if constexpr (std::is_integral_v<Acc>) return static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    else return a + b;
  }
};
// The sum behind a float mean: col_reduce adds float partial sums of a few rows into the double
// accumulator (see there). Plain sums keep exact double accumulation: with cancellation their
// result can be far smaller than the terms, while a mean's error stays relative to the terms' size.
template <class In>
struct ChunkedSumC : SumC<In, double> {};
template <class In, class A>
struct ProdC {
  using Acc = A;
  static Acc init() { return Acc(1); }
  static Acc step(Acc a, In x) {
    if constexpr (std::is_integral_v<Acc>) return static_cast<Acc>(static_cast<uint64_t>(a) * static_cast<uint64_t>(static_cast<Acc>(x)));
    else return a * static_cast<Acc>(x);
  }
  static Acc merge(Acc a, Acc b) {
    if constexpr (std::is_integral_v<Acc>) return static_cast<Acc>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    else return a * b;
  }
};
template <class In>
struct MaxC {
  using Acc = In;
  static Acc init() {
    if constexpr (std::is_floating_point_v<In>) return -std::numeric_limits<In>::infinity();
    else return std::numeric_limits<In>::lowest();
  }
  // once acc is NaN neither test fires, so NaN sticks
  static Acc step(Acc a, In x) { return (x > a || x != x) ? x : a; }
  static Acc merge(Acc a, Acc b) { return a != a ? a : step(a, b); }
};
template <class In>
struct MinC {
  using Acc = In;
  static Acc init() {
    if constexpr (std::is_floating_point_v<In>) return std::numeric_limits<In>::infinity();
    else return std::numeric_limits<In>::max();
  }
  static Acc step(Acc a, In x) { return (x < a || x != x) ? x : a; }
  static Acc merge(Acc a, Acc b) { return a != a ? a : step(a, b); }
};
template <class In>
struct SqDevC {  // sum of (x - mean)^2; mean is set per row
  using Acc = double;
  double mean;
  Acc init() const { return 0; }
  Acc step(Acc a, In x) const {
    const double d = static_cast<double>(x) - mean;
    return a + d * d;
  }
  static Acc merge(Acc a, Acc b) { return a + b; }
};

template <class In, class C>
typename C::Acc row_reduce(const C& c, const In* x, int64_t n) {
  using Acc = typename C::Acc;
  if constexpr (std::is_integral_v<Acc>) {
    // integer combining is associative, so GCC vectorises this plain loop by itself; the
    // 8-lane form below miscompiles for int8 -> int64 widening with GCC 12 -O3
    Acc a = c.init();
    for (int64_t i = 0; i < n; ++i) a = c.step(a, x[i]);
    return a;
  }
  Acc a[8];
  for (auto& v : a) v = c.init();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] = c.step(a[j], x[i + j]);
  for (; i < n; ++i) a[0] = c.step(a[0], x[i]);
  return C::merge(C::merge(C::merge(a[0], a[1]), C::merge(a[2], a[3])), C::merge(C::merge(a[4], a[5]), C::merge(a[6], a[7])));
}

// acc[0..I) op= x[r][0..I) for r in [0, R); x points at the first row, rows I apart (row stride ld).
template <class In, class C>
void col_reduce(const C& c, const In* x, int64_t R, int64_t n, int64_t ld, typename C::Acc* acc) {
  for (int64_t i = 0; i < n; ++i) acc[i] = c.init();
  if constexpr (std::is_same_v<C, ChunkedSumC<float>>) {
    // Float sums of 32 rows at a time, each added into the double accumulator: float adds
    // vectorise 4-wide here where float -> double conversions ran at a quarter of that (a
    // squeeze-excitation mean over [1, 144/16, 56, 56, 16] took 0.17 ms, ~10 GB/s). Each 32-term
    // float partial sum is off by at most ~32 ulp of the terms' magnitude, so the mean is too.
    constexpr int64_t kChunk = 32;
    if (active_isa() == Isa::Avx512) return reduce_detail::chunked_col_sum_avx512(x, R, n, ld, kChunk, acc);
    float part[kInnerTile];
    for (int64_t r0 = 0; r0 < R; r0 += kChunk) {
      const int64_t r1 = std::min(R, r0 + kChunk);
      for (int64_t i = 0; i < n; ++i) part[i] = 0.f;
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = x + r * ld;
        for (int64_t i = 0; i < n; ++i) part[i] += row[i];
      }
      for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(part[i]);
    }
    return;
  }
  for (int64_t r = 0; r < R; ++r) {
    const In* row = x + r * ld;
    for (int64_t i = 0; i < n; ++i) acc[i] = c.step(acc[i], row[i]);
  }
}

// Reduces [O][R][I] into out[O][I] with combiner c (same for every row).
template <class In, class C>
void reduce_ORI(const C& c, const In* x, int64_t O, int64_t R, int64_t I, typename C::Acc* out, const Parallel& par) {
  using Acc = typename C::Acc;
  if (I == 1) {
    const int64_t nblk = (R + kRowBlock - 1) / kRowBlock;
    if (O < 2 * par.num_threads() && nblk > 1) {
      // few long rows: reduce fixed blocks in parallel, then merge in block order
      std::vector<Acc> part(static_cast<size_t>(O * nblk));
      par.parallel_for(O * nblk, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / nblk, k = t % nblk;
          const int64_t s = k * kRowBlock, n = std::min(kRowBlock, R - s);
          part[t] = row_reduce<In>(c, x + o * R + s, n);
        }
      });
      for (int64_t o = 0; o < O; ++o) {
        Acc a = part[o * nblk];
        for (int64_t k = 1; k < nblk; ++k) a = C::merge(a, part[o * nblk + k]);
        out[o] = a;
      }
      return;
    }
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1));
    auto body = [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out[o] = row_reduce<In>(c, x + o * R, R);
    };
    if (O <= grain) body(0, O);
    else par.parallel_for(O, grain, body);
    return;
  }
  const int64_t tiles = (I + kInnerTile - 1) / kInnerTile;
  const int64_t width = std::min(I, kInnerTile);
  // A long reduced axis (a global pool over a channel-blocked [1, C/x, H, W, x] tensor is O = C/x,
  // R = H*W, I = x): fixed blocks of rows in parallel, merged in block order. The split depends on
  // the shape only, so results do not depend on the thread count.
  const int64_t rblk = std::max<int64_t>(64, 16384 / width), nrb = (R + rblk - 1) / rblk;
  if (nrb > 1) {
    // Work goes out row-block-major (all output rows' first row block, then the second, ...):
    // the thread pool's fixed shares then give each thread a band of the reduced rows, the band
    // the spatially split conv before it wrote on the same core (see conv_nchwc_spatial_split).
    // efficientnet_b0's squeeze-and-excitation means: 0.34 -> 0.30 ms per call at batch 1.
    // (not std::vector: Acc may be bool)
    std::unique_ptr<Acc[]> part(new Acc[static_cast<size_t>(O * tiles * nrb * width)]);
    par.parallel_for(O * tiles * nrb, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = (i % (O * tiles)) * nrb + i / (O * tiles);  // part[] stays [O*tiles][nrb]
        const int64_t ot = t / nrb, k = t % nrb, o = ot / tiles, i0 = (ot % tiles) * kInnerTile;
        const int64_t s = k * rblk;
        col_reduce<In>(c, x + (o * R + s) * I + i0, std::min(rblk, R - s), std::min(kInnerTile, I - i0), I,
                       part.get() + t * width);
      }
    });
    for (int64_t ot = 0; ot < O * tiles; ++ot) {
      const int64_t o = ot / tiles, i0 = (ot % tiles) * kInnerTile, n = std::min(kInnerTile, I - i0);
      const Acc* pp = part.get() + ot * nrb * width;
      for (int64_t i = 0; i < n; ++i) {
        Acc a = pp[i];
        for (int64_t k = 1; k < nrb; ++k) a = C::merge(a, pp[k * width + i]);
        out[o * I + i0 + i] = a;
      }
    }
    return;
  }
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(R * width, 1));
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / tiles, i0 = (t % tiles) * kInnerTile, n = std::min(kInnerTile, I - i0);
      col_reduce<In>(c, x + o * R * I + i0, R, n, I, out + o * I + i0);
    }
  };
  if (O * tiles <= grain) body(0, O * tiles);
  else par.parallel_for(O * tiles, grain, body);
}

template <class In>
void argreduce(bool is_max, const In* x, int64_t O, int64_t R, int64_t I, int64_t* out, const Parallel& par) {
  // NaN beats everything and, once held, is never replaced (first NaN wins)
  auto better = [is_max](In v, In best) {
    if (best != best) return false;
    return (is_max ? v > best : v < best) || v != v;
  };
  const int64_t tiles = (I + kInnerTile - 1) / kInnerTile;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(R * std::min(I, kInnerTile), 1));
  auto body = [&](int64_t b, int64_t e) {
    std::unique_ptr<In[]> best(new In[static_cast<size_t>(std::min(I, kInnerTile))]);
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / tiles, i0 = (t % tiles) * kInnerTile, n = std::min(kInnerTile, I - i0);
      const In* base = x + o * R * I + i0;
      int64_t* oi = out + o * I + i0;
      for (int64_t i = 0; i < n; ++i) {
        best[i] = base[i];
        oi[i] = 0;
      }
      for (int64_t r = 1; r < R; ++r) {
        const In* row = base + r * I;
        for (int64_t i = 0; i < n; ++i) {
          if (better(row[i], best[i])) {
            best[i] = row[i];
            oi[i] = r;
          }
        }
      }
    }
  };
  if (O * tiles <= grain) body(0, O * tiles);
  else par.parallel_for(O * tiles, grain, body);
}

// Converts n accumulator values into y of out_dtype (or is a no-op when acc already is y).
template <class Acc>
void store(const Acc* acc, int64_t n, void* y, DType out_dtype, const Parallel& par) {
  if (static_cast<const void*>(acc) == y) return;
  StridedArg a{acc, dtype_of<Acc>(), {1}};
  unary(UnaryOp::Identity, UnaryAttrs{}, {n}, a, y, out_dtype, par);
}

template <class In>
void reduce_typed(ReduceOp op, const In* x, int64_t O, int64_t R, int64_t I, void* y, DType out_dtype,
                  double correction, const Parallel& par) {
  const int64_t n_out = O * I;
  auto with_buffer = [&](auto tag, auto&& fn) {
    using Acc = decltype(tag);
    if (out_dtype == dtype_of<Acc>()) {
      fn(static_cast<Acc*>(y));
    } else {
      std::unique_ptr<Acc[]> buf(new Acc[static_cast<size_t>(std::max<int64_t>(n_out, 1))]);
      fn(buf.get());
      store(buf.get(), n_out, y, out_dtype, par);
    }
  };
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod: {
      auto go = [&](auto tag) {
        using Acc = decltype(tag);
        with_buffer(tag, [&](Acc* acc) {
          if (op == ReduceOp::Sum) reduce_ORI<In>(SumC<In, Acc>{}, x, O, R, I, acc, par);
          else reduce_ORI<In>(ProdC<In, Acc>{}, x, O, R, I, acc, par);
        });
      };
      if (is_integral(out_dtype)) go(int64_t{});
      else go(double{});
      return;
    }
    case ReduceOp::Mean:
    case ReduceOp::Var: {
      with_buffer(double{}, [&](double* acc) {
        if (op == ReduceOp::Mean && std::is_same_v<In, float>) reduce_ORI<In>(ChunkedSumC<In>{}, x, O, R, I, acc, par);
        else reduce_ORI<In>(SumC<In, double>{}, x, O, R, I, acc, par);
        const double inv = 1.0 / static_cast<double>(R);  // R == 0 gives NaN like torch
        for (int64_t k = 0; k < n_out; ++k) acc[k] = R == 0 ? std::numeric_limits<double>::quiet_NaN() : acc[k] * inv;
        if (op == ReduceOp::Mean) return;
        const double denom = std::max(0.0, static_cast<double>(R) - correction);
        // second pass, per output: sum of squared deviations from that output's mean
        auto body = [&](int64_t b, int64_t e) {
          std::vector<double> tmp;
          for (int64_t o = b; o < e; ++o) {
            if (I == 1) {
              SqDevC<In> c{acc[o]};
              acc[o] = row_reduce<In>(c, x + o * R, R) / denom;
            } else {
              tmp.assign(static_cast<size_t>(I), 0.0);
              double* mean = acc + o * I;
              for (int64_t r = 0; r < R; ++r) {
                const In* row = x + (o * R + r) * I;
                for (int64_t i = 0; i < I; ++i) {
                  const double d = static_cast<double>(row[i]) - mean[i];
                  tmp[i] += d * d;
                }
              }
              for (int64_t i = 0; i < I; ++i) mean[i] = tmp[i] / denom;
            }
          }
        };
        const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(R * I, 1));
        if (O <= grain) body(0, O);
        else par.parallel_for(O, grain, body);
      });
      return;
    }
    case ReduceOp::Max:
    case ReduceOp::Min:
      DNNF_CHECK(R > 0, "max/min over an empty axis has no identity; the reduced extent is 0");
      with_buffer(In{}, [&](In* acc) {
        if (op == ReduceOp::Max) reduce_ORI<In>(MaxC<In>{}, x, O, R, I, acc, par);
        else reduce_ORI<In>(MinC<In>{}, x, O, R, I, acc, par);
      });
      return;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      DNNF_CHECK(R > 0, "argmax/argmin over an empty axis; the reduced extent is 0");
      argreduce<In>(op == ReduceOp::ArgMax, x, O, R, I, static_cast<int64_t*>(y), par);
      return;
  }
  DNNF_THROW("unknown reduce op ", static_cast<int>(op));
}

}  // namespace

void reduce(ReduceOp op, const std::vector<int64_t>& shape, const std::vector<int64_t>& dims, const void* x,
            DType in_dtype, void* y, DType out_dtype, double correction, const Parallel& par) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> red(static_cast<size_t>(rank), dims.empty());
  for (size_t k = 0; k < dims.size(); ++k) {
    DNNF_CHECK(dims[k] >= 0 && dims[k] < rank, "reduce dim ", dims[k], " out of range for rank ", rank,
               "; dims must be in [0, rank)");
    DNNF_CHECK(k == 0 || dims[k] > dims[k - 1], "reduce dims must be sorted and unique");
    red[dims[k]] = true;
  }
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  if (arg) {
    DNNF_CHECK(dims.size() <= 1, "argmax/argmin reduce exactly one axis (or none = flattened); got ", dims.size());
    DNNF_CHECK(out_dtype == DType::Int64, "argmax/argmin write int64; got out_dtype ", dtype_name(out_dtype));
  }
  int64_t numel = 1;
  for (int64_t s : shape) {
    DNNF_CHECK(s >= 0, "negative size ", s, " in reduce shape");
    numel *= s;
  }
  dispatch(out_dtype, [](auto) {});
  // Collapse into groups of consecutive same-kind axes (size-1 axes vanish).
  std::vector<int64_t> gsize;
  std::vector<bool> gred;
  for (int64_t d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    if (!gsize.empty() && gred.back() == red[d]) gsize.back() *= shape[d];
    else {
      gsize.push_back(shape[d]);
      gred.push_back(red[d]);
    }
  }
  int64_t O = 1, R = 1, I = 1;
  int n_red_groups = 0;
  for (size_t k = 0; k < gsize.size(); ++k) n_red_groups += gred[k];
  std::vector<char> permuted;
  const void* src = x;
  if (n_red_groups <= 1) {
    size_t k = 0;
    for (; k < gsize.size() && !gred[k]; ++k) O *= gsize[k];
    for (; k < gsize.size() && gred[k]; ++k) R *= gsize[k];
    for (; k < gsize.size(); ++k) I *= gsize[k];
  } else {
    // permute kept axes first, reduced axes last: then it is [O][R]
    const size_t es = dtype_size(in_dtype);
    std::vector<int64_t> gstride(gsize.size());
    int64_t st = 1;
    for (size_t k = gsize.size(); k-- > 0;) {
      gstride[k] = st;
      st *= gsize[k];
    }
    std::vector<int64_t> pshape, pstride;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t k = 0; k < gsize.size(); ++k)
        if (gred[k] == (pass == 1)) {
          pshape.push_back(gsize[k]);
          pstride.push_back(gstride[k]);
          (pass ? R : O) *= gsize[k];
        }
    permuted.resize(static_cast<size_t>(numel) * es);
    strided_copy(es, pshape, x, pstride, 0, permuted.data(), par);
    src = permuted.data();
  }
  if (numel == 0 && O * I == 0) return;  // nothing to write
  dispatch(in_dtype, [&](auto tag) {
    using In = decltype(tag);
    reduce_typed<In>(op, static_cast<const In*>(src), O, R, I, y, out_dtype, correction, par);
  });
}

void cumsum(const std::vector<int64_t>& shape, int64_t dim, const void* x, DType in_dtype, void* y, DType out_dtype,
            const Parallel& par) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t r = std::max<int64_t>(rank, 1);  // a 0-d tensor accepts dim 0 / -1
  DNNF_CHECK(dim >= -r && dim < r, "cumsum dim ", dim, " out of range for rank ", rank, "; allowed [", -r, ", ", r, ")");
  if (dim < 0) dim += r;
  int64_t O = 1, R = 1, I = 1;
  for (int64_t d = 0; d < rank; ++d) (d < dim ? O : d == dim ? R : I) *= shape[d];
  const int64_t n = O * R * I;
  dispatch(out_dtype, [](auto) {});
  dispatch(in_dtype, [&](auto tag) {
    using In = decltype(tag);
    const In* xi = static_cast<const In*>(x);
    auto go = [&](auto acc_tag) {
      using Acc = decltype(acc_tag);
      std::vector<Acc> buf;
      Acc* acc = static_cast<Acc*>(y);
      if (out_dtype != dtype_of<Acc>()) {
        buf.resize(static_cast<size_t>(n));
        acc = buf.data();
      }
      auto body = [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          const In* xs = xi + o * R * I;
          Acc* ys = acc + o * R * I;
          if (I == 1) {
            Acc s = 0;
            for (int64_t k = 0; k < R; ++k) {
              s = SumC<In, Acc>::step(s, xs[k]);
              ys[k] = s;
            }
          } else {
            for (int64_t i = 0; i < I && R > 0; ++i) ys[i] = static_cast<Acc>(xs[i]);
            for (int64_t k = 1; k < R; ++k)
              for (int64_t i = 0; i < I; ++i) ys[k * I + i] = SumC<In, Acc>::step(ys[(k - 1) * I + i], xs[k * I + i]);
          }
        }
      };
      const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(R * I, 1));
      if (O <= grain) body(0, O);
      else par.parallel_for(O, grain, body);
      if (!buf.empty()) store(buf.data(), n, y, out_dtype, par);
    };
    if (is_integral(out_dtype)) go(int64_t{});
    else go(double{});
  });
}

}  // namespace dnnfusion::kernels
