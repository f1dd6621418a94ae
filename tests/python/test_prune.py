"""dnnfusion.prune: scores against direct torch computations, argument checks, channel couplings
on hand-built models (each pruned model must equal the original with the removed channels zeroed),
unstructured pruning, ten torchvision architectures at ratios 0.3 and 0.5 (forward, output
shape, reported parameter counts, save/load, torch.compile(backend="dnnfusion") vs eager), and the
compile-time pass options={"prune": r} (same result as dnnfusion.prune, option checks, fallbacks)."""
import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnfusion
from dnnfusion import _C
from dnnfusion.prune import criteria
from dnnfusion.report import collecting

TOL = 2e-4
SEED = 1234


def _close(out, ref, tol=TOL):
    err = (out - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= tol * scale + 1e-6, f"max|out-ref| = {err:.3e}, max|ref| = {scale:.3e}"


# ---------------------------------------------------------------- scores vs direct torch

def test_scores_match_direct_torch_computation():
    g = torch.Generator().manual_seed(SEED)
    for rows, cols in [(1, 5), (7, 3), (33, 50), (130, 9)]:
        w = torch.randn(rows, cols, generator=g)
        w[0] = 0  # a zero filter stays zero after normalization
        wn = w / w.norm(dim=1, keepdim=True).clamp(min=1e-30)
        wn[w.norm(dim=1) == 0] = 0
        p = (wn.double() @ wn.double().T - torch.eye(rows, dtype=torch.float64)).abs()
        torch.testing.assert_close(criteria.orthogonality(w), (p.sum(1) / rows).float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(criteria.l2_norms(w), w.norm(dim=1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(criteria.l1_norms(w), w.abs().sum(1), atol=1e-4, rtol=1e-5)


def _direct_rank(v):
    n = v.numel()
    less = (v[None, :] < v[:, None]).sum(1).double()
    eq = (v[None, :] == v[:, None]).sum(1).double()
    return ((less + 0.5 * (eq - 1)) / max(n - 1, 1)).float() if n > 1 else torch.full((1,), 0.5)


def test_rank_and_combined_score_match_formula():
    g = torch.Generator().manual_seed(SEED + 1)
    for n in (1, 2, 17, 64):
        orth = torch.randint(0, 4, (n,), generator=g).float() / 4  # ties on purpose
        l2 = torch.rand(n, generator=g)
        act = torch.randint(0, 3, (n,), generator=g).float()
        torch.testing.assert_close(criteria.rank(act), _direct_rank(act))
        for omega, lam in [(0.8, 0.5), (1.0, 1.0), (0.0, 0.3), (1.0, 0.0)]:
            want = omega * (lam * _direct_rank(-orth) + (1 - lam) * _direct_rank(l2)) + (1 - omega) * _direct_rank(act)
            got = _C.prune_combined(orth, l2, act, omega, lam)
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_activation_l1_accumulates_in_cpp():
    g = torch.Generator().manual_seed(SEED + 2)
    x = torch.randn(3, 5, 7, generator=g)
    acc = torch.zeros(5, dtype=torch.float64)
    _C.prune_accumulate_abs(x, acc)
    _C.prune_accumulate_abs(x, acc)
    torch.testing.assert_close(acc, 2 * x.double().abs().sum((0, 2)))


def test_select_keep_and_keep_count():
    s = torch.tensor([0.5, 0.9, 0.5, 0.1, 0.9])
    assert _C.prune_select_keep(s, 3) == [0, 1, 4]  # tie 0.5 vs 0.5: lower index kept
    assert _C.prune_keep_count(64, 0.5, 8) == 32 and _C.prune_keep_count(10, 0.3, 1) == 7
    with pytest.raises(ValueError, match="float32"):
        _C.prune_rank(torch.zeros(3, dtype=torch.float64))


# ---------------------------------------------------------------- argument checks

def _tiny():
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()


@pytest.mark.parametrize("kwargs,match", [
    ({"ratio": 0.0}, "ratio"), ({"ratio": 1.0}, "ratio"), ({"ratio": -0.2}, "ratio"), ({"ratio": "half"}, "ratio"),
    ({"omega": 1.5}, "omega"), ({"lam": -0.1}, "lam"), ({"criterion": "taylor"}, "criterion"),
    ({"multiple_of": 0}, "multiple_of"), ({"example_inputs": torch.randn(1, 5, 8, 8)}, "example_inputs"),
    ({"ignored_layers": ["nope"]}, "ignored_layers"),
])
def test_invalid_arguments_raise_value_error(kwargs, match):
    args = {"ratio": 0.5, "example_inputs": torch.randn(1, 3, 8, 8)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dnnfusion.prune(_tiny(), **args)


# ---------------------------------------------------------------- couplings on hand-built models

def _masked_reference(model, kept):
    """The original model with every removed output channel zeroed (weight rows, bias, norm
    affine): wherever pruning is exact, it computes what the pruned model computes."""
    ref = copy.deepcopy(model)
    tensors = dict(ref.named_parameters())
    tensors.update(dict(ref.named_buffers()))
    with torch.no_grad():
        for name, dims in kept.items():
            if 0 not in dims or name.endswith(("running_mean", "running_var")):
                continue
            t = tensors[name]
            mask = torch.zeros(t.shape[0], dtype=torch.bool)
            mask[dims[0]] = True
            t[~mask] = 0
    return ref


def _prune_and_compare(model, x, ratio=0.5, exact=True, **kw):
    model.eval()
    state = copy.deepcopy(model.state_dict())
    small, rep = dnnfusion.prune(model, ratio, x, return_report=True, **kw)
    for k, v in model.state_dict().items():  # the input model is left as it was
        assert torch.equal(v, state[k]), f"prune modified the input model's {k}"
    with torch.no_grad():
        out = small(x)
        assert out.shape == model(x).shape
        if exact:
            _close(out, _masked_reference(model, rep.kept)(x))
    assert rep.params_after == sum(p.numel() for p in small.parameters()) < rep.params_before
    return small, rep


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.bn0 = nn.BatchNorm2d(16)
        self.a = nn.Conv2d(16, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.b = nn.Conv2d(16, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = F.relu(self.bn0(self.stem(x)))
        y = self.bn2(self.b(F.relu(self.bn1(self.a(x)))))
        x = F.relu(x + y)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def test_residual_add_couples_both_branches():
    torch.manual_seed(SEED)
    m = Residual()
    small, rep = _prune_and_compare(m, torch.randn(2, 3, 12, 12))
    # stem and b feed one add: same kept channels; a is free.
    assert torch.equal(rep.kept["stem.weight"][0], rep.kept["b.weight"][0])
    assert small.stem.out_channels == small.b.out_channels == small.bn0.num_features == 8
    assert small.a.out_channels == 8 and small.fc.in_features == 8 and small.fc.out_features == 5


class Concat(nn.Module):
    def __init__(self):
        super().__init__()
        self.l, self.r = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 12, 1)
        self.bn = nn.BatchNorm2d(20)
        self.c = nn.Conv2d(20, 16, 3, padding=1)
        self.out = nn.Conv2d(16, 6, 1)

    def forward(self, x):
        y = F.relu(self.bn(torch.cat([self.l(x), self.r(x)], 1)))
        a, b = torch.chunk(F.relu(self.c(y)), 2, dim=1)
        return self.out(torch.cat([b, a], 1))  # the model output is a conv: its channels stay


def test_concat_and_chunk_with_conv_output():
    torch.manual_seed(SEED)
    small, rep = _prune_and_compare(Concat(), torch.randn(2, 3, 10, 10))
    assert small.l.out_channels == 4 and small.r.out_channels == 6 and small.bn.num_features == 10
    assert small.c.in_channels == 10 and small.c.out_channels == 8 and small.out.out_channels == 6
    # chunk() halves stay equal: the same positions go in both halves.
    k = rep.kept["c.weight"][0]
    assert torch.equal(k[:4], k[4:] - 8)


class DepthwiseGrouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.pw1 = nn.Conv2d(3, 16, 1)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.g = nn.Conv2d(16, 32, 3, padding=1, groups=4)
        self.bn = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 4 * 4, 3)

    def forward(self, x):
        x = F.relu(self.dw(F.relu(self.pw1(x))))
        x = F.relu(self.bn(self.g(x)))
        return self.fc(torch.flatten(x, 1))  # flatten -> linear without pooling


def test_depthwise_grouped_and_flatten_linear():
    torch.manual_seed(SEED)
    small, rep = _prune_and_compare(DepthwiseGrouped(), torch.randn(2, 3, 4, 4))
    assert small.dw.groups == small.dw.out_channels == small.pw1.out_channels == 8
    assert small.g.groups == 4 and small.g.in_channels == 8 and small.g.out_channels == 16
    # grouped conv: every group keeps the same positions
    k = rep.kept["g.weight"][0].view(4, -1)
    assert all(torch.equal(k[i] - 8 * i, k[0]) for i in range(4))
    assert small.fc.in_features == 16 * 16 and small.fc.out_features == 3


class Shuffles(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(3, 8, 1)
        self.c = nn.Conv2d(16, 16, 3, padding=1)
        self.up = nn.Conv2d(16, 32, 1)
        self.ps = nn.PixelShuffle(2)
        self.d = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = torch.cat([self.a(x), self.b(x)], 1)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)  # channel shuffle
        y = F.relu(self.c(y))
        return self.d(F.relu(self.ps(self.up(y))))


def test_channel_and_pixel_shuffle_stay_correct():
    torch.manual_seed(SEED)
    small, rep = _prune_and_compare(Shuffles(), torch.randn(2, 3, 6, 6))
    # Shuffle: a and b lose the same positions; pixel shuffle: whole blocks of 4 go.
    assert torch.equal(rep.kept["a.weight"][0], rep.kept["b.weight"][0])
    up = rep.kept["up.weight"][0].view(-1, 4)
    assert torch.equal(up - up[:, :1], torch.arange(4).expand_as(up)) and small.up.out_channels % 4 == 0


class Attention(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Linear(6, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 3)
        self.scale = (dim // heads) ** -0.5

    def forward(self, x):
        x = self.embed(x)
        b, n, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1) * self.scale).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(b, n, -1)
        return self.head(x + self.proj(y))


def test_attention_heads_keep_the_same_positions():
    torch.manual_seed(SEED)
    small, rep = _prune_and_compare(Attention(), torch.randn(2, 5, 6))
    k = rep.kept["qkv.weight"][0].view(6, -1)  # (q,k,v) x heads blocks of head_dim
    assert all(torch.equal(k[i] - 8 * i, k[0]) for i in range(6))
    assert small.qkv.out_features == 24 and small.embed.out_features == 8


class NormLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.ln = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 4)
        self.gamma = nn.Parameter(torch.rand(16, 1, 1))

    def forward(self, x):
        x = F.relu(self.gn(self.c1(x)))
        x = self.gamma * self.c2(x)
        x = self.ln(x.permute(0, 2, 3, 1)).mean((1, 2))
        return self.fc(x)


def test_group_norm_layer_norm_and_layer_scale():
    torch.manual_seed(SEED)
    # Normalization statistics change when channels go, so only structure is compared here.
    small, rep = _prune_and_compare(NormLayers(), torch.randn(2, 3, 6, 6), exact=False)
    assert small.gn.num_channels == small.c1.out_channels == 8
    k = rep.kept["c1.weight"][0].view(4, -1)  # GroupNorm: the same positions in each group
    assert all(torch.equal(k[i] - 4 * i, k[0]) for i in range(4))
    assert small.ln.normalized_shape == (8,) and small.gamma.shape == (8, 1, 1) and small.fc.in_features == 8


def test_ignored_layers_multiple_of_and_global():
    torch.manual_seed(SEED)
    m = Residual()
    x = torch.randn(2, 3, 12, 12)
    small = dnnfusion.prune(m, 0.5, x, ignored_layers=[m.a])
    assert small.a.out_channels == 16 and small.stem.out_channels == 8
    small = dnnfusion.prune(m, 0.3, x, multiple_of=8)
    assert small.a.out_channels == 16 and small.stem.out_channels == 16  # 16*0.7 = 11.2 -> 12 -> 16
    small = dnnfusion.prune(m, 0.6, x, multiple_of=4)
    assert small.a.out_channels == 8 and small.stem.out_channels == 8
    small, rep = dnnfusion.prune(m, 0.5, x, global_pruning=True, return_report=True)
    assert rep.classes_after == rep.classes_before // 2
    with torch.no_grad():
        assert small(x).shape == (2, 5)


def test_criteria_choose_the_expected_channels():
    torch.manual_seed(SEED)
    m = _tiny()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        m[1].weight.fill_(0.1)
        m[1].weight[[1, 5, 6, 7]] = 5.0  # bn_scale keeps these
        m[0].weight[[0, 2, 3, 4]] *= 0.01  # and L1/L2 drop these
    _, rep = dnnfusion.prune(m, 0.5, x, criterion="bn_scale", return_report=True)
    assert rep.kept["0.weight"][0].tolist() == [1, 5, 6, 7]
    for c in ("l1", "l2"):
        _, rep = dnnfusion.prune(m, 0.5, x, criterion=c, return_report=True)
        assert rep.kept["0.weight"][0].tolist() == [1, 5, 6, 7]
    # aukc with omega=0 ranks by activation L1 over the calibration data only.
    calib = [torch.randn(2, 3, 8, 8) for _ in range(3)]
    _, rep = dnnfusion.prune(m, 0.5, x, calib_data=calib, omega=0.0, return_report=True)
    with torch.no_grad():
        act = sum(m[:3](b).abs().sum((0, 2, 3)) for b in calib)
    assert rep.kept["0.weight"][0].tolist() == sorted(torch.topk(act, 4).indices.tolist())
    r1 = dnnfusion.prune(m, 0.5, x, criterion="random", seed=3, return_report=True)[1].kept["0.weight"][0]
    r2 = dnnfusion.prune(m, 0.5, x, criterion="random", seed=3, return_report=True)[1].kept["0.weight"][0]
    assert torch.equal(r1, r2)


class HardCoded(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 16, 3)
        self.fc = nn.Linear(16, 2)

    def forward(self, x):
        y = self.c(x)
        return self.fc(y.reshape(y.shape[0], 16, -1).mean(-1))  # a literal channel count


def test_hard_coded_channel_count_is_a_clear_error():
    torch.manual_seed(SEED)
    with pytest.raises(ValueError, match="no longer runs|pair channels"):
        dnnfusion.prune(HardCoded(), 0.5, torch.randn(2, 3, 6, 6))


class FixedPermutation(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 1)
        self.d = nn.Conv2d(8, 8, 1)
        self.e = nn.Conv2d(8, 2, 1)
        self.register_buffer("perm", torch.tensor([3, 1, 0, 2, 7, 6, 5, 4]))

    def forward(self, x):
        return self.e(F.relu(self.d(self.c(x)[:, self.perm])))


def test_unknown_channel_reordering_keeps_those_channels():
    torch.manual_seed(SEED)
    small, rep = _prune_and_compare(FixedPermutation(), torch.randn(2, 3, 5, 5))
    assert small.c.out_channels == 8 and small.d.out_channels == 4
    assert rep.frozen_by


def test_unstructured_magnitude_sparsity():
    torch.manual_seed(SEED)
    m = Residual().eval()
    x = torch.randn(2, 3, 12, 12)
    small, rep = dnnfusion.prune(m, 0.7, x, structured=False, return_report=True, ignored_layers=["fc"])
    assert {l.name for l in rep.layers} == {"stem", "a", "b"}
    for l in rep.layers:
        w = small.get_submodule(l.name).weight
        assert l.after == (w.numel(), int((w == 0).sum())) and l.after[1] == int(0.7 * w.numel())
        orig = m.get_submodule(l.name).weight
        kept = w != 0  # the survivors are the largest magnitudes, unchanged
        assert torch.equal(w[kept], orig[kept]) and orig[kept].abs().min() >= orig[~kept].abs().max()
    assert torch.count_nonzero(small.fc.weight) == m.fc.weight.numel()
    small, rep = dnnfusion.prune(m, 0.5, x, structured=False, global_pruning=True, return_report=True)
    total = sum(l.after[0] for l in rep.layers)
    assert sum(l.after[1] for l in rep.layers) == int(0.5 * total)


# ---------------------------------------------------------------- real architectures

# Each architecture at one ratio; both ratios are covered across them (the ratio arithmetic itself
# is tested above on small models), which keeps the suite's time in budget.
MODELS = [("resnet18", 0.5), ("resnet50", 0.3), ("mobilenet_v2", 0.5), ("mobilenet_v3_small", 0.3),
          ("vgg16_bn", 0.5), ("efficientnet_b0", 0.3), ("densenet121", 0.5), ("shufflenet_v2_x1_0", 0.3),
          ("regnet_y_400mf", 0.5), ("convnext_tiny", 0.3)]


@pytest.mark.parametrize("name,ratio", MODELS)
def test_torchvision_model_pruned(name, ratio):
    import torchvision

    torch.manual_seed(SEED)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(SEED))
    small, rep = dnnfusion.prune(model, ratio, x, return_report=True)
    n_small = sum(p.numel() for p in small.parameters())
    assert rep.params_before == sum(p.numel() for p in model.parameters())
    assert rep.params_after == n_small < rep.params_before
    assert rep.flops_after < rep.flops_before
    assert rep.classes_after < rep.classes_before
    with torch.no_grad():
        ref = small(x)
    assert ref.shape == (2, 1000) and torch.isfinite(ref).all()
    buf = io.BytesIO()
    torch.save(small, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False).eval()
    with torch.no_grad():
        assert torch.equal(loaded(x), ref)
    print(f"\n{name} ratio {ratio}: params -{100 * rep.param_reduction:.1f}%, FLOPs -{100 * rep.flop_reduction:.1f}%")
    # fusion "none" keeps the compile free of the C++ JIT (test time); the kernels are the same.
    compiled = torch.compile(small, backend="dnnfusion", options={"fusion": "none"}, dynamic=False)
    with torch.no_grad():
        _close(compiled(x), ref)


# ---------------------------------------------------------------- compile-time pass: options={"prune": r}

class ResidualDepthwise(nn.Module):
    """An inverted-residual block (expand, depthwise, project, residual add) with BN and a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(16, 48, 1, bias=False), nn.BatchNorm2d(48), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(48, 48, 3, padding=1, groups=48, bias=False), nn.BatchNorm2d(48), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(48, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Sequential(nn.Conv2d(16, 32, 1), nn.ReLU())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.dw(self.expand(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.head(x), 1), 1))


def _randomize_norms(model, seed):
    """Batch-norm statistics and affine away from their defaults, so outputs are not degenerate
    (randomly initialized torchvision models can give outputs near 1e-10) and BN matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.2, generator=g)
                m.running_mean.normal_(0, 0.2, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
    return model


def _compile_pruned(model, x, ratio=0.5, **options):
    compiled = torch.compile(model, backend="dnnfusion", options=dict(options, prune=ratio), dynamic=False)
    with collecting() as graphs, torch.no_grad():
        out = compiled(x)
    return compiled, out, graphs


def _tensor_numel(model):
    """Elements of the parameters and buffers a forward in eval mode reads."""
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    return sum(t.numel() for n, t in tensors if not n.endswith("num_batches_tracked"))


def _strictly_close(out, ref, tol=TOL):
    err, scale = (out - ref).abs().max().item(), ref.abs().max().item()
    assert scale > 1e-3 and err <= tol * scale, f"max|out-ref| = {err:.3e}, max|ref| = {scale:.3e}"


# fusion "none" for the torchvision models keeps the test free of the C++ JIT (test time); the small
# model goes through the default fusion path with its generated code.
@pytest.mark.parametrize("name,options", [("resnet18", {"fusion": "none"}), ("mobilenet_v2", {"fusion": "none"}),
                                          ("residual_depthwise", {})])
def test_compile_option_prune_equals_dnnfusion_prune(name, options):
    import torchvision

    torch.manual_seed(SEED)
    if name == "residual_depthwise":
        model, x = ResidualDepthwise(), torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(SEED))
    else:
        model = getattr(torchvision.models, name)(weights=None)
        x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(SEED))
    if name != "resnet18":
        _randomize_norms(model, SEED)
    model.eval()
    state = copy.deepcopy(model.state_dict())
    small, rep = dnnfusion.prune(model, 0.5, example_inputs=x, return_report=True)

    compiled, out, graphs = _compile_pruned(model, x, **options)
    with torch.no_grad():
        ref, full = small(x), model(x)
    assert out.shape == full.shape  # the pruned graph keeps the model's output shape
    _strictly_close(out, ref)
    for k, v in model.state_dict().items():  # compiling with prune leaves the model as it was
        assert torch.equal(v, state[k]), f"torch.compile(prune=0.5) modified the model's {k}"

    (g,) = graphs
    assert g.prune is not None, g.notes
    assert (g.prune.classes_before, g.prune.classes_after) == (rep.classes_before, rep.classes_after)
    assert g.prune.params_before == rep.params_before and g.prune.params_after == rep.params_after
    assert g.prune.params_after < g.prune.params_before
    assert any(n.startswith("pruned at compile time") for n in g.notes)
    # The weights handed to lowering are the pruned ones: as many elements as the pruned model's.
    assert g.frozen_numel == _tensor_numel(small) < _tensor_numel(model)

    with collecting() as again, torch.no_grad():
        out2 = compiled(x)
    assert not again and torch.equal(out2, out)  # no recompile, same pruned weights


@pytest.mark.parametrize("bad", [0, 0.0, 1, 1.0, -0.5, 1.5, "half", True, [0.5]])
def test_invalid_prune_option_is_a_value_error(bad):
    with pytest.raises(ValueError, match=r"option 'prune' must be a float in \(0, 1\)"):
        dnnfusion.options.parse_options({"prune": bad})


def test_invalid_prune_option_through_torch_compile():
    with pytest.raises(Exception) as ei:
        _compile_pruned(_tiny(), torch.randn(1, 3, 8, 8), ratio=2)
    msg = str(ei.value)
    assert "prune" in msg and "(0, 1)" in msg
    assert isinstance(ei.value, ValueError) or "ValueError" in msg


def test_prune_option_off_and_valid_values():
    assert dnnfusion.options.parse_options({}).prune is None
    assert dnnfusion.options.parse_options({"prune": None}).prune is None
    assert dnnfusion.options.parse_options({"prune": 0.3}).prune == 0.3
    assert "prune" in dnnfusion.VALID_OPTIONS


def test_prune_option_shows_in_explain():
    torch.manual_seed(SEED)
    m = _tiny()
    text = str(dnnfusion.explain(m, torch.randn(2, 3, 8, 8), options={"prune": 0.5, "fusion": "none"},
                                 compare_modes=False))
    assert "pruned at compile time (prune=0.5" in text
    assert f"parameters {sum(p.numel() for p in m.parameters()):,} -> " in text


def test_prune_option_shape_changes_reuse_the_first_plan():
    # Dynamo recompiles for a new shape (statically, then as a dynamic graph compiled per shape):
    # every shape runs the model pruned with the plan calibrated on the first call's inputs.
    torch.manual_seed(SEED)
    model = _randomize_norms(ResidualDepthwise(), SEED).eval()
    g = torch.Generator().manual_seed(SEED)
    xs = [torch.randn(2, 3, 12, 12, generator=g), torch.randn(3, 3, 12, 12, generator=g),
          torch.randn(1, 3, 16, 16, generator=g)]
    small = dnnfusion.prune(model, 0.5, example_inputs=xs[0])
    compiled = torch.compile(model, backend="dnnfusion", options={"prune": 0.5, "fusion": "none"})
    for x in xs:
        with collecting() as graphs, torch.no_grad():
            out = compiled(x)
            ref = small(x)
        _strictly_close(out, ref)
        assert any(n.startswith("pruned at compile time") for g in graphs for n in g.notes)
    # dynamic=True from the start: the first concrete call chooses the plan.
    torch._dynamo.reset()
    m = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 4, 1)).eval()
    small = dnnfusion.prune(m, 0.5, example_inputs=xs[0])
    compiled = torch.compile(m, backend="dnnfusion", options={"prune": 0.5, "fusion": "none"}, dynamic=True)
    for x in xs:
        with collecting() as graphs, torch.no_grad():
            out = compiled(x)
            ref = small(x)
        _strictly_close(out, ref)
        assert any(n.startswith("pruned at compile time") for g in graphs for n in g.notes)


def test_prune_option_not_applicable_compiles_unpruned():
    torch.manual_seed(SEED)
    x = torch.randn(2, 3, 8, 8)
    # Nothing to remove: the only conv produces the model's output, whose channels stay.
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).eval()
    import dnnfusion.backend as b

    b._warned.discard(("prune", "PruneSkipped"))  # the warning is once per process and reason
    with pytest.warns(UserWarning, match="prune=0.5 not applied"):
        _, out, graphs = _compile_pruned(m, x, fusion="none")
    with torch.no_grad():
        _close(out, m(x))
    assert graphs[0].prune is None and any("not applied" in n for n in graphs[0].notes)
    # Grad enabled: the model runs eagerly, unpruned, and says so.
    torch._dynamo.reset()
    m = _tiny()
    compiled = torch.compile(m, backend="dnnfusion", options={"prune": 0.5})
    with collecting() as graphs:
        out = compiled(x)
    _close(out.detach(), m(x).detach())
    assert any("prune=0.5 not applied: grad enabled" in n for g in graphs for n in g.notes)
