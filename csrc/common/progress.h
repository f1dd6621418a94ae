// A one-line progress bar on stderr for long compile-time work (yellow-cell profiling, conv
// tuning): users see that the compile is measuring, not hung. When stderr is not a terminal (CI
// logs, files) the carriage-return redraws would pile up into one huge line, so only the start,
// every further tenth and the end are printed, one line each.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdio>

namespace dnnfusion {

inline void progress_bar(const char* what, size_t done, size_t total) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  static const bool tty = isatty(fileno(stderr)) != 0;
  if (!tty) {
    const size_t tenth = total ? (10 * done) / total : 10;
    const size_t prev = total && done ? (10 * (done - 1)) / total : static_cast<size_t>(-1);
    if (done != 0 && done != total && tenth == prev) return;
    std::fprintf(stderr, "[dnnfusion] %s [%.*s%*s] %zu/%zu\n", what, filled, "##############################",
                 width - filled, "", done, total);
    std::fflush(stderr);
    return;
  }
  std::fprintf(stderr, "\r[dnnfusion] %s [%.*s%*s] %zu/%zu", what, filled, "##############################",
               width - filled, "", done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace dnnfusion
