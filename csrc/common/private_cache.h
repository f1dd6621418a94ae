// Where dnnfusion keeps what it generates and later runs (compiled kernel modules, GPU kernel
// templates), and the trust check that decides whether a directory may hold such files: a cache
// is code this process will execute, so a directory (or file) that another user owns or can write
// is refused and a private per-user directory is used instead, with one warning on stderr.
//
// Precondition: none. Postconditions: private_cache_dir(name) returns an existing directory owned
// by the effective user and not group- or world-writable (created 0700 where it had to be
// created); directories created on the way are 0700.
#pragma once
#include <sys/stat.h>

#include <string>

namespace dnnfusion {

// The preferred cache root, before the trust check: $DNNFUSION_CACHE_DIR, else
// $XDG_CACHE_HOME/dnnfusion, else $HOME/.cache/dnnfusion, else (HOME unset or empty) the passwd
// entry's home directory + /.cache/dnnfusion, else /tmp/dnnfusion-<euid>.
std::string cache_root();

// cache_root()/name if it and cache_root() pass the trust check (created if missing), else the
// private fallback /tmp/dnnfusion-<euid>/name (or, if another user got there first, a fresh mkdtemp
// directory), warning once per refused directory. `name` is one path component ("kernels").
std::string private_cache_dir(const std::string& name);

// The private fallback alone (for a file found unsafe inside a directory that passed): created and
// checked as above.
std::string private_fallback_dir(const std::string& name);

// Why a file or directory with this status may have been written by someone else; "" if not.
std::string ownership_problem(const struct stat& st);

// Why directory `path` may not hold code this process loads; "" if it may. A symbolic link the
// user owns is followed (a cache moved to another disk); one another user owns is refused.
std::string dir_problem(const std::string& path);

// Prints `message` on stderr the first time `key` is seen in this process.
void warn_once(const std::string& key, const std::string& message);

}  // namespace dnnfusion
