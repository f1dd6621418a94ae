"""Python glue of the fpga target (csrc/target/fpga/): the ``torch.compile`` route.

``torch.compile(model, backend="dnnfusion", options={"target": "fpga", "calib_data": batches})``
hands the whole Dynamo graph to :func:`compile_graph` instead of the core's per-node pipeline: the
accelerator needs calibration data and quantizes whole runs of layers, which ``dnnfusion.fpga.compile``
does on a module-level fx graph. So the Dynamo graph is first turned back into one
(:func:`modularize`): its parameters and buffers become constants of a new root module, and every
``conv2d`` / inference ``batch_norm`` whose weights are such constants becomes a call of an
``nn.Conv2d`` / ``nn.BatchNorm2d`` holding them. Precondition: a Dynamo graph with static shapes
(the per-shape compile of the backend gives concrete ints for symbolic ones) and one image input.
Postcondition: a callable taking Dynamo's arguments and returning the graph's outputs, computed by
an :class:`dnnfusion.fpga.FpgaModule` (accelerator subgraphs on OpenCL, the rest on the cpu target);
the report's text goes to ``explain()``.
"""
import threading

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

_CONV = (torch.conv2d, F.conv2d)
_BATCH_NORM = (F.batch_norm, torch.batch_norm)


def _static_positions(gm):
    out = []
    for i, n in enumerate(gm.graph.find_nodes(op="placeholder")):
        if (n.meta.get("tensor_dict") or {}).get("_dynamo_static_input_type"):
            out.append(i)
    return out


def _arg(node, i, name, default):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _as_conv_module(node, const):
    """An nn.Conv2d equal to this conv2d call, or None when its weights are not constants."""
    w, b = _arg(node, 1, "weight", None), _arg(node, 2, "bias", None)
    if w not in const or (b is not None and b not in const):
        return None
    weight = const[w]
    if weight.dim() != 4:
        return None
    groups = _arg(node, 6, "groups", 1)
    m = nn.Conv2d(weight.shape[1] * groups, weight.shape[0], tuple(weight.shape[2:]), stride=_arg(node, 3, "stride", 1),
                  padding=_arg(node, 4, "padding", 0), dilation=_arg(node, 5, "dilation", 1), groups=groups,
                  bias=b is not None)
    with torch.no_grad():
        m.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        if b is not None:
            m.bias = nn.Parameter(const[b].detach().clone(), requires_grad=False)
    return m.eval()


def _as_batch_norm_module(node, const):
    """An eval-mode nn.BatchNorm2d equal to this inference batch_norm call, or None."""
    mean, var = _arg(node, 1, "running_mean", None), _arg(node, 2, "running_var", None)
    weight, bias = _arg(node, 3, "weight", None), _arg(node, 4, "bias", None)
    if _arg(node, 5, "training", False) or mean not in const or var not in const:
        return None
    if (weight is not None and weight not in const) or (bias is not None and bias not in const):
        return None
    val = node.args[0].meta.get("example_value") if isinstance(node.args[0], fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dim() != 4:
        return None
    c = const[mean].numel()
    m = nn.BatchNorm2d(c, eps=float(_arg(node, 7, "eps", 1e-5)), affine=True)
    with torch.no_grad():
        m.running_mean.copy_(const[mean])
        m.running_var.copy_(const[var])
        m.weight.copy_(const[weight] if weight is not None else torch.ones(c))
        m.bias.copy_(const[bias] if bias is not None else torch.zeros(c))
    return m.eval()


def modularize(gm, example_inputs):
    """(GraphModule with the image inputs as its only placeholders, their positions in Dynamo's
    arguments). Parameters/buffers and concrete ints become constants; convolutions and batch
    norms on constant weights become module calls."""
    root = nn.Module()
    graph = fx.Graph()
    env, const, image_pos = {}, {}, []
    static = set(_static_positions(gm))
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if len(placeholders) != len(example_inputs):
        raise ValueError(f"dnnfusion: target 'fpga': the graph has {len(placeholders)} inputs but "
                         f"{len(example_inputs)} example inputs were given")
    n_mod = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            i = placeholders.index(node)
            v = example_inputs[i]
            if i in static and isinstance(v, torch.Tensor):
                name = f"const_{len(const)}"
                root.register_buffer(name, v.detach(), persistent=False)
                env[node] = graph.get_attr(name)
                const[env[node]] = v.detach()
            elif isinstance(v, torch.Tensor):
                env[node] = graph.placeholder(node.name)
                env[node].meta = dict(node.meta)
                image_pos.append(i)
            else:  # a concrete size of a per-shape compile
                env[node] = v
            continue
        if node.op == "get_attr":
            t = getattr(gm, node.target)
            name = f"const_{len(const)}"
            if isinstance(t, torch.Tensor):
                root.register_buffer(name, t.detach(), persistent=False)
                env[node] = graph.get_attr(name)
                const[env[node]] = t.detach()
            else:
                root.add_module(name, t)
                env[node] = graph.get_attr(name)
            continue
        new = graph.node_copy(node, lambda x: env[x])
        module = None
        if node.op == "call_function" and node.target in _CONV:
            module = _as_conv_module(new, const)
        elif node.op == "call_function" and node.target in _BATCH_NORM:
            module = _as_batch_norm_module(new, const)
        if module is not None:
            name = f"{'conv' if isinstance(module, nn.Conv2d) else 'bn'}_{n_mod}"
            n_mod += 1
            root.add_module(name, module)
            with graph.inserting_after(new):
                call = graph.call_module(name, (new.args[0],))
            new.replace_all_uses_with(call)
            graph.erase_node(new)
            new = call
        new.meta = dict(node.meta)
        env[node] = new
    if len(image_pos) != 1:
        raise ValueError(f"dnnfusion: target 'fpga' compiles models with one image input [N, C, H, W]; this graph "
                         f"takes {len(image_pos)} tensor inputs besides its parameters")
    out = fx.GraphModule(root, graph)
    out.graph.eliminate_dead_code()  # the weights the new modules took over
    out.recompile()
    return out, image_pos


def compile_graph(gm, example_inputs, opts, report):
    """The backend's whole-graph compile for this target (see the module doc). The graph becomes a
    module-level one now; calibration, quantization and the CPU parts' compile run at the first
    call, outside Dynamo's compile (which must not see the fx interpretation and tracing they do)."""
    if opts.calib_data is None:
        raise ValueError("dnnfusion: target 'fpga' needs calibration data: options={'target': 'fpga', "
                         "'calib_data': images [N, C, H, W] or an iterable of input batches}")
    mod, image_pos = modularize(gm, example_inputs)
    (pos,) = image_pos
    state = {"fm": None}
    lock = threading.Lock()

    def build():
        from .. import fpga

        fm = fpga.compile(mod, opts.calib_data, calibration=opts.calibration, per_channel=opts.per_channel,
                          platform=opts.fpga_platform, fpga_binary=opts.fpga_binary, cpu_backend="dnnfusion")
        report.target_sections.append(("fpga target", str(fm.report)))
        n_fpga = sum(1 for op in fm.report.ops if op["target"] == "fpga")
        n_cpu = sum(1 for op in fm.report.ops if op["target"] == "cpu")
        report.notes.append(f"fpga target: {fm.report.num_subgraphs} accelerator subgraph(s), {n_fpga} ops on the "
                            f"accelerator, {n_cpu} on the cpu target")
        return fm

    def run(*args):
        with lock:
            if state["fm"] is None:
                state["fm"] = build()
        return state["fm"](args[pos])

    return run
