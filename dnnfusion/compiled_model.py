"""Ahead-of-time compilation: ``dnnfusion.compile(model, example_inputs)``.

The model is captured once with ``torch.export`` and compiled by the same path as the
torch.compile backend (aot_autograd inference graph, weights frozen, lowering into the core), but
the result is called directly: no Dynamo frame evaluation and no guards on every call. Those guards
check every module and parameter the trace read (one dictionary tag per module dict on
mobilenet_v3_large: 26 us per call with warm caches, 0.39 ms with cold ones), which is what a
batch-1 call of a small CNN pays on top of its kernels. Here a call checks only what it needs: the
inputs' structure and tensor metadata against the compiled signature (a new one is compiled, up to
_SIGNATURES_KEPT), and, in the core, that the frozen weights are the same tensors at the same version
(an in-place update such as ``load_state_dict`` lowers the graph again, with a warning).

What it does not see, by design: a submodule or parameter replaced by assignment after compiling
(``model.fc = nn.Linear(...)``) keeps running the weights it was compiled with, as an exported ONNX
or OpenVINO model would. Compile again after such a change, or use torch.compile, whose guards see
it. Inference only: calls run under no_grad and outputs carry no autograd history.

Precondition: the model exports with ``torch.export.export(strict=False)`` (under no_grad; a buffer
it updates in place in forward stays a live input, updated on every call as in eager).
Postcondition: calls return what ``model(*args, **kwargs)`` returns (same pytree structure),
computed by the core where the ops are supported and by ATen elsewhere.
"""
import collections
import threading

import torch
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind, OutputKind

from .backend import _compile_static, _inputs_device_type, _require_available
from .options import parse_options
from .report import GraphReport, publish

_SIGNATURES_KEPT = 8
_FROZEN_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def _leaf_key(x):
    """What a compiled signature fixes of one flattened input: a tensor's metadata, any other value itself."""
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), tuple(x.stride()), x.dtype, x.device)
    return (type(x), x)


def _signature(args, kwargs):
    """The flattened inputs and the key of their signature. Positional tensors alone (the common
    call) skip the pytree walk: their structure is their count, which the key holds."""
    if not kwargs and all(type(x) is torch.Tensor for x in args):
        return args, tuple(_leaf_key(x) for x in args)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    return leaves, (spec, tuple(_leaf_key(x) for x in leaves))


class _Compiled:
    """One exported and lowered graph for one input signature."""

    def __init__(self, model, args, kwargs, options):
        opts = parse_options(options, _inputs_device_type(pytree.tree_leaves((args, kwargs))))
        if opts.prune is not None:
            raise ValueError("dnnfusion.compile: option 'prune' is not supported here; prune with "
                             "dnnfusion.prune(model, ratio) first, or use torch.compile(backend='dnnfusion')")
        from .targets import glue

        if glue(opts.target).compile_graph is not None:
            raise ValueError(f"dnnfusion.compile: target {opts.target!r} compiles Dynamo graphs whole; "
                             "use torch.compile(model, backend='dnnfusion', options=...) for it")
        _require_available(opts.target)
        try:
            ep = torch.export.export(model, args, kwargs, strict=False)
        except Exception as e:
            raise ValueError(f"dnnfusion.compile: torch.export could not capture the model ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}); torch.compile(model, "
                             "backend='dnnfusion') handles graph breaks") from e
        self._check_supported(ep)
        self.out_spec = ep.call_spec.out_spec
        self.single_output = self.out_spec.is_leaf()
        frozen, self.template, self.user_positions = self._inputs(ep)
        example = list(self.template)
        for pos, x in zip(self.user_positions, pytree.tree_leaves((args, kwargs))):
            example[pos] = x
        self.report = GraphReport()
        self.report.notes.append("compiled ahead of time with torch.export (dnnfusion.compile)")
        self.fn = _compile_static(ep.graph_module, example, opts, self.report, static=frozen)
        publish(self.report)

    @staticmethod
    def _check_supported(ep):
        sig = ep.graph_signature
        odd_in = sorted({s.kind.name for s in sig.input_specs if s.kind not in _FROZEN_KINDS + (InputKind.USER_INPUT,)})
        odd_out = sorted({s.kind.name for s in sig.output_specs if s.kind is not OutputKind.USER_OUTPUT})
        if odd_in or odd_out:
            raise ValueError(f"dnnfusion.compile: the exported model has inputs {odd_in} / outputs {odd_out} "
                             "(it mutates buffers or inputs, or uses custom objects); only parameters, buffers, "
                             "constants and user inputs in, user outputs out are supported; use "
                             "torch.compile(model, backend='dnnfusion') for it")

    @staticmethod
    def _inputs(ep):
        """The graph's inputs: positions of the frozen tensors, a template of every input with the
        frozen ones filled in, and the positions the user's flattened inputs go to."""
        frozen, template, user = [], [], []
        for i, spec in enumerate(ep.graph_signature.input_specs):
            if spec.kind in _FROZEN_KINDS:  # a non-persistent buffer is among the constants
                template.append(ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target])
                frozen.append(i)
            else:
                template.append(None)
                user.append(i)
        return frozen, template, user

    def __call__(self, leaves):
        full = list(self.template)
        for pos, x in zip(self.user_positions, leaves):
            full[pos] = x
        if torch.is_grad_enabled():
            with torch.no_grad():
                outs = self.fn(*full)
        else:
            outs = self.fn(*full)
        return outs[0] if self.single_output else pytree.tree_unflatten(list(outs), self.out_spec)


class CompiledModel:
    """A model compiled ahead of time by ``dnnfusion.compile``; call it like the model."""

    def __init__(self, model, args, kwargs, options):
        self._model = model
        self._options = dict(options or {})
        self._lock = threading.Lock()
        self._by_signature = collections.OrderedDict()
        key = _signature(args, kwargs)[1]
        # (key, compiled) of the signature called last, replaced as one object: a call on another
        # thread never pairs one signature's key with another's graph.
        self._last = (key, self._compile(key, args, kwargs))

    def _compile(self, key, args, kwargs):
        with torch.no_grad():
            compiled = _Compiled(self._model, args, kwargs, self._options)
        with self._lock:
            self._by_signature[key] = compiled
            while len(self._by_signature) > _SIGNATURES_KEPT:
                self._by_signature.popitem(last=False)
        return compiled

    @property
    def reports(self):
        """One GraphReport per input signature compiled so far (oldest first)."""
        return [c.report for c in self._by_signature.values()]

    def explain(self):
        """What fused, what ran where and what fell back, for the signature compiled last."""
        from .explain import ExplainReport

        return ExplainReport([self._last[1].report], mode=parse_options(self._options).fusion, per_mode=None)

    def __call__(self, *args, **kwargs):
        leaves, key = _signature(args, kwargs)
        last_key, compiled = self._last
        if key != last_key:
            with self._lock:
                compiled = self._by_signature.get(key)
                if compiled is not None:
                    self._by_signature.move_to_end(key)
            if compiled is None:
                compiled = self._compile(key, args, kwargs)
            self._last = (key, compiled)
        return compiled(leaves)


def compile(model, args, kwargs=None, *, options=None):  # noqa: A001 - dnnfusion.compile, as torch.compile
    """Compiles `model` for inputs like `args` / `kwargs` (a tuple and a dict, as torch.export takes
    them) and returns a CompiledModel to call instead of the model. `options` are the torch.compile
    backend's (see dnnfusion.VALID_OPTIONS) except 'prune'. Inputs of another shape, dtype, stride or
    device, or other non-tensor values, compile again for that signature."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"dnnfusion.compile: model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(args, tuple):
        raise TypeError(f"dnnfusion.compile: args must be a tuple of example inputs, got {type(args).__name__} "
                        "(write (x,) for one input)")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"dnnfusion.compile: kwargs must be a dict or None, got {type(kwargs).__name__}")
    return CompiledModel(model, args, kwargs or {}, options)
