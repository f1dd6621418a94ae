"""dnnfusion.quantize and _C.quant against direct numpy computations: the KL threshold search
re-implemented in numpy (same curve, same threshold), requantize vs numpy int64 arithmetic for
every shift 0..31 (bit-equal, per tensor and per channel, with ReLU/ReLU6 bounds), choose_multiplier
vs its definition, weight/bias quantization and batch-norm folding vs numpy/torch, calibrate() on a
small CNN (a scale for the input and output of every hooked module, minmax scales equal to the
batch maxima), and the ValueError cases."""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn

from dnnfusion import _C
from dnnfusion import quantize as Q

SEED = 20240531


# ---------------------------------------------------------------- KL threshold in numpy

def np_kl_threshold(counts, hist_range, max_abs, levels=128, eps=1e-10):
    """TensorRT entropy calibration as csrc/quant/calibration.h states it; returns (T, KL curve)."""
    c = np.asarray(counts, dtype=np.float64)
    bins = len(c)
    curve = []
    for i in range(levels, bins + 1):
        p = c[:i].copy()
        p[i - 1] += c[i:].sum()
        edges = (np.arange(levels + 1) * i) // levels
        group = np.repeat(np.arange(levels), np.diff(edges))
        total = np.add.reduceat(c[:i], edges[:-1])
        nonzero = np.add.reduceat((p != 0).astype(np.float64), edges[:-1])
        q = np.where(p != 0, total[group] / np.maximum(nonzero[group], 1), 0.0)
        pn = p / p.sum()
        qn = q / q.sum() if q.sum() > 0 else q
        m = p > 0
        qm = np.where(qn[m] > 0, qn[m], eps)
        curve.append(float(np.sum(pn[m] * np.log(pn[m] / qm))))
    best = int(np.argmin(curve)) + levels  # first minimum, as the C++ search
    return min((best + 0.5) * hist_range / bins, max_abs), np.array(curve)


def _histograms():
    rng = np.random.default_rng(SEED)
    k = np.arange(2048)
    gauss = np.round(1e6 * np.diff([math.erf(x / (150 * math.sqrt(2))) for x in range(2049)]))
    body_outlier = np.zeros(2048)
    body_outlier[:60] = 1000.0 * (60 - k[:60])
    body_outlier[1900] = 3
    laplace, _ = np.histogram(np.abs(rng.laplace(size=200000)), bins=2048, range=(0, 12))
    sparse = rng.integers(0, 50, size=700).astype(np.float64) * (rng.random(700) < 0.3)
    sparse[-1] += 1
    return [(gauss, 2048.0), (body_outlier, 2048.0), (laplace.astype(np.float64), 12.0), (sparse, 3.5)]


@pytest.mark.parametrize("index", range(4))
def test_kl_threshold_matches_numpy(index):
    counts, hist_range = _histograms()[index]
    h = Q.Histogram.from_counts(counts.tolist(), hist_range)
    want_t, want_curve = np_kl_threshold(counts, hist_range, hist_range)
    got_curve = _C.quant.kl_divergences(h).numpy()
    np.testing.assert_allclose(got_curve, want_curve, rtol=1e-9, atol=1e-13)
    t, scale = _C.quant.kl_threshold(h)
    assert t == pytest.approx(want_t, rel=1e-15, abs=0)
    assert scale == pytest.approx(t / 127, rel=1e-15)


def test_kl_ignores_far_outlier_and_keeps_uniform():
    counts, hist_range = _histograms()[1]
    t, _ = Q.threshold(Q.Histogram.from_counts(counts, hist_range))
    assert 60 <= t < 300  # body ends at bin 60, the outlier sits at bin 1900
    t, _ = Q.threshold(Q.Histogram.from_counts(np.full(2048, 5.0), 4.0))
    assert t == 4.0


def test_histogram_from_samples_numpy_and_torch_agree():
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal(50000).astype(np.float32)
    a, b = Q.Histogram(), Q.Histogram()
    a.add(x)
    b.add(torch.from_numpy(x))
    assert torch.equal(a.counts(), b.counts())
    assert a.max_abs == pytest.approx(float(np.abs(x).max()))
    assert a.total == 50000
    # A fixed range equal to max|x| is numpy's histogram of |x| (last bin closed).
    c = Q.Histogram(2048, float(np.abs(x).max()))
    c.add(x)
    want, _ = np.histogram(np.abs(x).astype(np.float64), bins=2048, range=(0, float(np.abs(x).max())))
    assert np.abs(c.counts().numpy() - want).sum() <= 4  # bin-edge rounding only


def test_thresholds_minmax_percentile_and_fallbacks():
    h = Q.Histogram.from_counts([9999.0] + [0.0] * 2046 + [1.0], 2048.0)
    assert Q.threshold(h, "minmax") == (2048.0, 2048.0 / 127)
    assert Q.threshold(h, "percentile", 99.99)[0] == 1.0
    zeros = Q.Histogram()
    zeros.add(torch.zeros(100))
    for m in ("kl", "minmax", "percentile"):
        assert Q.threshold(zeros, m) == (1.0, 1.0 / 127)
    with pytest.raises(ValueError, match="empty"):
        Q.threshold(Q.Histogram(), "kl")
    with pytest.raises(ValueError, match="percentile"):
        Q.threshold(h, "percentile", 0.0)


# ---------------------------------------------------------------- requantization in numpy

def np_requantize(acc, m, s, lo=-128, hi=127):
    p = acc.astype(np.int64) * np.int64(m)
    if s > 0:
        p = (p + (np.int64(1) << np.int64(s - 1))) >> np.int64(s)
    return np.clip(p, lo, hi).astype(np.int8)


def test_requantize_bit_equal_to_numpy_for_every_shift():
    rng = np.random.default_rng(SEED)
    for shift in range(32):
        for mag in (2**31 - 1, 2**20, 300):
            acc = rng.integers(-mag - 1, mag, size=4096, dtype=np.int64).astype(np.int32)
            acc[:4] = [-(2**31), 2**31 - 1, 0, -1][: 4]
            m = int(rng.integers(0, 2**31))
            got = Q.requantize(torch.from_numpy(acc), m, shift).numpy()
            np.testing.assert_array_equal(got, np_requantize(acc, m, shift), err_msg=f"m={m} shift={shift}")
            got = Q.requantize(torch.from_numpy(acc), m, shift, activation="relu").numpy()
            np.testing.assert_array_equal(got, np_requantize(acc, m, shift, 0, 127))
            got = Q.requantize(torch.from_numpy(acc), m, shift, activation="relu6", out_scale=0.1).numpy()
            np.testing.assert_array_equal(got, np_requantize(acc, m, shift, 0, 60))


def test_requantize_exact_halves_and_per_channel():
    acc = torch.tensor([1, -1, 3, -3, -5], dtype=torch.int32)
    assert Q.requantize(acc, 1, 1).tolist() == [1, 0, 2, -1, -2]  # ties toward +inf
    rng = np.random.default_rng(SEED + 1)
    acc = rng.integers(-(2**31), 2**31, size=(2, 5, 3, 4), dtype=np.int64).astype(np.int32)
    ms = rng.integers(0, 2**31, size=5).astype(np.int32)
    ss = rng.integers(0, 32, size=5).astype(np.int32)
    got = Q.requantize(torch.from_numpy(acc), torch.from_numpy(ms), torch.from_numpy(ss)).numpy()
    for c in range(5):
        np.testing.assert_array_equal(got[:, c], np_requantize(acc[:, c], int(ms[c]), int(ss[c])))


def test_requant_params_matches_definition():
    rng = np.random.default_rng(SEED + 2)
    for scale in np.exp2(rng.uniform(-20, 30, size=2000)):
        m, s = Q.requant_params(float(scale))
        want_s = next(k for k in range(31, -1, -1) if np.round(scale * 2.0**k) < 2**31)
        assert (m, s) == (int(np.round(scale * 2.0**want_s)), want_s)
        assert abs(m / 2.0**s - scale) <= 2.0 ** -(s + 1)
    for bad in (0.0, -1.0, float("nan"), 2.0**31):
        with pytest.raises(ValueError, match="scale"):
            Q.requant_params(bad)


# ---------------------------------------------------------------- weights, bias, BN folding

def np_round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


@pytest.mark.parametrize("per_channel", [True, False])
def test_quantize_weight_matches_numpy(per_channel):
    g = torch.Generator().manual_seed(SEED)
    w = torch.randn(8, 3, 3, 3, generator=g) * torch.logspace(-3, 1, 8).reshape(8, 1, 1, 1)
    w[5] = 0
    q, scales = Q.quantize_weight(w, per_channel=per_channel)
    wn = w.numpy().reshape(8, -1).astype(np.float64)
    if per_channel:
        want_s = (np.abs(wn).max(1) / 127).astype(np.float32)
        want_s[5] = 1.0
    else:
        want_s = np.array([np.abs(wn).max() / 127], dtype=np.float32)
    np.testing.assert_array_equal(scales.numpy(), want_s)
    s = np.broadcast_to(want_s.astype(np.float64).reshape(-1, 1), wn.shape)
    want_q = np.clip(np_round_away(wn / s), -127, 127).astype(np.int8).reshape(w.shape)
    assert q.dtype == torch.int8 and q.shape == w.shape
    np.testing.assert_array_equal(q.numpy(), want_q)
    assert (q[5] == 0).all()


def test_quantize_bias_and_saturation_warning():
    q = Q.quantize_bias(torch.tensor([1.0, -1.0]), 0.1, torch.tensor([0.01, 0.02]))
    assert q.dtype == torch.int32 and q.tolist() == [1000, -500]
    with pytest.warns(RuntimeWarning, match=r"channels \[1\]"):
        q = Q.quantize_bias(torch.tensor([1.0, -1e9]), 1.0, torch.tensor([0.01]))
    assert q.tolist() == [100, -(2**31 - 1)]
    assert Q.quantize_bias(torch.tensor([0.5, -0.25]), 0.5, 0.25).tolist() == [4, -2]  # one per-tensor scale
    with pytest.raises(ValueError, match="one entry per output channel"):
        Q.quantize_bias(torch.tensor([1.0, 2.0, 3.0]), 0.1, [0.01, 0.02])


def test_layer_requant_per_channel():
    m, s = Q.layer_requant(0.05, torch.tensor([0.01, 0.002]), 0.1)
    assert [(int(a), int(b)) for a, b in zip(m, s)] == [Q.requant_params(0.05 * float(np.float32(x)) / 0.1)
                                                        for x in (0.01, 0.002)]


def test_fold_bn_equals_conv_then_bn():
    torch.manual_seed(SEED)
    conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
    bn = nn.BatchNorm2d(6)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.2, 3)
    bn.weight.data.uniform_(0.5, 2)
    bn.bias.data.uniform_(-1, 1)
    bn.eval()
    x = torch.randn(2, 3, 8, 8)
    w, b = Q.fold_bn(conv.weight, conv.bias, bn)
    ref = bn(conv(x))
    out = torch.nn.functional.conv2d(x, w, b, padding=1)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="features"):
        Q.fold_bn(conv.weight, None, nn.BatchNorm2d(5))


# ---------------------------------------------------------------- calibrate

class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU6())
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


def _batches(n, generator):
    return [torch.randn(4, 3, 8, 8, generator=generator) for _ in range(n)]


@pytest.mark.parametrize("method", ["kl", "minmax", "percentile"])
def test_calibrate_small_cnn(method):
    torch.manual_seed(SEED)
    model = SmallCNN().train()
    data = _batches(3, torch.Generator().manual_seed(SEED))
    scales = Q.calibrate(model, [(x, 0) for x in data], method=method)
    hooked = [n for n, m in model.named_modules() if isinstance(m, Q.CALIBRATED_MODULES)]
    assert len(hooked) == 7
    assert set(scales) == {"input"} | {f"{n}.{d}" for n in hooked for d in ("in", "out")}
    assert all(math.isfinite(s) and s > 0 for s in scales.values()), scales
    assert model.training  # restored
    if method == "minmax":
        assert scales["input"] == pytest.approx(max(x.abs().max().item() for x in data) / 127, rel=1e-7)
        # In-place ReLU: its input is recorded before it runs, so negatives count.
        with torch.no_grad():
            model.eval()
            pre = [model.features[1](model.features[0](x)) for x in data]
        assert scales["features.2.in"] == pytest.approx(max(p.abs().max().item() for p in pre) / 127, rel=1e-6)
        assert scales["features.5.out"] <= 6.0 / 127 + 1e-7


def test_calibrate_kl_scale_equals_histogram_of_same_data():
    model = nn.Sequential(nn.ReLU())
    data = _batches(2, torch.Generator().manual_seed(SEED + 3))
    scales = Q.calibrate(model, data)
    h = Q.Histogram()
    for x in data:
        h.add(x.relu())
    assert scales["0.out"] == Q.threshold(h, "kl")[1]


def test_calibrate_errors():
    model = SmallCNN()
    with pytest.raises(ValueError, match="calibration data is empty"):
        Q.calibrate(model, [])
    with pytest.raises(ValueError, match=r"unknown calibration method 'entropy'.*'kl', 'minmax', 'percentile'"):
        Q.calibrate(model, [torch.randn(1, 3, 8, 8)], method="entropy")
    with pytest.raises(ValueError, match=r"cannot run batch 1"):
        Q.calibrate(model, [torch.randn(1, 3, 8, 8), torch.randn(1, 5, 8, 8)])
    bad = torch.randn(1, 3, 8, 8)
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"batch 0: 'input'.*finite"):
        Q.calibrate(model, [bad])
    with pytest.raises(ValueError, match="batch 0.*int64"):
        Q.calibrate(model, [torch.zeros(1, 3, 8, 8, dtype=torch.int64)])
    with pytest.raises(ValueError, match="not one tensor"):
        Q.calibrate(model, torch.randn(1, 3, 8, 8))
    with pytest.raises(ValueError, match="percentile"):
        Q.calibrate(model, [torch.randn(1, 3, 8, 8)], method="percentile", percentile=150)


def test_wrong_dtypes_and_arguments():
    with pytest.raises(ValueError, match="floating-point"):
        Q.quantize_weight(torch.ones(3, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="int32"):
        Q.requantize(torch.ones(3), 1, 0)
    with pytest.raises(ValueError, match="activation"):
        Q.requantize(torch.ones(3, dtype=torch.int32), 1, 0, activation="gelu")
    with pytest.raises(ValueError, match="out_scale"):
        Q.requantize(torch.ones(3, dtype=torch.int32), 1, 0, activation="relu6")
    with pytest.raises(ValueError, match=r"\[0, 31\]"):
        Q.requantize(torch.ones(3, dtype=torch.int32), 1, 32)
    with pytest.raises(ValueError, match="float32"):
        Q.Histogram().add(torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="float32"):
        Q.Histogram().add(np.ones(3))
    with pytest.raises(ValueError, match="float32"):
        _C.quant.quantize_weights(torch.ones(2, 2).t(), True)  # not contiguous
    with pytest.raises(ValueError, match="3 multipliers"):
        Q.requantize(torch.ones(2, 3, dtype=torch.int32), torch.ones(2, dtype=torch.int32),
                     torch.zeros(2, dtype=torch.int32))


def test_kl_leaves_exact_zeros_out():
    # A ReLU output: half exact zeros, half |N(0, 1)|. The zeros are representable at every scale,
    # so the KL threshold is that of the nonzero half alone (with them, TensorRT's search picks
    # candidate 255, an eighth of the range, because every later candidate merges the zero spike
    # with bin 1).
    rng = np.random.default_rng(SEED)
    body = np.abs(rng.standard_normal(100000)).astype(np.float32)
    relu = np.concatenate([np.zeros(100000, np.float32), body])
    h, h_body = Q.Histogram(2048, float(body.max())), Q.Histogram(2048, float(body.max()))
    h.add(relu)
    h_body.add(body)
    assert h.zeros == 100000 and h_body.zeros == 0
    assert Q.threshold(h, "kl") == Q.threshold(h_body, "kl")
    t = Q.threshold(h, "kl")[0]
    assert t > 2.5, f"KL clipped a half-normal ReLU output at {t}"
    # Without the fix, the zero spike would rule: the same counts without knowing which are zeros.
    spiky = Q.Histogram.from_counts(h.counts().tolist(), h.range, h.max_abs)
    assert Q.threshold(spiky, "kl")[0] < t
