#include "target/target.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "common/error.h"
#include "common/large_alloc.h"

namespace dnnfusion::target {

// ---- Target ----

const std::unordered_map<std::string, runtime::OpKernel>& Target::table() const {
  std::call_once(table_once_, [this] {
    runtime::KernelTable kt;
    register_kernels(kt);
    for (auto& [op, k] : kt)
      if (!table_.emplace(op, k).second) DNNF_THROW("target '", name(), "': kernel for op '", op, "' registered twice");
  });
  return table_;
}

const runtime::OpKernel* Target::find_kernel(const std::string& op) const {
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> Target::kernel_ops() const {
  std::vector<std::string> ops;
  for (const auto& kv : table()) ops.push_back(kv.first);
  std::sort(ops.begin(), ops.end());
  return ops;
}

std::string Target::supports(const ecg::Graph& g, const ecg::Node& n) const {
  const runtime::OpKernel* k = find_kernel(n.op);
  if (!k) return "no " + name() + " kernel for op '" + n.op + "'";
  if (!k->check) return "";
  try {
    return k->check(g, n);
  } catch (const std::exception& e) {  // a check that cannot even read the node refuses it
    return e.what();
  }
}

std::string Target::supports_at_import(const ecg::Graph& g, const ecg::Node& n, const CompileOptions& opts) const {
  try {
    if (auto why = import_decision(g, n, opts)) return *why;
  } catch (const std::exception& e) {
    return e.what();
  }
  return supports(g, n);
}

std::vector<YellowTiming> Target::measure_yellow(const ecg::Graph&, const std::vector<YellowQuery>&,
                                                 const CompileOptions&) const {
  DNNF_THROW("target '", name(), "' has no cost oracle for yellow fusion cells");
}

void* host_allocate(size_t bytes) {
  try {
    return allocate_large(bytes);  // a large arena on huge pages, as the weights (common/large_alloc.h)
  } catch (const std::bad_alloc&) {
    DNNF_THROW("out of memory allocating a ", bytes, "-byte buffer");
  }
}

void host_deallocate(void* p) { free_large(p); }

// ---- Registry ----

void Registry::add(std::unique_ptr<Target> t) {
  DNNF_CHECK(t != nullptr, "registering a null target");
  for (const auto& have : targets_)
    if (have->name() == t->name()) DNNF_THROW("target '", t->name(), "' registered twice");
  targets_.push_back(std::move(t));
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> v;
  for (const auto& t : targets_) v.push_back(t->name());
  return v;
}

const Target& Registry::get(const std::string& name) const {
  for (const auto& t : targets_)
    if (t->name() == name) return *t;
  std::string list;
  for (const auto& n : names()) list += (list.empty() ? "" : ", ") + n;
  DNNF_THROW_AS(UnknownTarget, "unknown target '", name, "' (registered targets: ", list, ")");
}

const Target& Registry::require_available(const std::string& name) const {
  const Target& t = get(name);
  const std::string why = t.unavailable_reason();
  if (!why.empty()) DNNF_THROW_AS(TargetUnavailable, "target '", name, "' cannot run on this machine: ", why);
  return t;
}

const Target& Registry::host_evaluator() const {
  for (const auto& t : targets_)
    if (t->device_type() == "cpu" && t->evaluates_constants()) return *t;
  DNNF_THROW("no registered target can evaluate constants on the host");
}

const Target& Registry::default_target() const {
  DNNF_CHECK(!targets_.empty(), "no target registered");
  return *targets_.front();
}

#define DNNF_TARGET(name) std::unique_ptr<Target> make_##name##_target();
#include "target/targets.def"
#undef DNNF_TARGET

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
#define DNNF_TARGET(name) reg.add(make_##name##_target());
#include "target/targets.def"
#undef DNNF_TARGET
    return reg;
  }();
  return r;
}

}  // namespace dnnfusion::target
