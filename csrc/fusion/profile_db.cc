#include "fusion/profile_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"

namespace dnnfusion::fusion {

namespace {

constexpr const char* kMagic = "dnnfusion-profile-db";

std::string sanitize(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string format_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool parse_time(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

// Whole file, or nullopt if it does not exist / cannot be opened.
std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Advisory lock that serializes the read-merge-write of concurrent savers (other processes, or
// other ProfileDb objects on the same file). Without it two savers could each merge the old file
// and the second rename would drop the first one's entries.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string ProfileDb::machine_signature(int threads) {
  return sanitize(kernels::cpu_brand() + " | isa " + kernels::isa_name(kernels::active_isa()) + " | threads " +
                  std::to_string(threads));
}

std::string ProfileDb::default_path() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (std::string p = env("DNNFUSION_PROFILE_DB"); !p.empty()) return p;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/dnnfusion/profile_db.txt";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/dnnfusion/profile_db.txt";
  return ".dnnfusion_profile_db.txt";
}

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
  return sanitize(s);
}

ProfileDb::ProfileDb(std::string path) : path_(std::move(path)) {
  std::optional<std::string> text = read_file(path_);
  if (!text) return;  // first use on this machine
  std::string why;
  if (!parse(*text, &entries_, &why)) {
    entries_.clear();
    std::cerr << "dnnfusion: profile database " << path_ << " is corrupt (" << why << "); rebuilding it" << std::endl;
  }
}

std::optional<ProfileDb::Entry> ProfileDb::lookup(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void ProfileDb::store(const std::string& key, Entry e) {
  const std::string k = sanitize(key);
  DNNF_CHECK(!k.empty(), "profile database keys must not be empty");
  DNNF_CHECK(std::isfinite(e.fused_us) && std::isfinite(e.separate_us) && e.fused_us >= 0 && e.separate_us >= 0,
             "profile database times must be finite and non-negative (", e.fused_us, ", ", e.separate_us, ")");
  std::lock_guard<std::mutex> lock(mu_);
  entries_[k] = e;
  stored_.insert(k);
}

size_t ProfileDb::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void ProfileDb::save() {
  std::lock_guard<std::mutex> lock(mu_);
  namespace fs = std::filesystem;
  const fs::path target(path_);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) DNNF_THROW("profile database: cannot create directory ", target.parent_path().string(), ": ", ec.message());
  }
  FileLock file_lock(path_ + ".lock");
  // Merge: what is on disk now (other processes' measurements) plus ours; our own stores win.
  std::map<std::string, Entry> merged;
  if (std::optional<std::string> text = read_file(path_)) {
    std::string why;
    // A corrupt file was reported when loaded (or was broken since); either way it is replaced.
    if (!parse(*text, &merged, &why)) merged.clear();
  }
  for (const auto& k : stored_) merged[k] = entries_.at(k);
  for (const auto& kv : entries_) merged.emplace(kv.first, kv.second);

  static std::atomic<unsigned> counter{0};
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const std::string data = serialize(merged);
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) DNNF_THROW("profile database: cannot write ", tmp, ": ", std::strerror(errno));
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        DNNF_THROW("profile database: cannot write ", tmp, ": ", std::strerror(err));
      }
      done += static_cast<size_t>(w);
    }
    // The rename must never expose a file whose data is not on disk yet.
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    DNNF_THROW("profile database: cannot replace ", path_, ": ", std::strerror(err));
  }
  entries_ = std::move(merged);
  // Saved: from now on a newer value another process saves for these keys is the one to keep.
  stored_.clear();
}

std::string ProfileDb::serialize(const std::map<std::string, Entry>& entries) {
  std::string body;
  for (const auto& kv : entries)
    body += kv.first + "\t" + format_double(kv.second.fused_us) + "\t" + format_double(kv.second.separate_us) + "\n";
  return std::string(kMagic) + " " + std::to_string(kVersion) + "\nentries " + std::to_string(entries.size()) +
         " checksum " + hex64(fnv1a(body)) + "\n" + body;
}

bool ProfileDb::parse(const std::string& text, std::map<std::string, Entry>* out, std::string* why) {
  auto fail = [](std::string* w, std::string msg) {
    *w = std::move(msg);
    return false;
  };
  out->clear();
  size_t pos = 0;
  auto next_line = [&](std::string* line) {
    if (pos >= text.size()) return false;
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      *line = text.substr(pos);
      pos = text.size();
    } else {
      *line = text.substr(pos, nl - pos);
      pos = nl + 1;
    }
    return true;
  };
  std::string line;
  if (!next_line(&line)) return fail(why, "empty file");
  const std::string magic = std::string(kMagic) + " ";
  if (line.compare(0, magic.size(), magic) != 0) return fail(why, "not a profile database: bad header line");
  if (line.substr(magic.size()) != std::to_string(kVersion))
    return fail(why, "unsupported version '" + line.substr(magic.size()) + "'");
  if (!next_line(&line)) return fail(why, "missing entry count line");
  unsigned long long count = 0;
  char sum[17] = {0};
  int consumed = 0;
  if (std::sscanf(line.c_str(), "entries %llu checksum %16[0-9a-f]%n", &count, sum, &consumed) != 2 ||
      static_cast<size_t>(consumed) != line.size() || std::strlen(sum) != 16)
    return fail(why, "bad entry count line");
  const size_t body_start = pos;
  if (hex64(fnv1a(text.substr(body_start))) != sum) return fail(why, "checksum mismatch");
  size_t n = 0;
  while (next_line(&line)) {
    ++n;
    const size_t t1 = line.find('\t');
    const size_t t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos || line.find('\t', t2 + 1) != std::string::npos || t1 == 0)
      return fail(why, "malformed entry on line " + std::to_string(n + 2));
    Entry e;
    if (!parse_time(line.substr(t1 + 1, t2 - t1 - 1), &e.fused_us) || !parse_time(line.substr(t2 + 1), &e.separate_us))
      return fail(why, "bad time on line " + std::to_string(n + 2));
    if (!out->emplace(line.substr(0, t1), e).second)
      return fail(why, "duplicate key on line " + std::to_string(n + 2));
  }
  if (n != count)
    return fail(why, "expected " + std::to_string(count) + " entries, found " + std::to_string(n));
  if (!text.empty() && text.back() != '\n' && n > 0) return fail(why, "truncated last line");
  return true;
}

}  // namespace dnnfusion::fusion
