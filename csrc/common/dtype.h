// Element types the core understands. Plain C++17, no torch: the bridge in csrc/python maps
// torch scalar types onto these.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace dnnfusion {

enum class DType : int8_t { Float32 = 0, Float64, Int64, Int32, Bool, UInt8, Int8, Float16, BFloat16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses a name as printed by dtype_name ("float32", "int64", ...); throws on an unknown name.
DType dtype_from_name(const std::string& name);
inline bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
inline bool is_integral(DType t) { return !is_floating(t); }  // Bool counts as integral here

}  // namespace dnnfusion
