// Data movement. strided_copy collapses dims that form one linear run in the source, then picks:
// one memcpy (contiguous), memcpy per row (last dim contiguous), 32x32 tiles (the last two dims
// transposed: the source's unit stride is on the second-to-last dim), or a typed strided row
// loop. Rows are walked with an incremental multi-index so short rows do not pay div/mod.
#include "kernels/cpu/data_movement.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/error.h"

namespace dnnfusion::kernels {
namespace {

constexpr int64_t kCopyGrainBytes = 1 << 16;

// Incremental walk over the multi-index of `shape` (row-major), keeping a strided offset.
struct OuterWalk {
  const std::vector<int64_t>& shape;
  const std::vector<int64_t>& stride;
  std::vector<int64_t> idx;
  int64_t off = 0;
  OuterWalk(const std::vector<int64_t>& sh, const std::vector<int64_t>& st, int64_t start) : shape(sh), stride(st) {
    idx.assign(sh.size(), 0);
    for (int64_t d = static_cast<int64_t>(sh.size()) - 1; d >= 0; --d) {
      idx[d] = start % sh[d];
      start /= sh[d];
      off += idx[d] * st[d];
    }
  }
  void next() {
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      off += stride[d];
      if (++idx[d] < shape[d]) return;
      off -= idx[d] * stride[d];
      idx[d] = 0;
    }
  }
};

template <size_t N>
struct Bytes {
  unsigned char b[N];
};
template <class F>
void by_elem_size(size_t es, F&& f) {
  switch (es) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    case 16: return f(Bytes<16>{});
    default: return f(static_cast<void*>(nullptr));  // generic: memcpy per element
  }
}

template <class T>
void copy_strided_row(const char* s, int64_t ss, char* d, int64_t n, size_t es) {
  if constexpr (std::is_pointer_v<T>) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * es, s + i * ss * static_cast<int64_t>(es), es);
  } else {
    const T* sp = reinterpret_cast<const T*>(s);
    T* dp = reinterpret_cast<T*>(d);
    for (int64_t i = 0; i < n; ++i) dp[i] = sp[i * ss];
  }
}

template <class Body>
void split(int64_t n, int64_t bytes_per_item, const Parallel& par, Body&& body) {
  const int64_t grain = std::max<int64_t>(1, kCopyGrainBytes / std::max<int64_t>(bytes_per_item, 1));
  if (n <= grain) body(int64_t{0}, n);
  else par.parallel_for(n, grain, body);
}

bool supported(DType t) { return t != DType::Float16 && t != DType::BFloat16; }

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

template <class T>
constexpr DType dtype_of_int() {
  if constexpr (std::is_same_v<T, int64_t>) return DType::Int64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::Int32;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::UInt8;
  else return DType::Int8;
}

// value -> T with torch's checks: integral targets need a finite value that fits.
template <class T>
T scalar_to(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    DNNF_CHECK(std::isfinite(v) && v >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                   v <= static_cast<double>(std::numeric_limits<T>::max()),
               "value ", v, " cannot be converted to integral dtype ", dtype_name(dtype_of_int<T>()),
               " without overflow");
    return static_cast<T>(static_cast<int64_t>(v));
  }
}

}  // namespace

void strided_copy(size_t elem_size, const std::vector<int64_t>& shape, const void* src,
                  const std::vector<int64_t>& src_strides, int64_t src_offset, void* dst, const Parallel& par) {
  DNNF_CHECK(elem_size > 0, "strided_copy: elem_size must be > 0");
  DNNF_CHECK(shape.size() == src_strides.size(), "strided_copy: shape has rank ", shape.size(), " but src_strides has ",
             src_strides.size(), " entries; they must match");
  int64_t numel = 1;
  for (int64_t s : shape) {
    DNNF_CHECK(s >= 0, "strided_copy: negative size ", s);
    numel *= s;
  }
  if (numel == 0) return;
  const int64_t es = static_cast<int64_t>(elem_size);
  const char* s0 = static_cast<const char*>(src) + src_offset * es;
  char* d0 = static_cast<char*>(dst);
  // collapse: innermost first
  std::vector<int64_t> cs, cst;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (!cs.empty() && src_strides[d] == cst.back() * cs.back()) cs.back() *= shape[d];
    else {
      cs.push_back(shape[d]);
      cst.push_back(src_strides[d]);
    }
  }
  std::reverse(cs.begin(), cs.end());
  std::reverse(cst.begin(), cst.end());
  const int64_t nd = static_cast<int64_t>(cs.size());
  if (nd == 0) {
    std::memcpy(d0, s0, elem_size);
    return;
  }
  if (nd == 1 && cst[0] == 1) {
    const int64_t bytes = numel * es, chunk = 1 << 18;
    split((bytes + chunk - 1) / chunk, chunk, par, [&](int64_t b, int64_t e) {
      const int64_t lo = b * chunk, hi = std::min(bytes, e * chunk);
      std::memcpy(d0 + lo, s0 + lo, static_cast<size_t>(hi - lo));
    });
    return;
  }
  const int64_t L = cs[nd - 1], Ls = cst[nd - 1];
  if (Ls == 1) {  // rows contiguous in the source
    const std::vector<int64_t> osh(cs.begin(), cs.end() - 1), ost(cst.begin(), cst.end() - 1);
    const int64_t rows = numel / L;
    split(rows, L * es, par, [&](int64_t b, int64_t e) {
      OuterWalk w(osh, ost, b);
      for (int64_t r = b; r < e; ++r, w.next()) std::memcpy(d0 + r * L * es, s0 + w.off * es, static_cast<size_t>(L * es));
    });
    return;
  }
  if (nd >= 2 && cst[nd - 2] == 1 && (es == 4 || es == 8 || es == 2 || es == 1)) {
    // transpose of the last two dims: dst[a][b] = src[a + b * Ls]; 32x32 tiles keep both sides
    // in cache lines
    constexpr int64_t T = 32;
    const int64_t A = cs[nd - 2];
    const std::vector<int64_t> osh(cs.begin(), cs.end() - 2), ost(cst.begin(), cst.end() - 2);
    const int64_t batches = numel / (A * L), ta = (A + T - 1) / T;
    by_elem_size(elem_size, [&](auto tag) {
      using E = decltype(tag);
      if constexpr (std::is_integral_v<E>) {
        split(batches * ta, T * L * es, par, [&](int64_t b, int64_t e) {
          OuterWalk w(osh, ost, b / ta);
          int64_t cur = b / ta;
          for (int64_t t = b; t < e; ++t) {
            while (cur < t / ta) {
              w.next();
              ++cur;
            }
            const int64_t a0 = (t % ta) * T, a1 = std::min(A, a0 + T);
            const E* sb = reinterpret_cast<const E*>(s0) + w.off;
            E* db = reinterpret_cast<E*>(d0) + cur * A * L;
            for (int64_t b0 = 0; b0 < L; b0 += T) {
              const int64_t b1 = std::min(L, b0 + T);
              for (int64_t a = a0; a < a1; ++a)
                for (int64_t bb = b0; bb < b1; ++bb) db[a * L + bb] = sb[a + bb * Ls];
            }
          }
        });
      }
    });
    return;
  }
  // generic: strided rows
  const std::vector<int64_t> osh(cs.begin(), cs.end() - 1), ost(cst.begin(), cst.end() - 1);
  const int64_t rows = numel / L;
  by_elem_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    split(rows, L * es, par, [&](int64_t b, int64_t e) {
      OuterWalk w(osh, ost, b);
      for (int64_t r = b; r < e; ++r, w.next()) copy_strided_row<E>(s0 + w.off * es, Ls, d0 + r * L * es, L, elem_size);
    });
  });
}

void concat(size_t elem_size, const std::vector<const void*>& srcs, const std::vector<std::vector<int64_t>>& shapes,
            int64_t dim, void* dst, const Parallel& par) {
  DNNF_CHECK(elem_size > 0, "concat: elem_size must be > 0");
  DNNF_CHECK(srcs.size() == shapes.size(), "concat: ", srcs.size(), " sources but ", shapes.size(), " shapes");
  // the reference shape: first input that is not a legacy empty 1-D [0]
  auto legacy_empty = [](const std::vector<int64_t>& s) { return s.size() == 1 && s[0] == 0; };
  const std::vector<int64_t>* ref = nullptr;
  for (const auto& s : shapes)
    if (!legacy_empty(s)) {
      ref = &s;
      break;
    }
  if (!ref) return;  // everything empty
  const int64_t rank = static_cast<int64_t>(ref->size());
  DNNF_CHECK(rank > 0, "concat: zero-dimensional inputs cannot be concatenated");
  DNNF_CHECK(dim >= -rank && dim < rank, "concat: dim ", dim, " out of range for rank ", rank, "; allowed [", -rank,
             ", ", rank, ")");
  if (dim < 0) dim += rank;
  int64_t outer = 1, inner = 1, total = 0;
  for (int64_t d = 0; d < dim; ++d) outer *= (*ref)[d];
  for (int64_t d = dim + 1; d < rank; ++d) inner *= (*ref)[d];
  std::vector<int64_t> chunk(srcs.size(), 0);  // bytes per outer slice, 0 for skipped inputs
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto& s = shapes[k];
    if (legacy_empty(s) && rank != 1) continue;
    DNNF_CHECK(static_cast<int64_t>(s.size()) == rank, "concat: input ", k, " has rank ", s.size(), ", expected ", rank);
    for (int64_t d = 0; d < rank; ++d)
      DNNF_CHECK(d == dim || s[d] == (*ref)[d], "concat: input ", k, " has size ", s[d], " at dim ", d, ", expected ",
                 (*ref)[d], " (all dims except the concat dim must match)");
    chunk[k] = s[dim] * inner * static_cast<int64_t>(elem_size);
    total += chunk[k];
  }
  if (total == 0 || outer == 0) return;
  char* d0 = static_cast<char*>(dst);
  const int64_t n_in = static_cast<int64_t>(srcs.size());
  split(outer * n_in, total / n_in + 1, par, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / n_in, k = t % n_in;
      if (chunk[k] == 0) continue;
      int64_t before = 0;
      for (int64_t j = 0; j < k; ++j) before += chunk[j];
      std::memcpy(d0 + o * total + before, static_cast<const char*>(srcs[k]) + o * chunk[k], static_cast<size_t>(chunk[k]));
    }
  });
}

void index_select(size_t elem_size, const void* src, int64_t outer, int64_t src_dim, int64_t inner, const void* idx,
                  DType idx_dtype, int64_t n_idx, void* dst, const Parallel& par) {
  DNNF_CHECK(elem_size > 0, "index_select: elem_size must be > 0");
  DNNF_CHECK(outer >= 0 && src_dim >= 0 && inner >= 0 && n_idx >= 0, "index_select: extents must be >= 0");
  DNNF_CHECK(idx_dtype == DType::Int64 || idx_dtype == DType::Int32, "index_select: index dtype must be int64 or int32, got ",
             dtype_name(idx_dtype));
  // validate + normalise first so an error is deterministic and the copy loop is branch-free
  std::vector<int64_t> ix(static_cast<size_t>(n_idx));
  for (int64_t j = 0; j < n_idx; ++j) {
    const int64_t v = idx_dtype == DType::Int64 ? static_cast<const int64_t*>(idx)[j] : static_cast<const int32_t*>(idx)[j];
    // As eager: index_select and embedding take no negative indices.
    if (v < 0 || v >= src_dim)
      DNNF_THROW_AS(IndexOutOfRange, "index ", v, " is out of range for a dimension of size ", src_dim, " (allowed: 0 to ",
                    src_dim - 1, ")");
    ix[j] = v;
  }
  const int64_t row = inner * static_cast<int64_t>(elem_size);
  if (row == 0 || outer == 0) return;
  const char* s0 = static_cast<const char*>(src);
  char* d0 = static_cast<char*>(dst);
  split(outer * n_idx, row, par, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / n_idx, j = t % n_idx;
      std::memcpy(d0 + t * row, s0 + (o * src_dim + ix[j]) * row, static_cast<size_t>(row));
    }
  });
}

void gather(size_t elem_size, const void* src, const std::vector<int64_t>& src_shape, int64_t dim,
            const int64_t* index, const std::vector<int64_t>& shape, void* dst, const Parallel& par) {
  DNNF_CHECK(elem_size > 0, "gather: elem_size must be > 0");
  const int64_t rank = static_cast<int64_t>(shape.size());
  DNNF_CHECK(static_cast<int64_t>(src_shape.size()) == rank, "gather: index has rank ", rank, " but src has rank ",
             src_shape.size(), "; they must match");
  const int64_t r = std::max<int64_t>(rank, 1);
  DNNF_CHECK(dim >= -r && dim < r, "gather: dim ", dim, " out of range for rank ", rank, "; allowed [", -r, ", ", r, ")");
  if (dim < 0) dim += r;
  int64_t numel = 1;
  for (int64_t d = 0; d < rank; ++d) {
    DNNF_CHECK(shape[d] >= 0, "gather: negative index size");
    DNNF_CHECK(d == dim || shape[d] <= src_shape[d], "gather: index size ", shape[d], " at dim ", d,
               " exceeds src size ", src_shape[d], " (allowed only along dim ", dim, ")");
    numel *= shape[d];
  }
  if (numel == 0) return;
  // src strides; the walk runs over the index shape with dim's stride zeroed (added per element)
  std::vector<int64_t> sst(static_cast<size_t>(rank), 1);
  for (int64_t d = rank - 2; d >= 0; --d) sst[d] = sst[d + 1] * src_shape[d + 1];
  const int64_t dsize = rank == 0 ? 1 : src_shape[dim];
  const int64_t dstride = rank == 0 ? 0 : sst[dim];
  if (rank == 0) {
    if (index[0] != 0) DNNF_THROW("gather: index ", index[0], " is out of bounds for size 1");
    std::memcpy(dst, src, elem_size);
    return;
  }
  std::vector<int64_t> wst = sst;
  wst[dim] = 0;
  const std::vector<int64_t> osh(shape.begin(), shape.end() - 1), ost(wst.begin(), wst.end() - 1);
  const int64_t L = shape[rank - 1], Ls = wst[rank - 1];
  const int64_t es = static_cast<int64_t>(elem_size);
  const char* s0 = static_cast<const char*>(src);
  char* d0 = static_cast<char*>(dst);
  split(numel / L, L * es, par, [&](int64_t b, int64_t e) {
    OuterWalk w(osh, ost, b);
    for (int64_t rr = b; rr < e; ++rr, w.next()) {
      const int64_t* ir = index + rr * L;
      char* dr = d0 + rr * L * es;
      for (int64_t i = 0; i < L; ++i) {
        int64_t v = ir[i];
        if (v < 0 || v >= dsize)  // as eager: no negative indices, and a RuntimeError (not IndexError)
          DNNF_THROW("gather: index ", v, " is out of bounds for dimension ", dim, " with size ",
                        dsize, " (allowed: 0 to ", dsize - 1, ")");
        std::memcpy(dr + i * es, s0 + (w.off + i * Ls + v * dstride) * es, elem_size);
      }
    }
  });
}

void constant_pad(DType dtype, const void* src, const std::vector<int64_t>& src_shape, const std::vector<int64_t>& pads,
                  double value, void* dst, const Parallel& par) {
  DNNF_CHECK(supported(dtype), "constant_pad: unsupported dtype ", dtype_name(dtype),
             "; supported: float32, float64, int64, int32, bool, uint8, int8");
  const int64_t rank = static_cast<int64_t>(src_shape.size());
  DNNF_CHECK(pads.size() % 2 == 0, "constant_pad: pads must have an even length, got ", pads.size());
  DNNF_CHECK(static_cast<int64_t>(pads.size()) <= 2 * rank, "constant_pad: ", pads.size(), " pad values for rank ", rank,
             "; at most 2*rank allowed");
  std::vector<int64_t> before(static_cast<size_t>(rank), 0), osh = src_shape;
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t d = rank - 1 - static_cast<int64_t>(k);
    before[d] = pads[2 * k];
    osh[d] = src_shape[d] + pads[2 * k] + pads[2 * k + 1];
    DNNF_CHECK(osh[d] >= 0, "constant_pad: dim ", d, " of size ", src_shape[d], " padded by (", pads[2 * k], ", ",
               pads[2 * k + 1], ") would have negative size ", osh[d]);
  }
  int64_t numel = 1;
  for (int64_t s : osh) numel *= s;
  if (numel == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = scalar_to<T>(value);
    const T* s0 = static_cast<const T*>(src);
    T* d0 = static_cast<T*>(dst);
    if (rank == 0) {
      d0[0] = s0[0];
      return;
    }
    std::vector<int64_t> sst(static_cast<size_t>(rank), 1);
    for (int64_t d = rank - 2; d >= 0; --d) sst[d] = sst[d + 1] * src_shape[d + 1];
    const int64_t W = osh[rank - 1], SW = src_shape[rank - 1], bw = before[rank - 1];
    // columns of an output row that come from the source
    const int64_t c0 = std::clamp<int64_t>(bw, 0, W), c1 = std::clamp<int64_t>(bw + SW, 0, W);
    const int64_t rows = numel / W;
    split(rows, W * static_cast<int64_t>(sizeof(T)), par, [&](int64_t b, int64_t e) {
      std::vector<int64_t> idx(static_cast<size_t>(rank - 1), 0);
      int64_t rem = b;
      for (int64_t d = rank - 2; d >= 0; --d) {
        idx[d] = rem % osh[d];
        rem /= osh[d];
      }
      for (int64_t r = b; r < e; ++r) {
        T* dr = d0 + r * W;
        bool inside = c1 > c0;
        int64_t soff = 0;
        for (int64_t d = 0; d < rank - 1 && inside; ++d) {
          const int64_t si = idx[d] - before[d];
          inside = si >= 0 && si < src_shape[d];
          soff += si * sst[d];
        }
        if (!inside) {
          for (int64_t i = 0; i < W; ++i) dr[i] = v;
        } else {
          for (int64_t i = 0; i < c0; ++i) dr[i] = v;
          std::memcpy(dr + c0, s0 + soff + (c0 - bw), static_cast<size_t>(c1 - c0) * sizeof(T));
          for (int64_t i = c1; i < W; ++i) dr[i] = v;
        }
        for (int64_t d = rank - 2; d >= 0; --d) {
          if (++idx[d] < osh[d]) break;
          idx[d] = 0;
        }
      }
    });
  });
}

void fill(DType dtype, double value, int64_t n, void* dst, const Parallel& par) {
  DNNF_CHECK(n >= 0, "fill: negative count ", n);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = scalar_to<T>(value);
    T* d = static_cast<T*>(dst);
    split(n, static_cast<int64_t>(sizeof(T)), par, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = v;
    });
  });
}

void arange(DType dtype, double start, double step, int64_t n, void* dst) {
  DNNF_CHECK(n >= 0, "arange: negative count ", n);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst);
    if constexpr (std::is_floating_point_v<T>) {
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(start + static_cast<double>(i) * step);
    } else if constexpr (std::is_same_v<T, bool>) {
      for (int64_t i = 0; i < n; ++i) d[i] = (start + static_cast<double>(i) * step) != 0;
    } else {
      const int64_t s = static_cast<int64_t>(start), st = static_cast<int64_t>(step);
      DNNF_CHECK(static_cast<double>(s) == start && static_cast<double>(st) == step,
                 "arange: integral dtype needs integral start and step; got ", start, ", ", step);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(s + i * st);
    }
  });
}

}  // namespace dnnfusion::kernels
