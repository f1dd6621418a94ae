"""End to end: every zoo model compiled with backend="dnnfusion" matches eager within
max|out - ref| <= 2e-4 * max|ref|, and at least 90% of its ATen ops (by count) run in the core —
in each fusion mode (none / tvm / dnnfusion) at batch 1, and in the default mode at batch 4; mode
none with NCHW layouts, the others with NCHW[x]c convolutions — on the cpu target; and every model
at batch 1 on the reference target. Models built of many identical layers run with fewer of them
(SHALLOWER). On the cpu target the AMX choice follows the shape rules alone (amx="rule"), so on a
CPU with AMX every layer they allow is checked on the tile kernels.

Dynamo's trace of a model does not depend on the backend's options, and tracing is most of a
compile's time on the larger models (densenet121: ~9 of ~12 s). So each model is traced once at
batch 1 and the three fusion modes compile that same graph through the backend entry point Dynamo
calls (`dnnfusion_backend(gm, example_inputs, options)`), checked against the graph run eagerly;
batch 4 goes through `torch.compile` itself, so every model also runs the whole torch.compile path
(guards, the call from Dynamo's frame) against the model's eager outputs."""
import pytest
import torch

import dnnfusion
from dnnfusion import zoo
from dnnfusion.backend import dnnfusion_backend
from dnnfusion.report import collecting

TOL = 2e-4


def _compare(out, ref):
    """Max relative error of out against ref (lists of tensors); asserts they match within TOL."""
    assert len(out) == len(ref), f"{len(out)} outputs, eager has {len(ref)}"
    worst = 0.0
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape, f"{o.dtype}{tuple(o.shape)} vs eager {r.dtype}{tuple(r.shape)}"
        if r.numel() == 0:
            continue
        if not r.is_floating_point():
            assert torch.equal(o, r)
            continue
        assert torch.isfinite(o).all(), "non-finite values in the compiled output"
        err = (o - r).abs().max().item()
        scale = r.abs().max().item()
        assert err <= TOL * scale + 1e-30, f"max|out-ref| = {err:.3e} > {TOL} * max|ref| = {TOL * scale:.3e}"
        worst = max(worst, err / scale if scale else err)
    return worst


def check_model(model, inputs, options=None):
    """Compares the model compiled by torch.compile with eager on every output tensor; returns the
    explain report and the max relative error."""
    before = [x.clone() for x in inputs]
    compiled = torch.compile(model, backend="dnnfusion", options=options, dynamic=False)
    with torch.no_grad():
        ref = zoo.all_tensors(model(*inputs))
        with collecting() as graphs:  # one compile serves both the report and the comparison
            out = zoo.all_tensors(compiled(*inputs))
    report = dnnfusion.ExplainReport(graphs)
    worst = _compare(out, ref)
    for x, b in zip(inputs, before):
        assert torch.equal(x, b), "an input was mutated"
    return report, worst


_traced = {}  # (name, batch) -> the graphs Dynamo made of that model; one model kept at a time


def traced_graphs(name, batch):
    """[(GraphModule, example inputs)] Dynamo hands a backend for zoo model `name` at `batch`."""
    key = (name, batch)
    if key not in _traced:
        _traced.clear()
        model, make_inputs = zoo.build(name, **SHALLOWER.get(name, {}))
        inputs = make_inputs(batch)
        graphs = []

        def capture(gm, example_inputs):
            graphs.append((gm, list(example_inputs)))
            return gm.forward

        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model, backend=capture, dynamic=False)(*inputs)
        torch._dynamo.reset()
        assert graphs, f"Dynamo made no graph of {name}"
        _traced[key] = graphs
    return _traced[key]


def check_traced(name, batch, options):
    """Compiles each of the model's Dynamo graphs through the backend entry point with `options`
    and compares it with the graph run eagerly; returns the explain report and the max error."""
    worst = 0.0
    with torch.no_grad(), collecting() as reports:
        for gm, example_inputs in traced_graphs(name, batch):
            ref = zoo.all_tensors(gm(*example_inputs))
            inputs = [x for x in example_inputs if isinstance(x, torch.Tensor) and not isinstance(x, torch.nn.Parameter)]
            before = [x.clone() for x in inputs]
            # Guards belong to Dynamo's frame, which a direct call has not got.
            fn = dnnfusion_backend(gm, example_inputs, {**options, "fast_guards": False})
            worst = max(worst, _compare(zoo.all_tensors(fn(*example_inputs)), ref))
            for x, b in zip(inputs, before):
                assert torch.equal(x, b), "an input was mutated"
    return dnnfusion.ExplainReport(reports), worst


# Mode none also runs NCHW everywhere (layout off): the other cases run NCHW[x]c convolutions.
CASES = [(1, "none"), (1, "tvm"), (1, "dnnfusion"), (4, "dnnfusion")]


# Models whose depth repeats one layer kind many times run with fewer repeats here (the benchmarks
# run them whole): ALBERT applies its one shared layer 3 times instead of 12 (AlbertConfig() is
# ALBERT-xxlarge, ~600 GFLOP per sequence of 128: two minutes of this suite), MobileBERT keeps 6
# of its 24 identical blocks. Every op kind, and ALBERT's weight sharing, stays in the graph.
SHALLOWER = {"albert": {"num_hidden_layers": 3}, "mobilebert": {"num_hidden_layers": 6}}


@pytest.mark.parametrize("batch,mode", CASES, ids=[f"b{b}-{m}" for b, m in CASES])
@pytest.mark.parametrize("name", zoo.ALL)
def test_zoo_model_matches_eager(name, batch, mode):
    # Not the timed AMX choice (the default; test_backend.py covers it): on a busy host it may
    # keep every layer on the fp32 kernels, and the tile kernels' numbers would go unchecked.
    options = {"fusion": mode, "layout": mode != "none", "amx": "rule"}
    if batch == 1:
        report, worst = check_traced(name, batch, options)
    else:
        model, make_inputs = zoo.build(name, **SHALLOWER.get(name, {}))
        report, worst = check_model(model, make_inputs(batch), options)
    fallbacks = {op: dict(r) for op, r in report.fallbacks.items()}
    print(f"\n{name} batch {batch} fusion {mode}: {report.n_core}/{report.n_total} ATen ops in the core "
          f"({100 * report.coverage:.1f}%), max rel error {worst:.2e}, kernels/call {report.kernels_per_call}, "
          f"IRS {report.irs_bytes / 2**20:.1f} MiB, fallbacks {fallbacks}")
    assert report.n_total > 0
    assert report.coverage >= 0.90, f"only {100 * report.coverage:.1f}% of ATen ops ran in the core: {fallbacks}"


# The reference target (plain loops, one thread, unfused) is the oracle: every zoo model must match
# eager on it too. Its kernels are slow by design, so the models run on smaller inputs with the same
# layer kinds: the CNNs on 112x112 images (vit_b_16, whose patch grid is fixed, at 224 with 2 of its
# 12 encoder layers), the transformers over a sequence of 64, albert (ALBERT-xxlarge) with 1 of its
# 12 passes through the shared layer over a sequence of 32, mobilebert with 6 of its 24 blocks.
def _reference_model(name):
    if name == "albert":
        model, make_inputs = zoo.build(name, num_hidden_layers=1)
        return model, lambda batch: make_inputs(batch, seq=32)
    model, make_inputs = zoo.build(name, **SHALLOWER.get(name, {}))
    if name == "vit_b_16":
        model.encoder.layers = model.encoder.layers[:2]
        return model.eval(), make_inputs
    if name in zoo.TRANSFORMERS:
        return model, lambda batch: make_inputs(batch, seq=64)
    return model, lambda batch: make_inputs(batch, size=112)


@pytest.mark.parametrize("name", zoo.ALL)
def test_zoo_model_matches_eager_on_the_reference_target(name):
    model, make_inputs = _reference_model(name)
    report, worst = check_model(model, make_inputs(1), {"target": "reference"})
    print(f"\n{name} batch 1 target reference: {report.n_core}/{report.n_total} ATen ops in the core "
          f"({100 * report.coverage:.1f}%), max rel error {worst:.2e}, kernels/call {report.kernels_per_call}")
    assert {r.target for r in report.regions} == {"reference"}
    assert report.coverage >= 0.90, f"only {100 * report.coverage:.1f}% of ATen ops ran in the core: {report.fallbacks}"
