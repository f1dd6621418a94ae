"""Every ATen op the core claims, exercised through torch.compile on small inputs: the result
must match eager and the op must have run in the core (not silently fallen back)."""
import pytest
import torch
import torch.nn.functional as F

import dnnfusion
from dnnfusion.report import collecting

g = torch.Generator().manual_seed(1234)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


def ri(lo, hi, *shape):
    return torch.randint(lo, hi, shape, generator=g)


# (name, function, inputs, ATen ops that must run in the core)
CASES = [
    ("add_scalar_alpha", lambda x, y: torch.add(x, y, alpha=0.5) + 2, (r(3, 4), r(4)), ["aten.add.Tensor"]),
    ("sub_rsub", lambda x, y: (x - y) + (1 - x), (r(2, 3), r(2, 3)), ["aten.sub.Tensor", "aten.rsub.Scalar"]),
    ("mul_div_broadcast", lambda x, y: x * y / (y.abs() + 1), (r(2, 1, 5), r(3, 1)), ["aten.mul.Tensor", "aten.div.Tensor"]),
    ("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), (r(4, 4) * 5, r(4, 4).abs() + 0.5), ["aten.div.Tensor_mode"]),
    ("pow_scalar_and_tensor", lambda x, y: x.abs() ** 1.5 + torch.pow(x.abs() + 1, y), (r(3, 3), r(3, 3)), ["aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"]),
    ("max_min", lambda x, y: torch.maximum(x, y) - torch.minimum(x, y), (r(5), r(5)), ["aten.maximum.default", "aten.minimum.default"]),
    ("compare_where", lambda x, y: torch.where(x > y, x, y * 2) + (x <= 0).float(), (r(4, 5), r(4, 5)), ["aten.gt.Tensor", "aten.where.self", "aten.le.Scalar"]),
    ("masked_fill", lambda x: x.masked_fill(x < 0, -1e4), (r(3, 6),), ["aten.masked_fill.Scalar"]),
    ("logical", lambda x: ((x > 0) & (x < 1)) | ~(x > -1), (r(10),), ["aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_not.default"]),
    ("unary_chain", lambda x: torch.exp(-x.abs()) + torch.log1p(x.abs()) * 0 + torch.sqrt(x.abs() + 1) + torch.rsqrt(x.abs() + 1)
     + torch.reciprocal(x.abs() + 2) + torch.erf(x) + torch.sin(x) + torch.cos(x) + torch.floor(x) + torch.ceil(x) + torch.round(x)
     + torch.sign(x), (r(64),), ["aten.exp.default", "aten.sqrt.default", "aten.rsqrt.default", "aten.erf.default", "aten.sin.default"]),
    ("activations", lambda x: F.relu(x) + F.gelu(x) + F.gelu(x, approximate="tanh") + F.silu(x) + torch.sigmoid(x) + torch.tanh(x)
     + F.hardswish(x) + F.hardsigmoid(x) + F.relu6(x) + F.leaky_relu(x, 0.2) + F.elu(x) + F.softplus(x) + F.mish(x),
     (r(8, 16) * 3,), ["aten.gelu.default", "aten.hardswish.default", "aten.leaky_relu.default", "aten.elu.default", "aten.softplus.default", "aten.mish.default"]),
    ("clamp", lambda x: x.clamp(-0.5, 0.7) + x.clamp(min=0.1), (r(20),), ["aten.clamp.default"]),
    ("casts", lambda x: (x * 10).to(torch.int64).to(torch.float32) + (x > 0).to(torch.float32), (r(4, 4),), ["aten._to_copy.default"]),
    ("int64_arith", lambda i: (i * 3 + 7) // 2 - i % 5, (ri(-50, 50, 6, 7),), ["aten.mul.Tensor", "aten.floor_divide.default", "aten.remainder.Scalar"]),
    ("reductions", lambda x: x.sum(dim=1) + x.mean(dim=(2,)) + x.mean() + x.sum(dim=(0, 2), keepdim=True).squeeze(2) + x.amax(dim=-1) + x.amin(dim=-1)
     + x.var(dim=1) + x.prod(dim=1) * 0.01, (r(3, 5, 5),), ["aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.var.correction", "aten.prod.dim_int"]),
    ("argmax_cumsum", lambda x: x.argmax(dim=1).float() + x.cumsum(dim=1)[:, -1], (r(4, 9),), ["aten.argmax.default", "aten.cumsum.default"]),
    ("softmax", lambda x: F.softmax(x, dim=-1) + F.log_softmax(x, dim=1).exp() + F.softmax(x, dim=0), (r(6, 7) * 4,), ["aten._softmax.default", "aten._log_softmax.default"]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (8,), w, b) + F.layer_norm(x, (4, 8)), (r(2, 4, 8) * 3 + 1, r(8), r(8)), ["aten.native_layer_norm.default"]),
    ("group_norm", lambda x, w, b: F.group_norm(x, 4, w, b), (r(2, 8, 5, 5), r(8), r(8)), ["aten.native_group_norm.default"]),
    ("batch_norm", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, False, 0.1, 1e-3), (r(2, 6, 4, 4), r(6), r(6).abs() + 0.5, r(6), r(6)),
     ["aten._native_batch_norm_legit_no_training.default"]),
    ("conv_variants", lambda x, w1, w2, w3: F.conv2d(x, w1, stride=2, padding=1) .sum() + F.conv2d(x, w2, groups=8, padding=2, dilation=2).sum()
     + F.conv2d(x, w3, padding=(0, 1)).sum(), (r(2, 8, 11, 9), r(4, 8, 3, 3), r(8, 1, 3, 3), r(6, 8, 1, 3)), ["aten.convolution.default"]),
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), (r(2, 4, 17), r(6, 4, 3), r(6)), ["aten.convolution.default"]),
    ("pools", lambda x: F.max_pool2d(x, 3, 2, 1) .sum() + F.max_pool2d(x, 2, ceil_mode=True).sum() + F.avg_pool2d(x, 3, 2, 1, count_include_pad=False).sum()
     + F.avg_pool2d(x, 2, ceil_mode=True).sum() + F.adaptive_avg_pool2d(x, (3, 2)).sum(), (r(2, 3, 9, 7),),
     ["aten.max_pool2d_with_indices.default", "aten.avg_pool2d.default", "aten._adaptive_avg_pool2d.default"]),
    ("matmuls", lambda a, b, c, bias: torch.addmm(bias, a, b, beta=0.5, alpha=2.0) .sum() + torch.bmm(c, c.transpose(1, 2)).sum()
     + torch.baddbmm(c, c, torch.ones(3, 5, 5), alpha=0.5).sum() + (a @ b).sum(), (r(4, 6), r(6, 5), r(3, 5, 5), r(4, 5)),
     ["aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default", "aten.mm.default"]),
    ("linear_3d", lambda x, w, b: F.linear(x, w, b), (r(2, 7, 16), r(12, 16), r(12)), ["aten.addmm.default"]),
    ("attention", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m) + F.scaled_dot_product_attention(q, k, v, is_causal=True)
     + F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0), (r(2, 3, 10, 8), r(2, 3, 10, 8), r(2, 3, 10, 8), r(2, 1, 10, 10)),
     ["aten._scaled_dot_product_flash_attention_for_cpu.default"]),
    ("views", lambda x: x.permute(2, 0, 1).reshape(5, -1).t().contiguous().unsqueeze(1).expand(12, 3, 5).transpose(0, 2)[1:4:2, :, 2:]
     .flatten() .sum() + x[:, 1].sum() + x.select(2, -1).sum(), (r(3, 4, 5),), ["aten.permute.default", "aten.expand.default", "aten.slice.Tensor", "aten.select.int"]),
    ("cat_split", lambda x, y: torch.cat([x, y, x], dim=1).split([2, 3, 4, 3], dim=1)[2] * 2 + torch.cat(x.chunk(2, dim=1)[::-1], dim=1).sum(),
     (r(2, 4, 3), r(2, 4, 3)), ["aten.cat.default", "aten.split_with_sizes.default", "aten.split.Tensor"]),
    ("unbind_stack", lambda x: sum(t * (i + 1) for i, t in enumerate(x.unbind(1))) + torch.stack([x[:, 0], x[:, 1]], dim=0).sum(0),
     (r(3, 4),), ["aten.unbind.int"]),
    ("indexing", lambda w, i, x: F.embedding(i, w).sum(1) + torch.index_select(x, 1, i[0]).sum(1, keepdim=True)
     + torch.gather(x, 1, i % 4).sum(1, keepdim=True), (r(10, 4), ri(0, 4, 2, 3), r(2, 4)),
     ["aten.embedding.default", "aten.index_select.default", "aten.gather.default"]),
    ("pad_repeat", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5).sum() + x.repeat(2, 1, 3).sum() + F.pad(x, (-1, 0)).sum(), (r(2, 3, 4),),
     ["aten.constant_pad_nd.default", "aten.repeat.default"]),
    ("sources", lambda x: x + torch.arange(x.shape[-1], dtype=torch.float32) * 0.5 + torch.full((x.shape[-1],), 2.0), (r(3, 6),),
     ["aten.add.Tensor"]),
]


def test_sigmoid_and_silu_keep_torchs_special_values():
    # Generated code computes both with a range-limited exp: the ends of the range must still give
    # torch's results (0 / -0 / NaN at -inf, 1 / x at +inf, NaN through).
    x = torch.tensor([-float("inf"), -200.0, -100.0, -88.0, -87.5, -87.0, -20.0, -1.0, -1e-30, 0.0, 1e-30, 1.0,
                      20.0, 87.0, 88.0, 100.0, float("inf"), float("nan")])

    def f(t):  # each a two-op chain, so it is generated code (a lone op runs the library kernel)
        return torch.sigmoid(t * 2.0), F.silu(t * 2.0), (t * 2.0) * torch.sigmoid(t * 2.0)

    torch._dynamo.reset()
    with torch.no_grad():
        rep = dnnfusion.explain(f, x / 2, compare_modes=False)
    assert "-> loop" in str(rep)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(f, backend="dnnfusion", dynamic=False)(x / 2)
    for a, b in zip(got, f(x / 2)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-30, equal_nan=True)
        assert torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(torch.isinf(a), torch.isinf(b))


@pytest.mark.parametrize("name,fn,inputs,must_run", CASES, ids=[c[0] for c in CASES])
def test_op_runs_in_core_and_matches_eager(name, fn, inputs, must_run):
    compiled = torch.compile(fn, backend="dnnfusion", dynamic=False)
    with torch.no_grad():
        ref = fn(*inputs)
        with collecting() as graphs:
            out = compiled(*inputs)
    rep = dnnfusion.ExplainReport(graphs)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if ref.is_floating_point():
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, ref.abs().max().item()))
    else:
        assert torch.equal(out, ref)
    core = rep.ops_core
    for op in must_run:
        assert core.get(op, 0) > 0, f"{op} did not run in the core: seen {dict(rep.ops_total)}, fallbacks {rep.fallbacks}"
