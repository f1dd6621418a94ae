"""dnnfusion.compile: ahead-of-time compilation through torch.export, called without Dynamo.
Outputs against eager on real models, the input signature (new shapes, strides, kwargs and pytree
outputs compile or unflatten correctly), weights updated in place, and the errors it raises."""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import dnnfusion
from dnnfusion import zoo


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


class InvertedResidual(nn.Module):
    """Expand, depthwise, project, with a residual: the shape of a mobile network's block."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(3, 12, 1)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.bn = nn.BatchNorm2d(12)
        self.project = nn.Conv2d(12, 3, 1)
        self.fc = nn.Linear(3, 5)

    def forward(self, x):
        y = F.hardswish(self.bn(self.dw(F.relu6(self.expand(x)))))
        return self.fc((x + self.project(y)).mean(dim=(2, 3)))


def convnet():
    torch.manual_seed(0)
    m = InvertedResidual().eval()
    with torch.no_grad():  # a BatchNorm that is not the identity
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


def test_mobilenet_v3_matches_eager_and_runs_in_the_core():
    torch.manual_seed(1)
    model = torchvision.models.mobilenet_v3_large(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    cm = dnnfusion.compile(model, (x,), options={"threads": 2})
    with torch.no_grad():
        ref = model(x)
    out = cm(x)
    assert out.shape == ref.shape
    assert rel_err(out, ref) < 1e-4
    rep = cm.explain()
    assert rep.ops_core == rep.ops_total  # every ATen op of the model ran in the core
    assert "compiled ahead of time" in str(rep)


@pytest.mark.parametrize("name, overrides", [("resnet18", {}), ("shufflenet_v2_x1_0", {}), ("distilbert", {}),
                                             ("gpt2", {"use_cache": False})])
def test_zoo_models_match_eager_at_batch_2(name, overrides):
    model, make = zoo.build(name, **overrides)
    x = make(2)
    cm = dnnfusion.compile(model, tuple(x))
    with torch.no_grad():
        ref = zoo.first_tensor(model(*x))
    assert rel_err(zoo.first_tensor(cm(*x)), ref) < 1e-4
    assert cm.explain().n_core > 0


def test_an_output_torch_export_cannot_flatten_is_a_clear_error():
    model, make = zoo.build("gpt2")  # returns its key/value cache, a type pytree does not know
    with pytest.raises(ValueError, match="torch.export could not capture the model.*DynamicCache"):
        dnnfusion.compile(model, tuple(make(1)))


def test_transformer_with_keyword_inputs_returns_the_models_output_structure():
    from transformers import BertConfig, BertModel

    torch.manual_seed(2)
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     vocab_size=500, max_position_embeddings=64)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, 500, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    cm = dnnfusion.compile(model, (ids,), {"attention_mask": mask})
    with torch.no_grad():
        ref = model(ids, attention_mask=mask)
    out = cm(ids, attention_mask=mask)
    assert type(out) is type(ref)
    assert rel_err(out.last_hidden_state, ref.last_hidden_state) < 1e-4
    assert rel_err(out.pooler_output, ref.pooler_output) < 1e-4


def test_a_new_shape_or_stride_compiles_again_and_old_ones_are_kept():
    model = convnet()
    x = torch.randn(1, 3, 16, 16)
    cm = dnnfusion.compile(model, (x,))
    y = torch.randn(3, 3, 20, 20)
    z = torch.randn(1, 3, 16, 16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        for inp in (y, z, x):
            assert rel_err(cm(inp), model(inp)) < 1e-5
    assert len(cm.reports) == 3  # x, y, z: one signature each, x's reused


def test_threads_calling_with_different_shapes_get_their_own_results():
    import threading

    model = convnet()
    xs = [torch.randn(1, 3, 10, 10), torch.randn(2, 3, 14, 14)]
    cm = dnnfusion.compile(model, (xs[0],))
    cm(xs[1])  # both signatures compiled before the threads start
    with torch.no_grad():
        refs = [model(x) for x in xs]
    errors = []

    def worker(i):
        for _ in range(50):
            out = cm(xs[i])
            if out.shape != refs[i].shape or rel_err(out, refs[i]) > 1e-5:
                errors.append((i, tuple(out.shape)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_weights_updated_in_place_are_seen():
    model = convnet()
    x = torch.randn(2, 3, 12, 12)
    cm = dnnfusion.compile(model, (x,))
    before = cm(x)
    from dnnfusion import backend

    backend._warned.discard("refreeze")  # the warning is once per process
    with torch.no_grad():
        model.fc.weight.mul_(2.0)
        ref = model(x)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        after = cm(x)
    assert rel_err(after, ref) < 1e-5
    assert rel_err(after, before) > 1e-3
    assert any("changed after compiling" in str(m.message) for m in w)
    assert any("parameters changed after compiling" in n for n in cm.reports[-1].notes)


def test_calls_with_grad_enabled_return_values_without_history():
    model = convnet()
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    cm = dnnfusion.compile(model, (x.detach(),))
    out = cm(x)
    assert not out.requires_grad
    with torch.no_grad():
        assert rel_err(out, model(x)) < 1e-5


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # torch.export cannot capture a branch on a tensor's value
            return x * 2
        return x - 1


class CountsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return x + self.calls


def test_a_buffer_the_model_updates_stays_live():
    model = CountsCalls()
    cm = dnnfusion.compile(model, (torch.zeros(4),))
    assert model.calls.item() == 0  # compiling does not run the model's update
    x = torch.zeros(4)
    assert cm(x).tolist() == [1.0] * 4
    assert cm(x).tolist() == [2.0] * 4
    assert model.calls.item() == 2


@pytest.mark.parametrize("make, args, kwargs, options, error, words", [
    (lambda: (lambda x: x), (torch.randn(2),), None, None, TypeError, "must be a torch.nn.Module"),
    (convnet, torch.randn(1, 3, 8, 8), None, None, TypeError, "args must be a tuple"),
    (convnet, (torch.randn(1, 3, 8, 8),), [1], None, TypeError, "kwargs must be a dict"),
    (convnet, (torch.randn(1, 3, 8, 8),), None, {"prune": 0.5}, ValueError, "'prune' is not supported"),
    (convnet, (torch.randn(1, 3, 8, 8),), None, {"speed": 11}, ValueError, "unknown option"),
    (DataDependent, (torch.randn(4),), None, None, ValueError, "torch.export could not capture"),
])
def test_errors_name_the_problem(make, args, kwargs, options, error, words):
    with pytest.raises(error, match=words):
        dnnfusion.compile(make(), args, kwargs, options=options)


def test_dnnfusion_explain_reports_a_compiled_model_as_compiled():
    model = convnet()
    x, x2 = torch.randn(1, 3, 8, 8), torch.randn(2, 3, 8, 8)
    cm = dnnfusion.compile(model, (x,), options={"threads": 2})
    rep = dnnfusion.explain(cm)
    assert str(rep) == str(cm.explain())
    assert rep.ops_core == rep.ops_total and rep.n_core > 1  # the model's ops, not one opaque call
    rep2 = dnnfusion.explain(cm, x2)  # a new signature: compiled, then reported
    assert len(cm.reports) == 2 and str(rep2) == str(cm.explain())
    with pytest.raises(ValueError, match="keeps the options it was compiled with"):
        dnnfusion.explain(cm, x, options={"fusion": "tvm"})


def test_dnnfusion_explain_without_inputs_is_a_clear_error():
    with pytest.raises(TypeError, match="no example inputs given"):
        dnnfusion.explain(convnet())
