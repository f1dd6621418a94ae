"""dnnfusion.prune(): AukC structured channel pruning (and unstructured magnitude pruning).

Precondition: a torch nn.Module and example inputs it runs on. Postcondition: a new, physically
smaller module (the input is untouched) whose forward runs at the example inputs with the same
output shapes, checked twice before it is returned: by running it, and by re-tracing it and
confirming that every op pairs the same channels as in the original (else a ValueError names the
layers involved, rather than a silently wrong model).
"""
import copy
import numbers

import torch
import torch.nn as nn

from . import criteria as crit
from .apply import magnitude_prune, slice_tensors
from .dependency import ChannelAnalysis, trace
from .plan import make_plan
from .report import LayerChange, PruneReport, count_flops, count_params


def _as_inputs(x, what):
    if isinstance(x, torch.Tensor):
        return (x,)
    if isinstance(x, (tuple, list)) and len(x) > 0:
        return tuple(x)
    raise ValueError(f"dnnfusion.prune: {what} must be a tensor or a non-empty tuple/list of model inputs, "
                     f"got {type(x).__name__}")


def _check_unit(name, v, open_interval):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"dnnfusion.prune: {name} must be a number, got {v!r}")
    ok = 0.0 < v < 1.0 if open_interval else 0.0 <= v <= 1.0
    if not ok:
        rng = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"dnnfusion.prune: {name} must lie in {rng}, got {v!r}")


def _ignored_names(model, ignored_layers):
    if ignored_layers is None:
        return set()
    by_id = {id(m): n for n, m in model.named_modules()}
    names = set()
    for item in ignored_layers:
        if isinstance(item, str):
            try:
                model.get_submodule(item)
            except AttributeError:
                raise ValueError(f"dnnfusion.prune: ignored_layers names {item!r}, which is not a submodule") from None
            names.add(item)
        elif isinstance(item, nn.Module) and id(item) in by_id:
            names.add(by_id[id(item)])
        else:
            raise ValueError("dnnfusion.prune: ignored_layers must list submodules of the model or their names, "
                             f"got {item!r}")
    return names


def _module_of(param_name):
    return param_name.rpartition(".")[0]


def _measure_site(an, pr):
    """Where a producer's activation is measured: after the chain of single-input ops (BN,
    activation) that directly follows it, i.e. the feature map the next layer actually sees."""
    node, dim = pr.node, pr.out_dim
    lab = an.labels.get(node)
    if lab is None or lab[dim] is None:
        return node, dim
    want = an.uf.roots(lab[dim])
    params = set(an.graph_placeholders()[:an.num_params])
    while len(node.users) == 1:
        user = next(iter(node.users))
        if user.op != "call_function":
            break
        acts = [a for a in user.all_input_nodes if a not in params and an.shapes.get(a, ()) != ()]
        if len(acts) != 1:
            break
        ulab = an.labels.get(user)
        if isinstance(ulab, list) and ulab and isinstance(ulab[0], list):
            firsts = [u for u in user.users if u.args[1:2] == (0,)]
            if len(firsts) != 1:
                break
            user, ulab = firsts[0], ulab[0]
        if not isinstance(ulab, list):
            break
        nxt = [d for d, v in enumerate(ulab) if v is not None and v.numel() == want.numel()
               and torch.equal(an.uf.roots(v), want)]
        if not nxt:
            break
        node, dim = user, nxt[0]
    return node, dim


def prune(model, ratio, example_inputs, calib_data=None, omega=0.8, lam=0.5, criterion="aukc", multiple_of=1,
          ignored_layers=None, global_pruning=False, structured=True, return_report=False, seed=0):
    """Returns a pruned copy of `model` (and a PruneReport with return_report=True).

    ratio: fraction of channels removed per prunable group (structured) or of weights zeroed
    (structured=False). calib_data: iterable of input batches for the activation criterion
    (default: the example inputs). omega, lam: AukC weights. criterion: "aukc", "l1", "l2",
    "random", "bn_scale". multiple_of: remaining channels per group rounded up to a multiple.
    ignored_layers: submodules (or names) whose output channels are never pruned.
    global_pruning: rank all groups together instead of the same ratio per group.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"dnnfusion.prune: model must be a torch.nn.Module, got {type(model).__name__}")
    _check_unit("ratio", ratio, open_interval=True)
    _check_unit("omega", omega, open_interval=False)
    _check_unit("lam", lam, open_interval=False)
    if criterion not in crit.CRITERIA:
        raise ValueError(f"dnnfusion.prune: unknown criterion {criterion!r}; valid: {', '.join(crit.CRITERIA)}")
    if isinstance(multiple_of, bool) or not isinstance(multiple_of, int) or multiple_of < 1:
        raise ValueError(f"dnnfusion.prune: multiple_of must be an int >= 1, got {multiple_of!r}")
    inputs = _as_inputs(example_inputs, "example_inputs")
    ignored = _ignored_names(model, ignored_layers)

    work = copy.deepcopy(model)
    work.eval()
    try:
        with torch.no_grad():
            ref_out = work(*inputs)
    except Exception as e:
        raise ValueError(f"dnnfusion.prune: example_inputs do not run the model: {type(e).__name__}: {e}") from e
    ref_shapes = [tuple(t.shape) for t in _flat_tensors(ref_out)]
    report = PruneReport(criterion=criterion, ratio=float(ratio), structured=bool(structured))
    report.params_before = count_params(work)
    report.flops_before = count_flops(work, inputs)

    if not structured:
        for name, numel, zeros in magnitude_prune(work, float(ratio), ignored, global_pruning):
            report.layers.append(LayerChange(name, type(work.get_submodule(name)).__name__, (numel, 0), (numel, zeros)))
        report.params_after = count_params(work)
        report.flops_after = report.flops_before  # dense FLOPs; the sparse kernels exploit the zeros
        work.train(model.training)
        return (work, report) if return_report else work

    calib = [inputs] if calib_data is None else [_as_inputs(b, "each calib_data batch") for b in calib_data]
    if not calib:
        raise ValueError("dnnfusion.prune: calib_data is empty")

    plan, an, names = plan_structured(work, inputs, calib, float(ratio), omega, lam, criterion, multiple_of,
                                      global_pruning, seed, ignored)
    report.frozen_by = dict(an.unknown_ops)
    report.groups, report.classes_before, report.classes_after = plan.groups, plan.classes_before, plan.classes_after
    report.kept = plan.keep

    before = _layer_sizes(work)
    slice_tensors(work, plan.keep)
    _verify(work, inputs, ref_shapes, an, names, plan)
    after = _layer_sizes(work)
    for n, b in before.items():
        if after.get(n) != b:
            report.layers.append(LayerChange(n, type(work.get_submodule(n)).__name__, b, after[n]))
    report.params_after = count_params(work)
    report.flops_after = count_flops(work, inputs)
    work.train(model.training)
    return (work, report) if return_report else work


def plan_structured(work, inputs, calib, ratio, omega, lam, criterion, multiple_of, global_pruning, seed,
                    ignored=frozenset()):
    """Dependency analysis, channel scores and the keep plan of a structured pruning run, shared by
    dnnfusion.prune() and the compile-time pass (prune/compile_pass.py).

    Precondition: `work` is an eval-mode module (not modified here) whose forward runs at `inputs`;
    `calib` is a non-empty list of input tuples; the arguments are already validated.
    Postcondition: (plan, analysis, tensor names): plan.keep lists, per parameter/buffer name of
    `work`, the indices each shrinking dim keeps.
    """
    gm, names, values = trace(work, inputs)
    an = ChannelAnalysis(gm, len(values), names)
    with torch.no_grad():
        an.run(values, *inputs)
    # Ignored layers keep every output channel (dim 0 of their own tensors).
    for p, name in enumerate(names):
        if _module_of(name) in ignored or any(_module_of(name).startswith(i + ".") for i in ignored if i):
            lab = an.param_ids_of(p)
            if lab and lab[0] is not None:
                an._freeze_vec(lab[0])

    producers, seen = [], set()
    for pr in an.producers:
        if (pr.param, pr.dim) not in seen:
            seen.add((pr.param, pr.dim))
            producers.append(pr)
    rows = [crit.weight_rows(values[pr.param], pr.dim) for pr in producers]
    act = [None] * len(producers)
    if criterion == "aukc":
        sites = {}
        for i, pr in enumerate(producers):
            node, dim = _measure_site(an, pr)
            pr.measure_node, pr.measure_dim = node, dim
            sites[node] = dim
        # The trace has the example's shapes baked in: a batch of another shape gets its own trace
        # (same op sequence, so the measured nodes are found again by name).
        sums = {}
        recs = {_signature(inputs): crit.ActivationL1(gm, sites)}
        site_names = {node.name: dim for node, dim in sites.items()}
        with torch.no_grad():
            for batch in calib:
                key = _signature(batch)
                try:
                    if key not in recs:
                        gmb = trace(work, batch)[0]
                        recs[key] = crit.ActivationL1(gmb, {nd: site_names[nd.name] for nd in gmb.graph.nodes
                                                            if nd.name in site_names})
                    recs[key].run(values, *batch)
                except Exception as e:
                    raise ValueError(f"dnnfusion.prune: a calib_data batch does not run the model: {e}") from e
        for rec in recs.values():
            for node, acc in rec.sums.items():
                sums[node.name] = acc if node.name not in sums else sums[node.name] + acc
        for i, pr in enumerate(producers):
            s = sums.get(pr.measure_node.name)
            act[i] = s.float() if s is not None and s.numel() == rows[i].shape[0] else torch.zeros(rows[i].shape[0])
    gen = torch.Generator().manual_seed(seed)
    scores = [crit.producer_scores(criterion, r, a, omega, lam, gen) for r, a in zip(rows, act)]
    bonus = _bn_scale_scores(an, values) if criterion == "bn_scale" else None
    plan = make_plan(an, names, producers, scores, ratio, multiple_of, global_pruning, bonus)
    return plan, an, names


def _bn_scale_scores(an, values):
    """Network slimming without sparsity training: a class scores the mean |γ| (divided by its
    layer's mean |γ|) of the batch-norm channels in it."""
    from .dependency import _BATCH_NORMS, _opname

    phs = an.graph_placeholders()
    total, count = {}, {}
    for n in an.module.graph.nodes:
        if n.op == "call_function" and _opname(n.target) in _BATCH_NORMS and len(n.args) > 1:
            w = n.args[1]
            if not isinstance(w, torch.fx.Node) or w not in phs[:an.num_params]:
                continue
            p = phs.index(w)
            g = values[p].detach().abs().float()
            g = g / g.mean() if float(g.mean()) > 0 else torch.ones_like(g)
            for r, s in zip(an.uf.roots(an.param_ids_of(p)[0]).tolist(), g.tolist()):
                total[r] = total.get(r, 0.0) + s
                count[r] = count.get(r, 0) + 1
    return {r: total[r] / count[r] for r in total}


def _signature(batch):
    return tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else repr(t) for t in batch)


def _flat_tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat_tensors(o)]
    return []


def _layer_sizes(model):
    sizes = {}
    for n, m in model.named_modules():
        if isinstance(m, nn.modules.conv._ConvNd):
            sizes[n] = (m.out_channels, m.in_channels)
        elif isinstance(m, nn.Linear):
            sizes[n] = (m.out_features, m.in_features)
        elif isinstance(m, nn.modules.batchnorm._NormBase):
            sizes[n] = (m.num_features, m.num_features)
        elif isinstance(m, (nn.LayerNorm, nn.GroupNorm)) and getattr(m, "weight", None) is not None:
            sizes[n] = (m.weight.shape[0], m.weight.shape[0])
    return sizes


def _verify(work, inputs, ref_shapes, an, names, plan):
    """Runs the pruned model and re-traces it: every op must pair the channels it paired before."""
    try:
        with torch.no_grad():
            out = work(*inputs)
    except Exception as e:
        raise ValueError(f"dnnfusion.prune: the pruned model no longer runs ({type(e).__name__}: {e}); "
                         "its forward probably hard-codes a channel count") from e
    shapes = [tuple(t.shape) for t in _flat_tensors(out)]
    if shapes != ref_shapes:
        raise ValueError(f"dnnfusion.prune: pruning changed the output shapes {ref_shapes} -> {shapes}")
    gm2, names2, values2 = trace(work, inputs)
    if names2 != names:
        raise ValueError("dnnfusion.prune: the pruned model has different parameters than the original")
    kept_ids = []
    for p, name in enumerate(names):
        lab = an.param_ids_of(p)
        if lab is None:
            kept_ids.append(None)
            continue
        dims = plan.keep.get(name, {})
        kept_ids.append([v.index_select(0, dims[d]) if d in dims else v for d, v in enumerate(lab)])
    check = ChannelAnalysis(gm2, len(values2), names2, param_ids=kept_ids, check_against=an)
    with torch.no_grad():
        check.run(values2, *inputs)
    if check.mismatches:
        node, a, b = check.mismatches[0]
        la, lb = an.owner_name(a), an.owner_name(b)
        raise ValueError(f"dnnfusion.prune: after pruning, op {node.target} ({node.name}) would pair channels of "
                         f"{la} with channels of {lb} that it did not pair before (a channel-reordering op such "
                         f"as a shuffle whose layout depends on the channel count); add one of these layers to "
                         f"ignored_layers")
