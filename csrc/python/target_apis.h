// The user-facing APIs of particular targets (dnnfusion.cuda, ...), bound without the module
// naming any target: each csrc/python/<name>_api.cc registers a binder at static-initialization
// time, and the module calls every binder once, each with its own submodule _C.<name>.
// Precondition: binders are registered before PYBIND11_MODULE runs (static initializers of the same
// shared library). Postcondition of bind_target_apis: one submodule per registered binder.
#pragma once
#include <pybind11/pybind11.h>

namespace dnnfusion::python {

using ApiBinder = void (*)(pybind11::module_& submodule);

// Registers `bind` for the submodule `name`; returns true (to initialize a namespace-scope bool).
bool register_target_api(const char* name, ApiBinder bind);

// Creates _C.<name> for every registered binder and binds it.
void bind_target_apis(pybind11::module_& m);

}  // namespace dnnfusion::python
