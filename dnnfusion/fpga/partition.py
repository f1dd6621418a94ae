"""Tracing, batch-norm folding and partitioning of a CNN for the fpga target.

``trace_and_fold`` symbolically traces an eval-mode copy of the model and folds every batch norm
that follows a convolution (the convolution's only user, the convolution called once) into it.
``partition`` decides per fx node whether it runs on the accelerator (ISA v1 layer types) or on the
CPU, and groups accelerator layers into subgraphs:

* conv3x3 (stride 1|2, padding 0|1, groups 1), depthwise 3x3 (groups = in = out channels, stride
  1|2, padding 0|1), conv1x1 (stride 1|2, padding 0, groups 1); dilation 1, zero padding mode;
* max pooling (square kernel 1..8, stride 1..8, padding < kernel, dilation 1, floor mode);
* residual add (``+`` / ``torch.add`` without alpha) of two same-shape tensors that accelerator
  layers produce;
* each optionally followed by a ReLU / ReLU6 / hardtanh(0, 6) that is its producer's only user,
  fused as clamp bounds.

An accelerator layer joins the subgraph of the layer producing its (first possible) input unless
that would make the subgraph depend on itself through a CPU op; otherwise it starts a new one. So
maximal connected runs of supported layers are subgraphs, and a network whose layers are all
supported gives exactly one.
"""
import copy
import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from .. import quantize as dq

ISA_TYPES = "conv3x3, conv1x1, dw3x3, maxpool, add"
_MAX_CHANNELS, _MAX_SPATIAL = 4096, 2048


@dataclass
class Layer:
    """One accelerator layer: the fx nodes it replaces and what the ISA needs to encode it."""
    kind: str                     # conv3x3 / conv1x1 / dw3x3 / maxpool / add
    nodes: list                   # fx nodes (the op, then a fused activation)
    inputs: list                  # fx nodes whose values it reads (1, or 2 for add)
    in_shape: tuple               # (C, H, W)
    out_shape: tuple
    kernel: int = 1
    stride: int = 1
    pad: int = 0
    act: str = None               # None / "relu" / "relu6"
    module: nn.Module = None      # the (BN-folded) convolution
    subgraph: int = -1

    @property
    def out_node(self):
        return self.nodes[-1]

    @property
    def name(self):
        return "+".join(n.name for n in self.nodes)


@dataclass
class Subgraph:
    index: int
    layers: list = field(default_factory=list)
    inputs: list = field(default_factory=list)   # fx nodes read from outside, in first-use order
    outputs: list = field(default_factory=list)  # out_nodes used outside the subgraph


@dataclass
class Partition:
    graph_module: fx.GraphModule
    layers: list
    subgraphs: list
    layer_of: dict      # fx node -> Layer (every node of the layer)
    cpu_reason: dict    # fx node -> why it runs on the CPU
    folded: dict        # name of a batch-norm node -> the conv node it was folded into


def _shape(node):
    meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    if meta is None or not hasattr(meta, "shape"):
        return None
    return tuple(meta.shape)


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def trace_and_fold(model):
    """(GraphModule, {bn node name: conv node name}) of an eval-mode deep copy of ``model``."""
    work = copy.deepcopy(model).eval()
    try:
        gm = fx.symbolic_trace(work)
    except Exception as e:
        raise ValueError(f"dnnfusion.fpga.compile: the model cannot be traced by torch.fx.symbolic_trace "
                         f"(data-dependent control flow?): {type(e).__name__}: {e}") from e
    modules = dict(gm.named_modules())
    calls = {}
    for n in gm.graph.nodes:
        if n.op == "call_module":
            calls[n.target] = calls.get(n.target, 0) + 1
    folded = {}
    for n in list(gm.graph.nodes):
        if n.op != "call_module" or not isinstance(modules.get(n.target), nn.BatchNorm2d):
            continue
        src = n.args[0] if n.args else None
        if not (isinstance(src, fx.Node) and src.op == "call_module" and isinstance(modules.get(src.target), nn.Conv2d)
                and len(src.users) == 1 and calls[src.target] == 1 and calls[n.target] == 1):
            continue
        bn, conv = modules[n.target], modules[src.target]
        if bn.running_mean is None or bn.num_features != conv.out_channels:
            continue
        w, b = dq.fold_bn(conv.weight, conv.bias, bn)
        with torch.no_grad():
            conv.weight = nn.Parameter(w.to(conv.weight.dtype), requires_grad=False)
            conv.bias = nn.Parameter(b.to(conv.weight.dtype), requires_grad=False)
        n.replace_all_uses_with(src)
        gm.graph.erase_node(n)
        folded[n.name] = src.name
    gm.graph.lint()
    gm.recompile()
    return gm, folded


def _activation(node, modules):
    """'relu' / 'relu6' when ``node`` is a ReLU-like op on its first argument, else None."""
    if node.op == "call_module":
        m = modules.get(node.target)
        if isinstance(m, nn.ReLU6):
            return "relu6"
        if isinstance(m, nn.ReLU):
            return "relu"
        if isinstance(m, nn.Hardtanh) and m.min_val == 0.0 and m.max_val == 6.0:
            return "relu6"
        return None
    if node.op == "call_function":
        if node.target in (F.relu, torch.relu, torch.relu_, F.relu_):
            return "relu"
        if node.target is F.relu6:
            return "relu6"
        if node.target is F.hardtanh:
            lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
            hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
            return "relu6" if (lo, hi) == (0.0, 6.0) or (lo, hi) == (0, 6) else None
    if node.op == "call_method" and node.target in ("relu", "relu_"):
        return "relu"
    return None


def _op_name(node, modules):
    if node.op == "call_module":
        return type(modules[node.target]).__name__
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    return f"{node.op}:{node.target}"


def _check_dims(c, h, w, k_out=None):
    if c > _MAX_CHANNELS or (k_out or 1) > _MAX_CHANNELS:
        return f"more than {_MAX_CHANNELS} channels (ISA v1 limit)"
    if h > _MAX_SPATIAL or w > _MAX_SPATIAL:
        return f"input larger than {_MAX_SPATIAL}x{_MAX_SPATIAL} (ISA v1 limit)"
    return None


def _conv_layer(node, m, shape_in, shape_out):
    """(Layer, None) or (None, reason) for a Conv2d call."""
    if shape_in is None or len(shape_in) != 4:
        return None, "input shape unknown or not NCHW"
    _, c, h, w = shape_in
    k, s, d = _pair(m.kernel_size), _pair(m.stride), _pair(m.dilation)
    p = m.padding
    if isinstance(p, str):
        p = (0, 0) if p == "valid" else tuple((kk - 1) // 2 for kk in k)
    p = _pair(p)
    if m.padding_mode != "zeros":
        return None, f"padding_mode '{m.padding_mode}' (the datapath pads with zeros)"
    if d != (1, 1):
        return None, f"dilation {d} (ISA v1 has none)"
    if k[0] != k[1] or s[0] != s[1] or p[0] != p[1]:
        return None, f"non-square kernel/stride/padding {k}/{s}/{p}"
    k, s, p = k[0], s[0], p[0]
    if s not in (1, 2):
        return None, f"stride {s} (ISA v1 convolutions take stride 1 or 2)"
    if k == 3:
        if p not in (0, 1):
            return None, f"3x3 padding {p} (ISA v1 takes 0 or 1)"
        if m.groups == 1:
            kind = "conv3x3"
        elif m.groups == m.in_channels == m.out_channels:
            kind = "dw3x3"
        else:
            return None, f"groups={m.groups} (ISA v1 runs groups 1 or depthwise groups = channels)"
    elif k == 1:
        if p != 0 or m.groups != 1:
            return None, f"1x1 with padding {p} / groups {m.groups} (ISA v1: padding 0, groups 1)"
        kind = "conv1x1"
    else:
        return None, f"{k}x{k} kernel (ISA v1 runs 3x3 and 1x1 convolutions)"
    if h + 2 * p < k or w + 2 * p < k:
        return None, "input smaller than the kernel"
    reason = _check_dims(c, h, w, m.out_channels)
    if reason:
        return None, reason
    return Layer(kind, [node], [node.args[0]], (c, h, w), tuple(shape_out[1:]), k, s, p, module=m), None


def _pool_params(node, modules):
    if node.op == "call_module":
        m = modules[node.target]
        return m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, m.return_indices
    names = ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"]
    defaults = [None, None, 0, 1, False, False]
    vals = list(node.args[1:]) + defaults[len(node.args) - 1:]
    vals = [node.kwargs.get(nm, v) for nm, v in zip(names, vals)]
    if vals[1] is None or vals[1] == []:
        vals[1] = vals[0]
    return tuple(vals)


def _pool_layer(node, modules, shape_in, shape_out):
    if shape_in is None or len(shape_in) != 4:
        return None, "input shape unknown or not NCHW"
    k, s, p, d, ceil, ret = _pool_params(node, modules)
    k, s, p, d = _pair(k), _pair(s if s is not None else k), _pair(p), _pair(d)
    if ceil or ret or d != (1, 1):
        return None, "ceil_mode / return_indices / dilation (ISA v1: floor mode, no indices, no dilation)"
    if k[0] != k[1] or s[0] != s[1] or p[0] != p[1]:
        return None, "non-square pooling window"
    k, s, p = int(k[0]), int(s[0]), int(p[0])
    if not (1 <= k <= 8 and 1 <= s <= 8 and 0 <= p < k):
        return None, f"max pool kernel {k} stride {s} padding {p} (ISA v1: kernel 1..8, stride 1..8, padding < kernel)"
    _, c, h, w = shape_in
    reason = _check_dims(c, h, w)
    if reason:
        return None, reason
    return Layer("maxpool", [node], [node.args[0]], tuple(shape_in[1:]), tuple(shape_out[1:]), k, s, p), None


def _classify(node, modules, produced):
    """(Layer, None) for a supported op, (None, reason) otherwise."""
    shape_out = _shape(node)
    if node.op == "call_module":
        m = modules[node.target]
        if isinstance(m, nn.Conv2d):
            return _conv_layer(node, m, _shape(node.args[0]), shape_out)
        if isinstance(m, nn.MaxPool2d):
            return _pool_layer(node, modules, _shape(node.args[0]), shape_out)
        if _activation(node, modules):
            return None, "activation whose producer is not an accelerator layer it can be fused into"
        if isinstance(m, nn.BatchNorm2d):
            return None, "batch norm not directly after a convolution (cannot be folded)"
        return None, f"{type(m).__name__} is not an accelerator layer type (ISA v1: {ISA_TYPES})"
    if node.op == "call_function" and node.target is F.max_pool2d:
        return _pool_layer(node, modules, _shape(node.args[0]), shape_out)
    if node.op == "call_function" and node.target in (operator.add, torch.add, operator.iadd):
        a = node.args[0] if node.args else None
        b = node.args[1] if len(node.args) > 1 else node.kwargs.get("other")
        if node.kwargs.get("alpha", 1) != 1 or not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
            return None, "add with a scalar or alpha"
        if a not in produced or b not in produced:
            return None, "add of a tensor the accelerator did not produce (both inputs must be accelerator-resident)"
        sa, sb = _shape(a), _shape(b)
        if sa is None or sa != sb or len(sa) != 4 or shape_out != sa:
            return None, f"add with broadcasting or non-NCHW shapes {sa} + {sb}"
        return Layer("add", [node], [a, b], tuple(sa[1:]), tuple(sa[1:])), None
    if _activation(node, modules):
        return None, "activation whose producer is not an accelerator layer it can be fused into"
    return None, f"{_op_name(node, modules)} is not an accelerator layer type (ISA v1: {ISA_TYPES})"


def partition(gm):
    """Classifies every node of a shape-propagated, BN-folded GraphModule and forms the subgraphs."""
    modules = dict(gm.named_modules())
    layers, layer_of, cpu_reason, produced = [], {}, {}, set()
    fused = set()
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr") or node in fused:
            continue
        layer, reason = _classify(node, modules, produced)
        if layer is None:
            cpu_reason[node] = reason
            continue
        if len(node.users) == 1:
            user = next(iter(node.users))
            if _activation(user, modules) and user.args and user.args[0] is node:
                layer.act = _activation(user, modules)
                layer.nodes.append(user)
                fused.add(user)
        layers.append(layer)
        for n in layer.nodes:
            layer_of[n] = layer
        produced.add(layer.out_node)

    # Subgraphs: join the producer's subgraph unless that closes a cycle through CPU ops.
    deps = {}          # fx node -> set of subgraph ids its value depends on
    ext_deps = []      # subgraph id -> ids its external inputs depend on

    def closure(ids):
        seen, todo = set(), list(ids)
        while todo:
            i = todo.pop()
            if i not in seen:
                seen.add(i)
                todo.extend(ext_deps[i])
        return seen

    subgraphs = []
    for node in gm.graph.nodes:
        layer = layer_of.get(node)
        if layer is None:
            deps[node] = set().union(*(deps.get(i, set()) for i in node.all_input_nodes))
            continue
        if node is not layer.nodes[0]:
            deps[node] = {layer.subgraph}
            continue
        chosen = None
        for src in layer.inputs:
            if src not in layer_of:
                continue
            sid = layer_of[src].subgraph
            ok = all(sid not in closure(deps[i]) for i in layer.inputs
                     if not (i in layer_of and layer_of[i].subgraph == sid))
            if ok:
                chosen = sid
                break
        if chosen is None:
            chosen = len(subgraphs)
            subgraphs.append(Subgraph(chosen))
            ext_deps.append(set())
        layer.subgraph = chosen
        subgraphs[chosen].layers.append(layer)
        for i in layer.inputs:
            if not (i in layer_of and layer_of[i].subgraph == chosen):
                ext_deps[chosen] |= deps[i]
                if i not in subgraphs[chosen].inputs:
                    subgraphs[chosen].inputs.append(i)
        deps[node] = {chosen}

    for sg in subgraphs:
        members = {n for layer in sg.layers for n in layer.nodes}
        for layer in sg.layers:
            if any(u not in members for u in layer.out_node.users):
                sg.outputs.append(layer.out_node)
    return layers, subgraphs, layer_of, cpu_reason
