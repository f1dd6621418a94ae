// A small persistent map from text keys to fixed-width rows of numbers, shared by several processes:
// the storage under the fusion profile database (fusion/profile_db) and the convolution tuning
// database (layout/tuning_db). Measurements are expensive, so the file must survive crashes, merge
// concurrent writers and never be trusted when damaged.
//
// On-disk format (text, one entry per line, versioned and checksummed):
//   <magic> <version>
//   entries <count> checksum <16 hex digits, FNV-1a 64 over the entry lines>
//   <key> TAB <number> TAB <number> ...   (exactly `fields` numbers, finite and >= 0)
// Precondition: keys contain no tab or newline (sanitize_key replaces them). Postconditions: a
// missing (or unopenable) file is an empty store; an inconsistent one prints
//   dnnfusion: <what> <path> is corrupt (<why>); rebuilding it
// on stderr, starts empty and is overwritten by the next save(). The path may name anything, so
// reading is bounded: a file that is not regular (/dev/zero, a FIFO) or is larger than
// kMaxFileBytes is not read at all (no store comes near the limit), counts as corrupt and is
// reported once per path and process ("... is corrupt (<why>); not reading it"); save() replaces
// an oversized file but refuses (dnnfusion::Error) to replace a path that is not a regular file.
// save() is atomic (temporary file + rename) and merges with what other processes saved meanwhile
// (under an advisory file lock): entries this object stored win, all others on disk are kept. All
// member functions are thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dnnfusion {

class KeyedFileStore {
 public:
  using Row = std::vector<double>;
  // Files larger than this are never read (see above).
  static constexpr size_t kMaxFileBytes = size_t{64} << 20;

  // `what` names the store in messages ("profile database"); `magic` starts the file.
  KeyedFileStore(std::string path, std::string what, std::string magic, int version, size_t fields);

  const std::string& path() const { return path_; }
  std::optional<Row> lookup(const std::string& key) const;
  // Throws dnnfusion::Error for an empty key or a row of the wrong width / with negative or
  // non-finite numbers.
  void store(const std::string& key, Row row);
  size_t size() const;
  std::map<std::string, Row> entries() const;
  // Writes the store, creating missing directories. Throws dnnfusion::Error if the file cannot
  // be written or the path names something other than a regular file (the in-memory entries stay
  // usable).
  void save();

  // Replaces tab/newline characters by spaces.
  static std::string sanitize_key(std::string s);
  // Where a per-user database file lives: $env_var if set, else $XDG_CACHE_HOME/dnnfusion/<file>,
  // else ~/.cache/dnnfusion/<file>, else .dnnfusion_<file> in the working directory.
  static std::string default_cache_path(const char* env_var, const std::string& file);

 private:
  bool parse(const std::string& text, std::map<std::string, Row>* out, std::string* why) const;
  std::string serialize(const std::map<std::string, Row>& entries) const;

  std::string path_, what_, magic_;
  int version_;
  size_t fields_;
  mutable std::mutex mu_;
  std::map<std::string, Row> entries_;
  std::set<std::string> stored_;  // keys this object wrote: they override the disk on save
};

}  // namespace dnnfusion
