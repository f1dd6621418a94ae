"""Running a compiled model: the accelerator subgraphs as opaque modules inside the fx graph of the
CPU parts, and the device they run on.

Boundary of a subgraph call, per image of the batch (ISA v1 runs batch 1): every fp32 input is
quantized (``clamp(round_half_away_from_zero(x / scale), -128, 127)``) straight into the blocked
int8 layout and written at its device offset; the stream runs; every output is read back and
dequantized (``q * scale``). In "fpga" mode that goes through the OpenCL driver
(``_C.fpga.Accelerator``); in "simulate" mode through the bit-exact C++ model on a host copy of
the same memory image. Both start from the same image and stream, so they agree bit for bit.
"""
import threading

import torch
import torch.nn as nn

from .. import _C

_devices = {}
_devices_lock = threading.Lock()


class _Device:
    """One Accelerator per (platform, binary), shared by every compiled model; ``owner`` is the
    subgraph whose memory image is on it now."""

    def __init__(self, platform, binary):
        self.accelerator = _C.fpga.Accelerator(platform or "", binary or "")
        self.owner = None
        self.lock = threading.Lock()


def device(platform, binary):
    key = (platform or "", binary or "")
    with _devices_lock:
        d = _devices.get(key)
        if d is None:
            d = _devices[key] = _Device(platform, binary)
        return d


class RunMode:
    """Shared by a compiled model and its subgraphs: "fpga" (OpenCL) or "simulate"."""

    def __init__(self):
        self.local = threading.local()

    @property
    def value(self):
        return getattr(self.local, "value", "fpga")

    @value.setter
    def value(self, v):
        self.local.value = v


class FpgaSubgraph(nn.Module):
    """One accelerator subgraph: forward(*fp32 inputs) -> tuple of fp32 outputs."""

    def __init__(self, plan, mode, platform, binary):
        super().__init__()
        self.index = plan.index
        self.plan = plan
        self.mode = mode
        self.platform, self.binary = platform, binary
        self.register_buffer("image", plan.image, persistent=False)
        self.register_buffer("program", plan.program, persistent=False)
        self._work = None   # host memory image of simulate mode
        self._lock = threading.Lock()
        self.last_stats = None

    def _check(self, xs):
        if len(xs) != len(self.plan.inputs):
            raise ValueError(f"fpga subgraph {self.index}: expected {len(self.plan.inputs)} inputs, got {len(xs)}")
        n = None
        for x, port in zip(xs, self.plan.inputs):
            if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != port.shape:
                got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"dnnfusion.fpga: accelerator subgraph {self.index} was compiled for inputs of shape "
                                 f"(N, {', '.join(map(str, port.shape))}) at '{port.node.name}', got {got}")
            if n is not None and x.shape[0] != n:
                raise ValueError(f"dnnfusion.fpga: subgraph {self.index} inputs disagree on the batch size")
            n = x.shape[0]
        return n

    def _run_image(self, packed, mode):
        words = self.program
        if mode == "simulate":
            with self._lock:
                if self._work is None:
                    self._work = self.image.clone()
                mem = self._work
                for port, data in zip(self.plan.inputs, packed):
                    mem[port.offset:port.offset + data.numel()] = data
                _C.fpga.simulate(mem, words)
                return [mem[p.offset:p.offset + p.device_bytes].clone() for p in self.plan.outputs]
        dev = device(self.platform, self.binary)
        with dev.lock:
            acc = dev.accelerator
            if dev.owner is not self:
                acc.upload(self.image)
                dev.owner = self
            for port, data in zip(self.plan.inputs, packed):
                acc.write(port.offset, data)
            self.last_stats = acc.run(words)
            return [acc.read(p.offset, p.device_bytes) for p in self.plan.outputs]

    @torch.compiler.disable
    def forward(self, *xs):
        n = self._check(xs)
        mode = self.mode.value
        outs = [[] for _ in self.plan.outputs]
        with torch.no_grad():
            for b in range(n):
                packed = [torch.from_numpy(_C.fpga.quantize_pack(x[b].detach().to("cpu", torch.float32), p.scale))
                          for x, p in zip(xs, self.plan.inputs)]
                for i, (raw, port) in enumerate(zip(self._run_image(packed, mode), self.plan.outputs)):
                    outs[i].append(torch.from_numpy(_C.fpga.dequantize_unpack(raw, *port.shape, port.scale)))
        device_ = xs[0].device
        return tuple(torch.stack(o).to(device_) for o in outs)


class FpgaModule(nn.Module):
    """A model compiled for the fpga target (see ``dnnfusion.fpga``)."""

    def __init__(self, graph_module, subgraphs, mode, report, cpu_backend):
        super().__init__()
        self.graph_module = graph_module
        self._subgraphs = subgraphs
        self._mode = mode
        self.report = report
        self.cpu_backend = cpu_backend
        self._compiled = torch.compile(graph_module, backend="dnnfusion") if cpu_backend == "dnnfusion" else None

    @property
    def programs(self):
        """The instruction stream (uint32 tensor) of every accelerator subgraph, in graph order."""
        return [sg.program for sg in self._subgraphs]

    @property
    def program(self):
        """The instruction stream of the first (with one subgraph: the only) accelerator subgraph;
        None when nothing runs on the accelerator. ``programs`` has them all."""
        return self._subgraphs[0].program if self._subgraphs else None

    @property
    def subgraphs(self):
        return list(self._subgraphs)

    def _call(self, mode, args, kwargs):
        previous = self._mode.value
        self._mode.value = mode
        try:
            with torch.no_grad():
                run = self._compiled if self._compiled is not None else self.graph_module
                return run(*args, **kwargs)
        finally:
            self._mode.value = previous

    def forward(self, *args, **kwargs):
        """Runs the CPU parts on the cpu target and every accelerator subgraph on the OpenCL device."""
        return self._call("fpga", args, kwargs)

    def simulate(self, *args, **kwargs):
        """The same computation with the bit-exact C++ model of the accelerator (no OpenCL)."""
        return self._call("simulate", args, kwargs)

    def explain(self):
        """The report as text: what ran where and why, boundaries, per layer words/cycles/DDR bytes."""
        return str(self.report)
