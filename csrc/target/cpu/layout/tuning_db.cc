#include "target/cpu/layout/tuning_db.h"

#include <cstdlib>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"

namespace dnnfusion::layout {

std::string TuningDb::default_path() { return KeyedFileStore::default_cache_path("DNNFUSION_TUNING_DB", "tuning_db.txt"); }

std::string TuningDb::make_key(const kernels::Conv2dShape& s, int ic_bn, int oc_bn, int threads) {
  std::string k = kernels::cpu_brand() + " | isa " + kernels::isa_name(kernels::active_isa()) + " | threads " +
                  std::to_string(threads) + " | conv ";
  const int64_t dims[] = {s.N, s.C, s.H, s.W, s.K, s.R, s.S, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
                          s.dil_h, s.dil_w, s.groups};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) k += (i ? "," : "") + std::to_string(dims[i]);
  k += " | " + std::to_string(ic_bn) + "x" + std::to_string(oc_bn);
  return KeyedFileStore::sanitize_key(k);
}

TuningDb::TuningDb(std::string path) : store_(std::move(path), "tuning database", "dnnfusion-tuning-db", kVersion, 3) {}

std::optional<TuningDb::Entry> TuningDb::lookup(const std::string& key) const {
  auto row = store_.lookup(key);
  if (!row) return std::nullopt;
  const double reg_n = (*row)[0], unroll = (*row)[1];
  // A well-formed file with nonsense knobs is treated as a miss: the caller re-tunes.
  if (reg_n < 1 || reg_n > 64 || reg_n != static_cast<int>(reg_n) || (unroll != 0 && unroll != 1)) return std::nullopt;
  return Entry{static_cast<int>(reg_n), unroll == 1, (*row)[2]};
}

void TuningDb::store(const std::string& key, const Entry& e) {
  DNNF_CHECK(e.reg_n >= 1 && e.reg_n <= 64, "tuning database: reg_n must be in 1..64, got ", e.reg_n);
  store_.store(key, {static_cast<double>(e.reg_n), e.unroll_ker ? 1.0 : 0.0, e.us});
}

}  // namespace dnnfusion::layout
