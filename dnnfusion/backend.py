"""The torch.compile backend: ``torch.compile(model, backend="dnnfusion", options={...})``.

Dynamo graph -> [options prune: channel pruning of the Dynamo graph, prune/compile_pass.py] ->
aot_autograd inference graph (functional ATen) with parameters and buffers frozen (they arrive as
graph inputs; Dynamo marks them static; each call checks they are still the same tensors at the
same version, else the graph is lowered again: _FrozenGraph) -> lowering.lower(), which hands the
supported regions to the C++ core and leaves the rest as eager ATen calls. A target whose Python glue defines
``compile_graph`` (dnnfusion/targets/<name>.py) gets the Dynamo graph whole instead: the fpga target
quantizes and offloads whole runs of layers with calibration data.
"""
import collections
import copy
import threading
import warnings

import torch
from torch._functorch.aot_autograd import aot_module_simplified
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import _C
from .guards import enable_for_this_compile
from .options import parse_options
from .report import GraphReport, publish, warn_fallback

_warned = set()
_SHAPE_CACHE_SIZE = 8
# Lowerings a compiled graph keeps, one per set of parameter tensors it has run with: instances of
# one model class share Dynamo's compiled code, so alternating between them must not lower the
# graph again on every call (each lowering holds its own packed weights).
_LOWERINGS_KEPT = 3


def _warn_once(key, msg):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, stacklevel=3)


def _static_indices(gm):
    """Positions of the Dynamo graph inputs that are parameters or buffers."""
    idx = []
    for i, n in enumerate(gm.graph.find_nodes(op="placeholder")):
        td = n.meta.get("tensor_dict") or {}
        if td.get("_dynamo_static_input_type"):
            idx.append(i)
    return idx


def _is_symbolic(gm, example_inputs):
    for n in gm.graph.find_nodes(op="placeholder"):
        v = n.meta.get("example_value", n.meta.get("val"))
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and any(not isinstance(s, int) for s in v.shape):
            return True
    return any(isinstance(x, torch.SymInt) for x in example_inputs)


def _compile_static(gm, example_inputs, opts, report, static=None):
    """Compiles a graph whose inputs at positions `static` (default: those Dynamo marked as
    parameters or buffers) are frozen into it."""
    from .lowering import lower

    static = _static_indices(gm) if static is None else static
    real = {i: example_inputs[i] for i in static if isinstance(example_inputs[i], torch.Tensor)}

    def lower_safely(aot_gm, frozen):
        try:
            return lower(aot_gm, frozen, opts, report)
        except (_C.CompilerNotFound, _C.TargetUnavailable):  # set-up problems the user must fix
            raise
        except Exception as e:  # never fail the user's model: run this graph eagerly
            warn_fallback(f"lowering failed ({type(e).__name__}: {e})", what="this graph")
            report.notes.append(f"lowering failed, graph runs eagerly: {type(e).__name__}: {e}")
            report.ops_core.clear()
            return aot_gm

    def inference_compiler(aot_gm, aot_inputs):
        placeholders = list(aot_gm.graph.find_nodes(op="placeholder"))
        if len(placeholders) != len(example_inputs):
            report.notes.append("parameters not frozen: aot graph inputs do not line up with Dynamo's")
            with unset_fake_temporarily():
                return lower_safely(aot_gm, {})
        # aot_autograd calls us under its fake mode; the core needs the real weights.
        with unset_fake_temporarily():
            return _FrozenGraph(aot_gm, placeholders, real, lower_safely, report)

    return aot_module_simplified(
        gm,
        example_inputs,
        fw_compiler=inference_compiler,
        inference_compiler=inference_compiler,
        keep_inference_input_mutations=True,
    )


class _FrozenGraph:
    """The lowered graph, its parameters and buffers frozen into it, run while they are still the
    tensors it was compiled with. Dynamo passes them on every call and guards only their metadata,
    so a swapped parameter (``m.fc = nn.Linear(...)``, a new ``nn.Parameter``) or one updated in
    place (``load_state_dict``, ``p.copy_()`` under no_grad: its version counter moves) would
    otherwise leave the compiled graph computing with the old values. On such a change the graph
    is lowered again from a pristine copy with the new values, with a warning; ``p.data = t`` and
    writes through ``p.data`` bypass both checks (as they bypass autograd). The lowerings of the
    last _LOWERINGS_KEPT sets of tensors are kept, so two instances of one model class (which
    share Dynamo's compiled code) each keep theirs."""

    def __init__(self, aot_gm, placeholders, real, lower_fn, report):
        self.pristine = copy.deepcopy(aot_gm)
        self.lower_fn = lower_fn
        self.report = report
        # A buffer the model updates in place stays a run-time input: frozen, it would keep the
        # value it had when compiled.
        written = _written_placeholders(aot_gm)
        self.positions = [i for i in sorted(real) if placeholders[i].name not in written]
        # (check, fn) per set of tensors, most recently used first; self.check / self.fn are
        # kept[0]'s, read directly on every call.
        self.kept = []
        self._freeze([real[i] for i in self.positions], aot_gm)

    def _freeze(self, tensors, gm):
        check = _C.FrozenTensors(self.positions, tensors)
        placeholders = list(gm.graph.find_nodes(op="placeholder"))
        frozen = {placeholders[i]: t.detach() for i, t in zip(self.positions, tensors)}
        self.report.frozen_numel = sum(t.numel() for t in tensors)
        fn = self.lower_fn(gm, frozen)
        # The lowered graph has no module hooks: its forward skips nn.Module.__call__ (~10-20 us).
        self.check, self.fn = check, fn.forward if isinstance(fn, torch.fx.GraphModule) else fn
        self.kept.insert(0, (self.check, self.fn))
        del self.kept[_LOWERINGS_KEPT:]

    def _switch(self, args):
        for i, (check, fn) in enumerate(self.kept[1:], start=1):  # kept[0] just failed
            if check.unchanged(args):  # a set of tensors this graph has run with before
                self.kept.insert(0, self.kept.pop(i))
                self.check, self.fn = check, fn
                return
        # Tensors updated in place: their old lowering can never match again.
        self.kept = [e for e in self.kept if not e[0].same_tensors(args)]
        _warn_once("refreeze", "dnnfusion: a parameter or buffer changed after compiling (a new tensor, an "
                               "in-place update, or another instance of the same model class); compiling the "
                               f"graph for the new values (the last {_LOWERINGS_KEPT} sets are kept)")
        self.report.notes.append("parameters changed after compiling: graph recompiled with the new values")
        self.report.clear_lowering()  # the new lowering reports it again
        self._freeze([args[p] for p in self.positions], copy.deepcopy(self.pristine))

    def __call__(self, *args):
        if not self.check.unchanged(args):
            self._switch(args)
        return self.fn(*args)


def _written_placeholders(gm):
    """Names of the graph inputs an op of the graph writes (a buffer the model updates in place,
    kept as a copy_ back into the input by keep_inference_input_mutations)."""
    out = set()
    for n in gm.graph.nodes:
        schema = getattr(n.target, "_schema", None) if n.op == "call_function" else None
        if schema is None:
            continue
        for arg, a in zip(schema.arguments, n.args):
            if arg.alias_info is not None and arg.alias_info.is_write and isinstance(a, torch.fx.Node) \
                    and a.op == "placeholder":
                out.add(a.name)
    return out


def _compile_graph(gm, example_inputs, opts, report):
    """A target whose glue compiles whole graphs (one that needs more than the graph, such as
    calibration data) gets the graph itself; the others go through lowering."""
    from .targets import glue

    whole = glue(opts.target).compile_graph
    if whole is not None:
        with unset_fake_temporarily():
            return whole(gm, list(example_inputs), opts, report)
    if opts.prune is not None:
        return _compile_pruned(gm, example_inputs, opts, report)
    return _compile_static(gm, example_inputs, opts, report)


def _compile_pruned(gm, example_inputs, opts, report):
    """options={"prune": r}: prunes the Dynamo graph (calibrated on the example inputs; a recompile
    of the same model, e.g. for another shape, reuses the first plan) and compiles the pruned graph
    on the pruned weights. Dynamo keeps passing the original parameters (its guards hold them), so
    the returned function swaps in the pruned tensors at their positions. Whatever goes wrong, the
    graph is compiled unpruned with a warning and a report note."""
    from .prune.compile_pass import prune_graph

    try:
        pg = prune_graph(gm, example_inputs, _static_indices(gm), opts.prune)
        compiled = _compile_static(pg.gm, pg.inputs, opts, report)
    except (_C.CompilerNotFound, _C.TargetUnavailable):  # set-up problems the user must fix
        raise
    except Exception as e:
        _warn_once(("prune", type(e).__name__), f"dnnfusion: prune={opts.prune} not applied ({e}); compiling unpruned")
        report.notes.append(f"prune={opts.prune} not applied, compiled unpruned: {e}")
        report.prune = None
        report.clear_lowering()  # a half-compiled pruned graph must not count
        return _compile_static(gm, example_inputs, opts, report)
    report.prune = pg.report
    report.notes.append(pg.summary())
    swap = sorted(pg.replaced.items())

    def run_pruned(*args):
        args = list(args)
        for i, t in swap:
            args[i] = t
        return compiled(*args)

    return run_pruned


class _PerShapeCompiled:
    """For a graph Dynamo made dynamic: compiles once per concrete input signature (LRU)."""

    def __init__(self, gm, opts, report):
        self.gm = gm
        self.opts = opts
        self.report = report
        self.cache = collections.OrderedDict()
        self.lock = threading.Lock()

    @staticmethod
    def _key(args):
        key = []
        for a in args:
            if isinstance(a, torch.Tensor):
                key.append((tuple(a.shape), a.dtype, a.device.type))
            elif isinstance(a, (int, float, bool, torch.SymInt)):
                key.append(int(a) if isinstance(a, torch.SymInt) else a)
            else:
                key.append(type(a).__name__)
        return tuple(key)

    def __call__(self, *args):
        key = self._key(args)
        with self.lock:
            fn = self.cache.get(key)
            if fn is not None:
                self.cache.move_to_end(key)
        if fn is None:
            rep = GraphReport()
            rep.notes.append(f"specialized for input signature {key}")
            try:
                fn = _compile_graph(self.gm, list(args), self.opts, rep)
            except Exception as e:  # never fail the user's call: run this shape eagerly
                warn_fallback(f"compiling for a new shape failed ({e})", what="this shape")
                fn = self.gm.forward
            publish(rep)
            with self.lock:
                self.cache[key] = fn
                while len(self.cache) > _SHAPE_CACHE_SIZE:
                    self.cache.popitem(last=False)
        return fn(*args)


def _inputs_device_type(example_inputs):
    """The device type of the example inputs (None when they hold no tensor)."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device.type
    return None


def _require_available(target):
    """A registered target this machine cannot run is an error at compile time, naming what is missing."""
    from .targets import glue, info

    glue(target).prepare()
    why = info(target)["unavailable_reason"]
    if why:
        raise _C.TargetUnavailable(f"dnnfusion: target {target!r} cannot run on this machine: {why}")


def dnnfusion_backend(gm: torch.fx.GraphModule, example_inputs, options=None, **kwargs):
    """torch.compile backend entry point (registered as "dnnfusion")."""
    if kwargs:
        raise ValueError(f"dnnfusion: unexpected backend arguments {sorted(kwargs)}; pass settings as options={{...}}")
    opts = parse_options(options, _inputs_device_type(example_inputs))
    _require_available(opts.target)
    report = GraphReport()
    if opts.fast_guards:
        enable_for_this_compile()
    if torch.is_grad_enabled():
        _warn_once(
            "grad",
            "dnnfusion compiles inference graphs only; with grad enabled the model runs eagerly. "
            "Call it under torch.no_grad() or torch.inference_mode().",
        )
        report.notes.append("grad enabled: whole graph runs eagerly")
        if opts.prune is not None:
            report.notes.append(f"prune={opts.prune} not applied: grad enabled (the model runs eagerly, unpruned)")
        publish(report)
        return gm.forward
    if _is_symbolic(gm, example_inputs):
        report.notes.append("dynamic shapes: compiled per concrete input shape at run time")
        publish(report)
        return _PerShapeCompiled(gm, opts, report)
    compiled = _compile_graph(gm, example_inputs, opts, report)
    publish(report)
    return compiled
