"""The fusion engine end to end: fusion-mode options, explain()'s fusion section and drawing, kernel
counts per mode on real models (dnnfusion <= tvm <= none), the on-disk kernel cache (a second
process runs no compiler), a missing compiler as a clear error at compile time (not at import),
and the profile database surviving across processes."""
import os
import stat
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnfusion
from dnnfusion import zoo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_py(code, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                          cwd=ROOT, timeout=600)


class Block(nn.Module):
    """conv-bn-relu twice with a residual add, then a small attention-like head."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(8, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.b2 = nn.BatchNorm2d(8)
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)) + x)
        t = y.flatten(2).transpose(1, 2)                    # [N, HW, C]
        s = (self.q(t) @ self.k(t).transpose(1, 2)) / 8 ** 0.5
        a = torch.softmax(s - 1.0, dim=-1) @ t
        return self.ln(F.gelu(a) + t)


def fresh_block():
    torch.manual_seed(0)
    m = Block().eval()
    with torch.no_grad():  # non-trivial BN statistics so folding is exercised
        for bn in (m.b1, m.b2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    return m


@pytest.mark.parametrize("mode", ["none", "tvm", "dnnfusion"])
def test_modes_match_eager(mode):
    m = fresh_block()
    x = torch.randn(2, 8, 6, 6)
    f = torch.compile(m, backend="dnnfusion", options={"fusion": mode})
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad,msg", [({"fusion": "xla"}, "'fusion' must be one of"),
                                     ({"profile": "yes"}, "'profile' must be True or False")])
def test_bad_fusion_options_are_rejected(bad, msg):
    f = torch.compile(nn.Linear(4, 4), backend="dnnfusion", options=bad)
    with pytest.raises(Exception, match=msg):
        f(torch.randn(2, 4))


def test_explain_fusion_section_and_drawing(tmp_path):
    m = fresh_block()
    x = torch.randn(2, 8, 6, 6)
    svg = tmp_path / "fused.svg"
    # NCHW layouts: this compares the fusion planners on the same kernels. With NCHW[x]c on, the
    # dnnfusion plan of this block materializes one [2, 8, 6, 6] tensor more than tvm's (the
    # transform back to NCHW before the flatten lands outside a block) — a known gap, see RESULTS.md.
    rep = dnnfusion.explain(m, x, graph=str(svg), options={"profile": False, "layout": False})
    text = str(rep)
    for needle in ("fusion (mode 'dnnfusion')", "ops imported / after rewriting", "rewrite rules applied",
                   "IRS bytes materialized", "per mode", "fused blocks", "Many-to-Many", "compile time"):
        assert needle in text, needle
    k = {m_: d["kernels"] for m_, d in rep.per_mode.items()}
    irs = {m_: d["irs_bytes"] for m_, d in rep.per_mode.items()}
    assert k["dnnfusion"] <= k["tvm"] < k["none"], k
    assert irs["dnnfusion"] <= irs["tvm"] < irs["none"], irs
    assert rep.ops_after_rewrite < rep.ops_imported  # BN folded into the convolutions at least
    assert os.path.exists(rep.graph_file) and os.path.getsize(rep.graph_file) > 100
    assert "<svg" in open(rep.graph_file).read()[:2000] or rep.graph_file.endswith(".txt")


@pytest.mark.parametrize("name", ["resnet18", "distilbert"])
def test_kernel_counts_per_mode_on_zoo_models(name):
    model, make_inputs = zoo.build(name, **({"n_layers": 2} if name == "distilbert" else {}))
    # Profiling off: yellow decisions come from timings, kernel counts must not.
    rep = dnnfusion.explain(model, *make_inputs(1), options={"profile": False})
    k = {m: d["kernels"] for m, d in rep.per_mode.items()}
    print(f"\n{name}: kernels per mode {k}, IRS MiB "
          f"{ {m: round(d['irs_bytes'] / 2**20, 2) for m, d in rep.per_mode.items()} }")
    assert k["dnnfusion"] <= k["tvm"] <= k["none"], k
    if name == "distilbert":
        # Residual adds become layer_norm prologues or GEMM epilogues, activations GEMM epilogues,
        # Q/K/V one GEMM whose head splits attention reads strided, attention stores the head merge.
        assert k["dnnfusion"] < k["tvm"], k
        assert 2 * k["dnnfusion"] <= k["none"], k


def test_second_process_finds_cached_kernels_and_profiles_and_runs_no_compiler(tmp_path):
    log = tmp_path / "cxx.log"
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec g++ \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    code = """
        import torch
        torch.manual_seed(0)
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
            def forward(self, x):   # GEMM -> transpose -> tanh: a yellow cell (Many-to-Many then Shuffle) to profile
                return torch.tanh(self.b(torch.nn.functional.gelu(self.a(x))).transpose(1, 2))
        m = M().eval()
        x = torch.randn(2, 4, 16)
        with torch.no_grad():
            y = torch.compile(m, backend="dnnfusion")(x)
            assert torch.allclose(y, m(x), atol=1e-5)
        print("OK")
    """
    env = {"DNNFUSION_CACHE_DIR": str(tmp_path / "cache"), "DNNFUSION_CXX": str(wrapper),
           "DNNFUSION_PROFILE_DB": str(tmp_path / "profile.db")}
    r1 = run_py(code, env)
    assert r1.returncode == 0 and "OK" in r1.stdout, r1.stderr[-3000:]
    first = log.read_text().count("\n")
    assert first >= 1, "the first process should have compiled generated code"
    r2 = run_py(code, env)
    assert r2.returncode == 0 and "OK" in r2.stdout, r2.stderr[-3000:]
    assert log.read_text().count("\n") == first, "the second process invoked the compiler"
    # The profile database survived too: the first process measured, the second only looked up.
    assert (tmp_path / "profile.db").exists()
    assert "profiling yellow fusion cells" in r1.stderr
    assert "profiling yellow fusion cells" not in r2.stderr


def test_missing_compiler_is_a_clear_error_at_compile_time_not_import(tmp_path):
    r = run_py("""
        import torch, dnnfusion                                # importing needs no compiler
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2), torch.nn.Sigmoid()).eval()
        try:
            with torch.no_grad():
                torch.compile(m, backend="dnnfusion")(torch.randn(2, 4))
        except Exception as e:
            cause = e
            while getattr(cause, "inner_exception", None) is not None or cause.__cause__ is not None:
                cause = getattr(cause, "inner_exception", None) or cause.__cause__
            print("ERROR:", type(cause).__name__, e)
        else:
            print("NO ERROR")
        with torch.no_grad():                                  # fusion "none" generates no code
            torch._dynamo.reset()
            y = torch.compile(m, backend="dnnfusion", options={"fusion": "none"})(torch.randn(2, 4))
        print("NONE OK", tuple(y.shape))
    """, {"DNNFUSION_CXX": "/nonexistent/c++", "DNNFUSION_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERROR: CompilerNotFound" in r.stdout and "no C++ compiler" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "NONE OK (2, 2)" in r.stdout


def test_debug_env_prints_the_fusion_plan():
    r = run_py("""
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Linear(4, 4)).eval()
        with torch.no_grad():
            torch.compile(m, backend="dnnfusion")(torch.randn(2, 4))
    """, env={"DNNFUSION_DEBUG": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "fusion plan (dnnfusion)" in r.stderr and "after pass codegen" in r.stderr
