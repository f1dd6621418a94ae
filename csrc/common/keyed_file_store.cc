#include "common/keyed_file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "common/error.h"

namespace dnnfusion {

namespace {

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

bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

// What read_file found. A store is never larger than a few MiB; anything past the limit, or that
// is not a regular file (/dev/zero, a FIFO), would only make the reader hang or exhaust memory.
struct FileText {
  enum State { Missing, Ok, Refused } state = Missing;
  std::string text;
  std::string why;  // for Refused
};

FileText read_file(const std::string& path) {
  FileText r;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return r;  // missing or unreadable: the store starts empty, as before
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    r.state = FileText::Refused;
    r.why = "not a regular file";
    return r;
  }
  const std::string too_big = "larger than the " + std::to_string(KeyedFileStore::kMaxFileBytes >> 20) + " MiB limit";
  if (st.st_size > static_cast<off_t>(KeyedFileStore::kMaxFileBytes)) {
    ::close(fd);
    r.state = FileText::Refused;
    r.why = too_big;
    return r;
  }
  r.text.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  // One byte more than the limit: a file that grew since fstat is caught without reading it all.
  for (;;) {
    if (done == r.text.size()) {
      if (r.text.size() > KeyedFileStore::kMaxFileBytes) break;
      r.text.resize(std::min(r.text.size() + 65536, KeyedFileStore::kMaxFileBytes + 1));
    }
    const ssize_t n = ::read(fd, &r.text[done], r.text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file, or an I/O error: the parser sees a truncated file
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done > KeyedFileStore::kMaxFileBytes) {
    r.state = FileText::Refused;
    r.why = too_big;
    r.text.clear();
    return r;
  }
  r.text.resize(done);
  r.state = FileText::Ok;
  return r;
}

// A refused file is reported once per path and process: every store object and every save()
// would otherwise repeat it.
void report_refused_once(const std::string& what, const std::string& path, const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(path).second) return;
  }
  std::cerr << "dnnfusion: " << what << " " << path << " is corrupt (" << why << "); not reading it" << std::endl;
}

// Advisory lock that serializes the read-merge-write of concurrent savers (other processes, or
// other objects on the same file). Without it two savers could each merge the old file and the
// second rename would drop the first one's entries.
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

std::string KeyedFileStore::sanitize_key(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

KeyedFileStore::KeyedFileStore(std::string path, std::string what, std::string magic, int version, size_t fields)
    : path_(std::move(path)), what_(std::move(what)), magic_(std::move(magic)), version_(version), fields_(fields) {
  const FileText file = read_file(path_);
  if (file.state == FileText::Missing) return;  // first use on this machine
  if (file.state == FileText::Refused) {
    report_refused_once(what_, path_, file.why);
    return;
  }
  std::string why;
  if (!parse(file.text, &entries_, &why)) {
    entries_.clear();
    std::cerr << "dnnfusion: " << what_ << " " << path_ << " is corrupt (" << why << "); rebuilding it" << std::endl;
  }
}

std::optional<KeyedFileStore::Row> KeyedFileStore::lookup(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void KeyedFileStore::store(const std::string& key, Row row) {
  const std::string k = sanitize_key(key);
  DNNF_CHECK(!k.empty(), what_, " keys must not be empty");
  DNNF_CHECK(row.size() == fields_, what_, " rows have ", fields_, " numbers, got ", row.size());
  for (double v : row)
    DNNF_CHECK(std::isfinite(v) && v >= 0, what_, " numbers must be finite and non-negative (got ", v, ")");
  std::lock_guard<std::mutex> lock(mu_);
  entries_[k] = std::move(row);
  stored_.insert(k);
}

size_t KeyedFileStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::map<std::string, KeyedFileStore::Row> KeyedFileStore::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

void KeyedFileStore::save() {
  std::lock_guard<std::mutex> lock(mu_);
  namespace fs = std::filesystem;
  const fs::path target(path_);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) DNNF_THROW(what_, ": cannot create directory ", target.parent_path().string(), ": ", ec.message());
  }
  // The rename below replaces whatever the path names: a device or FIFO someone pointed the
  // store at is refused rather than replaced.
  if (struct stat st; ::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    DNNF_THROW(what_, ": ", path_, " is not a regular file; not replacing it");
  FileLock file_lock(path_ + ".lock");
  // Merge: what is on disk now (other processes' measurements) plus ours; our own stores win.
  std::map<std::string, Row> merged;
  const FileText file = read_file(path_);
  if (file.state == FileText::Refused) report_refused_once(what_, path_, file.why);
  if (file.state == FileText::Ok) {
    std::string why;
    // A corrupt file was reported when loaded (or was broken since); either way it is replaced.
    if (!parse(file.text, &merged, &why)) merged.clear();
  }
  for (const auto& k : stored_) merged[k] = entries_.at(k);
  for (const auto& kv : entries_) merged.emplace(kv.first, kv.second);

  static std::atomic<unsigned> counter{0};
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const std::string data = serialize(merged);
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) DNNF_THROW(what_, ": cannot write ", tmp, ": ", std::strerror(errno));
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        DNNF_THROW(what_, ": cannot write ", tmp, ": ", std::strerror(err));
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
    DNNF_THROW(what_, ": cannot replace ", path_, ": ", std::strerror(err));
  }
  entries_ = std::move(merged);
  // Saved: from now on a newer value another process saves for these keys is the one to keep.
  stored_.clear();
}

std::string KeyedFileStore::serialize(const std::map<std::string, Row>& entries) const {
  std::string body;
  for (const auto& kv : entries) {
    body += kv.first;
    for (double v : kv.second) body += "\t" + format_double(v);
    body += "\n";
  }
  return magic_ + " " + std::to_string(version_) + "\nentries " + std::to_string(entries.size()) + " checksum " +
         hex64(fnv1a(body)) + "\n" + body;
}

bool KeyedFileStore::parse(const std::string& text, std::map<std::string, Row>* out, std::string* why) const {
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
  const std::string magic = magic_ + " ";
  if (line.compare(0, magic.size(), magic) != 0) return fail(why, "not a " + what_ + ": bad header line");
  if (line.substr(magic.size()) != std::to_string(version_))
    return fail(why, "unsupported version '" + line.substr(magic.size()) + "'");
  if (!next_line(&line)) return fail(why, "missing entry count line");
  unsigned long long count = 0;
  char sum[17] = {0};
  int consumed = 0;
  if (std::sscanf(line.c_str(), "entries %llu checksum %16[0-9a-f]%n", &count, sum, &consumed) != 2 ||
      static_cast<size_t>(consumed) != line.size() || std::strlen(sum) != 16)
    return fail(why, "bad entry count line");
  if (hex64(fnv1a(text.substr(pos))) != sum) return fail(why, "checksum mismatch");
  size_t n = 0;
  while (next_line(&line)) {
    ++n;
    const std::string where = " on line " + std::to_string(n + 2);
    std::vector<std::string> cols;
    for (size_t start = 0;;) {
      const size_t tab = line.find('\t', start);
      cols.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (cols.size() != fields_ + 1 || cols[0].empty()) return fail(why, "malformed entry" + where);
    Row row(fields_);
    for (size_t i = 0; i < fields_; ++i)
      if (!parse_number(cols[i + 1], &row[i])) return fail(why, "bad number" + where);
    if (!out->emplace(cols[0], std::move(row)).second) return fail(why, "duplicate key" + where);
  }
  if (n != count) return fail(why, "expected " + std::to_string(count) + " entries, found " + std::to_string(n));
  if (!text.empty() && text.back() != '\n' && n > 0) return fail(why, "truncated last line");
  return true;
}

std::string KeyedFileStore::default_cache_path(const char* env_var, const std::string& file) {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (std::string p = env(env_var); !p.empty()) return p;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/dnnfusion/" + file;
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/dnnfusion/" + file;
  return ".dnnfusion_" + file;
}

}  // namespace dnnfusion
