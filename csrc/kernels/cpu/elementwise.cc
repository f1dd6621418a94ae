// Elementwise kernels. Structure: operands are collapsed to the fewest dims, the flat output
// range is split over workers, and each worker walks rows of the innermost dim. A row is handled
// in blocks: an operand whose dtype is already the compute type and whose inner stride is 0 or 1
// is read in place, otherwise the block is converted into a small stack buffer first; likewise
// for the output. The op itself is a lambda inlined into one of four tight loops (vector/vector,
// scalar/vector, vector/scalar, scalar/scalar), which is what lets GCC vectorise the float32
// contiguous, scalar-broadcast and per-channel cases.
// Floating-point exceptions are never inspected, and with -ftrapping-math (GCC's default) the
// compiler will not if-convert selects whose arms contain FP arithmetic, which keeps loops such
// as exp_f32, leaky_relu or NaN-propagating max scalar. Set before any include so every
// function in this file (std:: ones included) shares the option and inlining is unaffected.
#pragma GCC optimize("no-trapping-math")
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/error.h"

namespace dnnfusion::kernels {
namespace {

constexpr int64_t kBlock = 256;

// ---------------------------------------------------------------------------------------------
// dtype plumbing

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

void check_supported(DType t, const char* what) {
  switch (t) {
    case DType::Float32: case DType::Float64: case DType::Int64: case DType::Int32:
    case DType::Bool: case DType::UInt8: case DType::Int8:
      return;
    default: break;
  }
  DNNF_THROW("unsupported dtype ", dtype_name(t), " for ", what,
             "; supported: float32, float64, int64, int32, bool, uint8, int8");
}

// Calls f(T{}) with T the C++ type of dtype t (bool for Bool: the 0/1 byte is its representation).
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
  DNNF_THROW("unsupported dtype ", dtype_name(t), "; supported: float32, float64, int64, int32, bool, uint8, int8");
}

// torch's value conversion: to bool is != 0; floating to integral truncates through int64 so
// narrow targets wrap instead of hitting the UB of a direct out-of-range cast.
template <class D, class S>
inline D cvt(S s) {
  if constexpr (std::is_same_v<D, S>) return s;
  else if constexpr (std::is_same_v<D, bool>) return s != S(0);
  else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S> && !std::is_same_v<D, int64_t>)
    return static_cast<D>(static_cast<int64_t>(s));
  else return static_cast<D>(s);
}

template <class S, class D>
void convert_loop(const S* s, int64_t ss, D* d, int64_t n) {
  if (ss == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] = cvt<D>(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = cvt<D>(s[i * ss]);
  }
}

// m values of dtype `dt` from base[off], stride s -> contiguous T.
template <class T>
void load_convert(const char* base, DType dt, int64_t off, int64_t s, int64_t m, T* out) {
  dispatch(dt, [&](auto tag) {
    using S = decltype(tag);
    convert_loop<S, T>(reinterpret_cast<const S*>(base) + off, s, out, m);
  });
}

// m contiguous R values -> dtype `dt` at base[off..].
template <class R>
void store_convert(const R* src, DType dt, char* base, int64_t off, int64_t m) {
  dispatch(dt, [&](auto tag) {
    using D = decltype(tag);
    convert_loop<R, D>(src, 1, reinterpret_cast<D*>(base) + off, m);
  });
}

void convert_any(const char* sb, DType sdt, int64_t soff, int64_t ss, char* db, DType ddt, int64_t doff, int64_t n) {
  dispatch(sdt, [&](auto stag) {
    using S = decltype(stag);
    dispatch(ddt, [&](auto dtag) {
      using D = decltype(dtag);
      const S* s = reinterpret_cast<const S*>(sb) + soff;
      D* d = reinterpret_cast<D*>(db) + doff;
      if (ss == 0) {
        const D v = cvt<D>(s[0]);
        for (int64_t i = 0; i < n; ++i) d[i] = v;
      } else {
        convert_loop<S, D>(s, ss, d, n);
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Shape collapsing and row iteration

template <int N>
struct Geometry {
  std::vector<int64_t> shape;                  // collapsed, no size-1 dims; empty = scalar
  std::array<std::vector<int64_t>, N> stride;  // per input operand
  int64_t numel = 1;
};

template <int N>
Geometry<N> collapse(const std::vector<int64_t>& shape, const std::array<const StridedArg*, N>& args) {
  Geometry<N> g;
  for (int64_t s : shape) {
    DNNF_CHECK(s >= 0, "negative size ", s, " in elementwise shape");
    g.numel *= s;
  }
  for (int k = 0; k < N; ++k)
    DNNF_CHECK(args[k]->strides.size() == shape.size(), "operand ", k, " has ", args[k]->strides.size(),
               " strides but the output has rank ", shape.size(), "; strides must be given over the output shape");
  if (g.numel == 0) return g;
  // Walk dims innermost first; merge dim d into the current (outer-most so far) collapsed dim
  // when every operand's stride makes them one linear run.
  std::vector<int64_t> rs;
  std::array<std::vector<int64_t>, N> rst;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = !rs.empty();
    for (int k = 0; k < N && merge; ++k)
      merge = args[k]->strides[d] == rst[k].back() * rs.back();
    if (merge) {
      rs.back() *= shape[d];
    } else {
      rs.push_back(shape[d]);
      for (int k = 0; k < N; ++k) rst[k].push_back(args[k]->strides[d]);
    }
  }
  g.shape.assign(rs.rbegin(), rs.rend());
  for (int k = 0; k < N; ++k) g.stride[k].assign(rst[k].rbegin(), rst[k].rend());
  return g;
}

// Calls row(out_offset, in_offsets, n, inner_strides) for each run of the innermost dim inside the
// flat output range [begin, end).
template <int N, class RowFn>
void for_each_row(const Geometry<N>& g, int64_t begin, int64_t end, RowFn&& row) {
  const int64_t nd = static_cast<int64_t>(g.shape.size());
  std::array<int64_t, N> inner{};
  if (nd == 0) {
    std::array<int64_t, N> off{};
    row(int64_t{0}, off, int64_t{1}, inner);
    return;
  }
  for (int k = 0; k < N; ++k) inner[k] = g.stride[k][nd - 1];
  const int64_t len = g.shape[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  std::array<int64_t, N> off{};
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    idx[d] = rem % g.shape[d];
    rem /= g.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * g.stride[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(len - idx[nd - 1], end - pos);
    row(pos, off, n, inner);
    pos += n;
    if (pos >= end) break;
    // advance: the innermost index wraps to 0, carry outward
    for (int k = 0; k < N; ++k) off[k] -= idx[nd - 1] * inner[k];
    idx[nd - 1] = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      ++idx[d];
      for (int k = 0; k < N; ++k) off[k] += g.stride[k][d];
      if (idx[d] < g.shape[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= idx[d] * g.stride[k][d];
      idx[d] = 0;
    }
  }
}

int64_t grain_for(int64_t cost_per_elem) { return std::max<int64_t>(1024, 32768 / cost_per_elem); }

template <int N, class WorkerFn>
void run_parallel(const Geometry<N>& g, int64_t cost, const Parallel& par, WorkerFn&& fn) {
  if (g.numel == 0) return;
  const int64_t grain = grain_for(cost);
  if (g.numel <= grain) {
    fn(int64_t{0}, g.numel);
    return;
  }
  par.parallel_for(g.numel, grain, [&](int64_t b, int64_t e) { fn(b, e); });
}

// ---------------------------------------------------------------------------------------------
// Operand access: a block of an operand as a T pointer (in place or converted into buf).

template <class T>
struct BlockReader {
  const char* base;
  DType dtype;
  bool same;
  // Returns a pointer to m values starting at element `off` with stride `s`; when s == 0 only
  // element 0 is meaningful (the caller treats the operand as a scalar).
  const T* read(int64_t off, int64_t s, int64_t m, T* buf) const {
    if (same && (s == 0 || s == 1)) return reinterpret_cast<const T*>(base) + off;
    load_convert<T>(base, dtype, off, s, s == 0 ? 1 : m, buf);
    return buf;
  }
};

template <class T>
BlockReader<T> reader(const StridedArg& a) {
  check_supported(a.dtype, "elementwise input");
  return {static_cast<const char*>(a.data), a.dtype, a.dtype == dtype_of<T>()};
}

// ---------------------------------------------------------------------------------------------
// Binary driver

template <class T, class R, class F>
void binary_loop(const T* a, bool as, const T* b, bool bs, R* o, int64_t n, F f) {
  if (!as && !bs) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (as && !bs) {
    const T av = a[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else if (!as && bs) {
    const T bv = b[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else {
    const R v = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

template <class T, class R, class F>
void binary_run(const std::vector<int64_t>& shape, const StridedArg& a, const StridedArg& b, void* out,
                DType out_dtype, int64_t cost, const Parallel& par, F f) {
  check_supported(out_dtype, "elementwise output");
  const Geometry<2> g = collapse<2>(shape, {&a, &b});
  const BlockReader<T> ra = reader<T>(a), rb = reader<T>(b);
  const bool out_same = out_dtype == dtype_of<R>();
  char* obase = static_cast<char*>(out);
  run_parallel(g, cost, par, [&](int64_t begin, int64_t end) {
    alignas(64) T ba[kBlock];
    alignas(64) T bb[kBlock];
    alignas(64) R bo[kBlock];
    for_each_row<2>(g, begin, end, [&](int64_t ooff, const std::array<int64_t, 2>& off, int64_t n,
                                       const std::array<int64_t, 2>& s) {
      const bool direct = out_same && ra.same && rb.same && (s[0] == 0 || s[0] == 1) && (s[1] == 0 || s[1] == 1);
      const int64_t blk = direct ? n : kBlock;
      for (int64_t j = 0; j < n; j += blk) {
        const int64_t m = std::min(blk, n - j);
        const T* pa = ra.read(off[0] + j * s[0], s[0], m, ba);
        const T* pb = rb.read(off[1] + j * s[1], s[1], m, bb);
        R* po = out_same ? reinterpret_cast<R*>(obase) + ooff + j : bo;
        binary_loop<T, R>(pa, s[0] == 0, pb, s[1] == 0, po, m, f);
        if (!out_same) store_convert<R>(bo, out_dtype, obase, ooff + j, m);
      }
    });
  });
}

template <class T>
using Wide = std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, std::make_unsigned_t<T>, T>;

// Integer add/sub/mul wrap (torch semantics) instead of being UB on overflow.
template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a + b;
  else return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
}
template <class T>
T wrap_sub(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a - b;
  else return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a * b;
  else return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
}

template <class T>
T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exp) {
    if (exp & 1) result = wrap_mul(result, base);
    exp = static_cast<T>(exp >> 1);
    base = wrap_mul(base, base);
  }
  return result;
}

template <class T>
T float_floordiv(T a, T b) {
  if (b == 0) return a / b;
  const T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div != 0) {
    T fl = std::floor(div);
    if (div - fl > T(0.5)) fl += 1;
    return fl;
  }
  return std::copysign(T(0), a / b);
}

template <class T>
T float_remainder(T a, T b) {
  T mod = std::fmod(a, b);
  if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
  return mod;
}

template <class T>
T int_floordiv(T a, T b) {
  if (b == 0) DNNF_THROW("integer division by zero in floor_divide");
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrap_sub(T(0), a);  // avoids INT_MIN / -1 overflow trap
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return a / b;
  }
}

template <class T>
T int_remainder(T a, T b) {
  if (b == 0) DNNF_THROW("integer division by zero in remainder");
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    return a % b;
  }
}

int64_t cost_of(BinaryOp op) {
  switch (op) {
    case BinaryOp::Pow: case BinaryOp::Atan2: case BinaryOp::FloorDiv: case BinaryOp::Remainder: return 16;
    default: return 1;
  }
}

template <class T>
void binary_typed(BinaryOp op, double alpha, const std::vector<int64_t>& shape, const StridedArg& a,
                  const StridedArg& b, void* out, DType odt, const Parallel& par) {
  const int64_t c = cost_of(op);
  auto run = [&](auto f) {
    using R = decltype(f(T{}, T{}));
    binary_run<T, R>(shape, a, b, out, odt, c, par, f);
  };
  constexpr bool is_bool = std::is_same_v<T, bool>;
  constexpr bool is_float = std::is_floating_point_v<T>;
  if constexpr (is_bool) {
    if (op == BinaryOp::Sub || op == BinaryOp::FloorDiv || op == BinaryOp::Remainder || op == BinaryOp::Pow)
      DNNF_THROW("binary op ", static_cast<int>(op), " is not supported with compute dtype bool (like torch); ",
                 "promote to an integral or floating dtype");
  }
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub: {
      const bool sub = op == BinaryOp::Sub;
      if constexpr (is_bool) {
        if (alpha == 0) return run([](T x, T) -> T { return x; });
        return run([](T x, T y) -> T { return x || y; });
      } else {
        if (alpha == 1) {
          if (sub) return run([](T x, T y) -> T { return wrap_sub(x, y); });
          return run([](T x, T y) -> T { return wrap_add(x, y); });
        }
        DNNF_CHECK(is_float || alpha == std::trunc(alpha), "alpha ", alpha, " must be integral for integral compute dtypes");
        const T al = is_float ? static_cast<T>(alpha) : static_cast<T>(static_cast<int64_t>(alpha));
        if (sub) return run([al](T x, T y) -> T { return wrap_sub(x, wrap_mul(al, y)); });
        return run([al](T x, T y) -> T { return wrap_add(x, wrap_mul(al, y)); });
      }
    }
    case BinaryOp::Mul:
      if constexpr (is_bool) return run([](T x, T y) -> T { return x && y; });
      else return run([](T x, T y) -> T { return wrap_mul(x, y); });
    case BinaryOp::Div:
      if constexpr (is_float) return run([](T x, T y) -> T { return x / y; });
      break;  // integral compute dtypes are redirected to double by binary()
    case BinaryOp::Atan2:
      if constexpr (is_float) return run([](T x, T y) -> T { return std::atan2(x, y); });
      break;
    case BinaryOp::FloorDiv:
      if constexpr (is_float) return run([](T x, T y) -> T { return float_floordiv(x, y); });
      else if constexpr (!is_bool) return run([](T x, T y) -> T { return int_floordiv(x, y); });
      break;
    case BinaryOp::Remainder:
      if constexpr (is_float) return run([](T x, T y) -> T { return float_remainder(x, y); });
      else if constexpr (!is_bool) return run([](T x, T y) -> T { return int_remainder(x, y); });
      break;
    case BinaryOp::Pow:
      if constexpr (is_float) return run([](T x, T y) -> T { return std::pow(x, y); });
      else if constexpr (!is_bool) return run([](T x, T y) -> T { return int_pow(x, y); });
      break;
    case BinaryOp::Maximum:
      if constexpr (is_float) return run([](T x, T y) -> T { return x != x ? x : (y != y ? y : (x > y ? x : y)); });
      else return run([](T x, T y) -> T { return x > y ? x : y; });
    case BinaryOp::Minimum:
      if constexpr (is_float) return run([](T x, T y) -> T { return x != x ? x : (y != y ? y : (x < y ? x : y)); });
      else return run([](T x, T y) -> T { return x < y ? x : y; });
    case BinaryOp::Eq: return run([](T x, T y) -> bool { return x == y; });
    case BinaryOp::Ne: return run([](T x, T y) -> bool { return x != y; });
    case BinaryOp::Lt: return run([](T x, T y) -> bool { return x < y; });
    case BinaryOp::Le: return run([](T x, T y) -> bool { return x <= y; });
    case BinaryOp::Gt: return run([](T x, T y) -> bool { return x > y; });
    case BinaryOp::Ge: return run([](T x, T y) -> bool { return x >= y; });
    case BinaryOp::LogicalAnd: return run([](T x, T y) -> bool { return (x != T(0)) & (y != T(0)); });
    case BinaryOp::LogicalOr: return run([](T x, T y) -> bool { return (x != T(0)) | (y != T(0)); });
    case BinaryOp::BitwiseAnd:
      if constexpr (!is_float) return run([](T x, T y) -> T { return static_cast<T>(x & y); });
      break;
    case BinaryOp::BitwiseOr:
      if constexpr (!is_float) return run([](T x, T y) -> T { return static_cast<T>(x | y); });
      break;
  }
  DNNF_THROW("binary op ", static_cast<int>(op), " is not supported for compute dtype ", dtype_name(dtype_of<T>()),
             " (bitwise ops need an integral or bool compute dtype)");
}

// ---------------------------------------------------------------------------------------------
// Unary driver

template <class T, class R, class F>
void unary_run(const std::vector<int64_t>& shape, const StridedArg& x, void* out, DType out_dtype, int64_t cost,
               const Parallel& par, F f) {
  check_supported(out_dtype, "elementwise output");
  const Geometry<1> g = collapse<1>(shape, {&x});
  const BlockReader<T> rx = reader<T>(x);
  const bool out_same = out_dtype == dtype_of<R>();
  char* obase = static_cast<char*>(out);
  run_parallel(g, cost, par, [&](int64_t begin, int64_t end) {
    alignas(64) T bx[kBlock];
    alignas(64) R bo[kBlock];
    for_each_row<1>(g, begin, end, [&](int64_t ooff, const std::array<int64_t, 1>& off, int64_t n,
                                       const std::array<int64_t, 1>& s) {
      const bool direct = out_same && rx.same && (s[0] == 0 || s[0] == 1);
      const int64_t blk = direct ? n : kBlock;
      for (int64_t j = 0; j < n; j += blk) {
        const int64_t m = std::min(blk, n - j);
        const T* px = rx.read(off[0] + j * s[0], s[0], m, bx);
        R* po = out_same ? reinterpret_cast<R*>(obase) + ooff + j : bo;
        if (s[0] == 0) {
          const R v = f(px[0]);
          for (int64_t i = 0; i < m; ++i) po[i] = v;
        } else {
          for (int64_t i = 0; i < m; ++i) po[i] = f(px[i]);
        }
        if (!out_same) store_convert<R>(bo, out_dtype, obase, ooff + j, m);
      }
    });
  });
}

// Identity: a plain conversion from x's dtype to out_dtype, straight from the strided source.
void cast_run(const std::vector<int64_t>& shape, const StridedArg& x, void* out, DType out_dtype,
              const Parallel& par) {
  check_supported(x.dtype, "elementwise input");
  check_supported(out_dtype, "elementwise output");
  const Geometry<1> g = collapse<1>(shape, {&x});
  const char* xb = static_cast<const char*>(x.data);
  char* ob = static_cast<char*>(out);
  run_parallel(g, 1, par, [&](int64_t begin, int64_t end) {
    for_each_row<1>(g, begin, end, [&](int64_t ooff, const std::array<int64_t, 1>& off, int64_t n,
                                       const std::array<int64_t, 1>& s) {
      convert_any(xb, x.dtype, off[0], s[0], ob, out_dtype, ooff, n);
    });
  });
}

// Tanh built on exp_f32 so float loops vectorise: a Cephes odd polynomial near 0 (where
// 1 - 2/(e^2x + 1) would cancel) and the exp form elsewhere.
inline float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = exp_f32(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0 ? -big : big;
  return ax < 0.625f ? small : big;
}

template <class T>
T t_exp(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x);
  else return std::exp(x);
}
template <class T>
T t_tanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanh_f32(x);
  else return std::tanh(x);
}

template <class T>
void unary_float(UnaryOp op, const UnaryAttrs& at, const std::vector<int64_t>& shape, const StridedArg& x,
                 void* out, DType odt, const Parallel& par) {
  auto run = [&](int64_t cost, auto f) { unary_run<T, T>(shape, x, out, odt, cost, par, f); };
  const T A = static_cast<T>(at.a), B = static_cast<T>(at.b);
  switch (op) {
    case UnaryOp::Identity: return run(1, [](T v) { return v; });
    case UnaryOp::Relu: return run(1, [](T v) { return v < T(0) ? T(0) : v; });
    case UnaryOp::Hardtanh:
    case UnaryOp::Clamp:
      return run(1, [A, B](T v) {
        T y = v < A ? A : v;
        return y > B ? B : y;
      });
    case UnaryOp::Hardswish:
      return run(1, [](T v) {
        T c = v + T(3);
        c = c < T(0) ? T(0) : c;
        c = c > T(6) ? T(6) : c;
        return v * c / T(6);
      });
    case UnaryOp::Hardsigmoid:
      return run(1, [](T v) {
        T c = v + T(3);
        c = c < T(0) ? T(0) : c;
        c = c > T(6) ? T(6) : c;
        return c / T(6);
      });
    case UnaryOp::Sigmoid: return run(4, [](T v) { return T(1) / (T(1) + t_exp(-v)); });
    case UnaryOp::Silu: return run(4, [](T v) { return v / (T(1) + t_exp(-v)); });
    case UnaryOp::Gelu:
      return run(8, [](T v) { return T(0.5) * v * (T(1) + std::erf(v * T(0.70710678118654752440))); });
    case UnaryOp::GeluTanh:
      return run(4, [](T v) {
        const T k = T(0.79788456080286535588);  // sqrt(2/pi)
        return T(0.5) * v * (T(1) + t_tanh(k * (v + T(0.044715) * v * v * v)));
      });
    case UnaryOp::Tanh: return run(4, [](T v) { return t_tanh(v); });
    case UnaryOp::Exp: return run(4, [](T v) { return t_exp(v); });
    case UnaryOp::Log: return run(8, [](T v) { return std::log(v); });
    case UnaryOp::Sqrt: return run(2, [](T v) { return std::sqrt(v); });
    case UnaryOp::Rsqrt: return run(2, [](T v) { return T(1) / std::sqrt(v); });
    case UnaryOp::Reciprocal: return run(1, [](T v) { return T(1) / v; });
    case UnaryOp::Neg: return run(1, [](T v) { return -v; });
    case UnaryOp::Abs: return run(1, [](T v) { return std::fabs(v); });
    case UnaryOp::Erf: return run(8, [](T v) { return std::erf(v); });
    case UnaryOp::PowScalar:
      // the exponents torch special-cases, so results match it bit for bit
      if (at.a == 2) return run(1, [](T v) { return v * v; });
      if (at.a == 3) return run(1, [](T v) { return v * v * v; });
      if (at.a == 1) return run(1, [](T v) { return v; });
      if (at.a == 0.5) return run(2, [](T v) { return std::sqrt(v); });
      if (at.a == -0.5) return run(2, [](T v) { return T(1) / std::sqrt(v); });
      if (at.a == -1) return run(1, [](T v) { return T(1) / v; });
      if (at.a == -2) return run(1, [](T v) { return T(1) / (v * v); });
      return run(16, [A](T v) { return std::pow(v, A); });
    case UnaryOp::LeakyRelu: return run(1, [A](T v) { return v > T(0) ? v : v * A; });
    case UnaryOp::Elu: return run(8, [A](T v) { return v > T(0) ? v : A * std::expm1(v); });
    case UnaryOp::Softplus:
      return run(16, [A, B](T v) { return v * A > B ? v : std::log1p(std::exp(v * A)) / A; });
    case UnaryOp::Mish: return run(16, [](T v) { return v * std::tanh(std::log1p(std::exp(v))); });
    case UnaryOp::LogicalNot: break;  // handled by unary()
    case UnaryOp::Sign: return run(1, [](T v) { return v > T(0) ? T(1) : (v < T(0) ? T(-1) : v); });
    case UnaryOp::Square: return run(1, [](T v) { return v * v; });
    case UnaryOp::Sin: return run(8, [](T v) { return std::sin(v); });
    case UnaryOp::Cos: return run(8, [](T v) { return std::cos(v); });
    case UnaryOp::Floor: return run(2, [](T v) { return std::floor(v); });
    case UnaryOp::Ceil: return run(2, [](T v) { return std::ceil(v); });
    case UnaryOp::Round: return run(2, [](T v) { return std::nearbyint(v); });
  }
  DNNF_THROW("unknown unary op ", static_cast<int>(op));
}

// double -> int64 for clamp bounds, saturating so +-inf mean "no bound"
int64_t sat_int64(double v) {
  if (std::isnan(v)) DNNF_THROW("NaN clamp bound with an integral dtype");
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

bool integral_preserving(UnaryOp op, const UnaryAttrs& at) {
  switch (op) {
    case UnaryOp::Relu: case UnaryOp::Hardtanh: case UnaryOp::Clamp: case UnaryOp::Neg: case UnaryOp::Abs:
    case UnaryOp::Sign: case UnaryOp::Square: case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round:
      return true;
    case UnaryOp::PowScalar: return at.a >= 0 && at.a == std::trunc(at.a) && at.a < 64;
    default: return false;
  }
}

void unary_int(UnaryOp op, const UnaryAttrs& at, const std::vector<int64_t>& shape, const StridedArg& x,
               void* out, DType odt, const Parallel& par) {
  using T = int64_t;
  auto run = [&](auto f) { unary_run<T, T>(shape, x, out, odt, 1, par, f); };
  switch (op) {
    case UnaryOp::Relu: return run([](T v) { return v < 0 ? T(0) : v; });
    case UnaryOp::Hardtanh:
    case UnaryOp::Clamp: {
      const T lo = sat_int64(at.a), hi = sat_int64(at.b);
      return run([lo, hi](T v) {
        T y = v < lo ? lo : v;
        return y > hi ? hi : y;
      });
    }
    case UnaryOp::Neg: return run([](T v) { return wrap_sub(T(0), v); });
    case UnaryOp::Abs: return run([](T v) { return v < 0 ? wrap_sub(T(0), v) : v; });
    case UnaryOp::Sign: return run([](T v) { return T((v > 0) - (v < 0)); });
    case UnaryOp::Square: return run([](T v) { return wrap_mul(v, v); });
    case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: return run([](T v) { return v; });
    case UnaryOp::PowScalar: {
      const T e = static_cast<T>(at.a);
      return run([e](T v) { return int_pow(v, e); });
    }
    default: break;
  }
  DNNF_THROW("unary op ", static_cast<int>(op), " is not integral-preserving");
}

}  // namespace

void unary(UnaryOp op, const UnaryAttrs& at, const std::vector<int64_t>& shape, const StridedArg& x, void* out,
           DType out_dtype, const Parallel& par) {
  check_supported(x.dtype, "unary input");
  check_supported(out_dtype, "unary output");
  if (op == UnaryOp::Identity) return cast_run(shape, x, out, out_dtype, par);
  if (op == UnaryOp::LogicalNot)
    return unary_run<bool, bool>(shape, x, out, out_dtype, 1, par, [](bool v) { return !v; });
  if (out_dtype == DType::Float32) return unary_float<float>(op, at, shape, x, out, out_dtype, par);
  if (out_dtype == DType::Float64 || !integral_preserving(op, at))
    return unary_float<double>(op, at, shape, x, out, out_dtype, par);
  return unary_int(op, at, shape, x, out, out_dtype, par);
}

void binary(BinaryOp op, double alpha, const std::vector<int64_t>& shape, const StridedArg& a, const StridedArg& b,
            void* out, DType out_dtype, DType compute_dtype, const Parallel& par) {
  check_supported(a.dtype, "binary input a");
  check_supported(b.dtype, "binary input b");
  check_supported(out_dtype, "binary output");
  check_supported(compute_dtype, "binary compute");
  if ((op == BinaryOp::Div || op == BinaryOp::Atan2) && !is_floating(compute_dtype)) compute_dtype = DType::Float64;
  switch (compute_dtype) {
    case DType::Float32: return binary_typed<float>(op, alpha, shape, a, b, out, out_dtype, par);
    case DType::Float64: return binary_typed<double>(op, alpha, shape, a, b, out, out_dtype, par);
    case DType::Int64: return binary_typed<int64_t>(op, alpha, shape, a, b, out, out_dtype, par);
    case DType::Int32: return binary_typed<int32_t>(op, alpha, shape, a, b, out, out_dtype, par);
    case DType::Bool: return binary_typed<bool>(op, alpha, shape, a, b, out, out_dtype, par);
    case DType::UInt8: return binary_typed<uint8_t>(op, alpha, shape, a, b, out, out_dtype, par);
    case DType::Int8: return binary_typed<int8_t>(op, alpha, shape, a, b, out, out_dtype, par);
    default: break;
  }
  DNNF_THROW("unreachable dtype in binary");
}

namespace {
template <class T>
void where_typed(const std::vector<int64_t>& shape, const StridedArg& cond, const StridedArg& a, const StridedArg& b,
                 void* out, const Parallel& par) {
  const Geometry<3> g = collapse<3>(shape, {&cond, &a, &b});
  const BlockReader<bool> rc = reader<bool>(cond);
  const BlockReader<T> ra = reader<T>(a), rb = reader<T>(b);
  T* o = static_cast<T*>(out);
  run_parallel(g, 1, par, [&](int64_t begin, int64_t end) {
    alignas(64) bool bc[kBlock];
    alignas(64) T ba[kBlock];
    alignas(64) T bb[kBlock];
    for_each_row<3>(g, begin, end, [&](int64_t ooff, const std::array<int64_t, 3>& off, int64_t n,
                                       const std::array<int64_t, 3>& s) {
      for (int64_t j = 0; j < n; j += kBlock) {
        const int64_t m = std::min(kBlock, n - j);
        const bool* pc = rc.read(off[0] + j * s[0], s[0], m, bc);
        const T* pa = ra.read(off[1] + j * s[1], s[1], m, ba);
        const T* pb = rb.read(off[2] + j * s[2], s[2], m, bb);
        T* po = o + ooff + j;
        const int64_t sc = s[0] != 0, sa = s[1] != 0, sb = s[2] != 0;
        if (sc && sa && sb) {
          for (int64_t i = 0; i < m; ++i) po[i] = pc[i] ? pa[i] : pb[i];
        } else {
          for (int64_t i = 0; i < m; ++i) po[i] = pc[i * sc] ? pa[i * sa] : pb[i * sb];
        }
      }
    });
  });
}
}  // namespace

void where(const std::vector<int64_t>& shape, const StridedArg& cond, const StridedArg& a, const StridedArg& b,
           void* out, DType out_dtype, const Parallel& par) {
  check_supported(cond.dtype, "where condition");
  check_supported(a.dtype, "where input a");
  check_supported(b.dtype, "where input b");
  check_supported(out_dtype, "where output");
  switch (out_dtype) {
    case DType::Float32: return where_typed<float>(shape, cond, a, b, out, par);
    case DType::Float64: return where_typed<double>(shape, cond, a, b, out, par);
    case DType::Int64: return where_typed<int64_t>(shape, cond, a, b, out, par);
    case DType::Int32: return where_typed<int32_t>(shape, cond, a, b, out, par);
    case DType::Bool: return where_typed<bool>(shape, cond, a, b, out, par);
    case DType::UInt8: return where_typed<uint8_t>(shape, cond, a, b, out, par);
    case DType::Int8: return where_typed<int8_t>(shape, cond, a, b, out, par);
    default: break;
  }
  DNNF_THROW("unreachable dtype in where");
}

}  // namespace dnnfusion::kernels
