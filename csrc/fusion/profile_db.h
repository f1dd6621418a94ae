// DNNFusion's profile database: measured times of yellow Table-3 cells, fused vs.
// separate, keyed by machine signature, op-type pair and shapes, persisted on disk so that only the
// first compile on a machine measures and later ones (or other machines of the same kind, sharing
// the file) look up. This file stores and retrieves; measuring is the pipeline's business.
//
// Storage (format, corruption handling, atomic merging saves, thread safety): common/
// keyed_file_store.h, with magic "dnnfusion-profile-db" and rows <fused_us> <separate_us>.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/keyed_file_store.h"

namespace dnnfusion::fusion {

class ProfileDb {
 public:
  struct Entry {
    double fused_us = 0;
    double separate_us = 0;
    bool fused_is_faster() const { return fused_us < separate_us; }
    // The planner's yellow decision: fuse unless fusing measured slower beyond `margin` (timing
    // noise); an equal-cost fusion saves a launch and lets green neighbours join afterwards.
    bool fusing_not_slower(double margin = 0.03) const { return fused_us <= (1.0 + margin) * separate_us; }
  };

  static constexpr int kVersion = 1;

  // What measured times are specific to: CPU brand and model, the ISA the kernels dispatch on, and
  // the thread count. Tabs and newlines never appear in it.
  static std::string machine_signature(int threads);
  // $DNNFUSION_PROFILE_DB if set and non-empty, else $XDG_CACHE_HOME/dnnfusion/profile_db.txt, else
  // $HOME/.cache/dnnfusion/profile_db.txt (./.dnnfusion_profile_db.txt without a HOME).
  static std::string default_path();
  // "<signature> | <op_a> -> <op_b> | <shape>;<shape>... | <detail>". `detail` carries whatever
  // else distinguishes two measurements (attributes, dtypes: e.g. codegen::yellow_key).
  static std::string make_key(const std::string& signature, const std::string& op_a, const std::string& op_b,
                              const std::vector<std::vector<int64_t>>& shapes, const std::string& detail = "");

  // Loads `path` (see the header comment for missing and corrupt files).
  explicit ProfileDb(std::string path);

  const std::string& path() const { return store_.path(); }
  std::optional<Entry> lookup(const std::string& key) const;
  void store(const std::string& key, Entry e);
  size_t size() const;
  // Writes the database, creating missing directories. Throws dnnfusion::Error if the file cannot
  // be written (the in-memory entries stay usable).
  void save();

 private:
  KeyedFileStore store_;
};

}  // namespace dnnfusion::fusion
