// REQUIRE_OPENCL() for the tests that need an OpenCL platform (the fpga target's runtime and
// datapath): without one the test fails, naming why — CI installs PoCL, so a missing platform there
// is a broken set-up, not a pass — unless DNNFUSION_SKIP_OPENCL_TESTS=1 asks for a skip.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "target/fpga/opencl/opencl_runtime.h"

namespace dnnfusion::test_util {

inline bool opencl_skip_allowed() {
  const char* v = std::getenv("DNNFUSION_SKIP_OPENCL_TESTS");
  return v && std::string(v) == "1";
}

}  // namespace dnnfusion::test_util

#define REQUIRE_OPENCL()                                                                                    \
  do {                                                                                                      \
    if (const std::string why = ::dnnfusion::fpga::opencl::opencl_unavailable_reason(); !why.empty()) {     \
      if (::dnnfusion::test_util::opencl_skip_allowed()) GTEST_SKIP() << why;                               \
      FAIL() << "OpenCL is not usable: " << why                                                             \
             << " (CI installs PoCL with scripts/setup.sh; DNNFUSION_SKIP_OPENCL_TESTS=1 skips these tests)"; \
    }                                                                                                       \
  } while (0)
