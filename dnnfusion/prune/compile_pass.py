"""Compile-time pruning, ``torch.compile(m, backend="dnnfusion", options={"prune": ratio})``: the same
dependency analysis, C++ scores, keep plan and verification as dnnfusion.prune(), applied to the
graph the backend receives from Dynamo, calibrated on its example inputs.

Precondition: a Dynamo GraphModule whose parameters/buffers are graph inputs marked static
(`static` = their positions), real example inputs (concrete values also for a dynamic graph's size
inputs), and a ratio in (0, 1).
Postcondition: a PrunedGraph holding a new GraphModule (the input graph and tensors are untouched)
that computes the pruned model, the example inputs with each pruned tensor replaced by its smaller
slice, and a PruneReport. The channels kept are those of the first plan made for the same
parameter tensors and ratio (a Dynamo recompile for another shape prunes the same way), else chosen
on these inputs. Shape literals that Dynamo baked from a channel count (conv `groups`,
layer_norm shapes, view/reshape/unflatten/expand sizes, split sizes) are rewritten for the new
counts, node metadata carries the new shapes, and the result passes dnnfusion.prune()'s checks
(same output shapes, every op pairs the channels it paired before). Anything else raises, and the
caller compiles the graph unpruned.

Why the Dynamo graph and not the aot_autograd graph: Dynamo keeps most shape arithmetic symbolic
in the user's terms (flatten(x, 1), chunk(2), view(n, -1, h, w)), while the ATen graph spells out
every size, so far fewer literals need rewriting here.
"""
import copy
import threading
import weakref
from dataclasses import dataclass, field

import torch
import torch.fx
import torch.nn as nn

from .api import _flat_tensors, _verify, plan_structured
from .report import LayerChange, PruneReport, count_flops


class PruneSkipped(Exception):
    """The graph cannot be pruned (it is then compiled unpruned); the message says why."""


@dataclass
class PrunedGraph:
    gm: torch.fx.GraphModule
    inputs: list  # the example inputs, pruned tensors at their static positions
    replaced: dict = field(default_factory=dict)  # graph input position -> pruned tensor
    report: PruneReport = None
    reused_plan: bool = False  # the channels chosen when this model was first compiled

    def summary(self):
        r = self.report
        calib = "plan of the model's first compile" if self.reused_plan else "calibrated on the example inputs"
        return (f"pruned at compile time (prune={r.ratio}, criterion {r.criterion}, {calib}): {r.classes_before} -> {r.classes_after} channel classes in {r.groups} groups, "
                f"{len(self.replaced)} tensors sliced, parameters {r.params_before:,} -> {r.params_after:,} "
                f"(-{100 * r.param_reduction:.1f}%), FLOPs {r.flops_before:,} -> {r.flops_after:,} "
                f"(-{100 * r.flop_reduction:.1f}%)")


class _GraphAsModule(nn.Module):
    """An nn.Module view of a Dynamo graph: the static inputs become buffers (named after their
    placeholders), forward takes the remaining inputs in order. dnnfusion.prune's trace() and
    verification work on any module, so they run unchanged on this one."""

    def __init__(self, gm, n_inputs, static_names):
        super().__init__()
        self._graph = [gm]  # in a list: not a submodule, whose tensors would be collected twice
        self._n = n_inputs
        self._static = static_names  # position -> buffer name
        self._dynamic = [i for i in range(n_inputs) if i not in static_names]

    def forward(self, *dynamic):
        args = [None] * self._n
        for pos, name in self._static.items():
            args[pos] = getattr(self, name)
        for pos, x in zip(self._dynamic, dynamic):
            args[pos] = x
        return self._graph[0](*args)


def _as_module(gm, inputs, static_names):
    mod = _GraphAsModule(gm, len(inputs), static_names)
    for pos, name in static_names.items():
        mod.register_buffer(name, inputs[pos].detach())
    return mod


def prune_graph(gm, example_inputs, static, ratio, omega=0.8, lam=0.5, criterion="aukc", seed=0):
    """Returns a PrunedGraph (see the module docstring) or raises (PruneSkipped: the reason)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # Every step runs real tensors (traces, calibration, checks), never the compiler's fake ones.
    with unset_fake_temporarily(), torch.no_grad():
        return _prune_graph(gm, example_inputs, static, ratio, omega, lam, criterion, seed)


def _prune_graph(gm, example_inputs, static, ratio, omega, lam, criterion, seed):
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        raise PruneSkipped("the graph holds its weights as attributes, not as inputs")
    static = [i for i in static if isinstance(example_inputs[i], torch.Tensor)]
    if not static:
        raise PruneSkipped("the graph has no parameters")
    phs = list(gm.graph.find_nodes(op="placeholder"))
    if len(phs) != len(example_inputs):
        raise PruneSkipped("graph inputs do not line up with the example inputs")
    static_names = {}
    for i in static:
        name = phs[i].name
        static_names[i] = name if not hasattr(nn.Module, name) else f"p_{name}"
    dynamic = [x for i, x in enumerate(example_inputs) if i not in static_names]
    if not any(isinstance(x, torch.Tensor) for x in dynamic):
        raise PruneSkipped("no tensor inputs to calibrate on")

    work = _as_module(gm, example_inputs, static_names).eval()
    recorder = _ShapeRecorder(gm)
    with torch.no_grad():
        ref_out = recorder.run(*example_inputs)
    ref_shapes = [tuple(t.shape) for t in _flat_tensors(ref_out)]
    del ref_out
    is_param = {static_names[i]: isinstance(example_inputs[i], nn.Parameter) for i in static}
    report = PruneReport(criterion=criterion, ratio=float(ratio), structured=True)
    report.params_before = sum(example_inputs[i].numel() for i in static if is_param[static_names[i]])
    report.flops_before = count_flops(work, dynamic)

    try:
        plan, an, names = plan_structured(work, tuple(dynamic), [tuple(dynamic)], float(ratio), omega, lam,
                                          criterion, 1, False, seed)
    except ValueError as e:
        raise PruneSkipped(str(e)) from e
    statics = [example_inputs[i] for i in static]
    cached = _cached_plan(float(ratio), statics)
    if cached is not None:
        # Dynamo recompiled the same model (another input shape): keep the channels chosen the first
        # time, so every shape runs the same pruned model.
        plan.keep = {static_names[i]: cached[j] for j, i in enumerate(static) if cached[j] is not None}
    else:
        _remember_plan(float(ratio), statics, [plan.keep.get(static_names[i]) for i in static])
    report.frozen_by = dict(an.unknown_ops)
    report.groups, report.classes_before, report.classes_after = plan.groups, plan.classes_before, plan.classes_after
    report.kept = plan.keep
    if not plan.keep:
        raise PruneSkipped("no channel can be removed (every channel is coupled to an output or an op the "
                           "analysis does not model)")

    pos_of = {name: pos for pos, name in static_names.items()}
    new_inputs = list(example_inputs)
    replaced = {}
    for name, dims in plan.keep.items():
        pos = pos_of[name]
        t = example_inputs[pos].detach()
        for d, idx in sorted(dims.items()):
            t = t.index_select(d, idx)
        replaced[pos] = new_inputs[pos] = t.contiguous()
        old = tuple(example_inputs[pos].shape)
        if len(old) >= 2:  # weights: (out, in or in per group) before -> after
            report.layers.append(LayerChange(name, "conv" if len(old) > 2 else "linear", old[:2], tuple(t.shape[:2])))

    gm2 = _copy_graph_module(gm)
    _rewrite_shape_literals(gm2, new_inputs, recorder.shapes)
    pruned = _as_module(gm2, new_inputs, static_names).eval()
    _verify(pruned, tuple(dynamic), ref_shapes, an, names, plan)  # ValueError: pairs channels differently
    report.params_after = sum(new_inputs[i].numel() for i in static if is_param[static_names[i]])
    report.flops_after = count_flops(pruned, dynamic)
    return PrunedGraph(gm=gm2, inputs=new_inputs, replaced=replaced, report=report, reused_plan=cached is not None)


# The plans chosen so far, by the identity of the graph's parameter/buffer tensors (weak references:
# a freed model's entry dies with it). A recompile of the same model reuses its plan.
_PLANS = []
_PLANS_LOCK = threading.Lock()
_MAX_PLANS = 16


def _cached_plan(ratio, statics):
    """The keep dims per tensor of `statics` chosen before for this set of tensors, or None."""
    with _PLANS_LOCK:
        _PLANS[:] = [e for e in _PLANS if all(ref() is not None for ref, _ in e[1].values())]
        for r, entry in _PLANS:
            if r == ratio and len(entry) == len(statics) and all(
                    id(t) in entry and entry[id(t)][0]() is t for t in statics):
                return [entry[id(t)][1] for t in statics]
    return None


def _remember_plan(ratio, statics, keeps):
    try:
        entry = {id(t): (weakref.ref(t), k) for t, k in zip(statics, keeps)}
    except TypeError:
        return
    with _PLANS_LOCK:
        _PLANS.append((ratio, entry))
        del _PLANS[:-_MAX_PLANS]


def _copy_graph_module(gm):
    """A new GraphModule over a copy of the graph (node meta copied per node, so rewriting it does
    not touch the original). Its meta is not Dynamo's: aot_autograd then does not look for the
    Dynamo sources that belong to the original graph's nodes."""
    graph = torch.fx.Graph()
    env = {}
    out = graph.graph_copy(gm.graph, env)
    graph.output(out)
    gm2 = torch.fx.GraphModule(gm, graph)
    for old, new in env.items():  # graph_copy leaves the output node's meta behind
        if old.op == "output":
            new.meta = copy.copy(old.meta)
    return gm2


# ---- shape literals -------------------------------------------------------------------------

def _name(n):
    t = n.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _shape(v):
    return tuple(int(s) for s in v.shape) if isinstance(v, torch.Tensor) else None


def _view_sizes(old_in, new_in, old_out):
    """New output shape of a view/reshape whose input changed from old_in to new_in. Dims are
    grouped into blocks of equal element count; a block whose input count changed passes the
    factor to its innermost output dim larger than 1 (the outer factors of a split channel dim are
    groups or heads, which pruning keeps: the same assumption as the dependency analysis)."""
    def prefix(shape):
        p, out = 1, [1]
        for s in shape:
            p *= s
            out.append(p)
        return out

    pi, po = prefix(old_in), prefix(old_out)
    cuts = sorted(set(pi) & set(po))
    new_out = list(old_out)
    for a, b in zip(cuts, cuts[1:]):
        in_dims = [k for k in range(len(old_in)) if pi[k] >= a and pi[k + 1] <= b and old_in[k] > 1]
        out_dims = [k for k in range(len(old_out)) if po[k] >= a and po[k + 1] <= b and old_out[k] > 1]
        old_n = new_n = 1
        for k in in_dims:
            old_n *= old_in[k]
            new_n *= new_in[k]
        if old_n == new_n:
            continue
        if not out_dims or (old_out[out_dims[-1]] * new_n) % old_n:
            raise PruneSkipped(f"cannot re-derive the view sizes {old_out} for an input of shape {new_in}")
        new_out[out_dims[-1]] = old_out[out_dims[-1]] * new_n // old_n
    # Dims that were 1 on both sides sit on a cut: they do not change.
    total_new = 1
    for s in new_in:
        total_new *= s
    check = 1
    for s in new_out:
        check *= s
    if check != total_new:
        raise PruneSkipped(f"cannot re-derive the view sizes {old_out} for an input of shape {new_in}")
    return new_out


def _sizes_arg(n, start):
    """(sizes, rebuild): the size list of view(x, *sizes) / view(x, sizes), and a function putting
    a new list back into the same form."""
    args = list(n.args)
    if len(args) == start + 1 and isinstance(args[start], (list, tuple, torch.Size)):
        kind = type(args[start])
        return list(args[start]), lambda s: tuple(args[:start]) + (kind(s) if kind is not torch.Size else tuple(s),)
    if "shape" in n.kwargs or "size" in n.kwargs:
        key = "shape" if "shape" in n.kwargs else "size"
        return list(n.kwargs[key]), None
    return list(args[start:]), lambda s: tuple(args[:start]) + tuple(s)


def _with_literals(sizes, new_out):
    """Keeps the -1 the user wrote (Dynamo records it as given) and the sizes computed in the graph
    (nodes: they follow the pruned shapes by themselves)."""
    return [s if (isinstance(s, int) and s == -1) or not isinstance(s, int) else int(v)
            for s, v in zip(sizes, new_out)]


class _ShapeRecorder(torch.fx.Interpreter):
    """Runs the original graph on the original inputs and records every tensor's shape by node name
    (concrete even where Dynamo's metadata is symbolic)."""

    def __init__(self, gm):
        super().__init__(gm)
        self.shapes = {}

    def run_node(self, n):
        value = super().run_node(n)
        self.shapes[n.name] = _shape(value)
        return value


class _Rewriter(torch.fx.Interpreter):
    """Runs the copied graph on the pruned inputs; before each node, rewrites the literals that
    depended on a channel count (old shapes from the run of the original graph), and after it
    records the new shape in the node metadata."""

    def __init__(self, gm, fake_mode, old_shapes):
        super().__init__(gm)
        self.fake_mode = fake_mode
        self.old = old_shapes  # node name -> shape in the unpruned graph

    def _old_shape(self, a):
        return self.old.get(a.name) if isinstance(a, torch.fx.Node) else None

    def _new_shape(self, a):
        return _shape(self.env.get(a)) if isinstance(a, torch.fx.Node) else None

    def run_node(self, n):
        if n.op in ("call_function", "call_method"):
            self._rewrite(n)
        try:
            value = super().run_node(n)
        except Exception as e:
            raise PruneSkipped(f"the pruned graph no longer runs at {n.name} ({_name(n)}: {type(e).__name__}: "
                               f"{e}); a size in the model's code probably depends on a channel count") from e
        if "example_value" in n.meta:
            n.meta["example_value"] = self._fake(value)
        return value

    def _fake(self, v):
        if isinstance(v, torch.Tensor):
            return self.fake_mode.from_tensor(v, static_shapes=True)
        if isinstance(v, (list, tuple)):
            return type(v)(self._fake(x) for x in v)
        return v

    def _rewrite(self, n):
        name = _name(n)
        x = n.args[0] if n.args else None
        old_in, new_in = self._old_shape(x), self._new_shape(x)
        if old_in is None or new_in is None or old_in == new_in:
            return
        if name in ("conv1d", "conv2d", "conv3d"):
            self._conv_groups(n, new_in)
        elif name == "layer_norm":
            args = list(n.args)
            if len(args) > 1:
                args[1] = tuple(new_in[len(new_in) - len(args[1]):])
                n.args = tuple(args)
            elif "normalized_shape" in n.kwargs:
                k = len(n.kwargs["normalized_shape"])
                n.kwargs = dict(n.kwargs, normalized_shape=tuple(new_in[len(new_in) - k:]))
        elif name in ("view", "reshape"):
            self._view(n, old_in, new_in)
        elif name == "unflatten":
            self._unflatten(n, old_in, new_in)
        elif name in ("expand",):
            self._expand(n, old_in, new_in)
        elif name == "split" and len(n.args) > 1 and isinstance(n.args[1], int):
            dim = n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0)
            dim %= len(old_in)
            if old_in[dim] != new_in[dim]:
                pieces = old_in[dim] // n.args[1]
                if old_in[dim] % n.args[1] or new_in[dim] % pieces:
                    raise PruneSkipped(f"split of {old_in[dim]} channels into sizes {n.args[1]} cannot follow pruning")
                n.args = (n.args[0], new_in[dim] // pieces) + tuple(n.args[2:])

    def _conv_groups(self, n, new_in):
        args = list(n.args)
        groups = args[6] if len(args) > 6 else n.kwargs.get("groups", 1)
        w = self._new_shape(args[1]) if len(args) > 1 else None
        if groups == 1 or w is None:
            return
        # Grouped conv keeps its group count (in/out per group shrink); depthwise keeps groups ==
        # channels. Both: groups = input channels / input channels per group.
        new_groups = new_in[1] // w[1]
        if new_groups * w[1] != new_in[1]:
            raise PruneSkipped(f"conv {n.name}: {new_in[1]} input channels do not split into groups of {w[1]}")
        if len(args) > 6:
            args[6] = new_groups
            n.args = tuple(args)
        else:
            n.kwargs = dict(n.kwargs, groups=new_groups)

    def _view(self, n, old_in, new_in):
        sizes, rebuild = _sizes_arg(n, 1)
        if not all(isinstance(s, (int, torch.fx.Node)) for s in sizes):
            return  # view(dtype): no sizes
        old_out = self._old_shape(n)
        if old_out is None or rebuild is None:
            raise PruneSkipped(f"{n.name}: cannot rewrite the sizes of {_name(n)}")
        new_out = _view_sizes(old_in, new_in, old_out)
        n.args = rebuild(_with_literals(sizes, new_out))

    def _unflatten(self, n, old_in, new_in):
        dim = n.args[1] % len(old_in)
        sizes = list(n.args[2])
        old_out = self._old_shape(n)
        new_out = _view_sizes(old_in, new_in, old_out)
        n.args = (n.args[0], n.args[1], type(n.args[2])(_with_literals(sizes, new_out[dim:dim + len(sizes)])))

    def _expand(self, n, old_in, new_in):
        sizes, rebuild = _sizes_arg(n, 1)
        if rebuild is None:
            return
        off = len(sizes) - len(old_in)
        out = list(sizes)
        for k, (o, w) in enumerate(zip(old_in, new_in)):
            if o != w and isinstance(out[off + k], int) and out[off + k] == o:
                out[off + k] = w
        n.args = rebuild(out)


def _rewrite_shape_literals(gm, inputs, old_shapes):
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = detect_fake_mode() or FakeTensorMode()  # Dynamo's, so the new meta matches the old
    with torch.no_grad():
        _Rewriter(gm, fake_mode, old_shapes).run(*inputs)
    gm.recompile()
