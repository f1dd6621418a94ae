"""Calibration, int8 quantization, device-memory layout and instruction encoding of the
accelerator subgraphs that ``partition`` found.

Scales. Every accelerator tensor has one per-tensor scale (real units per int8 step): a subgraph's
external inputs and every layer's output get a histogram over the calibration data (an fx
Interpreter run of the BN-folded fp32 graph), thresholded by the chosen method; a max pool's output
keeps its input's scale (the datapath does not requantize it).

Memory image of one subgraph (all offsets multiples of 64 bytes, ISA v1 section 1):
``[weights and parameter tables of every layer][activation buffers]``. Activation buffers are
assigned first-fit in layer order: a layer's output is placed while its inputs are still live
(so it never overlaps what it reads), and a tensor's buffer is freed after its last reader;
subgraph outputs stay live to the end. The constants are never overwritten.
"""
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from .. import _C
from .. import quantize as dq

_ALIGN = 64


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class _Recorder(fx.Interpreter):
    """Runs the fp32 graph; with ``ranges`` None records max |x| per wanted node, else histograms
    over [0, that max) (TensorRT's two-pass calibration: no range growth, full resolution)."""

    def __init__(self, gm, wanted, hists, ranges=None):
        super().__init__(gm)
        self.wanted, self.hists, self.ranges = wanted, hists, ranges

    def run_node(self, n):
        out = super().run_node(n)
        if n in self.wanted:
            if not isinstance(out, torch.Tensor) or not out.is_floating_point():
                raise ValueError(f"dnnfusion.fpga.compile: '{n.name}' is not a floating-point tensor")
            t = out.detach().to("cpu", torch.float32).contiguous()
            if not torch.isfinite(t).all():
                raise ValueError(f"dnnfusion.fpga.compile: '{n.name}' has non-finite values on the calibration data")
            if self.ranges is None:
                self.hists[n] = max(self.hists.get(n, 0.0), float(t.abs().max()) if t.numel() else 0.0)
                return out
            h = self.hists.get(n)
            if h is None:
                h = self.hists[n] = dq.Histogram(_C.quant.HISTOGRAM_BINS, self.ranges[n])
            h.add(t)
        return out


def calibrate(gm, batches, subgraphs, method, percentile=99.99):
    """{fx node: scale} for every accelerator tensor, from the calibration batches."""
    wanted = set()
    for sg in subgraphs:
        wanted.update(sg.inputs)
        wanted.update(layer.out_node for layer in sg.layers if layer.kind != "maxpool")
    ranges, hists = {}, {}
    for rec in (_Recorder(gm, wanted, ranges), _Recorder(gm, wanted, hists, ranges)):
        with torch.no_grad():
            for index, x in enumerate(batches):
                try:
                    rec.run(x)
                except ValueError:
                    raise
                except Exception as e:
                    raise ValueError(f"dnnfusion.fpga.compile: the model cannot run calibration batch {index}: "
                                     f"{type(e).__name__}: {e}") from e
    # The model's own inputs are data, not activations: under "kl" they keep their whole range.
    # Entropy calibration matches distribution shapes, and an image's background (one value for most
    # pixels) is a spike that drives the search to clip the strokes (digits: 15 accuracy points lost).
    scales = {n: float(dq.threshold(h, "minmax" if method == "kl" and n.op == "placeholder" else method,
                                    percentile)[1]) for n, h in hists.items()}
    for sg in subgraphs:
        for layer in sg.layers:
            if layer.kind == "maxpool":
                scales[layer.out_node] = scales[layer.inputs[0]]
    return scales


def _bounds(act, scale):
    if act is None:
        return -128, 127
    if act == "relu":
        return 0, 127
    return 0, int(_C.quant.relu6_bound(float(scale)))


@dataclass
class LayerPlan:
    layer: object                 # partition.Layer
    desc: dict                    # the ISA layer dict (offsets included)
    in_scale: float
    out_scale: float
    constants: list = field(default_factory=list)   # (what, bytes tensor) before placement
    words: list = field(default_factory=list)
    cost: dict = field(default_factory=dict)


@dataclass
class Port:
    """A tensor crossing the boundary: its fx node, shape (C, H, W), scale and device offset."""
    node: object
    shape: tuple
    scale: float
    offset: int = 0

    @property
    def device_bytes(self):
        c, h, w = self.shape
        return (c + 7) // 8 * 8 * h * w


@dataclass
class SubgraphPlan:
    index: int
    layers: list
    inputs: list
    outputs: list
    memory_bytes: int
    constant_bytes: int
    image: torch.Tensor           # uint8, constants placed, activations zero
    program: torch.Tensor         # uint32 stream


def _quantize_layer(layer, scales, per_channel):
    s_in, s_out = scales[layer.inputs[0]], scales[layer.out_node]
    c, h, w = layer.in_shape
    lo, hi = _bounds(layer.act, s_out)
    k = layer.out_shape[0]
    desc = dict(type=layer.kind, in_channels=c, out_channels=k, in_h=h, in_w=w, kernel=layer.kernel,
                stride=layer.stride, pad=layer.pad, act_lo=lo, act_hi=hi)
    plan = LayerPlan(layer, desc, s_in, s_out)
    if layer.kind in ("conv3x3", "conv1x1", "dw3x3"):
        m = layer.module
        wq, ws = dq.quantize_weight(m.weight, per_channel)
        bias = m.bias.detach() if m.bias is not None else torch.zeros(k)
        bq = dq.quantize_bias(bias, s_in, ws)
        mult, shift = _C.quant.layer_requant(float(s_in), ws.contiguous(), float(s_out), k)
        wpack = torch.from_numpy(_C.fpga.pack_weights(layer.kind, k, c, wq.contiguous()))
        plan.constants = [("weights", wpack), ("params", torch.from_numpy(_C.fpga.pack_params(bq, mult, shift)))]
    elif layer.kind == "add":
        s_b = scales[layer.inputs[1]]
        ma, sa = dq.requant_params(s_in / s_out)
        mb, sb = dq.requant_params(s_b / s_out)
        full = lambda v: torch.full((c,), v, dtype=torch.int32)
        plan.constants = [("params", torch.from_numpy(_C.fpga.pack_add_params(full(ma), full(sa), full(mb), full(sb))))]
        desc.update(kernel=1, stride=1, pad=0)
    return plan


class _Allocator:
    """First-fit allocation of 64-byte aligned activation buffers above ``base``."""

    def __init__(self, base):
        self.base, self.live, self.end = base, [], base

    def alloc(self, size):
        size = _align(size)
        off = self.base
        for o, s in sorted(self.live):
            if off + size <= o:
                break
            off = max(off, o + s)
        self.live.append((off, size))
        self.end = max(self.end, off + size)
        return off

    def free(self, off):
        self.live = [(o, s) for o, s in self.live if o != off]


def lower_subgraph(sg, scales, per_channel):
    """Quantizes, places and encodes one subgraph."""
    plans = [_quantize_layer(layer, scales, per_channel) for layer in sg.layers]
    # Constants first.
    offset = 0
    for p in plans:
        for what, data in p.constants:
            p.desc["weight_offset" if what == "weights" else "param_offset"] = offset
            offset = _align(offset + data.numel())
    constant_bytes = offset
    # Activations: liveness in layer order; -1 = before the first layer.
    shape_of = {n: layer.out_shape for layer in sg.layers for n in [layer.out_node]}
    inputs = []
    for n in sg.inputs:
        shape = tuple(n.meta["tensor_meta"].shape[1:])
        inputs.append(Port(n, shape, scales[n]))
        shape_of[n] = shape
    last_use = {}
    for i, layer in enumerate(sg.layers):
        for n in layer.inputs:
            last_use[n] = i
    for n in sg.outputs:
        last_use[n] = len(sg.layers)
    alloc, where = _Allocator(constant_bytes), {}

    def place(n):
        c, h, w = shape_of[n]
        where[n] = alloc.alloc(int(_C.fpga.activation_bytes(c, h, w)))

    for port in inputs:
        place(port.node)
        port.offset = where[port.node]
    for i, (layer, p) in enumerate(zip(sg.layers, plans)):
        place(layer.out_node)
        p.desc["input_offset"] = where[layer.inputs[0]]
        if layer.kind == "add":
            p.desc["input_b_offset"] = where[layer.inputs[1]]
        p.desc["output_offset"] = where[layer.out_node]
        for n in set(layer.inputs) | {layer.out_node}:
            if last_use.get(n, -2) <= i and where.get(n) is not None:
                alloc.free(where.pop(n))
    memory_bytes = max(_ALIGN, _align(alloc.end))
    outputs = [Port(n, shape_of[n], scales[n], where[n]) for n in sg.outputs]

    image = torch.zeros(memory_bytes, dtype=torch.uint8)
    for p in plans:
        for what, data in p.constants:
            off = p.desc["weight_offset" if what == "weights" else "param_offset"]
            image[off:off + data.numel()] = data
    program = torch.from_numpy(_C.fpga.encode([p.desc for p in plans], memory_bytes))
    words = program.tolist()
    for i, p in enumerate(plans):
        p.words = words[4 + 13 * i: 4 + 13 * (i + 1)]
        p.cost = dict(_C.fpga.estimate(p.desc))
    return SubgraphPlan(sg.index, plans, inputs, outputs, memory_bytes, constant_bytes, image, program)
