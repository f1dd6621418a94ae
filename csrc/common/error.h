// Error reporting for the core: every failure is a dnnfusion::Error (a std::runtime_error) whose
// message names what went wrong; the Python bridge turns it into a Python exception.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace dnnfusion {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
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
#define DNNF_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) DNNF_THROW("check failed: " #cond ": ", ::dnnfusion::detail::str_cat(__VA_ARGS__)); \
  } while (0)
