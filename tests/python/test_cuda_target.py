"""The cuda target end to end: torch.compile(..., options={"target": "cuda"}) runs every sparse
convolution (with its folded batch norm, residual add and ReLU) as a kernel generated for its
weights, and everything else on ATen. Without a GPU, DNNFUSION_CUDA_EMULATE=1 runs those kernels'
PTX on the CPU through the PTX interpreter — the very PTX that ptxas assembles for the GPU — with
CPU tensors; the outputs must match eager. Without that switch and without a driver, compiling for
the target is a clean TargetUnavailable. Replay with DNNFUSION_TEST_SEED=<seed>."""
import os

import pytest
import torch
import torch.nn as nn
import torchvision

import dnnfusion
from dnnfusion.options import parse_options

SEED = int(os.environ.get("DNNFUSION_TEST_SEED", "2101"))


@pytest.fixture
def emulate(monkeypatch):
    monkeypatch.setenv("DNNFUSION_CUDA_EMULATE", "1")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compile(model, x, **options):
    with torch.no_grad():
        cm = torch.compile(model, backend="dnnfusion", options={"target": "cuda", **options})
        return cm(x)


def _sparsify(model, sparsity, gen):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.mul_((torch.rand(m.weight.shape, generator=gen) >= sparsity).float())
            if isinstance(m, nn.BatchNorm2d):  # non-trivial statistics, so folding them matters
                m.running_mean.uniform_(-0.5, 0.5, generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.2, 0.2, generator=gen)
    return model


class Block(nn.Module):
    """conv-bn-relu, conv-bn + identity, relu; a conv whose output is also read elsewhere; relu6."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(6, 12, 3, padding=1), nn.BatchNorm2d(12)
        self.c2, self.b2 = nn.Conv2d(12, 12, 3, padding=1, bias=False), nn.BatchNorm2d(12)
        self.c3 = nn.Conv2d(12, 10, 1, stride=2)
        self.c4 = nn.Conv2d(10, 10, 5, padding=2, dilation=1)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        z = torch.relu(self.b2(self.c2(y)) + y)
        u = self.c3(z)                      # read by relu6 and by the sum below: computed for both
        v = nn.functional.relu6(u)
        w = self.c4(v)
        return w + u.mean(), torch.sigmoid(w)


def test_compiling_for_cuda_without_a_driver_is_target_unavailable(monkeypatch):
    monkeypatch.delenv("DNNFUSION_CUDA_EMULATE", raising=False)
    if not dnnfusion.cuda.toolchain()["driver"]:
        pytest.fail("this machine has a CUDA driver: the GPU tests (benchmarks/sparse_gpu.py) apply instead")
    torch._dynamo.reset()
    model = nn.Sequential(nn.Conv2d(3, 4, 3)).eval()
    with pytest.raises(Exception) as e:
        _compile(model, torch.randn(1, 3, 8, 8))
    torch._dynamo.reset()
    chain = [e.value]  # Dynamo wraps a backend's error; the cause is ours
    while chain[-1].__cause__ is not None or getattr(chain[-1], "inner_exception", None) is not None:
        chain.append(chain[-1].__cause__ or chain[-1].inner_exception)
    assert any(isinstance(x, dnnfusion.TargetUnavailable) for x in chain), chain
    assert "libcuda.so.1" in str(e.value) and "DNNFUSION_CUDA_EMULATE=1" in str(e.value)


def test_emulated_block_matches_eager_and_explains(emulate):
    gen = torch.Generator().manual_seed(SEED)
    model = _sparsify(Block().eval(), 0.9, gen)
    x = torch.randn(2, 6, 11, 13, generator=gen)
    with torch.no_grad():
        want = model(x)
    got = _compile(model, x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"seed {SEED}")
    text = str(dnnfusion.explain(model, x, options={"target": "cuda"}))
    assert "sparse convolutions (cuda target)" in text, text
    assert "kernels generated for their weights : 5" in text, text  # c1, c2, c3 twice (u and relu6(u)), c4
    assert "emulated on the CPU" in text
    assert "epilogue ops run inside them        : 4" in text, text  # relu, add, relu, relu6 (BN folded first)


def test_dense_and_too_large_convolutions_stay_on_aten(emulate):
    gen = torch.Generator().manual_seed(SEED + 1)
    model = nn.Sequential(nn.Conv2d(4, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU()).eval()
    _sparsify(model[2:], 0.95, gen)  # only the second conv is sparse
    x = torch.randn(1, 4, 10, 10, generator=gen)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(_compile(model, x), want, rtol=1e-4, atol=1e-5)
    text = str(dnnfusion.explain(model, x, options={"target": "cuda"}))
    assert "below sparse_threshold 70%" in text, text
    assert "kernels generated for their weights : 1" in text, text
    text = str(dnnfusion.explain(model, x, options={"target": "cuda", "sparse_max_weights": 100}))
    assert "exceed the generated-kernel limit 100" in text, text
    assert "kernels generated for their weights" not in text or ": 0" in text


def test_all_zero_convolution_gives_its_bias_through_relu(emulate):
    model = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.ReLU()).eval()
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.copy_(torch.tensor([-1.0, 0.5, 0.0, 2.0, -0.25]))
    x = torch.randn(1, 3, 7, 7)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(_compile(model, x), want)


def test_pruned_resnet18_matches_eager(emulate):
    """dnnfusion.prune(..., structured=False) at 90%, then the convolutions with up to 40k weights
    (conv1, layer1, the 1x1 downsamples) as generated kernels: a smaller limit than the default
    keeps the one-time template compile of this test to seconds."""
    torch.manual_seed(SEED)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    pruned = dnnfusion.prune(model, 0.9, x, structured=False).eval()
    _sparsify(pruned, 0.0, torch.Generator().manual_seed(SEED))  # BN statistics only
    with torch.no_grad():
        want = pruned(x)
    got = _compile(pruned, x, sparse_max_weights=40000)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4, msg=f"seed {SEED}")
    text = str(dnnfusion.explain(pruned, x, options={"target": "cuda", "sparse_max_weights": 40000}))
    assert "kernels generated for their weights : 7" in text, text


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True])
def test_sparse_threshold_is_checked(bad):
    with pytest.raises(ValueError, match="sparse_threshold"):
        parse_options({"target": "cuda", "sparse_threshold": bad})


@pytest.mark.parametrize("bad", [0, -5, 2.5, "big"])
def test_sparse_max_weights_is_checked(bad):
    with pytest.raises(ValueError, match="sparse_max_weights"):
        parse_options({"sparse_max_weights": bad})


def test_target_follows_the_inputs_device():
    assert parse_options({}, "cpu").target == "cpu"
    assert parse_options({"target": "reference"}, "cpu").target == "reference"
    cuda_type = dnnfusion.targets.info("cuda")["device_type"]
    assert parse_options({}, cuda_type).target == ("cpu" if cuda_type == "cpu" else "cuda")
