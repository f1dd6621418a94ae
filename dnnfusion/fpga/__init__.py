"""dnnfusion.fpga: int8 CNN inference on an accelerator card, through OpenCL.

Compile a trained CNN with a few hundred calibration images::

    import dnnfusion
    fm = dnnfusion.fpga.compile(model, calib_images)   # calib: a tensor [N, C, H, W] or batches
    y = fm(x)                   # accelerator subgraphs on the OpenCL device, the rest on the CPU
    y_sim = fm.simulate(x)      # the same with the bit-exact C++ model of the accelerator
    print(fm.report)            # what ran where and why, boundaries, words, cycles, DDR bytes
    fm.program                  # the instruction stream (torch.uint32), fm.programs: every subgraph's
    dnnfusion.fpga.disassemble(fm.program)   # one dict per layer: fields, words, text

The same through ``torch.compile``: ``torch.compile(model, backend="dnnfusion", options={"target":
"fpga", "calib_data": calib_images})`` (options ``calibration``, ``per_channel``, ``fpga_platform``,
``fpga_binary``; see dnnfusion/targets/fpga.py), and ``dnnfusion.explain`` prints the report.

What happens in ``compile``:

1. The eval-mode model is traced with ``torch.fx.symbolic_trace`` and every batch norm that directly
   follows a convolution is folded into it.
2. Partition. Supported layers (ISA version 1 of the accelerator): 3x3 convolutions (stride 1 or 2,
   padding 0 or 1, groups 1), depthwise 3x3 (groups = channels), 1x1 convolutions (padding 0,
   stride 1 or 2), max pooling (square kernel up to 8, padding < kernel, floor mode) and residual
   adds of two tensors the accelerator computed, each with an optional following ReLU / ReLU6 /
   hardtanh(0, 6) fused as clamp bounds. Maximal connected runs of them become accelerator
   subgraphs; everything else (SiLU, sigmoid, average pooling, linear, softmax, upsampling, 7x7
   convolutions, ...) runs on the CPU in fp32. Channels are padded to multiples of 8 on the device.
3. Calibration: the fp32 model runs on ``calib_data``; a histogram of every accelerator tensor
   (subgraph inputs, every layer output) gives its per-tensor int8 scale by ``calibration``:
   ``"kl"`` (TensorRT's entropy method), ``"minmax"`` or ``"percentile"`` (99.99 %).
4. Quantization (``dnnfusion.quantize``, the C++ rules): weights symmetric int8 per output channel
   (or per tensor with ``per_channel=False``), biases int32, int32 accumulation, requantization by
   a per-output-channel multiplier and right shift (round half up, saturate to the clamp bounds);
   adds requantize each input into the output scale.
5. Device memory per subgraph: constants (packed weights, parameter tables) first, then activation
   buffers reused once their tensors are dead, all 64-byte aligned; the layers are encoded as the
   accelerator's instruction stream (13 register words per layer, checksummed).

At run time each subgraph call is an explicit boundary: fp32 inputs are quantized on entry
(``clamp(round_half_away_from_zero(x / scale), -128, 127)``) into the blocked int8 layout and
written to device memory, the stream runs, outputs are read back and dequantized (``q * scale``).
A batch runs image by image (the accelerator runs batch 1). The CPU parts run through
``torch.compile(backend="dnnfusion")`` (``cpu_backend="eager"`` for plain PyTorch); the
accelerator calls are opaque to Dynamo. ``fm(x)`` and ``fm.simulate(x)`` agree bit for bit.

Where it runs: any OpenCL platform. By default PoCL's CPU device (``apt install pocl-opencl-icd``)
runs the datapath kernels built from source; ``platform="xilinx"`` (a substring of the platform's
name or vendor) with ``fpga_binary="datapath.xclbin"`` (or an Intel ``.aocx``) runs them on a card.
The OpenCL loader can be forced with $DNNFUSION_OPENCL_LIBRARY, the platform with
$DNNFUSION_OPENCL_PLATFORM.

Errors: ``ValueError`` for bad arguments (empty calibration data, a model that does not run on it,
an unknown calibration method, a platform that does not exist — the message lists the platforms
found, a missing binary); ``dnnfusion.TargetUnavailable`` at compile time on a machine without a
usable OpenCL platform.
"""
import heapq
import operator
import os

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp

from .. import _C
from . import lower, partition as part
from .report import FpgaReport, subgraph_dict
from .runtime import FpgaModule, FpgaSubgraph, RunMode

__all__ = ["compile", "disassemble", "disassemble_text", "FpgaModule", "FpgaReport", "CALIBRATION_METHODS",
           "platforms"]

CALIBRATION_METHODS = ("kl", "minmax", "percentile")
_CPU_BACKENDS = ("dnnfusion", "eager")
_CALIB_CHUNK = 32


def platforms():
    """The OpenCL platforms this machine has (name, vendor, version, devices); [] without any."""
    try:
        return list(_C.fpga.list_platforms())
    except _C.TargetUnavailable:  # no OpenCL loader at all
        return []


def _check_platform(platform):
    reason = _C.fpga.opencl_unavailable_reason()
    if reason:
        raise _C.TargetUnavailable(f"dnnfusion.fpga.compile: no usable OpenCL platform on this machine: {reason}")
    found = _C.fpga.list_platforms()
    if platform is None:
        wanted = os.environ.get("DNNFUSION_OPENCL_PLATFORM", "")
        if not wanted:
            pocl = [p for p in found if "portable computing language" in p["name"].lower()]
            return (pocl or found)[0]["name"]
        platform = wanted
    if not isinstance(platform, str) or not platform:
        raise ValueError(f"dnnfusion.fpga.compile: platform must be a non-empty string or None, got {platform!r}")
    s = platform.lower()
    names = ", ".join(f"'{p['name']}' ({p['vendor']})" for p in found) or "none"
    exact = [p for p in found if p["name"].lower() == s]
    matches = exact or [p for p in found if s in p["name"].lower() or s in p["vendor"].lower()]
    if not matches:
        raise ValueError(f"dnnfusion.fpga.compile: no OpenCL platform matches {platform!r}; platforms found: {names}")
    if len(matches) > 1:
        raise ValueError(f"dnnfusion.fpga.compile: platform {platform!r} matches several platforms; "
                         f"platforms found: {names}")
    return matches[0]["name"]


def _calibration_batches(calib_data):
    if isinstance(calib_data, torch.Tensor):
        if calib_data.dim() == 0 or calib_data.shape[0] == 0:
            raise ValueError("dnnfusion.fpga.compile: calibration data is empty")
        return list(calib_data.split(_CALIB_CHUNK))
    if calib_data is None or isinstance(calib_data, (str, bytes)):
        raise ValueError("dnnfusion.fpga.compile: calib_data must be a tensor of images [N, C, H, W] or an iterable "
                         f"of input batches / (input, label) tuples, got {type(calib_data).__name__}")
    try:
        items = list(calib_data)
    except TypeError:
        raise ValueError("dnnfusion.fpga.compile: calib_data must be a tensor of images or an iterable of batches, "
                         f"got {type(calib_data).__name__}") from None
    batches = []
    for i, item in enumerate(items):
        x = item[0] if isinstance(item, (tuple, list)) and item else item
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise ValueError(f"dnnfusion.fpga.compile: calibration batch {i} is not a floating-point tensor "
                             f"(got {type(x).__name__})")
        if x.dim() == 0 or x.shape[0] == 0:
            continue
        batches.append(x.detach().to("cpu", torch.float32))
    if not batches:
        raise ValueError("dnnfusion.fpga.compile: calibration data is empty")
    return batches


def _toposort(gm):
    """Rebuilds gm.graph in a topological order that keeps the original order where it can."""
    g = gm.graph
    nodes = list(g.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    out = [n for n in nodes if n.op == "output"]
    pending = {n: len(set(n.all_input_nodes)) for n in nodes if n.op != "output"}
    ready = [pos[n] for n, d in pending.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = nodes[heapq.heappop(ready)]
        order.append(n)
        for u in n.users:
            if u in pending:
                pending[u] -= 1
                if pending[u] == 0:
                    heapq.heappush(ready, pos[u])
    if len(order) != len(pending):
        raise RuntimeError("dnnfusion.fpga: partition produced a cyclic graph (internal error)")
    new = fx.Graph()
    env = {}
    for n in order + out:
        env[n] = new.node_copy(n, lambda x: env[x])
    gm.graph = new
    gm.recompile()


def _rewrite(gm, subgraphs, plans, mode, platform, binary):
    g = gm.graph
    output = next(n for n in g.nodes if n.op == "output")
    for sg, plan in zip(subgraphs, plans):
        name = f"fpga_subgraph_{sg.index}"
        gm.add_submodule(name, FpgaSubgraph(plan, mode, platform, binary))
        members = {n for layer in sg.layers for n in layer.nodes}
        with g.inserting_before(output):
            call = g.call_module(name, tuple(sg.inputs))
            gets = [g.call_function(operator.getitem, (call, i)) for i in range(len(sg.outputs))]
        for node, get in zip(sg.outputs, gets):
            node.replace_all_uses_with(get, delete_user_cb=lambda user: user not in members)
        for node in reversed([n for n in g.nodes if n in members]):
            g.erase_node(node)
    _toposort(gm)
    gm.graph.lint()


def _op_rows(gm, layer_of, cpu_reason, folded):
    modules = dict(gm.named_modules())
    by_conv = {}
    for bn, conv in folded.items():
        by_conv.setdefault(conv, []).append(bn)
    rows = []
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output", "get_attr"):
            continue
        op = part._op_name(n, modules)
        layer = layer_of.get(n)
        if layer is not None:
            detail = layer.kind if n is layer.nodes[0] else f"{layer.act} fused into {layer.nodes[0].name} as clamp bounds"
            rows.append(dict(node=n.name, op=op, target="fpga", subgraph=layer.subgraph, detail=detail))
        else:
            rows.append(dict(node=n.name, op=op, target="cpu", subgraph=None, detail=cpu_reason.get(n, "")))
        for bn in by_conv.get(n.name, []):
            rows.append(dict(node=bn, op="BatchNorm2d", target="folded", subgraph=None,
                             detail=f"folded into {n.name}"))
    return rows


def compile(model, calib_data, *, calibration="kl", per_channel=True, platform=None, fpga_binary=None,
            cpu_backend="dnnfusion"):
    """Compiles ``model`` for the fpga target; returns an :class:`FpgaModule` (see the module doc).

    ``calib_data``: a float tensor of images ``[N, C, H, W]`` (split into batches of 32), or an
    iterable of input batches or ``(input, label, ...)`` tuples. ``calibration``: "kl", "minmax" or
    "percentile". ``per_channel``: per-output-channel (True) or per-tensor weight scales.
    ``platform``: OpenCL platform name or vendor substring (None: $DNNFUSION_OPENCL_PLATFORM, else
    PoCL, else the first). ``fpga_binary``: a vendor device binary of the datapath kernels (None:
    build them from source). ``cpu_backend``: "dnnfusion" or "eager" for the CPU parts.
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"dnnfusion.fpga.compile: model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(calibration, str) or calibration not in CALIBRATION_METHODS:
        raise ValueError(f"dnnfusion.fpga.compile: unknown calibration method {calibration!r}; "
                         f"use one of {', '.join(CALIBRATION_METHODS)}")
    if not isinstance(per_channel, bool):
        raise ValueError(f"dnnfusion.fpga.compile: per_channel must be True or False, got {per_channel!r}")
    if cpu_backend not in _CPU_BACKENDS:
        raise ValueError(f"dnnfusion.fpga.compile: cpu_backend must be one of {', '.join(_CPU_BACKENDS)}, "
                         f"got {cpu_backend!r}")
    if fpga_binary is not None:
        if not isinstance(fpga_binary, (str, os.PathLike)) or not os.path.isfile(fpga_binary):
            raise ValueError(f"dnnfusion.fpga.compile: fpga_binary must be the path of a device binary file "
                             f"(.aocx / .xclbin), got {fpga_binary!r}")
        fpga_binary = os.fspath(fpga_binary)
    batches = _calibration_batches(calib_data)
    platform_name = _check_platform(platform)

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(batches[0])
    except Exception as e:
        raise ValueError(f"dnnfusion.fpga.compile: the model cannot run calibration batch 0 "
                         f"(shape {tuple(batches[0].shape)}): {type(e).__name__}: {e}") from e
    finally:
        model.train(was_training)

    gm, folded = part.trace_and_fold(model)
    with torch.no_grad():
        ShapeProp(gm).propagate(batches[0][:1])
    layers, subgraphs, layer_of, cpu_reason = part.partition(gm)
    rows = _op_rows(gm, layer_of, cpu_reason, folded)
    scales = lower.calibrate(gm, batches, subgraphs, calibration)
    plans = [lower.lower_subgraph(sg, scales, per_channel) for sg in subgraphs]

    mode = RunMode()
    _rewrite(gm, subgraphs, plans, mode, platform if platform is not None else "", fpga_binary)
    report = FpgaReport(ops=rows, subgraphs=[subgraph_dict(p) for p in plans], calibration=calibration,
                        per_channel=per_channel, platform=platform_name)
    fm = FpgaModule(gm, [getattr(gm, f"fpga_subgraph_{sg.index}") for sg in subgraphs], mode, report, cpu_backend)
    return fm


def disassemble(words):
    """One dict per layer of a valid stream: its fields (``type`` by name, sizes, window, clamp,
    offsets), ``index``, ``words`` (its 13 register words) and ``text`` (their disassembly), plus
    the stream's ``memory_bytes``. A stream that does not validate raises ValueError naming the
    word and field (use :func:`disassemble_text` to look at it anyway)."""
    layers, memory_bytes = _C.fpga.decode(words)
    lines = _C.fpga.disassemble_lines(words)
    raw = words.tolist() if hasattr(words, "tolist") else list(words)
    out = []
    for i, d in enumerate(layers):
        lo, hi = 4 + 13 * i, 4 + 13 * (i + 1)
        d = dict(d)
        d.update(index=i, memory_bytes=memory_bytes, words=[int(w) & 0xFFFFFFFF for w in raw[lo:hi]], text=lines[lo:hi])
        out.append(d)
    return out


def disassemble_text(words):
    """One line per word ("0004 30000001 SWITCH conv3x3"); never refuses a stream."""
    return list(_C.fpga.disassemble_lines(words))
