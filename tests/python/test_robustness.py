"""Never crash, never answer wrong: shapes with 0 and 1, index checks as eager makes them,
attention arguments the kernels do not implement, compilers that hang or fail, and fallbacks that
say so (a FallbackWarning and the reason in explain())."""
import os
import stat
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnfusion

MODES = ["none", "tvm", "dnnfusion"]


def _compile_run(model, *inputs, mode="dnnfusion"):
    """(outputs, fallback warnings) of the compiled model."""
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", dnnfusion.FallbackWarning)
        dnnfusion.report._warned.clear()
        out = torch.compile(model, backend="dnnfusion", options={"fusion": mode}, dynamic=False)(*inputs)
    return out, [str(w.message) for w in caught if issubclass(w.category, dnnfusion.FallbackWarning)]


class GemmN1(nn.Module):  # a GEMM with N = 1 and an epilogue (its bias folds to a 0-d tensor)
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(33, 1))

    def forward(self, x):
        return x @ self.w + 3.0


class EmptyBmm(nn.Module):  # a size-0 dimension reaching mm/bmm
    def forward(self, x):
        return x[:0] @ x[:0].transpose(-1, -2), x.sum()


class ConvHead(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return torch.relu(self.conv(x)) * 2.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", ["gemm_n1", "empty_bmm", "grouped_conv", "conv_empty_batch", "expand_output",
                                  "addmm_scalar_bias"])
def test_small_and_empty_shapes_match_eager_without_fallback(case, mode):
    torch.manual_seed(0)
    if case == "gemm_n1":
        m, x = GemmN1(), (torch.randn(3, 33),)
    elif case == "empty_bmm":
        m, x = EmptyBmm(), (torch.randn(3, 2, 2, 5),)
    elif case == "grouped_conv":
        m, x = ConvHead(nn.Conv2d(5, 10, 3, padding=1, groups=5)), (torch.randn(1, 5, 8, 8),)
    elif case == "conv_empty_batch":
        m, x = ConvHead(nn.Conv2d(3, 4, 3)), (torch.randn(0, 3, 8, 8),)
    elif case == "addmm_scalar_bias":  # a 1x1 GEMM plus a 0-d tensor, then a view: addmm with a 0-d bias
        class AddmmScalar(nn.Module):
            def forward(self, a, c):
                return ((a @ a.transpose(-1, -2)) + c).transpose(1, 0) * 2

        m, x = AddmmScalar(), (torch.randn(1, 3), torch.randn([]))
    else:  # an output that is an expanded (stride-0) view of an input
        class ExpandOut(nn.Module):
            def forward(self, a, b):
                return torch.tanh(a) + 1, b.expand(2, -1)

        m, x = ExpandOut(), (torch.randn(3, 4), torch.randn(4))
    m = m.eval()
    got, fallbacks = _compile_run(m, *x, mode=mode)
    with torch.no_grad():
        want = m(*x)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert fallbacks == []


@pytest.mark.parametrize("kind", ["embedding", "index_select", "gather"])
@pytest.mark.parametrize("bad", [-1, 10])
def test_out_of_range_indices_raise_what_eager_raises(kind, bad):
    w = torch.randn(10, 4)

    class Indexing(nn.Module):
        def forward(self, ids):
            if kind == "embedding":
                return F.embedding(ids, w) * 2
            if kind == "index_select":
                return torch.index_select(w, 0, ids) * 2
            return torch.gather(w, 0, ids.view(-1, 1).expand(-1, 4)) * 2

    m = Indexing()
    good = torch.tensor([1, 9, 0])
    f = torch.compile(m, backend="dnnfusion", dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(f(good), m(good))
        report = dnnfusion.explain(m, good)
        assert report.n_core == report.n_total  # the index op runs in the core, so the check is ours
        ids = torch.tensor([1, bad, 0])
        with pytest.raises((IndexError, RuntimeError)) as eager:
            m(ids)
        with pytest.raises(type(eager.value)) as ours:  # the same class eager raises
            f(ids)
    assert str(bad) in str(ours.value) and "out of" in str(ours.value), (str(eager.value), str(ours.value))


def test_grouped_query_attention_is_refused_with_its_reason_and_matches_eager():
    torch.manual_seed(0)

    class Gqa(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(32, 32)
            self.kv = nn.Linear(32, 16)

        def forward(self, x):
            b, t, _ = x.shape
            q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
            k, v = self.kv(x).view(b, t, 2, 8).transpose(1, 2).chunk(2, dim=-1)
            k, v = k.repeat(1, 1, 1, 2), v.repeat(1, 1, 1, 2)
            o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True)
            return o.transpose(1, 2).reshape(b, t, 32)

    m, x = Gqa().eval(), torch.randn(2, 7, 32)
    got, fallbacks = _compile_run(m, x)
    with torch.no_grad():
        torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-5)
        report = dnnfusion.explain(m, x)
    reasons = [r for rs in report.fallbacks.values() for r in rs]
    assert any("grouped-query attention" in r for r in reasons), reasons
    assert fallbacks == []  # refused per node (a fallback by design), not a failed region


def _script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


@pytest.mark.parametrize("compiler", ["hangs", "fails"])
def test_a_hanging_or_failing_compiler_falls_back_with_a_warning(tmp_path, monkeypatch, compiler):
    body = "sleep 100\n" if compiler == "hangs" else "echo 'cc1plus: fatal error: out of memory' >&2\nexit 1\n"
    monkeypatch.setenv("DNNFUSION_CXX", _script(tmp_path, "cxx", body))
    monkeypatch.setenv("DNNFUSION_COMPILE_TIMEOUT", "2")
    monkeypatch.setenv("DNNFUSION_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DNNFUSION_PROFILE_DB", str(tmp_path / "profiles.txt"))
    m = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 3), nn.Tanh()).eval()
    x = torch.randn(4, 8)
    got, fallbacks = _compile_run(m, x)
    with torch.no_grad():
        torch.testing.assert_close(got, m(x))
    assert len(fallbacks) == 1, fallbacks
    want = "CompilerTimeout" if compiler == "hangs" else "out of memory"
    assert want in fallbacks[0]
    report = dnnfusion.explain(m, x)
    assert any(want in r for rs in report.fallbacks.values() for r in rs)


def test_a_fallback_reason_warns_once(tmp_path, monkeypatch):
    monkeypatch.setenv("DNNFUSION_CXX", _script(tmp_path, "cxx", "exit 3\n"))
    monkeypatch.setenv("DNNFUSION_CACHE_DIR", str(tmp_path / "cache"))
    m = nn.Sequential(nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 8), nn.SiLU()).eval()
    dnnfusion.report._warned.clear()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", dnnfusion.FallbackWarning)
        for batch in (2, 3):
            torch.compile(m, backend="dnnfusion", dynamic=False)(torch.randn(batch, 8))
    assert sum(issubclass(w.category, dnnfusion.FallbackWarning) for w in caught) == 1


def test_a_private_cache_is_created_private(tmp_path, monkeypatch):
    cache = tmp_path / "fresh" / "cache"
    monkeypatch.setenv("DNNFUSION_CACHE_DIR", str(cache))
    m = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)).eval()
    got, fallbacks = _compile_run(m, torch.randn(2, 8))
    assert fallbacks == []
    for d in (cache, cache / "kernels"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for f in (cache / "kernels").iterdir():
        assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f


def test_a_world_writable_cache_is_not_used(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("DNNFUSION_CACHE_DIR", str(shared))
    m = nn.Sequential(nn.Linear(8, 8), nn.Hardswish(), nn.Linear(8, 8)).eval()
    x = torch.randn(2, 8)
    got, fallbacks = _compile_run(m, x)
    with torch.no_grad():
        torch.testing.assert_close(got, m(x))
    assert fallbacks == []
    assert list(shared.iterdir()) == []  # nothing written to, or loaded from, the shared directory
