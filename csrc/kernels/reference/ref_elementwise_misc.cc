// Naive references (see header). Deliberately simple: one element at a time, offsets from the
// multi-index, values carried as a tagged double / int64.
#include "kernels/reference/ref_elementwise_misc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"

namespace dnnfusion::reference {
namespace {

using kernels::BinaryOp;
using kernels::ReduceOp;
using kernels::StridedArg;
using kernels::UnaryAttrs;
using kernels::UnaryOp;

void require(DType t) {
  if (t == DType::Float16 || t == DType::BFloat16) DNNF_THROW("reference: unsupported dtype ", dtype_name(t));
}

struct Val {
  bool fl = false;
  double f = 0;
  int64_t i = 0;
};
double dbl(const Val& v) { return v.fl ? v.f : static_cast<double>(v.i); }

int64_t wrap(int64_t x, DType t) {
  const uint64_t u = static_cast<uint64_t>(x);
  switch (t) {
    case DType::Int32: return static_cast<int32_t>(static_cast<uint32_t>(u));
    case DType::UInt8: return static_cast<uint8_t>(u);
    case DType::Int8: return static_cast<int8_t>(static_cast<uint8_t>(u));
    case DType::Bool: return x != 0;
    default: return x;
  }
}

Val to_type(const Val& v, DType t) {
  require(t);
  Val r;
  if (t == DType::Float32) {
    r.fl = true;
    r.f = v.fl ? static_cast<double>(static_cast<float>(v.f)) : static_cast<double>(static_cast<float>(v.i));
  } else if (t == DType::Float64) {
    r.fl = true;
    r.f = dbl(v);
  } else if (t == DType::Bool) {
    r.i = v.fl ? (v.f != 0 || std::isnan(v.f)) : (v.i != 0);
  } else {
    r.i = wrap(v.fl ? static_cast<int64_t>(std::trunc(v.f)) : v.i, t);
  }
  return r;
}

Val load(const void* base, DType t, int64_t off) {
  require(t);
  const char* p = static_cast<const char*>(base) + off * static_cast<int64_t>(dtype_size(t));
  Val v;
  switch (t) {
    case DType::Float32: { float x; std::memcpy(&x, p, 4); v.fl = true; v.f = x; break; }
    case DType::Float64: { double x; std::memcpy(&x, p, 8); v.fl = true; v.f = x; break; }
    case DType::Int64: { int64_t x; std::memcpy(&x, p, 8); v.i = x; break; }
    case DType::Int32: { int32_t x; std::memcpy(&x, p, 4); v.i = x; break; }
    case DType::Bool: case DType::UInt8: { uint8_t x; std::memcpy(&x, p, 1); v.i = x; break; }
    case DType::Int8: { int8_t x; std::memcpy(&x, p, 1); v.i = x; break; }
    default: break;
  }
  return v;
}

void store(void* base, DType t, int64_t off, const Val& v0) {
  const Val v = to_type(v0, t);
  char* p = static_cast<char*>(base) + off * static_cast<int64_t>(dtype_size(t));
  switch (t) {
    case DType::Float32: { float x = static_cast<float>(v.f); std::memcpy(p, &x, 4); break; }
    case DType::Float64: std::memcpy(p, &v.f, 8); break;
    case DType::Int64: std::memcpy(p, &v.i, 8); break;
    case DType::Int32: { int32_t x = static_cast<int32_t>(v.i); std::memcpy(p, &x, 4); break; }
    case DType::Bool: case DType::UInt8: { uint8_t x = static_cast<uint8_t>(v.i); std::memcpy(p, &x, 1); break; }
    case DType::Int8: { int8_t x = static_cast<int8_t>(v.i); std::memcpy(p, &x, 1); break; }
    default: break;
  }
}

Val fval(double f) { Val v; v.fl = true; v.f = f; return v; }
Val ival(int64_t i) { Val v; v.i = i; return v; }

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}
// multi-index of flat position p in row-major `shape`
std::vector<int64_t> unravel(int64_t p, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = p % shape[k];
    p /= shape[k];
  }
  return idx;
}
int64_t dot(const std::vector<int64_t>& idx, const std::vector<int64_t>& st) {
  int64_t o = 0;
  for (size_t k = 0; k < idx.size(); ++k) o += idx[k] * st[k];
  return o;
}
// dot(unravel(p, shape), st) without building the index: the copies and elementwise ops below
// visit every element, and an allocation per element made folding a large weight's transpose
// take seconds.
int64_t offset_of(int64_t p, const std::vector<int64_t>& shape, const std::vector<int64_t>& st) {
  int64_t o = 0;
  for (size_t k = shape.size(); k-- > 0;) {
    o += (p % shape[k]) * st[k];
    p /= shape[k];
  }
  return o;
}
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    st[k] = s;
    s *= shape[k];
  }
  return st;
}

int64_t mul_wrap(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
int64_t ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : b == -1 ? ((e % 2) ? -1 : 1) : 0;
  int64_t r = 1;
  for (int64_t k = 0; k < e; ++k) r = mul_wrap(r, b);
  return r;
}

double py_floordiv(double a, double b) {
  if (b == 0) return a / b;
  const double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return std::copysign(0.0, a / b);
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1;
  return fl;
}

bool unary_int_ok(UnaryOp op, const UnaryAttrs& at) {
  switch (op) {
    case UnaryOp::Relu: case UnaryOp::Hardtanh: case UnaryOp::Clamp: case UnaryOp::Neg: case UnaryOp::Abs:
    case UnaryOp::Sign: case UnaryOp::Square: case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round:
      return true;
    case UnaryOp::PowScalar: return at.a >= 0 && at.a == std::floor(at.a) && at.a < 64;
    default: return false;
  }
}

double unary_f(UnaryOp op, const UnaryAttrs& at, double x) {
  const double a = at.a, b = at.b;
  switch (op) {
    case UnaryOp::Identity: return x;
    case UnaryOp::Relu: return std::isnan(x) ? x : std::max(x, 0.0);
    case UnaryOp::Hardtanh:
    case UnaryOp::Clamp: return std::isnan(x) ? x : std::min(std::max(x, a), b);
    case UnaryOp::Hardswish: return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::Hardsigmoid: return std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryOp::Silu: return x / (1 + std::exp(-x));
    case UnaryOp::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1 / std::sqrt(x);
    case UnaryOp::Reciprocal: return 1 / x;
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Erf: return std::erf(x);
    // torch evaluates x^0.5 / x^-0.5 as sqrt / rsqrt, which differs from pow at -0 and -inf
    case UnaryOp::PowScalar: return a == 0.5 ? std::sqrt(x) : a == -0.5 ? 1 / std::sqrt(x) : std::pow(x, a);
    case UnaryOp::LeakyRelu: return x > 0 ? x : a * x;
    case UnaryOp::Elu: return x > 0 ? x : a * std::expm1(x);
    case UnaryOp::Softplus: return x * a > b ? x : std::log1p(std::exp(a * x)) / a;
    case UnaryOp::Mish: return x * std::tanh(std::log1p(std::exp(x)));
    case UnaryOp::LogicalNot: return x == 0;
    case UnaryOp::Sign: return std::isnan(x) ? x : x > 0 ? 1 : x < 0 ? -1 : x;
    case UnaryOp::Square: return x * x;
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Floor: return std::floor(x);
    case UnaryOp::Ceil: return std::ceil(x);
    case UnaryOp::Round: {
      const double r = std::round(x);  // half away from zero; fix ties to even
      if (std::fabs(x - std::trunc(x)) == 0.5) return 2 * std::round(x / 2);
      return r;
    }
  }
  DNNF_THROW("reference: unknown unary op");
}

int64_t clamp_bound(double v) {
  if (v >= 9.2e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

int64_t unary_i(UnaryOp op, const UnaryAttrs& at, int64_t x) {
  switch (op) {
    case UnaryOp::Relu: return std::max<int64_t>(x, 0);
    case UnaryOp::Hardtanh:
    case UnaryOp::Clamp: return std::min(std::max(x, clamp_bound(at.a)), clamp_bound(at.b));
    case UnaryOp::Neg: return mul_wrap(x, -1);
    case UnaryOp::Abs: return x < 0 ? mul_wrap(x, -1) : x;
    case UnaryOp::Sign: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case UnaryOp::Square: return mul_wrap(x, x);
    case UnaryOp::PowScalar: return ipow(x, static_cast<int64_t>(at.a));
    default: return x;  // floor / ceil / round of an integer
  }
}

}  // namespace

void unary(UnaryOp op, const UnaryAttrs& at, const std::vector<int64_t>& shape, const StridedArg& x, void* out,
           DType out_dtype) {
  const int64_t n = numel_of(shape);
  for (int64_t p = 0; p < n; ++p) {
    const Val v = load(x.data, x.dtype, offset_of(p, shape, x.strides));
    Val r;
    if (op == UnaryOp::Identity) {
      r = v;
    } else if (op == UnaryOp::LogicalNot) {
      r = ival(to_type(v, DType::Bool).i == 0);
    } else if (is_floating(out_dtype)) {
      const Val c = to_type(v, out_dtype);
      r = to_type(fval(unary_f(op, at, c.f)), out_dtype);
    } else if (unary_int_ok(op, at)) {
      r = ival(unary_i(op, at, to_type(v, DType::Int64).i));
    } else {
      r = fval(unary_f(op, at, to_type(v, DType::Float64).f));
    }
    store(out, out_dtype, p, r);
  }
}

void binary(BinaryOp op, double alpha, const std::vector<int64_t>& shape, const StridedArg& a, const StridedArg& b,
            void* out, DType out_dtype, DType compute_dtype) {
  require(compute_dtype);
  if ((op == BinaryOp::Div || op == BinaryOp::Atan2) && !is_floating(compute_dtype)) compute_dtype = DType::Float64;
  const bool fl = is_floating(compute_dtype);
  const int64_t n = numel_of(shape);
  for (int64_t p = 0; p < n; ++p) {
    const Val va = to_type(load(a.data, a.dtype, offset_of(p, shape, a.strides)), compute_dtype);
    const Val vb = to_type(load(b.data, b.dtype, offset_of(p, shape, b.strides)), compute_dtype);
    Val r;
    bool is_bool_result = false;
    bool cmp = false;
    if (fl) {
      const double x = va.f, y = vb.f;
      double z = 0;
      switch (op) {
        case BinaryOp::Add: z = x + alpha * y; break;
        case BinaryOp::Sub: z = x - alpha * y; break;
        case BinaryOp::Mul: z = x * y; break;
        case BinaryOp::Div: z = x / y; break;
        case BinaryOp::FloorDiv: z = py_floordiv(x, y); break;
        case BinaryOp::Pow: z = std::pow(x, y); break;
        case BinaryOp::Maximum: z = (std::isnan(x) || std::isnan(y)) ? NAN : std::max(x, y); break;
        case BinaryOp::Minimum: z = (std::isnan(x) || std::isnan(y)) ? NAN : std::min(x, y); break;
        case BinaryOp::Eq: is_bool_result = true; cmp = x == y; break;
        case BinaryOp::Ne: is_bool_result = true; cmp = x != y; break;
        case BinaryOp::Lt: is_bool_result = true; cmp = x < y; break;
        case BinaryOp::Le: is_bool_result = true; cmp = x <= y; break;
        case BinaryOp::Gt: is_bool_result = true; cmp = x > y; break;
        case BinaryOp::Ge: is_bool_result = true; cmp = x >= y; break;
        case BinaryOp::LogicalAnd: is_bool_result = true; cmp = x != 0 && y != 0; break;
        case BinaryOp::LogicalOr: is_bool_result = true; cmp = x != 0 || y != 0; break;
        case BinaryOp::Remainder: {
          z = std::fmod(x, y);
          if (z != 0 && ((y < 0) != (z < 0))) z += y;
          break;
        }
        case BinaryOp::Atan2: z = std::atan2(x, y); break;
        default: DNNF_THROW("reference: bitwise op on a floating compute dtype");
      }
      r = is_bool_result ? ival(cmp) : to_type(fval(z), compute_dtype);
    } else {
      const int64_t x = va.i, y = vb.i;
      int64_t z = 0;
      const int64_t al = static_cast<int64_t>(alpha);
      if (compute_dtype == DType::Bool &&
          (op == BinaryOp::Sub || op == BinaryOp::FloorDiv || op == BinaryOp::Remainder || op == BinaryOp::Pow))
        DNNF_THROW("reference: op not supported for bool");
      switch (op) {
        case BinaryOp::Add: z = static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(mul_wrap(al, y))); break;
        case BinaryOp::Sub: z = static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(mul_wrap(al, y))); break;
        case BinaryOp::Mul: z = mul_wrap(x, y); break;
        case BinaryOp::FloorDiv: {
          if (y == 0) DNNF_THROW("reference: integer division by zero");
          // floor of the exact rational x / y
          int64_t q = x / y;
          if (q * y != x && ((x < 0) != (y < 0))) q -= 1;
          z = q;
          break;
        }
        case BinaryOp::Remainder: {
          if (y == 0) DNNF_THROW("reference: integer division by zero");
          z = x - y * (x / y);
          if (z != 0 && ((z < 0) != (y < 0))) z += y;
          break;
        }
        case BinaryOp::Pow: z = ipow(x, y); break;
        case BinaryOp::Maximum: z = std::max(x, y); break;
        case BinaryOp::Minimum: z = std::min(x, y); break;
        case BinaryOp::Eq: is_bool_result = true; cmp = x == y; break;
        case BinaryOp::Ne: is_bool_result = true; cmp = x != y; break;
        case BinaryOp::Lt: is_bool_result = true; cmp = x < y; break;
        case BinaryOp::Le: is_bool_result = true; cmp = x <= y; break;
        case BinaryOp::Gt: is_bool_result = true; cmp = x > y; break;
        case BinaryOp::Ge: is_bool_result = true; cmp = x >= y; break;
        case BinaryOp::LogicalAnd: is_bool_result = true; cmp = x != 0 && y != 0; break;
        case BinaryOp::LogicalOr: is_bool_result = true; cmp = x != 0 || y != 0; break;
        case BinaryOp::BitwiseAnd: z = x & y; break;
        case BinaryOp::BitwiseOr: z = x | y; break;
        default: DNNF_THROW("reference: unreachable");
      }
      r = is_bool_result ? ival(cmp) : ival(wrap(z, compute_dtype));
    }
    store(out, out_dtype, p, r);
  }
}

void where(const std::vector<int64_t>& shape, const StridedArg& cond, const StridedArg& a, const StridedArg& b, void* out,
           DType out_dtype) {
  const int64_t n = numel_of(shape);
  for (int64_t p = 0; p < n; ++p) {
    const auto idx = unravel(p, shape);
    const bool c = to_type(load(cond.data, cond.dtype, dot(idx, cond.strides)), DType::Bool).i != 0;
    const Val v = c ? load(a.data, a.dtype, dot(idx, a.strides)) : load(b.data, b.dtype, dot(idx, b.strides));
    store(out, out_dtype, p, v);
  }
}

void reduce(ReduceOp op, const std::vector<int64_t>& shape, const std::vector<int64_t>& dims, const void* x,
            DType in_dtype, void* y, DType out_dtype, double correction) {
  const size_t rank = shape.size();
  std::vector<bool> red(rank, dims.empty());
  for (int64_t d : dims) red.at(static_cast<size_t>(d)) = true;
  std::vector<int64_t> oshape;
  for (size_t d = 0; d < rank; ++d)
    if (!red[d]) oshape.push_back(shape[d]);
  const int64_t n_out = numel_of(oshape), n_in = numel_of(shape);
  // bucket every input element by its output position
  std::vector<std::vector<Val>> groups(static_cast<size_t>(n_out));
  std::vector<std::vector<int64_t>> pos(static_cast<size_t>(n_out));  // position along the reduced axes
  for (int64_t p = 0; p < n_in; ++p) {
    const auto idx = unravel(p, shape);
    int64_t o = 0, rpos = 0;
    for (size_t d = 0; d < rank; ++d) {
      if (red[d]) rpos = rpos * shape[d] + idx[d];
      else o = o * shape[d] + idx[d];
    }
    groups[o].push_back(load(x, in_dtype, p));
    pos[o].push_back(rpos);
  }
  for (int64_t o = 0; o < n_out; ++o) {
    const auto& g = groups[o];
    const double cnt = static_cast<double>(g.size());
    Val r;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Prod: {
        if (is_integral(out_dtype)) {
          int64_t s = op == ReduceOp::Sum ? 0 : 1;
          for (const Val& v : g) {
            const int64_t vi = to_type(v, DType::Int64).i;
            s = op == ReduceOp::Sum ? static_cast<int64_t>(static_cast<uint64_t>(s) + static_cast<uint64_t>(vi))
                                    : mul_wrap(s, vi);
          }
          r = ival(s);
        } else {
          double s = op == ReduceOp::Sum ? 0 : 1;
          for (const Val& v : g) s = op == ReduceOp::Sum ? s + dbl(v) : s * dbl(v);
          r = fval(s);
        }
        break;
      }
      case ReduceOp::Mean:
      case ReduceOp::Var: {
        double s = 0;
        for (const Val& v : g) s += dbl(v);
        const double mean = g.empty() ? NAN : s / cnt;
        if (op == ReduceOp::Mean) {
          r = fval(mean);
        } else {
          double q = 0;
          for (const Val& v : g) q += (dbl(v) - mean) * (dbl(v) - mean);
          r = fval(q / std::max(0.0, cnt - correction));
        }
        break;
      }
      case ReduceOp::Max:
      case ReduceOp::Min: {
        if (g.empty()) DNNF_THROW("reference: max/min of empty");
        Val best = g[0];
        for (const Val& v : g) {
          if (best.fl && std::isnan(best.f)) break;
          if (v.fl && std::isnan(v.f)) { best = v; break; }
          const bool better = v.fl ? (op == ReduceOp::Max ? v.f > best.f : v.f < best.f)
                                   : (op == ReduceOp::Max ? v.i > best.i : v.i < best.i);
          if (better) best = v;
        }
        r = best;
        break;
      }
      case ReduceOp::ArgMax:
      case ReduceOp::ArgMin: {
        if (g.empty()) DNNF_THROW("reference: argmax of empty");
        size_t bi = 0;
        for (size_t k = 0; k < g.size(); ++k) {
          if (g[k].fl && std::isnan(g[k].f)) { bi = k; break; }
          const double v = dbl(g[k]), b = dbl(g[bi]);
          if (op == ReduceOp::ArgMax ? v > b : v < b) bi = k;
        }
        r = ival(pos[o][bi]);
        break;
      }
    }
    store(y, out_dtype, o, r);
  }
}

void cumsum(const std::vector<int64_t>& shape, int64_t dim, const void* x, DType in_dtype, void* y, DType out_dtype) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (dim < 0) dim += std::max<int64_t>(rank, 1);
  const auto st = contiguous_strides(shape);
  const int64_t n = numel_of(shape);
  for (int64_t p = 0; p < n; ++p) {
    const auto idx = unravel(p, shape);
    const int64_t k = rank == 0 ? 0 : idx[dim];
    const int64_t step = rank == 0 ? 0 : st[dim];
    if (is_integral(out_dtype)) {
      int64_t s = 0;
      for (int64_t j = 0; j <= k; ++j)
        s = static_cast<int64_t>(static_cast<uint64_t>(s) + static_cast<uint64_t>(to_type(load(x, in_dtype, p - (k - j) * step), DType::Int64).i));
      store(y, out_dtype, p, ival(s));
    } else {
      double s = 0;
      for (int64_t j = 0; j <= k; ++j) s += dbl(load(x, in_dtype, p - (k - j) * step));
      store(y, out_dtype, p, fval(s));
    }
  }
}

void softmax(const float* x, float* y, int64_t outer, int64_t dim, int64_t inner, bool log) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t d) { return (o * dim + d) * inner + i; };
      double m = -INFINITY;
      bool nan = false;
      for (int64_t d = 0; d < dim; ++d) {
        nan |= std::isnan(x[at(d)]);
        m = std::max(m, static_cast<double>(x[at(d)]));
      }
      double s = 0;
      for (int64_t d = 0; d < dim; ++d) s += std::exp(x[at(d)] - m);
      for (int64_t d = 0; d < dim; ++d) {
        const double v = log ? x[at(d)] - m - std::log(s) : std::exp(x[at(d)] - m) / s;
        y[at(d)] = nan ? NAN : static_cast<float>(v);
      }
    }
}

void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t rows, int64_t cols, float* y,
                float* mean, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, q = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    const double m = s / cols;
    for (int64_t c = 0; c < cols; ++c) q += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    const double rs = 1 / std::sqrt(q / cols + eps);
    if (mean) mean[r] = static_cast<float>(m);
    if (rstd) rstd[r] = static_cast<float>(rs);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = static_cast<float>((x[r * cols + c] - m) * rs * (weight ? weight[c] : 1.0) + (bias ? bias[c] : 0.0));
  }
}

void batch_norm_inference(const float* x, const float* running_mean, const float* running_var, const float* weight,
                          const float* bias, float eps, int64_t N, int64_t C, int64_t inner, float* y) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t p = (n * C + c) * inner + i;
        y[p] = static_cast<float>((x[p] - static_cast<double>(running_mean[c])) /
                                      std::sqrt(static_cast<double>(running_var[c]) + eps) * (weight ? weight[c] : 1.0) +
                                  (bias ? bias[c] : 0.0));
      }
}

void group_norm(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C, int64_t inner,
                int64_t G, float* y, float* mean, float* rstd) {
  const int64_t cpg = C / G;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s = 0, q = 0;
      const int64_t cnt = cpg * inner;
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c)
        for (int64_t i = 0; i < inner; ++i) s += x[(n * C + c) * inner + i];
      const double m = s / cnt;
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c)
        for (int64_t i = 0; i < inner; ++i) {
          const double d = x[(n * C + c) * inner + i] - m;
          q += d * d;
        }
      const double rs = 1 / std::sqrt(q / cnt + eps);
      if (mean) mean[n * G + g] = static_cast<float>(m);
      if (rstd) rstd[n * G + g] = static_cast<float>(rs);
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t p = (n * C + c) * inner + i;
          y[p] = static_cast<float>((x[p] - m) * rs * (weight ? weight[c] : 1.0) + (bias ? bias[c] : 0.0));
        }
    }
}

void strided_copy(size_t elem_size, const std::vector<int64_t>& shape, const void* src,
                  const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst) {
  const int64_t n = numel_of(shape), es = static_cast<int64_t>(elem_size);
  const size_t rank = shape.size();
  // The output in order, the source offset carried along like an odometer: constant folding
  // runs this over whole weights (a transposed 4096 x 16384 matrix), too often to divide per element.
  std::vector<int64_t> idx(rank, 0);
  int64_t off = src_offset;
  for (int64_t p = 0; p < n; ++p) {
    std::memcpy(static_cast<char*>(dst) + p * es, static_cast<const char*>(src) + off * es, elem_size);
    for (size_t k = rank; k-- > 0;) {
      off += src_strides[k];
      if (++idx[k] < shape[k]) break;
      off -= src_strides[k] * shape[k];
      idx[k] = 0;
    }
  }
}

void concat(size_t elem_size, const std::vector<const void*>& srcs, const std::vector<std::vector<int64_t>>& shapes,
            int64_t dim, void* dst) {
  // output shape from the non-legacy-empty inputs
  std::vector<int64_t> oshape;
  for (const auto& s : shapes)
    if (!(s.size() == 1 && s[0] == 0)) {
      oshape = s;
      break;
    }
  if (oshape.empty()) return;
  const int64_t rank = static_cast<int64_t>(oshape.size());
  if (dim < 0) dim += rank;
  oshape[dim] = 0;
  for (const auto& s : shapes)
    if (static_cast<int64_t>(s.size()) == rank) oshape[dim] += s[dim];
  const int64_t n = numel_of(oshape), es = static_cast<int64_t>(elem_size);
  for (int64_t p = 0; p < n; ++p) {
    auto idx = unravel(p, oshape);
    int64_t k = 0;
    for (;; ++k) {
      if (static_cast<int64_t>(shapes[k].size()) != rank) continue;
      if (idx[dim] < shapes[k][dim]) break;
      idx[dim] -= shapes[k][dim];
    }
    std::memcpy(static_cast<char*>(dst) + p * es,
                static_cast<const char*>(srcs[k]) + dot(idx, contiguous_strides(shapes[k])) * es, elem_size);
  }
}

void index_select(size_t elem_size, const void* src, int64_t outer, int64_t src_dim, int64_t inner, const void* idx,
                  DType idx_dtype, int64_t n_idx, void* dst) {
  const int64_t es = static_cast<int64_t>(elem_size);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n_idx; ++j) {
      int64_t v = idx_dtype == DType::Int64 ? static_cast<const int64_t*>(idx)[j] : static_cast<const int32_t*>(idx)[j];
      if (v < 0 || v >= src_dim)
        DNNF_THROW_AS(IndexOutOfRange, "index ", v, " is out of range for a dimension of size ", src_dim);
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(static_cast<char*>(dst) + ((o * n_idx + j) * inner + i) * es,
                    static_cast<const char*>(src) + ((o * src_dim + v) * inner + i) * es, elem_size);
    }
}

void gather(size_t elem_size, const void* src, const std::vector<int64_t>& src_shape, int64_t dim,
            const int64_t* index, const std::vector<int64_t>& shape, void* dst) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (dim < 0) dim += std::max<int64_t>(rank, 1);
  const auto sst = contiguous_strides(src_shape);
  const int64_t n = numel_of(shape), es = static_cast<int64_t>(elem_size);
  for (int64_t p = 0; p < n; ++p) {
    auto idx = unravel(p, shape);
    if (rank > 0) {
      const int64_t v = index[p];
      if (v < 0 || v >= src_shape[dim])
        DNNF_THROW("gather: index ", v, " is out of bounds for a dimension of size ", src_shape[dim]);
      idx[dim] = v;
    }
    std::memcpy(static_cast<char*>(dst) + p * es, static_cast<const char*>(src) + dot(idx, sst) * es, elem_size);
  }
}

void constant_pad(DType dtype, const void* src, const std::vector<int64_t>& src_shape, const std::vector<int64_t>& pads,
                  double value, void* dst) {
  const int64_t rank = static_cast<int64_t>(src_shape.size());
  std::vector<int64_t> oshape = src_shape, before(rank, 0);
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t d = rank - 1 - static_cast<int64_t>(k);
    before[d] = pads[2 * k];
    oshape[d] += pads[2 * k] + pads[2 * k + 1];
  }
  const auto sst = contiguous_strides(src_shape);
  const int64_t n = numel_of(oshape);
  for (int64_t p = 0; p < n; ++p) {
    auto idx = unravel(p, oshape);
    bool inside = true;
    for (int64_t d = 0; d < rank; ++d) {
      idx[d] -= before[d];
      inside = inside && idx[d] >= 0 && idx[d] < src_shape[d];
    }
    store(dst, dtype, p, inside ? load(src, dtype, dot(idx, sst)) : fval(value));
  }
}

void fill(DType dtype, double value, int64_t n, void* dst) {
  for (int64_t p = 0; p < n; ++p) store(dst, dtype, p, fval(value));
}

void arange(DType dtype, double start, double step, int64_t n, void* dst) {
  for (int64_t p = 0; p < n; ++p) {
    if (is_integral(dtype) && dtype != DType::Bool)
      store(dst, dtype, p, ival(static_cast<int64_t>(start) + p * static_cast<int64_t>(step)));
    else
      store(dst, dtype, p, fval(start + static_cast<double>(p) * step));
  }
}

}  // namespace dnnfusion::reference
