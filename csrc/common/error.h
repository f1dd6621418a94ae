// Error reporting for the core: every failure is a dnnfusion::Error (a std::runtime_error) whose
// message names what went wrong. The kinds a caller acts on differently are subclasses, and the
// Python bridge raises each as its own exception class (dnnfusion.CompilerNotFound, ...), so no
// caller recognizes an error by its message text.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace dnnfusion {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// No system compiler for generated code: a set-up problem the user must fix (not a fallback).
struct CompilerNotFound : Error {
  using Error::Error;
};
// The system compiler ran past $DNNFUSION_COMPILE_TIMEOUT on generated code and was killed: a
// machine too slow or loaded for the limit (raise it), or a compiler that hangs.
struct CompilerTimeout : Error {
  using Error::Error;
};
// An op (or an argument of one) that the chosen target does not run.
struct UnsupportedOp : Error {
  using Error::Error;
};
// A registered target that this machine cannot run (no device, driver or toolchain).
struct TargetUnavailable : Error {
  using Error::Error;
};
// A target name nobody registered.
struct UnknownTarget : Error {
  using Error::Error;
};
// Bad input from the caller: an option value, a tensor of the wrong shape/dtype/device.
struct InvalidInput : Error {
  using Error::Error;
};
// An index tensor's value outside the dimension it indexes (embedding, index_select), found at run
// time: eager raises IndexError for these, and so does the bridge (gather's is a RuntimeError).
struct IndexOutOfRange : InvalidInput {
  using InvalidInput::InvalidInput;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace dnnfusion

#define DNNF_THROW(...) throw ::dnnfusion::Error(::dnnfusion::detail::str_cat(__VA_ARGS__))
// Throws one of the Error subclasses above: DNNF_THROW_AS(InvalidInput, "...", x).
#define DNNF_THROW_AS(Kind, ...) throw ::dnnfusion::Kind(::dnnfusion::detail::str_cat(__VA_ARGS__))
#define DNNF_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) DNNF_THROW("check failed: " #cond ": ", ::dnnfusion::detail::str_cat(__VA_ARGS__)); \
  } while (0)
