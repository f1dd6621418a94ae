// See target_apis.h.
#include "target_apis.h"

#include <string>
#include <utility>
#include <vector>

namespace dnnfusion::python {
namespace {

// Function-local: filled by other translation units' static initializers, in any order.
std::vector<std::pair<std::string, ApiBinder>>& binders() {
  static std::vector<std::pair<std::string, ApiBinder>> b;
  return b;
}

}  // namespace

bool register_target_api(const char* name, ApiBinder bind) {
  binders().emplace_back(name, bind);
  return true;
}

void bind_target_apis(pybind11::module_& m) {
  for (const auto& [name, bind] : binders()) {
    pybind11::module_ sub = m.def_submodule(name.c_str());
    bind(sub);
  }
}

}  // namespace dnnfusion::python
