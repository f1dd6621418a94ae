"""Lowers an aot_autograd inference graph (functional ATen) onto the C++ core.

The graph is imported once into one ECG, the target deciding per node whether it runs it; maximal convex groups of supported nodes
(torch.fx CapabilityBasedPartitioner) become one compiled region each, called through the
custom op ``torch.ops.dnnfusion.run``. Unsupported nodes stay as ATen calls and run eagerly; the
reason is recorded in the GraphReport.
"""
import collections
import numbers
import operator
import weakref

import torch
import torch.fx as fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from . import _C  # noqa: F401  (registers torch.ops.dnnfusion.run)
from .fake import register_region_meta, unregister_region_meta
from .options import core_options
from .report import GraphReport, RegionStats, warn_fallback
from .targets import info as target_info

_DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}

# Binary elementwise ops whose Scalar operands become 0-d constants of the compute dtype.
_BINARY = {"add", "sub", "rsub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
           "logical_and", "logical_or", "bitwise_and", "bitwise_or", "remainder", "floor_divide", "atan2",
           "where", "masked_fill"}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"}
# Arguments that do not change values in the core: the core's tensors are dense CPU tensors and
# output strides are restored at the region boundary. (Their schema types print as plain ints.)
_SKIP_ARGS = ("layout", "memory_format", "pin_memory", "device", "generator", "non_blocking")


def op_name(target):
    return target.overloadpacket.__name__


def aten_name(target):
    return f"aten.{target.overloadpacket.__name__}.{target._overloadname}"


def _tensor_vals(val):
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)):
        return list(val)
    return None


class Unsupported(Exception):
    pass


def _is_tensor_type(t):
    s = str(t)
    return s in ("Tensor", "Optional[Tensor]", "Tensor?")


def _is_tensor_list_type(t):
    s = str(t)
    return s.startswith("List[Tensor]") or s.startswith("List[Optional[Tensor]]") or s in ("Tensor[]", "Tensor?[]")


def _attr_value(v, argtype):
    if isinstance(v, torch.dtype):
        if v not in _DTYPES:
            raise Unsupported(f"dtype {v}")
        return _DTYPES[v]
    if isinstance(v, bool):
        return v
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        raise Unsupported("symbolic scalar argument")
    if isinstance(v, numbers.Number):
        return v
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        out = [_attr_value(x, argtype) for x in v]
        if any(isinstance(x, (list, tuple, str)) or x is None for x in out):
            raise Unsupported("nested list attribute")
        return out
    raise Unsupported(f"argument of type {type(v).__name__}")


def normalize(node):
    """Splits an ATen call into (op, tensor operands, attributes) following its schema.

    Operands are fx Nodes, None (absent optional), or Python numbers (scalars in tensor slots).
    """
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        raise Unsupported("not an ATen op")
    schema = target._schema
    bound = {}
    for i, a in enumerate(node.args):
        bound[schema.arguments[i].name] = a
    bound.update(node.kwargs)
    name = op_name(target)
    operands, attrs = [], {}
    for arg in schema.arguments:
        if arg.name in bound:
            v = bound[arg.name]
        elif arg.has_default_value():
            v = arg.default_value
        else:
            v = None
        t = arg.type
        if _is_tensor_list_type(t):
            operands.extend(v)
        elif _is_tensor_type(t) or (name in _BINARY and str(t) in ("Scalar", "number") and arg.name in ("self", "other", "exponent", "value")):
            operands.append(v)
        elif arg.name in _SKIP_ARGS:
            if arg.name == "device" and v is not None and torch.device(v).type != "cpu":
                raise Unsupported(f"device {v}")
            continue
        elif v is None:
            continue
        else:
            attrs[arg.name] = _attr_value(v, t)
    if name == "arange":
        # arange(end) / arange(start, end) / arange(start, end, step)
        attrs.setdefault("step", 1)
        if "start" not in attrs:
            attrs["start"] = 0
    if name in _BINARY and name not in ("where", "masked_fill"):
        attrs["compute_dtype"] = _DTYPES.get(_scalar_dtype(name, operands, node), "float32")
    return name, operands, attrs


def is_non_overlapping_and_dense(t):
    """True if t's elements tile one block of memory exactly once (a permutation of contiguous)."""
    dims = sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def _meta(n):
    if isinstance(n, fx.Node):
        return n.meta.get("val")
    return n


def _out_specs(node, device_type):
    vals = _tensor_vals(node.meta.get("val"))
    if vals is None:
        raise Unsupported("no tensor metadata")
    specs = []
    for v in vals:
        if not isinstance(v, torch.Tensor):
            raise Unsupported("non-tensor output")
        if v.dtype not in _DTYPES:
            raise Unsupported(f"output dtype {v.dtype}")
        if any(not isinstance(s, int) for s in v.shape):
            raise Unsupported("symbolic shape")
        if v.device.type != device_type:
            raise Unsupported(f"output on {v.device}, the target runs on {device_type}")
        specs.append((list(v.shape), _DTYPES[v.dtype]))
    return specs


def _scalar_dtype(name, operands, node):
    """dtype of a constant made from a Python scalar operand: the op's compute dtype."""
    vals = [_meta(o) for o in operands if o is not None]
    try:
        rt = torch.result_type(*vals[:2]) if len(vals) >= 2 else torch.result_type(vals[0], vals[0])
    except Exception:
        rt = node.meta["val"].dtype
    if name in ("where", "masked_fill"):
        rt = node.meta["val"].dtype
    return rt


class Lowerer:
    """Imports the FX graph once into one whole-model ECG, deciding support per node as it goes,
    and compiles partitions of it.

    Each node is normalized once and crosses the bridge once (``Graph.import_node``): the target
    sees it with its real producers and weights. A region is then cut out of that graph in the
    core (``_C.compile_part``), so nothing is imported twice.
    """

    def __init__(self, gm, frozen, opts, report: GraphReport):
        self.gm = gm
        # placeholder name -> real tensor (parameters and buffers). Names, not Nodes: fx passes
        # such as fuse_by_partitions copy nodes into submodules under the same names.
        self.frozen = {(k.name if isinstance(k, fx.Node) else k): v for k, v in frozen.items()}
        self.opts = opts
        self.core_opts = core_options(opts)
        self.device_type = target_info(opts.target)["device_type"]
        self.report = report
        self.graph = _C.Graph()  # the whole model
        self.values = {}     # fx node name -> ECG value id, or list of ids for a multi-output node
        self.ecg_nodes = {}  # fx node name -> ECG node id (every imported node, run or not)
        self.decisions = {}  # fx node name -> True if the target runs it
        self.reasons = {}    # fx node name -> why not

    # ---- operands ----
    def is_compile_time(self, n):
        return (n.op == "placeholder" and n.name in self.frozen) or n.op == "get_attr"

    def _value(self, o):
        """The ECG value of an fx operand; one the graph does not have yet enters as a weight
        (parameters, buffers) or as an input (anything computed outside the core)."""
        if o.op == "call_function":
            self.decide(o)  # getitem nodes are decided when first read
        if o.name in self.values:
            vid = self.values[o.name]
            if isinstance(vid, list):
                raise Unsupported("operand is a list of tensors")
            return vid
        if self.is_compile_time(o):
            t = self.frozen[o.name] if o.op == "placeholder" else _fetch_attr(self.gm, o.target)
            if t.device.type != self.device_type:
                raise Unsupported(f"weight on {t.device}, the target runs on {self.device_type}")
            vid = self.graph.add_weight(t, o.name)
        else:
            v = o.meta.get("val")
            if not isinstance(v, torch.Tensor):
                raise Unsupported("operand without tensor metadata")
            if v.dtype not in _DTYPES:
                raise Unsupported(f"operand dtype {v.dtype}")
            if any(not isinstance(s, int) for s in v.shape):
                raise Unsupported("symbolic shape")
            if v.device.type != self.device_type:
                raise Unsupported(f"operand on {v.device}, the target runs on {self.device_type}")
            vid = self.graph.add_input(list(v.shape), _DTYPES[v.dtype], o.name)
        self.values[o.name] = vid
        return vid

    def _operand_ids(self, name, operands, node):
        ids = []
        for o in operands:
            if o is None:
                ids.append(-1)
            elif isinstance(o, fx.Node):
                ids.append(self._value(o))
            elif isinstance(o, numbers.Number):
                dt = _scalar_dtype(name, operands, node)
                if dt not in _DTYPES:
                    raise Unsupported(f"scalar dtype {dt}")
                ids.append(self.graph.add_constant(torch.tensor(o, dtype=dt), "scalar"))
            else:
                raise Unsupported(f"operand of type {type(o).__name__}")
        return ids

    # ---- support, decided once per node ----
    def decide(self, node):
        if node.op != "call_function":
            return False
        if node.name not in self.decisions:
            try:
                self._import(node)
                self.decisions[node.name] = True
            except Unsupported as e:
                self.decisions[node.name] = False
                self.reasons[node.name] = str(e)
            except Exception as e:  # a converter bug must not break compilation: fall back and say why
                self.decisions[node.name] = False
                self.reasons[node.name] = f"import error: {type(e).__name__}: {e}"
        return self.decisions[node.name]

    def _import(self, node):
        if node.target is operator.getitem:
            src = node.args[0]
            if not isinstance(src, fx.Node):
                raise Unsupported("getitem of a non-node")
            ok = self.decide(src)
            if isinstance(self.values.get(src.name), list):
                self.values[node.name] = self.values[src.name][node.args[1]]
            if not ok:
                raise Unsupported(self.reasons.get(src.name, "unsupported"))
            return
        name, operands, attrs = normalize(node)
        if name == "as_strided":
            src = _meta(operands[0])
            if not (src.is_contiguous() and src.storage_offset() == 0):
                raise Unsupported("as_strided of a non-contiguous input")
        outs = _out_specs(node, self.device_type)
        ids = self._operand_ids(name, operands, node)
        nid, out_ids, reason = self.graph.import_node(self.core_opts, name, ids, outs, attrs, aten_name(node.target))
        if nid >= 0:
            self.ecg_nodes[node.name] = nid
            self.values[node.name] = out_ids[0] if isinstance(node.meta.get("val"), torch.Tensor) else list(out_ids)
        if reason:
            raise Unsupported(reason)

    # ---- compiling a region ----
    def build_region(self, sub: fx.GraphModule, outer_args):
        """Compiles one fused submodule, cut from the whole-model ECG; returns (handle, run inputs, metas)."""
        # An outer argument that an earlier region's call now produces carries that region's
        # output value (recorded by note_region_outputs), the value this region's nodes read.
        input_ids = [self._value(a) for a in outer_args]
        run_inputs = [a for a in outer_args if not self.is_compile_time(a)]
        try:
            node_ids = sorted(self.ecg_nodes[n.name] for n in sub.graph.nodes
                              if n.op == "call_function" and n.target is not operator.getitem)
        except KeyError as e:
            raise RuntimeError(f"region node {e} was never imported") from None
        results = sub.graph.output_node().args[0]
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        out_ids = [self.values.get(r.name) for r in results]
        if any(not isinstance(v, int) for v in out_ids):
            raise RuntimeError("a region output is not a single imported tensor")
        metas = [r.meta["val"] for r in results]
        # Eager's strides where they describe a dense tensor; an overlapping view (expand's
        # stride 0) cannot be written into, so that output stays contiguous (same values).
        strides = [list(m.stride()) if not m.is_contiguous() and is_non_overlapping_and_dense(m) else []
                   for m in metas]
        handle = _C.compile_part(self.graph, node_ids, input_ids, out_ids, self.core_opts, strides)
        return handle, run_inputs, metas, out_ids

    def note_region_outputs(self, call, out_ids):
        """The getitem nodes reading a region's call stand for the region's output values."""
        for user in call.users:
            if user.target is operator.getitem and isinstance(user.args[1], int):
                self.values[user.name] = out_ids[user.args[1]]


def _fetch_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class _Support(OperatorSupportBase):
    def __init__(self, lowerer):
        self.lowerer = lowerer

    def is_node_supported(self, submodules, node):
        return self.lowerer.decide(node)


def _release(handles):
    for h in handles:
        try:
            _C.release(h)
            unregister_region_meta(h)
        except Exception:
            pass


def lower(gm: fx.GraphModule, frozen: dict, opts, report: GraphReport) -> fx.GraphModule:
    """Rewrites `gm` in place so that supported regions run in the core; returns it."""
    lowerer = Lowerer(gm, frozen, opts, report)
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            name = aten_name(n.target) if isinstance(n.target, torch._ops.OpOverload) else str(n.target)
            report.ops_total[name] += 1
            if lowerer.decide(n):
                report.ops_core[name] += 1
            else:
                report.add_fallback(name, lowerer.reasons.get(n.name, "unsupported"))
    partitioner = CapabilityBasedPartitioner(gm, _Support(lowerer), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    # A partition made only of getitem nodes has nothing to run.
    partitions = [p for p in partitions if any(n.target is not operator.getitem for n in p.nodes)]
    if not partitions:
        return gm
    fuse_by_partitions(gm, [p.nodes for p in partitions], prefix="dnnf_region_", always_return_tuple=True)
    handles = []
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith("dnnf_region_"):
            continue
        sub = getattr(gm, node.target)
        try:
            handle, run_inputs, metas, out_ids = lowerer.build_region(sub, node.args)
        except (_C.CompilerNotFound, _C.TargetUnavailable):  # set-up problems the user must fix, not fallbacks
            raise
        except Exception as e:  # the region runs eagerly (its submodule stays), and we say why, loudly
            reason = f"region failed to compile in the core: {type(e).__name__}: {e}"
            warn_fallback(reason)
            for n in sub.graph.nodes:
                if n.op == "call_function" and n.target is not operator.getitem:
                    name = aten_name(n.target)
                    report.ops_core[name] -= 1
                    report.add_fallback(name, reason)
            report.ops_core += collections.Counter()  # drop zero counts
            continue
        handles.append(handle)
        register_region_meta(handle, metas)
        report.regions.append(RegionStats.from_core(_C.stats(handle), handle))
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(torch.ops.dnnfusion.run.default, (handle, list(run_inputs)))
        call.meta["val"] = list(metas)
        node.replace_all_uses_with(call)
        lowerer.note_region_outputs(call, out_ids)
        gm.graph.erase_node(node)
        delattr(gm, node.target)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    # Regions live as long as the returned module.
    weakref.finalize(gm, _release, list(handles))
    return gm
