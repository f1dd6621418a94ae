// A one-line progress bar on stderr for long compile-time work (yellow-cell profiling, conv
// tuning): users see that the compile is measuring, not hung.
#pragma once
#include <cstddef>
#include <cstdio>

namespace dnnfusion {

inline void progress_bar(const char* what, size_t done, size_t total) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[dnnfusion] %s [%.*s%*s] %zu/%zu", what, filled, "##############################",
               width - filled, "", done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace dnnfusion
