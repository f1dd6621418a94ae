"""NCHW[x]c layouts end to end: every layout mode matches eager, the tuning database is filled by
options={"tune": True} and by `python -m dnnfusion.tune`, and read back by the next compile."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torchvision

import dnnfusion
from dnnfusion.report import collecting


class SmallCNN(nn.Module):
    """Stem, a residual block, a depthwise conv, a 10-channel conv (stays NCHW) and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.c1 = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 32, 3, 1, 1))
        self.dw = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1, groups=32), nn.ReLU6(), nn.Conv2d(32, 64, 1))
        self.odd = nn.Conv2d(64, 10, 1)
        self.fc = nn.Linear(10, 5)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.c1(x) + x)
        x = self.odd(self.dw(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _with_random_bn(m):
    """m in eval mode with non-trivial batch-norm statistics (the seed set by the caller)."""
    m.eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
    return m


def _model():
    torch.manual_seed(0)
    return _with_random_bn(SmallCNN())


def _run(model, x, options):
    torch._dynamo.reset()
    f = torch.compile(model, backend="dnnfusion", options=options)
    with collecting() as graphs, torch.no_grad():
        y = f(x)
    return y, [r for g in graphs for r in g.regions]


def _close(y, ref):
    return (y - ref).abs().max().item() <= 2e-4 * ref.abs().max().item()


@pytest.mark.parametrize("layout", [True, "local", "convs-only", False])
@pytest.mark.parametrize("fusion", ["dnnfusion", "none"])
def test_layout_modes_match_eager(layout, fusion, tmp_path):
    m, x = _model(), torch.randn(2, 3, 33, 31)
    with torch.no_grad():
        ref = m(x)
    y, regions = _run(m, x, {"layout": layout, "fusion": fusion, "tuning_db": str(tmp_path / "db.txt")})
    assert _close(y, ref), (y - ref).abs().max()
    blocked = sum(r.target_counters["convs_blocked"] for r in regions)
    assert blocked == (0 if layout is False else 5), blocked  # 5 of the 6 convs have blockable channels
    propagated = sum(r.target_counters["layout_propagated"] for r in regions)
    if layout in (True, "local"):
        assert propagated > 0
    else:
        assert propagated == 0


def test_tune_fills_the_database_and_the_next_compile_reads_it(tmp_path, capfd):
    db = tmp_path / "tuning.txt"
    m, x = _model(), torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = m(x)
    y, regions = _run(m, x, {"tune": True, "tuning_db": str(db)})
    assert _close(y, ref)
    assert sum(r.target_counters["convs_tuned_now"] for r in regions) > 0
    assert "tuning convolutions" in capfd.readouterr().err  # the progress bar
    assert db.exists() and db.read_text().startswith("dnnfusion-tuning-db")
    y2, regions2 = _run(m, x, {"tuning_db": str(db)})
    assert _close(y2, ref)
    assert sum(r.target_counters["convs_tuned_now"] for r in regions2) == 0
    assert {r.target_notes["layout_method"] for r in regions2 if r.target_counters["convs_blocked"]} == {"global (exact)"}


def test_corrupt_tuning_database_is_rebuilt_with_a_warning(tmp_path, capfd):
    db = tmp_path / "tuning.txt"
    db.write_text("this is not a tuning database\n\x00\x01")
    m, x = _model(), torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = m(x)
    y, regions = _run(m, x, {"tune": True, "tuning_db": str(db)})
    assert _close(y, ref)
    assert "tuning database" in capfd.readouterr().err
    assert db.read_text().startswith("dnnfusion-tuning-db")


@pytest.mark.parametrize("opts, match", [
    ({"layout": "nchw"}, "layout"),
    ({"layout": 1}, "layout"),
    ({"tune": "yes"}, "tune"),
    ({"tuning_db": 3}, "tuning_db"),
])
def test_invalid_layout_options_are_value_errors(opts, match):
    with pytest.raises(ValueError, match=match):
        dnnfusion.options.parse_options(opts)


class PreActDense(nn.Module):
    """DenseNet's pre-activation layer: BN -> ReLU -> conv on a concatenation. That BN has no conv
    to fold into; as a per-channel mul + add it stays on the blocked tensor."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 32, 3, 1, 1)
        self.b = nn.Conv2d(32, 32, 3, 1, 1)
        self.bn = nn.BatchNorm2d(64)
        self.c = nn.Conv2d(64, 32, 1)

    def forward(self, x):
        a = self.a(x)
        y = torch.cat([a, self.b(a)], 1)
        return self.c(torch.relu(self.bn(y)))


def test_unfoldable_batch_norm_stays_blocked():
    torch.manual_seed(0)
    m = PreActDense().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.5, 0.5)
    x = torch.randn(1, 3, 20, 20)
    with torch.no_grad():
        ref = m(x)
    y, regions = _run(m, x, {"tuning_db": ""})
    assert _close(y, ref), (y - ref).abs().max()
    to_blocked, to_plain, reblocked = (sum(r.target_counters[("layout_to_blocked", "layout_to_plain", "layout_reblocked")[i]] for r in regions) for i in range(3))
    # Only the graph input and output change layout: the BN no longer forces NCHW in between.
    assert (to_blocked, to_plain) == (1, 1), (to_blocked, to_plain, reblocked)
    text = str(dnnfusion.explain(m, x, options={"tuning_db": ""}, compare_modes=False))
    assert "batch_norm to per-channel mul + add x1" in text


def test_explain_reports_the_layout():
    rep = dnnfusion.explain(_model(), torch.randn(1, 3, 32, 32), options={"tuning_db": ""}, compare_modes=False)
    text = str(rep)
    assert "layout (NCHW[x]c):" in text
    assert "convolutions blocked           : 5 (schemes: heuristic)" in text


def test_tune_command_prefills_the_database(tmp_path):
    db = tmp_path / "cli.txt"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-m", "dnnfusion.tune", "torchvision.models:resnet18", "--shape", "3,64,64",
                        "--threads", "2", "--db", str(db)], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resnet18 batch 1: 20 convolutions" in r.stdout, r.stdout
    lines = [line for line in db.read_text().splitlines()[1:] if line.strip()]
    assert len(lines) > 10
    # The second compile of the same model reads every entry: nothing left to measure.
    m = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        ref = m(x)
    y, regions = _run(m, x, {"tuning_db": str(db), "threads": 2})
    assert _close(y, ref)
    assert sum(r.target_counters["convs_tuned_now"] for r in regions) == 0
    assert sum(r.target_counters["convs_blocked"] for r in regions) == 20


def test_unknown_model_in_tune_command_is_a_clear_error():
    r = subprocess.run([sys.executable, "-m", "dnnfusion.tune", "no_such_model"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2
    assert "unknown model 'no_such_model'" in r.stderr


class InvertedResiduals(nn.Module):
    """MobileNet/EfficientNet-style blocks: 1x1 expand + BN + activation -> depthwise (stride 1 or 2)
    + BN + activation -> 1x1 projection, one with a residual add; every activation the fused kernel runs.
    First a stem (3x3 stride 2 + BN + ReLU6) whose output only a depthwise conv reads, as in
    MobileNet-V2: that pair fuses too."""

    def __init__(self):
        super().__init__()

        def block(cin, mid, cout, stride, act):
            return nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act(),
                                 nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), act(),
                                 nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.b0 = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                                nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.b1 = block(16, 96, 24, 2, nn.ReLU6)
        self.b2 = block(24, 144, 24, 1, nn.Hardswish)
        self.b3 = block(24, 72, 40, 2, nn.SiLU)
        self.b4 = block(40, 120, 40, 1, nn.ReLU)

    def forward(self, x):
        x = self.b1(self.b0(self.stem(x)))
        x = x + self.b2(x)
        x = self.b3(x)
        return x + self.b4(x)


def _check_conv_fusion(m, x, fuse, counter, count, explain_line, tmp_path):
    """m compiled with fuse_expand_depthwise=fuse matches eager, fuses `count` times by `counter`
    (none when off), and explain() shows `explain_line` exactly when on. Returns the options."""
    with torch.no_grad():
        ref = m(x)
    opts = {"fuse_expand_depthwise": fuse, "tuning_db": str(tmp_path / "db.txt")}
    y, regions = _run(m, x, opts)
    assert _close(y, ref), (y - ref).abs().max()
    assert sum(r.target_counters[counter] for r in regions) == (count if fuse else 0)
    torch._dynamo.reset()
    rep = str(dnnfusion.explain(m, x, options=opts, compare_modes=False))
    assert (explain_line in rep) == fuse
    return opts, ref


@pytest.mark.parametrize("fuse", [True, False])
def test_expand_depthwise_fusion_matches_eager(fuse, tmp_path):
    torch.manual_seed(0)
    m = _with_random_bn(InvertedResiduals())
    x = torch.randn(2, 3, 45, 37)
    opts, ref = _check_conv_fusion(m, x, fuse, "expand_dw_fused", 5, "conv + depthwise fused         : 5 pairs",
                                   tmp_path)
    # TVM's rules never fuse two convolutions: the option changes nothing there.
    y, regions = _run(m, x, dict(opts, fusion="tvm"))
    assert _close(y, ref) and sum(r.target_counters["expand_dw_fused"] for r in regions) == 0
    with pytest.raises(ValueError, match="fuse_expand_depthwise"):
        dnnfusion.options.parse_options({"fuse_expand_depthwise": 1})


class WideBlock(nn.Module):
    """One MobileNet-V2 block at a size where the projection fuses: 24 -> 144 -> 24 channels at
    112x112, batch 2 (the depthwise output, 16 MB in 32-lane blocks, is over the 8 MiB threshold),
    with its residual add."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(24, 144, 1, bias=False), nn.BatchNorm2d(144), nn.ReLU6(),
                                  nn.Conv2d(144, 144, 3, 1, 1, groups=144, bias=False), nn.BatchNorm2d(144),
                                  nn.ReLU6(), nn.Conv2d(144, 24, 1, bias=False), nn.BatchNorm2d(24))

    def forward(self, x):
        return x + self.body(x)


class FirstBlockV3(nn.Module):
    """MobileNet-V3's first block: the stem (3 -> 16, 3x3 stride 2, hardswish), then a depthwise
    conv, a 1x1 projection and the skip connection from the stem's output. The whole block fuses
    into one kernel that never writes the stem's output (the skip is added from its row window)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.body = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16))

    def forward(self, x):
        s = self.stem(x)
        return s + self.body(s)


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("block, shape", [(WideBlock, (2, 24, 112, 112)), (FirstBlockV3, (2, 3, 64, 58))])
def test_depthwise_projection_fusion_matches_eager(block, shape, fuse, tmp_path):
    torch.manual_seed(0)
    m = _with_random_bn(block())
    x = torch.randn(*shape)
    _check_conv_fusion(m, x, fuse, "dw_projects_fused", 1, "... with their 1x1 projection  : 1", tmp_path)


class WinogradNet(nn.Module):
    """3x3 stride-1 convs that take each algorithm at batch 2 on 40x36: F(4x4) (32 -> 32 at 40x36,
    180 4x4 tiles; one with a residual add and ReLU fused behind it), F(2x2) (128 -> 128 at 10x9,
    18 4x4 tiles) and direct (the RGB stem, the stride-2 conv, 128 -> 16 at 10x9: 6.6 MFLOP)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), nn.ReLU())
        self.a = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.b = nn.Conv2d(32, 32, 3, 1, 1)
        self.down = nn.Conv2d(32, 128, 3, 2, 1)
        self.c = nn.Sequential(nn.Conv2d(128, 128, 3, 1, 1), nn.ReLU6())
        self.d = nn.Conv2d(128, 16, 3, 1, 1)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.b(self.a(x)) + x)
        x = nn.functional.max_pool2d(self.down(x), 2)
        return self.d(self.c(x))


@pytest.mark.parametrize("winograd", [True, False])
def test_winograd_convs_match_eager(winograd, tmp_path):
    torch.manual_seed(0)
    m = WinogradNet().eval()
    with torch.no_grad():
        m.a[1].running_mean.uniform_(-0.5, 0.5)
        m.a[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 40, 36)
    with torch.no_grad():
        ref = m(x)
    opts = {"winograd": winograd, "tuning_db": str(tmp_path / "db.txt")}
    for fusion in ("dnnfusion", "none"):
        y, regions = _run(m, x, dict(opts, fusion=fusion, layout=True))
        assert _close(y, ref), (fusion, (y - ref).abs().max())
        f2, f4 = (sum(r.target_counters[("convs_winograd_f2", "convs_winograd_f4")[i]] for r in regions) for i in range(2))
        assert (f2, f4) == ((1, 2) if winograd else (0, 0)), (fusion, f2, f4)
        assert sum(r.target_counters["convs_blocked"] for r in regions) == 6
    torch._dynamo.reset()
    rep = str(dnnfusion.explain(m, x, options=opts, compare_modes=False))
    assert ("as Winograd                : 2 F(4x4, 3x3), 1 F(2x2, 3x3)" in rep) == winograd, rep
    with pytest.raises(ValueError, match="winograd"):
        dnnfusion.options.parse_options({"winograd": "yes"})


class GroupedNet(nn.Module):
    """Grouped convs as ResNeXt and RegNet have them, plus two that only the NCHW path takes on
    AVX-512/AVX2: 4-channel groups (several whole groups per 16-lane block), 32-channel groups
    (blocks inside one group, stride 2), a channel multiplier (groups = C, K = 2C), and 4 in / 6
    out channels per group (no 8/16-lane block lies inside a group or holds whole ones)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(64, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
                                   nn.Conv2d(128, 128, 3, 1, 1, groups=32, bias=False), nn.BatchNorm2d(128),
                                   nn.ReLU(), nn.Conv2d(128, 64, 1, bias=False), nn.BatchNorm2d(64))
        self.wide = nn.Sequential(nn.Conv2d(64, 64, 3, 2, 1, groups=2), nn.ReLU6())
        self.mult = nn.Conv2d(64, 128, 3, 1, 1, groups=64)
        self.odd = nn.Conv2d(128, 192, 3, 1, 1, groups=32)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.block(x) + x)
        return self.odd(torch.relu(self.mult(self.wide(x))))


def test_grouped_convs_run_blocked_and_match_eager(tmp_path):
    torch.manual_seed(0)
    m = GroupedNet().eval()
    with torch.no_grad():
        for bn in (m.block[1], m.block[4], m.block[7]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 20, 18)
    with torch.no_grad():
        ref = m(x)
    opts = {"tuning_db": str(tmp_path / "db.txt")}
    vector = dnnfusion._C.isa() != "scalar"
    for fusion in ("dnnfusion", "tvm", "none"):
        y, regions = _run(m, x, dict(opts, fusion=fusion))
        assert _close(y, ref), (fusion, (y - ref).abs().max())
        # stem, the block's three, wide, mult; odd too where 6-channel groups fit a block (scalar).
        assert sum(r.target_counters["convs_blocked"] for r in regions) == (6 if vector else 7), fusion
    y, regions = _run(m, x, dict(opts, layout=False))
    assert _close(y, ref) and sum(r.target_counters["convs_blocked"] for r in regions) == 0
