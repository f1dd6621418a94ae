// The convolution tuning database (NeoCPU §3.3 local search results): for a convolution workload on
// a machine and a pair of channel blocks (input layout NCHW[ic_bn]c, output layout NCHW[oc_bn]c),
// the fastest kernel knobs found and their measured time. Tuning fills it once; compiles on the
// same kind of machine (or sharing the file) read it. Keys carry the CPU brand, the ISA the
// kernels dispatch on and the thread count, so a file copied to another machine only answers for
// workloads tuned there.
// Storage (format, corruption handling, atomic merging saves, thread safety): common/
// keyed_file_store.h, magic "dnnfusion-tuning-db", rows <reg_n> <unroll_ker 0|1> <microseconds>.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "common/keyed_file_store.h"
#include "kernels/cpu/conv2d.h"

namespace dnnfusion::layout {

class TuningDb {
 public:
  struct Entry {
    int reg_n = 0;
    bool unroll_ker = false;
    double us = 0;  // measured time of one call with these knobs
  };
  static constexpr int kVersion = 1;

  // $DNNFUSION_TUNING_DB if set and non-empty, else $XDG_CACHE_HOME/dnnfusion/tuning_db.txt, else
  // $HOME/.cache/dnnfusion/tuning_db.txt.
  static std::string default_path();
  // "<cpu brand> | isa <isa> | threads <n> | conv N,C,H,W,K,R,S,stride,pad,dil,groups | ic_bn x oc_bn"
  static std::string make_key(const kernels::Conv2dShape& s, int ic_bn, int oc_bn, int threads);

  explicit TuningDb(std::string path);
  const std::string& path() const { return store_.path(); }
  std::optional<Entry> lookup(const std::string& key) const;
  // Throws dnnfusion::Error for knobs out of range or a negative / non-finite time.
  void store(const std::string& key, const Entry& e);
  size_t size() const { return store_.size(); }
  // Throws dnnfusion::Error if the file cannot be written.
  void save() { store_.save(); }

 private:
  KeyedFileStore store_;
};

}  // namespace dnnfusion::layout
