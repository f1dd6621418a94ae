"""The backend's contract: entry-point registration, options, fallbacks, shape/dtype changes,
errors, explain(), the fake kernel, and the debug dump."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnfusion
from dnnfusion import _C
from dnnfusion.report import collecting

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compiled_run(model, *inputs, **kw):
    f = torch.compile(model, backend="dnnfusion", **kw)
    with torch.no_grad():
        return f(*inputs)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


def run_py(code, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                          cwd=ROOT, timeout=600)


def test_entry_point_in_fresh_interpreter_and_no_duplicate_registration():
    r = run_py("""
        import sys, torch
        m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).eval()
        x = torch.randn(3, 16)
        assert "dnnfusion" not in sys.modules
        f = torch.compile(m, backend="dnnfusion")
        with torch.no_grad():
            y = f(x)
        assert "dnnfusion" in sys.modules, "backend was not loaded through the entry point"
        assert torch.allclose(y, m(x), atol=1e-5), (y - m(x)).abs().max()
        import dnnfusion                                # must not register the backend again
        import importlib; importlib.reload(dnnfusion)
        from torch._dynamo import list_backends
        assert "dnnfusion" in list_backends()
        torch._dynamo.reset()
        with torch.no_grad():
            y2 = torch.compile(m, backend="dnnfusion")(x)
        assert torch.allclose(y2, m(x), atol=1e-5)
        print("OK")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK" in r.stdout


def test_unknown_option_lists_valid_ones():
    m = ConvNet().eval()
    with pytest.raises(Exception) as ei:
        compiled_run(m, torch.randn(1, 3, 8, 8), options={"fusoin": "tvm"})
    msg = str(ei.value)
    assert "fusoin" in msg and "threads" in msg
    assert isinstance(ei.value, ValueError) or "ValueError" in msg


def test_linear_weights_are_packed_once_unless_switched_off():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(24, 40), nn.GELU(), nn.Linear(40, 7)).eval()
    x = torch.randn(5, 24)
    for pack in (True, False):
        rep = dnnfusion.explain(m, x, options={"pack_gemm_weights": pack}, compare_modes=False)
        packed = sum(r.target_counters["gemms_packed"] for r in rep.regions)
        assert packed == (2 if pack else 0)
        assert "GEMM weights packed at compile : " + str(packed) in str(rep)
        torch._dynamo.reset()
        torch.testing.assert_close(compiled_run(m, x, options={"pack_gemm_weights": pack}), m(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="pack_gemm_weights"):
        dnnfusion.options.parse_options({"pack_gemm_weights": "yes"})


def _cpu_offers_amx():
    with open("/proc/cpuinfo") as f:
        flags = set(next((line for line in f if line.startswith("flags")), "").split())
    return {"amx_tile", "amx_bf16", "avx512_bf16"} <= flags and os.environ.get("DNNFUSION_AMX") != "0"


def _assert_as_close_as_eager(m, x):
    """The compiled model is as close to the exact (float64) result as eager's fp32 is."""
    with torch.no_grad():
        y = compiled_run(m, x).double()
        eager = m(x).double()
        exact = m.double()(x.double())
    scale = exact.abs().max()
    assert (y - exact).abs().max() / scale <= 4 * (eager - exact).abs().max() / scale + 1e-7


def _amx_counts(rep, kind):
    taken = "gemms_bf16x6" if kind == "gemms" else "convs_amx"
    return (sum(r.target_counters[taken] for r in rep.regions),
            sum(r.target_counters[f"{kind}_amx_declined"] for r in rep.regions))


def test_tall_linear_layers_take_the_amx_gemm_with_fp32_accuracy():
    # GEMMs of >= 64 rows run as six bf16 products on AMX where the CPU has it (fp32 panels elsewhere):
    # either way as close to the exact result as eager's fp32. amx='rule' takes all three.
    torch.manual_seed(0)
    m, x = _amx_linear_model()
    rep = dnnfusion.explain(m, x, options={"amx": "rule"}, compare_modes=False)
    assert _amx_counts(rep, "gemms") == ((3, 0) if _cpu_offers_amx() else (0, 0)), str(rep)
    if _cpu_offers_amx():
        assert "for the AMX bf16x6 GEMM    : 3" in str(rep)
    _assert_as_close_as_eager(m, x)


def _amx_linear_model():
    return nn.Sequential(nn.Linear(96, 200), nn.GELU(), nn.Linear(200, 50), nn.ReLU(), nn.Linear(50, 33)).eval(), \
        torch.randn(130, 96)


def _amx_conv_model():
    return nn.Sequential(nn.Conv2d(64, 128, 1), nn.ReLU(), nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(256, 128, 1), nn.ReLU(),
                         nn.Conv2d(128, 64, 1)).eval(), torch.randn(2, 64, 24, 24)


@pytest.mark.parametrize("kind", ["gemms", "convs"])
def test_amx_measure_mode_times_each_allowed_layer_and_keeps_the_faster(kind):
    # The default: each layer the shape rules allow (3 in each model) is timed on both kernels and
    # runs on the faster; every allowed layer is either taken or declined, and the report says
    # which. Either way the outputs stay as close to the exact result as eager's.
    torch.manual_seed(0)
    m, x = _amx_linear_model() if kind == "gemms" else _amx_conv_model()
    rep = dnnfusion.explain(m, x, compare_modes=False)
    taken, declined = _amx_counts(rep, kind)
    assert taken + declined == (3 if _cpu_offers_amx() else 0), str(rep)
    kept = "on the fp32 kernel" if kind == "gemms" else "on the direct kernel"
    if declined:
        assert f"{declined} more kept {kept}, which timed faster here" in str(rep)
    off = dnnfusion.explain(m, x, options={"amx": "off"}, compare_modes=False)
    assert _amx_counts(off, kind) == (0, 0), str(off)
    _assert_as_close_as_eager(m, x)
    with pytest.raises(ValueError, match="option 'amx' must be one of"):
        dnnfusion.options.parse_options({"amx": True})


def test_large_convs_take_the_amx_gemm_with_fp32_accuracy():
    # Direct convs with >= 128 outputs over >= 256 positions run as bf16x6 GEMMs on AMX (NCHW[x]c in
    # and out; the strided 3x3 one gathers its taps): the 1x1 64->128, the 3x3 stride-2 and the
    # 1x1 256->128. The stride-1 3x3 conv stays Winograd, the 64-output 1x1 conv direct (amx='rule':
    # the shape rules alone).
    torch.manual_seed(0)
    m, x = _amx_conv_model()
    rep = dnnfusion.explain(m, x, options={"amx": "rule"}, compare_modes=False)
    assert _amx_counts(rep, "convs") == ((3, 0) if _cpu_offers_amx() else (0, 0)), str(rep)
    if _cpu_offers_amx():
        assert "on AMX (bf16x6)            : 3" in str(rep)
    _assert_as_close_as_eager(m, x)


def test_amx_gemm_is_switched_off_by_the_environment():
    r = run_py("""
        import torch, torch.nn as nn, dnnfusion
        m = nn.Sequential(nn.Linear(64, 80), nn.ReLU(), nn.Linear(80, 16)).eval()
        x = torch.randn(100, 64)
        rep = dnnfusion.explain(m, x, compare_modes=False)
        print("AMX", sum(r.target_counters["gemms_bf16x6"] for r in rep.regions),
              sum(r.target_counters["gemms_packed"] for r in rep.regions))
        c = dnnfusion.compile(m, (x,))
        with torch.no_grad():
            torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
        print("OK")
    """, env={"DNNFUSION_AMX": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "AMX 0 2" in r.stdout and "OK" in r.stdout


@pytest.mark.parametrize("bad", [0, -2, "4", 2.5, True])
def test_bad_thread_count_is_rejected(bad):
    with pytest.raises(ValueError, match="threads"):
        dnnfusion.options.parse_options({"threads": bad})


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_counts_give_the_same_result(threads):
    torch.manual_seed(0)
    m = ConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    y = compiled_run(m, x, options={"threads": threads})
    torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)


def test_grad_enabled_runs_eagerly_with_one_warning():
    m = ConvNet().eval()
    x = torch.randn(1, 3, 8, 8)
    f = torch.compile(m, backend="dnnfusion")
    import dnnfusion.backend as b

    b._warned.discard("grad")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y1 = f(x)
        y2 = f(x)
    msgs = [str(x.message) for x in w if "dnnfusion" in str(x.message)]
    assert len(msgs) == 1 and "grad" in msgs[0]
    assert y1.requires_grad  # eager autograd still works
    torch.testing.assert_close(y2, m(x))


def test_shape_changes_never_fail_and_stay_correct():
    torch.manual_seed(0)
    m = ConvNet().eval()
    f = torch.compile(m, backend="dnnfusion")  # dynamic shapes allowed: Dynamo goes symbolic
    with torch.no_grad(), collecting() as graphs:
        for n, hw in [(1, 8), (2, 8), (3, 12), (2, 8), (5, 9)]:
            x = torch.randn(n, 3, hw, hw)
            torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
    notes = [n for g in graphs for n in g.notes]
    assert any("dynamic" in n for n in notes), notes
    assert any("specialized" in n for n in notes), notes


def test_dtype_and_rank_changes_recompile_and_stay_correct():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 4), nn.Tanh()).eval()
    f = torch.compile(m, backend="dnnfusion", dynamic=False)
    with torch.no_grad():
        x = torch.randn(3, 6)
        torch.testing.assert_close(f(x), m(x))
        x3 = torch.randn(2, 3, 6)  # new rank
        torch.testing.assert_close(f(x3), m(x3))
        m64 = m.double()
        xd = torch.randn(3, 6, dtype=torch.float64)  # new dtype (weights too)
        torch.testing.assert_close(f(xd), m64(xd))


def test_region_rejects_inputs_it_was_not_compiled_for():
    m = ConvNet().eval()
    with collecting() as graphs:
        compiled_run(m, torch.randn(1, 3, 8, 8), dynamic=False)
    handle = graphs[0].regions[0].handle
    with pytest.raises(RuntimeError, match="compiled for"):
        torch.ops.dnnfusion.run(handle, [torch.randn(1, 3, 9, 9)])
    with pytest.raises(RuntimeError, match="dtype"):
        torch.ops.dnnfusion.run(handle, [torch.randn(1, 3, 8, 8, dtype=torch.float64)])
    with pytest.raises(RuntimeError, match="expects 1 inputs"):
        torch.ops.dnnfusion.run(handle, [])
    with pytest.raises(RuntimeError, match="unknown or released"):
        torch.ops.dnnfusion.run(10**9, [])


def test_core_error_surfaces_as_python_exception_naming_op_and_shapes():
    emb = nn.Embedding(10, 4).eval()
    f = torch.compile(emb, backend="dnnfusion", dynamic=False)
    with torch.no_grad():
        f(torch.tensor([1, 2, 3]))
        with pytest.raises(IndexError) as ei:  # what eager raises for an out-of-range id
            f(torch.tensor([1, 2, 12]))
    msg = str(ei.value)
    assert "embedding" in msg and "10x4" in msg, msg


def test_unsupported_ops_fall_back_and_are_reported():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)  # transposed conv: no core kernel
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return torch.sigmoid(self.conv(self.up(torch.relu(x))))

    torch.manual_seed(0)
    m = M().eval()
    x = torch.randn(1, 4, 6, 6)
    rep = dnnfusion.explain(m, x)
    text = str(rep)
    assert "aten.convolution.default" in rep.fallbacks
    reasons = " ".join(rep.fallbacks["aten.convolution.default"])
    assert "transposed" in reasons
    assert "fallback ops" in text and "transposed" in text
    assert 0 < rep.n_core < rep.n_total
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_run(m, x), m(x), rtol=1e-5, atol=1e-5)


def test_explain_reports_ops_kernels_and_memory():
    torch.manual_seed(0)
    m = ConvNet().eval()
    rep = dnnfusion.explain(m, torch.randn(2, 3, 16, 16), options={"fusion": "none"}, compare_modes=False)
    assert rep.coverage == 1.0
    assert rep.ops_total["aten.convolution.default"] == 1
    assert rep.ops_core["aten.addmm.default"] == 1
    assert rep.kernels_per_call >= 4  # conv (BN folded in by rewriting), relu, mean, addmm
    assert rep.peak_bytes >= 2 * 8 * 16 * 16 * 4  # at least the conv output lives in the arena
    text = str(rep)
    for needle in ("ATen ops seen", "ops run in the core", "kernels per call", "peak planned memory", "fallback ops: none"):
        assert needle in text


def test_inputs_are_not_mutated_and_noncontiguous_inputs_work():
    torch.manual_seed(0)
    m = ConvNet().eval()
    x = torch.randn(2, 3, 16, 16).transpose(2, 3)  # non-contiguous
    before = x.clone()
    y = compiled_run(m, x, dynamic=False)
    assert torch.equal(x, before)
    torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)


def test_in_place_ops_in_the_model_match_eager():
    class M(nn.Module):
        def forward(self, x):
            y = x * 2
            y.add_(1)
            y.relu_()
            return y.view(-1)[:5]

    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled_run(M(), x, dynamic=False), M()(x))


def test_fake_kernel_gives_output_metadata():
    m = nn.Sequential(nn.Linear(6, 4), nn.ReLU()).eval()
    with collecting() as graphs:
        compiled_run(m, torch.randn(3, 6), dynamic=False)
    handle = graphs[0].regions[0].handle
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        outs = torch.ops.dnnfusion.run(handle, [torch.empty(3, 6)])
    assert [tuple(o.shape) for o in outs] == [(3, 4)]


def test_debug_env_dumps_the_ecg_after_each_pass():
    r = run_py("""
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
        with torch.no_grad():
            torch.compile(m, backend="dnnfusion")(torch.randn(2, 4))
    """, env={"DNNFUSION_DEBUG": "1", "DNNFUSION_TIME_PASSES": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "imported ECG" in r.stderr and "after pass fold_constants" in r.stderr and "addmm" in r.stderr
    assert "pass plan_and_bind" in r.stderr


def test_registry_classifies_every_supported_op():
    for op in _C.registry_ops():
        info = _C.op_info(op)
        assert info["mapping"] in ("One-to-One", "One-to-Many", "Many-to-Many", "Reorganize", "Shuffle")
        # Every op runs on some target; only a device target's own fused op (the cuda target's
        # sparse_conv2d) is missing from the cpu target.
        assert "cpu" in info["targets"] or info["targets"] == ["cuda"] and op == "sparse_conv2d", (op, info["targets"])


def test_region_that_fails_in_the_core_runs_eagerly_and_is_reported(monkeypatch):
    import dnnfusion.lowering as lowering

    def broken_compile(*a, **k):
        raise RuntimeError("injected core failure")

    monkeypatch.setattr(lowering._C, "compile_part", broken_compile)
    torch.manual_seed(0)
    m = ConvNet().eval()
    x = torch.randn(1, 3, 8, 8)
    dnnfusion.report._warned.clear()
    with pytest.warns(dnnfusion.FallbackWarning, match="injected core failure"):
        rep = dnnfusion.explain(m, x)
    assert rep.n_core == 0
    assert any("injected core failure" in reason for reasons in rep.fallbacks.values() for reason in reasons)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_run(m, x), m(x))


def _guard_build_flags(monkeypatch):
    """Records Dynamo's dict-tag guard setting each time it finalizes a frame's guards."""
    import torch._dynamo.guards as guards

    seen = []
    orig = guards.GuardManagerWrapper.finalize

    def finalize(self):
        seen.append(torch._dynamo.config.use_recursive_dict_tags_for_guards)
        return orig(self)

    monkeypatch.setattr(guards.GuardManagerWrapper, "finalize", finalize)
    return seen


@pytest.mark.parametrize("fast", [True, False])
def test_fast_guards_apply_to_our_frames_only_and_restore_dynamo_setting(monkeypatch, fast):
    torch._dynamo.reset()
    seen = _guard_build_flags(monkeypatch)
    before = torch._dynamo.config.use_recursive_dict_tags_for_guards
    m, x = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    compiled_run(m, x, options={"fast_guards": fast})
    assert seen == [fast or before]
    assert torch._dynamo.config.use_recursive_dict_tags_for_guards == before
    # another backend compiled afterwards builds its guards with the user's setting
    f = torch.compile(ConvNet().eval(), backend="eager")
    with torch.no_grad():
        f(x)
    assert seen[-1] == before


@pytest.mark.parametrize("fast", [True, False])
def test_changed_parameters_after_compiling_are_used_not_the_frozen_ones(fast):
    torch._dynamo.reset()
    m, x = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    f = torch.compile(m, backend="dnnfusion", options={"fast_guards": fast})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
        assert not [w for w in caught if "changed after compiling" in str(w.message)]
        m.fc = nn.Linear(8, 5)  # a swapped submodule
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
        m.conv.weight = nn.Parameter(torch.randn_like(m.conv.weight))  # a new parameter
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
        m.load_state_dict(ConvNet().state_dict())  # in place, through copy_
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
        m.bn.running_mean.add_(0.5)  # a buffer updated in place
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)  # and unchanged again


def test_instances_of_one_model_class_keep_their_own_lowering(monkeypatch):
    """Dynamo runs two instances of one class through the same compiled code (their parameters
    are inputs): each keeps its lowering instead of the graph being lowered again at every switch,
    and an in-place update of one instance is still seen."""
    from dnnfusion import lowering

    torch._dynamo.reset()
    lowered = []
    orig = lowering.lower
    monkeypatch.setattr(lowering, "lower", lambda *a, **k: lowered.append(1) or orig(*a, **k))
    a, b = ConvNet().eval(), ConvNet().eval()
    fa, fb = torch.compile(a, backend="dnnfusion"), torch.compile(b, backend="dnnfusion")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            torch.testing.assert_close(fa(x), a(x), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(fb(x), b(x), rtol=1e-4, atol=1e-5)
        assert len(lowered) == 2
        a.load_state_dict(ConvNet().state_dict())  # in place: a's old lowering is stale
        for _ in range(2):
            torch.testing.assert_close(fa(x), a(x), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(fb(x), b(x), rtol=1e-4, atol=1e-5)
        assert len(lowered) == 3


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_fast_guards_option_must_be_bool(bad):
    with pytest.raises(ValueError, match="fast_guards"):
        dnnfusion.options.parse_options({"fast_guards": bad})


def test_buffer_the_model_updates_in_place_is_not_frozen():
    class Accumulate(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("acc", torch.zeros(4))
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            self.acc.add_(x.sum(0))
            return self.lin(x) + self.acc

    torch._dynamo.reset()
    m = Accumulate().eval()
    ref = Accumulate().eval()
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend="dnnfusion")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(2, 4)
            torch.testing.assert_close(f(x), ref(x), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(m.acc, ref.acc)
    assert not [w for w in caught if "changed after compiling" in str(w.message)]  # no recompiles
