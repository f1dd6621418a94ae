#include "fusion/profile_db.h"

#include <cstdlib>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"

namespace dnnfusion::fusion {

namespace {

constexpr const char* kMagic = "dnnfusion-profile-db";

}  // namespace

std::string ProfileDb::machine_signature(int threads) {
  return KeyedFileStore::sanitize_key(kernels::cpu_brand() + " | isa " + kernels::isa_name(kernels::active_isa()) + " | threads " +
                  std::to_string(threads));
}

std::string ProfileDb::default_path() { return KeyedFileStore::default_cache_path("DNNFUSION_PROFILE_DB", "profile_db.txt"); }

std::string ProfileDb::make_key(const std::string& signature, const std::string& op_a, const std::string& op_b,
                                const std::vector<std::vector<int64_t>>& shapes, const std::string& detail) {
  std::string s = signature + " | " + op_a + " -> " + op_b + " | ";
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) s += ";";
    s += "[";
    for (size_t d = 0; d < shapes[i].size(); ++d) s += (d ? "x" : "") + std::to_string(shapes[i][d]);
    s += "]";
  }
  if (!detail.empty()) s += " | " + detail;
  return KeyedFileStore::sanitize_key(s);
}

ProfileDb::ProfileDb(std::string path) : store_(std::move(path), "profile database", kMagic, kVersion, 2) {}

std::optional<ProfileDb::Entry> ProfileDb::lookup(const std::string& key) const {
  auto row = store_.lookup(key);
  if (!row) return std::nullopt;
  return Entry{(*row)[0], (*row)[1]};
}

void ProfileDb::store(const std::string& key, Entry e) { store_.store(key, {e.fused_us, e.separate_us}); }

size_t ProfileDb::size() const { return store_.size(); }

void ProfileDb::save() { store_.save(); }

}  // namespace dnnfusion::fusion
