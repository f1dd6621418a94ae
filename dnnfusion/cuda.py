"""dnnfusion.cuda: sparse convolutions as PTX kernels generated for their own weights.

A convolution pruned without structure (``dnnfusion.prune(model, 0.9, structured=False)``) gets a
kernel of its own: a dense direct-convolution template, compiled once per shape to PTX with every
weight an immediate in its own FMA, is rewritten for the real weights (a zero weight costs no
instruction) and assembled by ptxas. Everything but launching works without a GPU::

    k = dnnfusion.cuda.sparse_conv2d(conv.weight, conv.bias, input_shape=(1, 64, 56, 56), padding=1,
                                     activation="relu", arch="sm_90")
    k.ptx, k.cubin, k.stats          # the rewritten PTX, ptxas's cubin, counts and timings
    y = k.emulate(x)                 # the PTX run on the CPU by the project's PTX interpreter
    y = k(x.cuda())                  # on a GPU (CUDA driver loaded at run time)

What it needs: NVRTC (CUDA C -> PTX; the ``nvidia-cuda-nvrtc`` wheel that a CUDA build of torch
installs, or a CUDA toolkit), ptxas (a CUDA toolkit, or ``pip install nvidia-cuda-nvcc``) and, for
the SASS FFMA count only, nvdisasm (``pip install nvidia-cuda-nvdisasm``). Their locations can be
forced with $DNNFUSION_NVRTC, $DNNFUSION_PTXAS and $DNNFUSION_NVDISASM (file paths). Missing tools
or driver raise ``dnnfusion.TargetUnavailable``; bad arguments raise ``ValueError``.
"""
import functools
import os
import site
import sys

import torch

from . import _C

_ACTIVATIONS = (None, "relu", "relu6")

__all__ = ["sparse_conv2d", "SparseConvKernel", "toolchain"]


@functools.lru_cache(maxsize=None)
def _register_wheel_dirs():
    """Tells the core where pip's NVIDIA wheels put NVRTC, ptxas and nvdisasm (site-packages/nvidia/...)."""
    roots = list(dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()] + sys.path))
    for root in roots:
        if not isinstance(root, str):
            continue
        for sub in ("cu13", "cuda_nvcc", "cuda_nvrtc", "cuda_nvdisasm", "cu12"):
            base = os.path.join(root, "nvidia", sub)
            if os.path.isdir(os.path.join(base, "bin")):
                _C.cuda.add_tool_dir(os.path.join(base, "bin"))
            if os.path.isdir(os.path.join(base, "lib")):
                _C.cuda.add_nvrtc_dir(os.path.join(base, "lib"))
    return True


def toolchain():
    """What this machine has: {nvrtc, ptxas, nvdisasm: path or "", archs: ptxas's, driver: "" or why not}."""
    _register_wheel_dirs()
    try:
        nvrtc = _C.cuda.nvrtc_path()
    except _C.TargetUnavailable as e:
        nvrtc = ""
        nvrtc_reason = str(e)
    else:
        nvrtc_reason = ""
    ptxas = _C.cuda.find_tool("ptxas")
    return {"nvrtc": nvrtc, "nvrtc_reason": nvrtc_reason, "ptxas": ptxas, "nvdisasm": _C.cuda.find_tool("nvdisasm"),
            "archs": _C.cuda.supported_archs() if ptxas else [], "driver": _C.cuda.driver_unavailable_reason()}


def _pair(v, name, minimum):
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    if (not isinstance(v, (tuple, list)) or len(v) != 2
            or not all(isinstance(e, int) and not isinstance(e, bool) and e >= minimum for e in v)):
        raise ValueError(f"dnnfusion.cuda.sparse_conv2d: {name} must be an int or a pair of ints >= {minimum}, got {v!r}")
    return tuple(v)


def _check_input_shape(input_shape, weight):
    if (not isinstance(input_shape, (tuple, list, torch.Size)) or len(input_shape) != 4
            or not all(isinstance(e, int) and not isinstance(e, bool) and e > 0 for e in input_shape)):
        raise ValueError("dnnfusion.cuda.sparse_conv2d: input_shape must be (N, C, H, W) of positive ints, "
                         f"got {input_shape!r}")
    n, c, h, w = input_shape
    if c != weight.shape[1]:
        if c % weight.shape[1] == 0:
            raise ValueError(f"dnnfusion.cuda.sparse_conv2d: the input has {c} channels and the weight "
                             f"{weight.shape[1]}: a grouped convolution (groups={c // weight.shape[1]}); only "
                             "groups=1 is supported")
        raise ValueError(f"dnnfusion.cuda.sparse_conv2d: the input has {c} channels, the weight expects "
                         f"{weight.shape[1]} (weight shape {tuple(weight.shape)})")
    return tuple(input_shape)


def _out_size(size, k, stride, pad, dil):
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


class SparseConvKernel:
    """One convolution's kernel, generated for its weights. ``ptx`` (str, rewritten), ``cubin``
    (bytes, from ptxas), ``stats`` (dict: nonzeros, density, ptx_fma, sass_ffma, registers, spills,
    cubin_bytes, tile, template/nvrtc/rewrite/ptxas seconds), ``emulate(x)`` (CPU, PTX
    interpreter), ``__call__(x)`` (a CUDA tensor)."""

    def __init__(self, core, input_shape, output_shape, bias, residual):
        self._core = core
        self.input_shape = input_shape
        self.output_shape = output_shape
        self._bias = bias  # float32 CPU tensor or None
        self._bias_on = {}  # device -> the bias there
        self.has_residual = residual

    ptx = property(lambda self: self._core.ptx)
    cubin = property(lambda self: self._core.cubin)
    entry = property(lambda self: self._core.entry)
    arch = property(lambda self: self._core.arch)
    stats = property(lambda self: self._core.stats)
    launch_dims = property(lambda self: self._core.launch_dims)

    def _check(self, x, residual, where):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or tuple(x.shape) != self.input_shape:
            got = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"dnnfusion.cuda: {where} takes a float32 tensor of shape {self.input_shape}, got {got}")
        if self.has_residual:
            if (not isinstance(residual, torch.Tensor) or residual.dtype != torch.float32
                    or tuple(residual.shape) != self.output_shape or residual.device != x.device):
                raise ValueError(f"dnnfusion.cuda: this kernel adds a residual: pass a float32 tensor of shape "
                                 f"{self.output_shape} on {x.device}")
        elif residual is not None:
            raise ValueError("dnnfusion.cuda: this kernel was built without a residual (sparse_conv2d(..., residual=True))")

    def emulate(self, x, residual=None):
        """Runs the kernel's PTX on the CPU with the project's PTX interpreter (x: CPU tensor)."""
        self._check(x, residual, "emulate()")
        if x.device.type != "cpu":
            raise ValueError(f"dnnfusion.cuda: emulate() runs on the CPU; x is on {x.device}")
        r = residual.contiguous() if residual is not None else None
        return torch.from_numpy(self._core.emulate(x.contiguous(), self._bias, r, torch.get_num_threads()))

    def __call__(self, x, residual=None):
        self._check(x, residual, "a SparseConvKernel call")
        if x.device.type != "cuda":
            raise ValueError(f"dnnfusion.cuda: a SparseConvKernel runs on a CUDA tensor; x is on {x.device} "
                             "(emulate() runs the kernel on the CPU)")
        reason = _C.cuda.driver_unavailable_reason()
        if reason:
            raise _C.TargetUnavailable(f"dnnfusion.cuda: no usable CUDA driver: {reason}")
        x = x.contiguous()
        y = torch.empty(self.output_shape, dtype=torch.float32, device=x.device)
        bias = 0
        if self._bias is not None:
            if x.device not in self._bias_on:
                self._bias_on[x.device] = self._bias.to(x.device)
            bias = self._bias_on[x.device].data_ptr()
        res = residual.contiguous().data_ptr() if residual is not None else 0
        stream = torch.cuda.current_stream(x.device).cuda_stream
        self._core.launch(x.data_ptr(), bias, res, y.data_ptr(), stream, x.device.index or 0)
        return y


def sparse_conv2d(weight, bias=None, *, input_shape, stride=1, padding=0, dilation=1, activation=None,
                  residual=False, arch="sm_90"):
    """Builds the kernel of one convolution for its weights: y = act(conv2d(x, weight) + bias + residual).

    weight: (K, C, R, S) float tensor (zeros are what the kernel skips); bias: (K,) or None;
    input_shape: (N, C, H, W); stride/padding/dilation: int or pair; activation: None, "relu",
    "relu6"; residual: whether calls pass a tensor shaped like the output to add before the
    activation; arch: the GPU architecture ptxas assembles for ("sm_80", "sm_86", "sm_89",
    "sm_90", ...). groups=1 only."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 4 or not weight.is_floating_point():
        got = f"a {weight.dim()}-d {weight.dtype} tensor" if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"dnnfusion.cuda.sparse_conv2d: weight must be a 4-d (K, C, R, S) float tensor, got {got}")
    if any(d == 0 for d in weight.shape):
        raise ValueError(f"dnnfusion.cuda.sparse_conv2d: weight shape {tuple(weight.shape)} has an empty dimension")
    input_shape = _check_input_shape(input_shape, weight)
    stride, padding, dilation = _pair(stride, "stride", 1), _pair(padding, "padding", 0), _pair(dilation, "dilation", 1)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"dnnfusion.cuda.sparse_conv2d: activation must be one of {_ACTIVATIONS}, got {activation!r}")
    if not isinstance(arch, str):
        raise ValueError(f"dnnfusion.cuda.sparse_conv2d: arch must be a string such as 'sm_90', got {arch!r}")
    k, c, r, s = weight.shape
    n, _, h, w = input_shape
    oh, ow = _out_size(h, r, stride[0], padding[0], dilation[0]), _out_size(w, s, stride[1], padding[1], dilation[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"dnnfusion.cuda.sparse_conv2d: a {r}x{s} filter (dilation {dilation}) does not fit the "
                         f"{h}x{w} input with padding {padding}: the output would be {oh}x{ow}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (k,):
            raise ValueError(f"dnnfusion.cuda.sparse_conv2d: bias must be a ({k},) tensor or None")
        bias = bias.detach().to("cpu", torch.float32).contiguous()
    _register_wheel_dirs()
    shape = dict(n=n, c=c, h=h, w=w, k=k, r=r, s=s, stride_h=stride[0], stride_w=stride[1], pad_h=padding[0],
                 pad_w=padding[1], dil_h=dilation[0], dil_w=dilation[1])
    wt = weight.detach().to("cpu", torch.float32).contiguous()
    core = _C.cuda.build_sparse_conv(wt, shape, bias is not None, bool(residual), activation or "none", arch, "")
    return SparseConvKernel(core, input_shape, (n, k, oh, ow), bias, bool(residual))
