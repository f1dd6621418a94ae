#include "common/dtype.h"

#include "common/error.h"

namespace dnnfusion {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Int32: return 4;
    case DType::Bool: return 1;
    case DType::UInt8: return 1;
    case DType::Int8: return 1;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Int32: return "int32";
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  for (int i = 0; i <= static_cast<int>(DType::BFloat16); ++i) {
    auto t = static_cast<DType>(i);
    if (n == dtype_name(t)) return t;
  }
  DNNF_THROW("unknown dtype '", n, "'; allowed: float32, float64, int64, int32, bool, uint8, int8, float16, bfloat16");
}

}  // namespace dnnfusion
