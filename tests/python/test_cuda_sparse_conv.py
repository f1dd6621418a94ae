"""dnnfusion.cuda.sparse_conv2d without a GPU: the generated kernel's PTX, run by the project's PTX
interpreter (emulate), equals torch's conv2d + epilogue on random shapes and sparsities; its
structure (FMA counts in PTX and SASS) follows the weights' density; ptxas accepts it for every
architecture we name; bad arguments are ValueErrors naming the problem; launching without a CUDA
driver is TargetUnavailable. Replay a random case with DNNFUSION_TEST_SEED=<seed>."""
import os
import random

import pytest
import torch
import torch.nn.functional as F

import dnnfusion
from dnnfusion import cuda

SEED = int(os.environ.get("DNNFUSION_TEST_SEED", random.randrange(1 << 31)))


def _seed_note():
    return f"replay with DNNFUSION_TEST_SEED={SEED}"


def _prune(w, sparsity, g):
    """Zeroes round(sparsity * numel) weights chosen at random (unstructured pruning)."""
    flat = w.flatten().clone()
    n = int(round(sparsity * flat.numel()))
    flat[torch.randperm(flat.numel(), generator=g)[:n]] = 0
    return flat.view_as(w)


def _reference(x, w, b, stride, padding, dilation, activation, residual):
    y = F.conv2d(x, w, b, stride, padding, dilation)
    if residual is not None:
        y = y + residual
    if activation == "relu":
        y = F.relu(y)
    elif activation == "relu6":
        y = F.relu6(y)
    return y


# (N, C, H, W, K, R, S, stride, padding, dilation, bias, activation, residual)
SHAPES = [
    (1, 3, 11, 13, 5, 3, 3, 1, 1, 1, True, "relu", False),     # odd sizes, C and K below a tile
    (4, 8, 9, 9, 16, 3, 3, 2, 1, 1, True, None, False),        # batch 4, stride 2
    (1, 16, 10, 7, 24, 1, 1, 1, 0, 1, False, "relu6", False),  # 1x1
    (1, 6, 12, 12, 10, 5, 5, 1, 2, 1, True, None, True),       # 5x5, padding 2, residual
    (1, 5, 13, 11, 7, 3, 3, 1, 2, 2, False, "relu", True),     # dilation 2, K not a multiple of the tile
    (4, 12, 8, 8, 20, 3, 3, 2, 0, 1, True, "relu", False),     # stride 2, padding 0, batch 4
]
SPARSITIES = [0.0, 0.5, 0.9, 0.99, 1.0]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"case{i}" for i in range(len(SHAPES))])
def test_emulated_kernel_matches_conv2d(shape):
    n, c, h, w, k, r, s, stride, padding, dilation, has_bias, act, has_res = shape
    g = torch.Generator().manual_seed(SEED + hash(shape) % 1000)
    x = torch.randn(n, c, h, w, generator=g)
    dense = torch.randn(k, c, r, s, generator=g)
    b = torch.randn(k, generator=g) if has_bias else None
    for sparsity in SPARSITIES:
        wt = _prune(dense, sparsity, g)
        kern = cuda.sparse_conv2d(wt, b, input_shape=(n, c, h, w), stride=stride, padding=padding, dilation=dilation,
                                  activation=act, residual=has_res, arch="sm_80")
        res = torch.randn(kern.output_shape, generator=g) if has_res else None
        want = _reference(x, wt, b, stride, padding, dilation, act, res)
        got = kern.emulate(x, res)
        scale = max(1.0, want.abs().max().item())
        err = (got - want).abs().max().item()
        assert err <= 1e-5 * scale, f"sparsity {sparsity}: max error {err} (scale {scale}); {_seed_note()}"
        st = kern.stats
        assert st["nonzeros"] == int((wt != 0).sum()), _seed_note()
        # Zero weights cost no instruction: the PTX keeps one FMA per non-zero weight and output.
        assert st["ptx_fma"] == st["nonzeros"] * (st["ptx_fma_dense"] // st["weights"]), (st, _seed_note())


def test_sass_ffma_falls_with_density():
    g = torch.Generator().manual_seed(SEED)
    dense = torch.randn(32, 32, 3, 3, generator=g)
    shape = (1, 32, 14, 14)
    k0 = cuda.sparse_conv2d(dense, input_shape=shape, padding=1, arch="sm_90")
    k9 = cuda.sparse_conv2d(_prune(dense, 0.9, g), input_shape=shape, padding=1, arch="sm_90")
    if k0.stats["sass_ffma"] < 0:
        pytest.fail(f"nvdisasm is not installed (scripts/setup.sh installs it): {k0.stats['sass_note']}")
    # Every PTX FMA is one SASS FFMA with its weight inside: nonzeros x outputs per weight, no more.
    assert k0.stats["sass_ffma"] == k0.stats["ptx_fma"] == k0.stats["ptx_fma_dense"], k0.stats
    assert k9.stats["sass_ffma"] == k9.stats["ptx_fma"], k9.stats
    assert k9.stats["sass_ffma"] <= 0.12 * k0.stats["sass_ffma"], (k9.stats, k0.stats, _seed_note())
    assert k9.stats["cubin_bytes"] < k0.stats["cubin_bytes"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_ptxas_accepts_every_arch(arch):
    g = torch.Generator().manual_seed(SEED)
    w = _prune(torch.randn(8, 4, 3, 3, generator=g), 0.7, g)
    kern = cuda.sparse_conv2d(w, torch.randn(8, generator=g), input_shape=(1, 4, 9, 9), padding=1,
                              activation="relu", arch=arch)
    assert kern.arch == arch and kern.cubin[:4] == b"\x7fELF" and kern.stats["registers"] > 0
    assert f".target sm_" in kern.ptx or ".target compute_" in kern.ptx


def test_all_zero_weights_store_the_bias():
    w = torch.zeros(4, 3, 3, 3)
    b = torch.tensor([1.0, -2.0, 3.0, 0.5])
    kern = cuda.sparse_conv2d(w, b, input_shape=(1, 3, 6, 6), padding=1, activation="relu")
    assert kern.stats["ptx_fma"] == 0
    got = kern.emulate(torch.randn(1, 3, 6, 6))
    assert torch.equal(got, F.relu(b).view(1, 4, 1, 1).expand(1, 4, 6, 6))


@pytest.mark.parametrize("call,match", [
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3), input_shape=(1, 3, 8, 8)), "4-d"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 6, 8, 8)), "groups=2"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 5, 8, 8)), "5 channels"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 5, 5), input_shape=(1, 3, 3, 3)), "does not fit"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 3, 8)), "input_shape"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 3, 8, 8), stride=0), "stride"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 3, 8, 8), padding=-1), "padding"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 3, 8, 8), activation="gelu"), "activation"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), torch.randn(5), input_shape=(1, 3, 8, 8)), "bias"),
    (lambda: cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 3, 8, 8), arch="sm_99"), "sm_90"),
    (lambda: cuda.sparse_conv2d(torch.full((4, 3, 3, 3), float("nan")), input_shape=(1, 3, 8, 8)), "finite"),
])
def test_bad_arguments_are_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_calls_check_their_tensors():
    kern = cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 3, 8, 8), padding=1)
    with pytest.raises(ValueError, match="CUDA tensor"):
        kern(torch.randn(1, 3, 8, 8))  # a CPU tensor
    with pytest.raises(ValueError, match=r"\(1, 3, 8, 8\)"):
        kern.emulate(torch.randn(1, 3, 8, 9))
    with pytest.raises(ValueError, match="without a residual"):
        kern.emulate(torch.randn(1, 3, 8, 8), torch.randn(1, 4, 8, 8))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a CUDA driver")
def test_launch_without_a_driver_is_target_unavailable():
    assert cuda.toolchain()["driver"], "no driver here, so a reason"
    kern = cuda.sparse_conv2d(torch.randn(4, 3, 3, 3), input_shape=(1, 3, 8, 8), padding=1)
    with pytest.raises(dnnfusion.TargetUnavailable, match="libcuda"):
        kern._core.launch(0, 0, 0, 0, 0, 0)
