// DNNFusion's profile database (DESIGN.md §5): measured times of yellow Table-3 cells, fused vs.
// separate, keyed by machine signature, op-type pair and shapes, persisted on disk so that only the
// first compile on a machine measures and later ones (or other machines of the same kind, sharing
// the file) look up. This file stores and retrieves; measuring is the pipeline's business.
//
// On-disk format (text, one entry per line, versioned and checksummed):
//   dnnfusion-profile-db <version>
//   entries <count> checksum <16 hex digits, FNV-1a 64 over the entry lines>
//   <key> TAB <fused_us> TAB <separate_us>
// Precondition: keys contain no tab or newline (make_key replaces them). Postconditions: a missing
// file is an empty database; an unreadable or inconsistent one prints
//   dnnfusion: profile database <path> is corrupt (<why>); rebuilding it
// on stderr, starts empty and is overwritten by the next save(). save() is atomic (temporary file
// + rename) and merges with what other processes saved meanwhile (under an advisory file lock):
// entries this object stored win, all others on disk are kept. All member functions are
// thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

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

  const std::string& path() const { return path_; }
  std::optional<Entry> lookup(const std::string& key) const;
  void store(const std::string& key, Entry e);
  size_t size() const;
  // Writes the database, creating missing directories. Throws dnnfusion::Error if the file cannot
  // be written (the in-memory entries stay usable).
  void save();

 private:
  // Parses `text`; on failure returns false with `why` set and leaves `out` unspecified.
  static bool parse(const std::string& text, std::map<std::string, Entry>* out, std::string* why);
  static std::string serialize(const std::map<std::string, Entry>& entries);

  std::string path_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> stored_;  // keys this object wrote: they override the disk on save
};

}  // namespace dnnfusion::fusion
