"""The fpga target's user-facing flow: dnnfusion.fpga.compile, partition, the report, the
instruction stream, bit-exactness of the OpenCL accelerator against the C++ model, and int8
accuracy on real data (scikit-learn's digits)."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnfusion
from dnnfusion import _C

sys.path.insert(0, os.path.dirname(__file__))
import fpga_digits  # noqa: E402

torch.set_num_threads(2)
HAS_OPENCL = _C.fpga.opencl_unavailable_reason() == ""
needs_opencl = pytest.mark.skipif(not HAS_OPENCL, reason="no OpenCL platform: " + _C.fpga.opencl_unavailable_reason())


class Tiny(nn.Module):
    """conv3x3+BN+ReLU, depthwise+ReLU6 with residual add, 1x1, strided 3x3, max pool; CPU tail."""

    def __init__(self, silu_in_middle=False):
        super().__init__()
        self.silu_in_middle = silu_in_middle
        self.c1, self.b1 = nn.Conv2d(3, 12, 3, padding=1), nn.BatchNorm2d(12)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12)
        self.pw = nn.Conv2d(12, 20, 1)
        self.c2 = nn.Conv2d(20, 20, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(20, 10)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = x + F.relu6(self.dw(x))
        x = self.pw(x)
        x = F.silu(x) if self.silu_in_middle else torch.relu(x)
        x = self.pool(self.c2(x))
        if self.silu_in_middle:
            x = x * torch.sigmoid(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def _tiny(**kw):
    torch.manual_seed(0)
    m = Tiny(**kw).eval()
    with torch.no_grad():
        m.b1.running_mean.uniform_(-0.2, 0.2)
        m.b1.running_var.uniform_(0.5, 1.5)
    return m


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


# ---- arguments ----

def test_argument_errors():
    m = _tiny()
    calib = torch.randn(8, 3, 16, 16)
    with pytest.raises(ValueError, match="calibration data is empty"):
        dnnfusion.fpga.compile(m, [])
    with pytest.raises(ValueError, match="calibration data is empty"):
        dnnfusion.fpga.compile(m, torch.empty(0, 3, 16, 16))
    with pytest.raises(ValueError, match="cannot run calibration batch 0"):
        dnnfusion.fpga.compile(m, torch.randn(4, 5, 16, 16))
    with pytest.raises(ValueError, match="unknown calibration method 'entropy'.*kl, minmax, percentile"):
        dnnfusion.fpga.compile(m, calib, calibration="entropy")
    with pytest.raises(ValueError, match="cpu_backend"):
        dnnfusion.fpga.compile(m, calib, cpu_backend="tvm")
    with pytest.raises(ValueError, match="fpga_binary"):
        dnnfusion.fpga.compile(m, calib, fpga_binary="/nonexistent/datapath.xclbin")
    with pytest.raises(ValueError, match="model must be a torch.nn.Module"):
        dnnfusion.fpga.compile(lambda x: x, calib)


@needs_opencl
def test_unknown_platform_lists_platforms():
    names = [p["name"] for p in _C.fpga.list_platforms()]
    with pytest.raises(ValueError, match="no OpenCL platform matches 'no-such-platform'") as e:
        dnnfusion.fpga.compile(_tiny(), torch.randn(4, 3, 16, 16), platform="no-such-platform")
    assert all(n in str(e.value) for n in names)


def test_target_unavailable_without_opencl():
    code = ("import torch, dnnfusion\n"
            "m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1)).eval()\n"
            "try:\n"
            "    dnnfusion.fpga.compile(m, torch.randn(2, 3, 8, 8))\n"
            "except dnnfusion.TargetUnavailable as e:\n"
            "    print('UNAVAILABLE', e)\n")
    env = dict(os.environ, DNNFUSION_OPENCL_LIBRARY="/nonexistent/libOpenCL.so")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "UNAVAILABLE" in out.stdout, out.stdout + out.stderr
    assert "OpenCL" in out.stdout


# ---- partition and report ----

def test_partition_cpu_ops_in_the_middle():
    m = _tiny(silu_in_middle=True)
    fm = dnnfusion.fpga.compile(m, torch.randn(8, 3, 16, 16), cpu_backend="eager")
    r = fm.report
    assert r.num_subgraphs == 2 and len(fm.programs) == 2
    where = {op["node"]: op for op in r.ops}
    assert where["silu"]["target"] == "cpu" and "not an accelerator layer type" in where["silu"]["detail"]
    assert where["sigmoid"]["target"] == "cpu"
    assert where["fc"]["target"] == "cpu" and "Linear" in where["fc"]["detail"]
    assert where["adaptive_avg_pool2d"]["target"] == "cpu"
    assert where["b1"]["target"] == "folded"
    assert where["c1"]["target"] == "fpga" and where["c1"]["detail"] == "conv3x3"
    assert where["dw"]["detail"] == "dw3x3" and where["pw"]["detail"] == "conv1x1"
    assert where["add"]["target"] == "fpga" and where["pool"]["detail"] == "maxpool"
    assert where["c1"]["subgraph"] == 0 and where["c2"]["subgraph"] == 1
    # bytes crossing: subgraph 0 takes the 3x16x16 input (padded to 8 channels) and gives 20x16x16.
    sg0 = r.subgraphs[0]
    assert sg0["inputs"][0]["device_bytes"] == 8 * 16 * 16 and sg0["outputs"][0]["device_bytes"] == 24 * 16 * 16
    text = str(r)
    assert "2 accelerator subgraph(s)" in text and "silu" in text and "words" in text and "cycles" in text
    assert fm.explain() == text
    x = torch.randn(2, 3, 16, 16)
    assert rel_err(fm.simulate(x), m(x)) < 0.2


def test_all_supported_gives_one_subgraph_and_disassembles():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU6(),
                      nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(), nn.Conv2d(16, 8, 1, stride=2),
                      nn.MaxPool2d(3, 1, 1)).eval()
    fm = dnnfusion.fpga.compile(m, torch.randn(8, 3, 12, 12), cpu_backend="eager")
    assert fm.report.num_subgraphs == 1
    assert all(op["target"] in ("fpga", "folded") for op in fm.report.ops)
    x = torch.randn(3, 3, 12, 12)
    assert torch.equal(fm.simulate(x)[1:2], fm.simulate(x[1:2]))  # batch = image by image, exactly
    prog = fm.program
    assert prog.dtype == torch.uint32 and prog.numel() == 5 + 13 * 4
    layers = dnnfusion.fpga.disassemble(prog)
    assert [d["type"] for d in layers] == ["conv3x3", "dw3x3", "conv1x1", "maxpool"]
    assert layers[0]["act_lo"] == 0 and 0 < layers[0]["act_hi"] <= 127
    assert layers[2]["stride"] == 2 and layers[3]["kernel"] == 3 and layers[3]["pad"] == 1
    assert layers[1]["words"] == prog[4 + 13:4 + 26].tolist() and len(layers[1]["text"]) == 13
    # round trip: re-encoding the decoded layers gives the same stream
    again = _C.fpga.encode([{k: v for k, v in d.items() if k not in ("index", "words", "text", "memory_bytes")}
                            for d in layers], layers[0]["memory_bytes"])
    assert torch.equal(torch.from_numpy(again), prog)


def test_corrupted_program_is_refused():
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).eval()
    fm = dnnfusion.fpga.compile(m, torch.randn(4, 3, 8, 8), cpu_backend="eager")
    bad = fm.program.clone()
    bad[8] = bad[8] ^ 0x1  # one bit of REG1 (input size)
    mem = fm.subgraphs[0].image.clone()
    before = mem.clone()
    with pytest.raises(ValueError):
        _C.fpga.simulate(mem, bad)
    assert torch.equal(mem, before)
    with pytest.raises(ValueError):
        dnnfusion.fpga.disassemble(bad)
    assert any("<mismatch>" in line or "checksum" in line for line in dnnfusion.fpga.disassemble_text(bad))
    if HAS_OPENCL:
        acc = _C.fpga.Accelerator()
        acc.upload(mem)
        with pytest.raises(ValueError):
            acc.run(bad)


# ---- numerics ----

def test_simulate_close_to_fp32_and_batches():
    m = _tiny()
    calib = torch.randn(32, 3, 16, 16)
    fm = dnnfusion.fpga.compile(m, calib, calibration="minmax", cpu_backend="eager")
    x = calib[:6]
    y = fm.simulate(x)
    ref = m(x)
    err = rel_err(y, ref)
    print(f"tiny: simulate vs fp32 relative error {err:.4f}")
    assert err < 0.2
    # batch > 1 runs image by image (the fp32 CPU tail may round differently per batch size)
    torch.testing.assert_close(y[2:3], fm.simulate(x[2:3]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="compiled for inputs of shape"):
        fm.simulate(torch.randn(1, 3, 20, 20))


@needs_opencl
def test_opencl_equals_simulate_tiny():
    m = _tiny()
    fm = dnnfusion.fpga.compile(m, torch.randn(16, 3, 16, 16), cpu_backend="eager")
    x = torch.randn(3, 3, 16, 16)
    assert torch.equal(fm(x), fm.simulate(x))


def test_cpu_backend_dnnfusion_runs_the_cpu_parts():
    m = _tiny(silu_in_middle=True)
    calib = torch.randn(8, 3, 16, 16)
    fm = dnnfusion.fpga.compile(m, calib)
    eager = dnnfusion.fpga.compile(m, calib, cpu_backend="eager")
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(fm.simulate(x), eager.simulate(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_zoo_models_on_the_accelerator(name):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    calib = torch.randn(8, 3, 64, 64)
    # Random-init networks with random inputs: KL clips their long tails hard; percentile is the
    # method a user would pick for them (quant_eval compares methods on a trained model).
    fm = dnnfusion.fpga.compile(m, calib, calibration="percentile", cpu_backend="eager")
    r = fm.report
    assert r.num_subgraphs == 1
    offloaded = [op["node"] for op in r.ops if op["target"] == "fpga"]
    on_cpu = {op["node"] for op in r.ops if op["target"] == "cpu"}
    assert len(offloaded) > 30
    if name == "resnet18":
        assert "conv1" in on_cpu and "fc" in on_cpu  # 7x7 stem and the classifier
    x = calib[:4]
    ys, ref = fm.simulate(x), m(x)
    err = rel_err(ys, ref)
    top1 = (ys.argmax(1) == ref.argmax(1)).float().mean().item()
    print(f"{name}: simulate vs fp32 relative error {err:.4f}, top-1 agreement {top1:.2f}")
    assert err < 0.2 and top1 >= 0.75
    if HAS_OPENCL:
        yf = fm(x)
        assert torch.equal(yf, ys), f"{name}: OpenCL output differs from simulate"


# ---- accuracy on real data ----

@pytest.fixture(scope="module")
def digits():
    torch.manual_seed(0)
    xtr, ytr, xte, yte = fpga_digits.load_digits_split()
    # lr 3e-3: at 1e-2 the accuracy swung between 93.8% and 98.7% with the backward's reduction
    # order (thread count, CPU); at 3e-3 it measured 97.3-98.7% on every seed and thread count tried.
    model = fpga_digits.train(fpga_digits.DigitsNet(32), xtr, ytr, epochs=10, lr=3e-3)
    return model, xtr, ytr, xte, yte


def test_digits_int8_within_one_point(digits):
    model, xtr, ytr, xte, yte = digits
    fp32 = fpga_digits.accuracy(model, xte, yte)
    assert fp32 > 95.0
    fm = dnnfusion.fpga.compile(model, xtr[:200], cpu_backend="eager")  # the default: KL calibration
    ops = {op["node"]: op["target"] for op in fm.report.ops}
    assert fm.report.num_subgraphs == 1 and ops["fc"] == "cpu" and ops["dw_0"] == "fpga" and ops["add"] == "fpga"
    sim = fpga_digits.accuracy(fm.simulate, xte, yte)
    print(f"digits: fp32 {fp32:.2f} %, int8 simulate {sim:.2f} %")
    assert abs(sim - fp32) <= 1.0
    if HAS_OPENCL:
        xs = xte[:64]
        assert torch.equal(fm(xs), fm.simulate(xs))
        acc = fpga_digits.accuracy(fm, xte, yte)
        assert acc == sim


# ---- the torch.compile route ----

def test_torch_compile_target_fpga_matches_fpga_compile():
    m = _tiny(silu_in_middle=True)
    calib = torch.randn(16, 3, 16, 16)
    opts = {"target": "fpga", "calib_data": calib, "calibration": "minmax"}
    torch._dynamo.reset()
    f = torch.compile(m, backend="dnnfusion", options=opts)
    fm = dnnfusion.fpga.compile(m, calib, calibration="minmax")
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        y = f(x)
    # The same layers, weights and calibration give the same int8 program; the CPU parts run on the
    # cpu target in both.
    assert torch.equal(y, fm.simulate(x)) or rel_err(y, fm.simulate(x)) < 1e-5
    assert rel_err(y, m(x)) < 0.2
    r = dnnfusion.explain(m, x, options=opts, compare_modes=False)
    text = str(r)
    assert "fpga target:" in text and "2 accelerator subgraph(s)" in text and "silu" in text
    assert any("ops on the accelerator" in n for n in r.notes)


def test_torch_compile_target_fpga_option_errors():
    m = _tiny()
    x = torch.randn(1, 3, 16, 16)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="needs calibration data"), torch.no_grad():
        torch.compile(m, backend="dnnfusion", options={"target": "fpga"})(x)
    with pytest.raises(ValueError, match="apply to target 'fpga' only"):
        dnnfusion.options.parse_options({"calib_data": x})
    with pytest.raises(ValueError, match="'calibration' must be one of"):
        dnnfusion.options.parse_options({"target": "fpga", "calib_data": x, "calibration": "entropy"})
    with pytest.raises(ValueError, match="'per_channel' must be True or False"):
        dnnfusion.options.parse_options({"target": "fpga", "calib_data": x, "per_channel": 1})
    torch._dynamo.reset()
    with pytest.raises(ValueError, match="calibration data is empty"), torch.no_grad():
        torch.compile(m, backend="dnnfusion", options={"target": "fpga", "calib_data": []})(x)


def test_core_api_views_tensors_and_refuses_copies():
    """_C.fpga sees tensors through numpy views: simulate writes into the caller's tensor, and a
    memory it could only reach through a copy (strided, another dtype) is refused, not written to a
    temporary."""
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).eval()
    fm = dnnfusion.fpga.compile(m, torch.randn(2, 3, 8, 8), cpu_backend="eager")
    mem = fm.subgraphs[0].image.clone()
    before = mem.clone()
    _C.fpga.simulate(mem, fm.program)
    assert not torch.equal(mem, before), "simulate wrote into the tensor it was given"
    wide = torch.zeros(2 * mem.numel(), dtype=torch.uint8)
    for bad, what in [(wide[::2], "strided"), (mem.to(torch.int32), "int32")]:
        with pytest.raises(ValueError, match="device memory must be a contiguous uint8 writable"):
            _C.fpga.simulate(bad, fm.program)
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        _C.fpga.simulate(mem, [2 ** 33])
    with pytest.raises(ValueError, match="bias must be a int32"):
        _C.fpga.pack_params(torch.zeros(8, dtype=torch.int64), torch.zeros(8, dtype=torch.int32),
                            torch.zeros(8, dtype=torch.int32))
