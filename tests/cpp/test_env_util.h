// Shared helpers for tests that touch the process environment and the file system:
//   ScopedEnv         sets or unsets an environment variable for a scope and restores it afterwards;
//   TempDir           a fresh private directory (mkdtemp) removed with its contents at the end, with
//                     file(name) for paths inside it and script(name, body) for an executable shell
//                     script (fake compilers and tools);
//   error_of<E>(f)    the what() of the E that f throws, recording a test failure otherwise;
//   outcome_of<E>(f)  the same text without the failure ("NO EXCEPTION" when f returns), for probes.
// Several test files (toolchain, JIT, OpenCL runtime, databases) need exactly these; one definition
// here keeps their behaviour the same everywhere (restoring the environment even when a test fails
// half-way, never removing anything but the directory mkdtemp made).
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace dnnfusion::test_util {

// Sets (value) or unsets (nullptr) the environment variable `name` for the scope, then restores its
// earlier value, or unsets it if it had none. Scopes on the same variable nest: each one restores
// what the one before it left.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A fresh directory (mode 0700) for one test, removed with its contents when the object goes.
// `prefix` starts the mkdtemp template (six random characters follow it): an absolute prefix is used
// as it is ("/tmp/dnnf_jit_test_" -> /tmp/dnnf_jit_test_XXXXXX), a relative one goes under
// std::filesystem::temp_directory_path() ($TMPDIR, else /tmp). Throws std::runtime_error when the
// directory cannot be made, which fails the test that wanted it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "dnnf_test_") {
    const std::filesystem::path base = prefix.rfind('/', 0) == 0 ? std::filesystem::path(prefix)
                                                                  : std::filesystem::temp_directory_path() / prefix;
    std::string tmpl = base.string() + "XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error("mkdtemp(" + tmpl + ") failed: " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` (which may hold subdirectories) inside the directory; nothing is created.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes an executable shell script `name` ("#!/bin/sh" then body) and returns its path.
  std::string script(const std::string& name, const std::string& body) const {
    const std::string p = file(name);
    std::ofstream(p) << "#!/bin/sh\n" << body;
    ::chmod(p.c_str(), 0755);
    return p;
  }

 private:
  std::filesystem::path path_;
};

namespace detail {

struct Outcome {
  enum Kind { kExpected, kOther, kNone } kind;
  std::string text;  // what(), "WRONG EXCEPTION TYPE: " + what(), or "NO EXCEPTION"
};

// Runs f(): nested tries so that E = std::exception needs no second handler of the same type.
template <typename E, typename F>
Outcome run_expecting(F&& f) {
  try {
    try {
      f();
    } catch (const E& e) {
      return {Outcome::kExpected, e.what()};
    }
  } catch (const std::exception& e) {
    return {Outcome::kOther, std::string("WRONG EXCEPTION TYPE: ") + e.what()};
  }
  return {Outcome::kNone, "NO EXCEPTION"};
}

}  // namespace detail

// What f() does, as text, recording nothing: the what() of the E it throws, "WRONG EXCEPTION TYPE:
// <what()>" for another exception derived from std::exception, "NO EXCEPTION" when it returns. For
// probes where not throwing is a legitimate answer (`if (outcome_of<E>(f) != "NO EXCEPTION") ...`).
template <typename E, typename F>
std::string outcome_of(F&& f) {
  return detail::run_expecting<E>(std::forward<F>(f)).text;
}

// The what() of the E that f() throws. Another exception (derived from std::exception), or none at
// all, is a test failure; the text returned then is outcome_of's ("WRONG EXCEPTION TYPE: ..." /
// "NO EXCEPTION"), so a check on the message fails as well and shows it.
template <typename E, typename F>
std::string error_of(F&& f) {
  detail::Outcome r = detail::run_expecting<E>(std::forward<F>(f));
  if (r.kind == detail::Outcome::kOther) ADD_FAILURE() << "expected another error type, got: " << r.text;
  if (r.kind == detail::Outcome::kNone) ADD_FAILURE() << "no exception thrown";
  return std::move(r.text);
}

}  // namespace dnnfusion::test_util
