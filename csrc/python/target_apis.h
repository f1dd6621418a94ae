// The user-facing APIs of particular targets (dnnfusion.cuda, dnnfusion.fpga, ...), bound without
// the bridge naming any target: each target's binder (csrc/target/<name>/python/bind_api.cc, built
// into the extension only) registers itself at static-initialization time, and the module calls
// every binder once, each with its own submodule _C.<name>.
// The binders see pybind11 but no torch header: host data crosses them as numpy arrays that view a
// CPU tensor's memory (numpy's __array__ protocol, which torch implements without a copy), device
// data as data_ptr integers; dnnfusion/<name>.py turns results back into tensors (torch.from_numpy).
// Precondition: binders are registered before PYBIND11_MODULE runs (static initializers of the same
// shared library). Postcondition of bind_target_apis: one submodule per registered binder.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

namespace dnnfusion::python {

using ApiBinder = void (*)(pybind11::module_& submodule);

// Registers `bind` for the submodule `name`; returns true (to initialize a namespace-scope bool).
bool register_target_api(const char* name, ApiBinder bind);

// Creates _C.<name> for every registered binder and binds it.
void bind_target_apis(pybind11::module_& m);

// `obj` (a numpy array, a CPU tensor, anything with __array__) as a C-contiguous array of T that
// shares its memory, never a converted copy: a write through it is a write into `obj`. Otherwise a
// ValueError "<what> must be a contiguous <dtype> CPU tensor or array".
template <typename T>
pybind11::array_t<T, pybind11::array::c_style> host_view(const pybind11::handle& obj, const std::string& what,
                                                         bool writable = false) {
  using View = pybind11::array_t<T, pybind11::array::c_style>;
  pybind11::array a = pybind11::array::ensure(obj);  // null (error cleared) where numpy cannot view it
  if (!a || !pybind11::isinstance<View>(a) || (writable && !a.writeable()))
    throw pybind11::value_error(what + " must be a contiguous " + std::string(pybind11::str(pybind11::dtype::of<T>())) +
                                (writable ? " writable" : "") + " CPU tensor or array");
  return pybind11::reinterpret_borrow<View>(a);
}

}  // namespace dnnfusion::python
