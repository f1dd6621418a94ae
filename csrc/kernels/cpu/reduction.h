// Reductions (sum, mean, max, min, prod, var, argmax, argmin) and cumsum over contiguous tensors.
//
// Preconditions: x is contiguous row-major of `shape`; dims are sorted, unique and in
// [0, rank) (empty = all dims); y is contiguous with shape = `shape` minus the reduced axes
// (keepdim only changes the shape, not the memory). Supported dtypes: Float32, Float64, Int64,
// Int32, Bool, UInt8, Int8 (Float16/BFloat16 throw).
// Accumulation: Sum/Prod accumulate in int64 when out_dtype is integral, else in double;
// Mean/Var in double (Var is two-pass: mean, then squared deviations, divided by
// max(0, n - correction)); Max/Min compare in the input dtype and propagate NaN; ArgMax/ArgMin
// take exactly one axis (or none = flattened), treat NaN as the extreme value, return the first
// occurrence, and always write int64 (out_dtype must be Int64). Max/Min/ArgMax/ArgMin over an
// empty axis throw; Sum gives 0, Prod 1, Mean/Var NaN.
// Postconditions: y holds the reduction converted to out_dtype; results do not depend on the
// number of threads.
#pragma once
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

enum class ReduceOp : int8_t { Sum, Mean, Max, Min, Prod, Var /*with correction*/, ArgMax, ArgMin };

void reduce(ReduceOp op, const std::vector<int64_t>& shape, const std::vector<int64_t>& dims, const void* x,
            DType in_dtype, void* y, DType out_dtype, double correction, const Parallel& par);

// Inclusive prefix sum along `dim` (negative wraps); x and y contiguous of `shape`. Floating
// outputs accumulate in double, integral outputs in int64, like torch.
void cumsum(const std::vector<int64_t>& shape, int64_t dim, const void* x, DType in_dtype, void* y, DType out_dtype,
            const Parallel& par);

}  // namespace dnnfusion::kernels
