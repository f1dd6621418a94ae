// What code generation made of one fusion block, for reports (explain(), the fusion benchmark):
// which steps it runs and what it writes to memory for its own use.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dnnfusion::codegen {

struct BlockReport {
  int block = -1;
  std::vector<int> nodes;
  std::string type;                // the block's mapping type
  int dominant = -1;               // node id or -1
  std::vector<std::string> steps;  // "loop", "prologue+kernel+epilogue", "kernel", "alias"...
  int64_t internal_bytes = 0;      // bytes the block materializes for its own use (not block outputs)
};

}  // namespace dnnfusion::codegen
