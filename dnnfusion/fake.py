"""Fake (meta) kernel of torch.ops.dnnfusion.run: output metadata of each compiled region, so the
returned graphs can be traced again (e.g. by an enclosing torch.compile or torch.export)."""
import threading

import torch

_metas = {}
_lock = threading.Lock()


def register_region_meta(handle, metas):
    with _lock:
        _metas[handle] = [(tuple(m.shape), tuple(m.stride()), m.dtype) for m in metas]


def unregister_region_meta(handle):
    with _lock:
        _metas.pop(handle, None)


@torch.library.register_fake("dnnfusion::run")
def _run_fake(handle, inputs):
    with _lock:
        metas = _metas.get(handle)
    if metas is None:
        raise RuntimeError(f"dnnfusion::run: unknown compiled region {handle}")
    return [torch.empty_strided(shape, stride, dtype=dtype, device="cpu") for shape, stride, dtype in metas]
