"""Execution targets from Python: the `target` option, the registry's listing, the reference
target end to end (explain() included), and the error classes that reach Python."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnfusion
from dnnfusion import _C
from dnnfusion.options import parse_options
from dnnfusion.report import RegionStats, collecting


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return torch.softmax(self.fc(y.mean(dim=(2, 3))), dim=-1)


def _compile_and_run(model, x, options):
    f = torch.compile(model, backend="dnnfusion", options=options, dynamic=False)
    with torch.no_grad(), collecting() as graphs:
        y = f(x)
    return y, [r for g in graphs for r in g.regions]


def test_registered_targets_cpu_first_and_reference():
    names = dnnfusion.targets.names()
    assert names[0] == "cpu" and "reference" in names
    for t in dnnfusion.targets.registered():
        assert t["description"] and t["device_type"] in ("cpu", "cuda")
        if t["name"] in ("cpu", "reference"):  # the host targets run everywhere
            assert t["device_type"] == "cpu" and t["unavailable_reason"] == ""
        elif t["unavailable_reason"]:  # a device target says what this machine lacks
            assert len(t["unavailable_reason"]) > 20
    assert parse_options(None).target == "cpu"


def test_unknown_target_is_a_value_error_listing_the_registered_ones():
    with pytest.raises(ValueError) as e:
        parse_options({"target": "tpu"})
    assert "'tpu'" in str(e.value) and "cpu" in str(e.value) and "reference" in str(e.value)
    # The core refuses it the same way (as a ValueError subclass of its own).
    g = _C.Graph()
    o = _C.CompileOptions()
    o.target = "tpu"
    with pytest.raises(dnnfusion.UnknownTarget) as e2:
        _C.compile(g, o)
    assert isinstance(e2.value, ValueError) and "reference" in str(e2.value)


def test_error_classes_are_distinct_and_share_a_base():
    kinds = [dnnfusion.CompilerNotFound, dnnfusion.UnsupportedOp, dnnfusion.TargetUnavailable,
             dnnfusion.UnknownTarget, dnnfusion.InvalidInput]
    assert len(set(kinds)) == len(kinds)
    for k in kinds:
        assert issubclass(k, dnnfusion.CoreError) and issubclass(k, RuntimeError)
    assert issubclass(dnnfusion.InvalidInput, ValueError) and not issubclass(dnnfusion.TargetUnavailable, ValueError)
    o = _C.CompileOptions()
    with pytest.raises(dnnfusion.InvalidInput):
        o.layout = "diagonal"


@pytest.mark.parametrize("fusion", ["none", "tvm", "dnnfusion"])
def test_reference_target_matches_eager_and_the_cpu_target(fusion):
    torch.manual_seed(0)
    m = SmallNet().eval()
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        ref = m(x)
    y_ref, regions = _compile_and_run(m, x, {"target": "reference", "fusion": fusion})
    torch._dynamo.reset()
    y_cpu, cpu_regions = _compile_and_run(m, x, {"fusion": fusion})
    torch.testing.assert_close(y_ref, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y_cpu, y_ref, rtol=1e-4, atol=1e-5)
    assert regions and all(r.target == "reference" for r in regions)
    assert all(r.target == "cpu" for r in cpu_regions)
    # Unfused whatever the fusion option says: one block per node, no generated code.
    for r in regions:
        assert all(len(b["ops"]) == 1 for b in r.fusion_blocks)
        assert r.generated_functions == 0 and r.target_counters == {}
        assert not any(p[0] == "propagate_blocked_layout" for p in r.passes)


def test_explain_with_the_reference_target():
    torch.manual_seed(0)
    m = SmallNet().eval()
    rep = dnnfusion.explain(m, torch.randn(1, 3, 8, 8), options={"target": "reference"}, compare_modes=False)
    text = str(rep)
    assert "target reference" in text, text
    assert "layout (NCHW[x]c)" not in text  # the cpu target's section only where it ran
    assert rep.coverage == 1.0, rep.fallbacks
    rep_cpu = dnnfusion.explain(m, torch.randn(1, 3, 8, 8), compare_modes=False)
    assert "target cpu" in str(rep_cpu) and "layout (NCHW[x]c)" in str(rep_cpu)


def test_region_stats_fail_loudly_on_a_missing_or_unknown_field():
    torch.manual_seed(0)
    _, regions = _compile_and_run(SmallNet().eval(), torch.randn(1, 3, 8, 8), None)
    d = _C.stats(regions[0].handle)
    RegionStats.from_core(dict(d), regions[0].handle)  # complete: accepted
    missing = dict(d)
    del missing["irs_bytes"]
    with pytest.raises(RuntimeError, match="missing \\['irs_bytes'\\]"):
        RegionStats.from_core(missing, 1)
    with pytest.raises(RuntimeError, match="unknown \\['irs_byte'\\]"):
        RegionStats.from_core(dict(d, irs_byte=0), 1)
    counters = dict(d["target_counters"])
    counters.pop("convs_blocked")
    with pytest.raises(RuntimeError, match="convs_blocked"):
        RegionStats.from_core(dict(d, target_counters=counters), 1)


def test_unavailable_target_is_a_clear_error_at_compile_time(monkeypatch):
    # The host targets run everywhere, so make the registry report one as unavailable (as a GPU
    # target reports a machine without a driver) and check what the user sees.
    real = _C.target_unavailable_reason
    monkeypatch.setattr(_C, "target_unavailable_reason",
                        lambda name: "no CUDA driver (libcuda.so.1 not found)" if name == "reference" else real(name))
    m = SmallNet().eval()
    f = torch.compile(m, backend="dnnfusion", options={"target": "reference"})
    with pytest.raises(Exception) as e, torch.no_grad():
        f(torch.randn(1, 3, 8, 8))
    chain = [e.value]
    while chain[-1].__cause__ is not None or getattr(chain[-1], "inner_exception", None) is not None:
        chain.append(chain[-1].__cause__ or chain[-1].inner_exception)
    assert any(isinstance(x, dnnfusion.TargetUnavailable) for x in chain), chain
    assert "libcuda.so.1 not found" in str(e.value)
