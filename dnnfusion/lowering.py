"""Lowers an aot_autograd inference graph (functional ATen) onto the C++ core.

Each supported ATen node becomes an ECG node; maximal convex groups of supported nodes
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
from .report import GraphReport, RegionStats
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
    """Decides support per node and builds ECG graphs for partitions."""

    def __init__(self, gm, frozen, opts, report: GraphReport):
        self.gm = gm
        # placeholder name -> real tensor (parameters and buffers). Names, not Nodes: fx passes
        # such as the partitioner's topological sort may rebuild the graph's nodes.
        self.frozen = {(k.name if isinstance(k, fx.Node) else k): v for k, v in frozen.items()}
        self.opts = opts
        self.core_opts = core_options(opts)
        self.device_type = target_info(opts.target)["device_type"]
        self.report = report
        self.decisions = {}  # Node -> (op, operands, attrs) or None
        self.reasons = {}

    # ---- support ----
    def _input_spec(self, o, name, operands, node):
        if o is None:
            return None
        if isinstance(o, fx.Node):
            v = o.meta.get("val")
            if not isinstance(v, torch.Tensor):
                raise Unsupported("operand without tensor metadata")
            if v.dtype not in _DTYPES:
                raise Unsupported(f"operand dtype {v.dtype}")
            if any(not isinstance(s, int) for s in v.shape):
                raise Unsupported("symbolic shape")
            if v.device.type != self.device_type:
                raise Unsupported(f"operand on {v.device}, the target runs on {self.device_type}")
            return (list(v.shape), _DTYPES[v.dtype], self.is_compile_time(o))
        if isinstance(o, numbers.Number):
            dt = _scalar_dtype(name, operands, node)
            if dt not in _DTYPES:
                raise Unsupported(f"scalar dtype {dt}")
            return ([], _DTYPES[dt], True)
        raise Unsupported(f"operand of type {type(o).__name__}")

    def is_compile_time(self, n):
        return (n.op == "placeholder" and n.name in self.frozen) or n.op == "get_attr"

    def decide(self, node):
        if node.op != "call_function":
            return False
        if node in self.decisions:
            return self.decisions[node] is not None
        if node.target is operator.getitem:
            src = node.args[0]
            ok = isinstance(src, fx.Node) and self.decide(src)
            self.decisions[node] = ("getitem",) if ok else None
            return ok
        try:
            name, operands, attrs = normalize(node)
            if name == "as_strided":
                src = _meta(operands[0])
                if not (src.is_contiguous() and src.storage_offset() == 0):
                    raise Unsupported("as_strided of a non-contiguous input")
            specs = [self._input_spec(o, name, operands, node) for o in operands]
            outs = _out_specs(node, self.device_type)
            reason = _C.check_support(self.opts.target, name, specs, outs, attrs)
            if reason:
                raise Unsupported(reason)
            self.decisions[node] = (name, operands, attrs)
            return True
        except Unsupported as e:
            self.decisions[node] = None
            self.reasons[node] = str(e)
            return False
        except Exception as e:  # a converter bug must not break compilation: fall back and say why
            self.decisions[node] = None
            self.reasons[node] = f"import error: {type(e).__name__}: {e}"
            return False

    # ---- building a region ----
    def build_region(self, sub: fx.GraphModule, outer_args):
        """Builds and compiles the ECG of one fused submodule; returns (handle, run inputs, metas)."""
        g = _C.Graph()
        env = {}
        run_inputs = []
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        for ph, outer in zip(placeholders, outer_args):
            v = outer.meta.get("val")
            if outer.op == "placeholder" and outer.name in self.frozen:
                env[ph] = g.add_weight(self.frozen[outer.name], outer.name)
            elif outer.op == "get_attr":
                env[ph] = g.add_weight(_fetch_attr(self.gm, outer.target), outer.name)
            else:
                env[ph] = g.add_input(list(v.shape), _DTYPES[v.dtype], outer.name)
                run_inputs.append(outer)
        for n in sub.graph.nodes:
            if n.op != "call_function":
                continue
            if n.target is operator.getitem:
                env[n] = env[n.args[0]][n.args[1]]
                continue
            name, operands, attrs = normalize(n)
            ids = []
            for o in operands:
                if o is None:
                    ids.append(-1)
                elif isinstance(o, fx.Node):
                    ids.append(env[o])
                else:
                    dt = _scalar_dtype(name, operands, n)
                    ids.append(g.add_constant(torch.tensor(o, dtype=dt), "scalar"))
            outs = g.add_node(name, ids, _out_specs(n, self.device_type), attrs, aten_name(n.target))
            val = n.meta.get("val")
            env[n] = outs[0] if isinstance(val, torch.Tensor) else outs
        out_node = sub.graph.output_node()
        results = out_node.args[0]
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        out_ids = [env[r] for r in results]
        metas = [r.meta["val"] for r in results]
        g.set_outputs(out_ids)
        strides = [list(m.stride()) if not m.is_contiguous() else [] for m in metas]
        handle = _C.compile(g, self.core_opts, strides)
        return handle, run_inputs, metas


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
                report.add_fallback(name, lowerer.reasons.get(n, "unsupported"))
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
            handle, run_inputs, metas = lowerer.build_region(sub, node.args)
        except (_C.CompilerNotFound, _C.TargetUnavailable):  # set-up problems the user must fix, not fallbacks
            raise
        except Exception as e:  # the region runs eagerly (its submodule stays) and we say why
            reason = f"region failed to compile in the core: {type(e).__name__}: {e}"
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
        gm.graph.erase_node(node)
        delattr(gm, node.target)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    # Regions live as long as the returned module.
    weakref.finalize(gm, _release, list(handles))
    return gm
