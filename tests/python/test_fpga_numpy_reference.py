"""The fpga datapath against an independent numpy int8 reference, bit for bit.

Everything the device sees is built here in numpy from csrc/target/fpga/ISA.md alone — the
channel-blocked activation layout, the weight layouts of each layer type, the parameter table, a
memory image with 64-byte aligned regions and random bytes everywhere else (padded input lanes
included) — and each layer's integer semantics (wrapping int32 accumulation, the requantization
rule, zero padding, max pooling over the positions inside the input, the add's two 32-bit
saturating requantizations) is computed in numpy int64. The project's code supplies only the
instruction words (`_C.fpga.encode`, whose round trip the disassembler tests check) and runs them:
the bit-exact C++ model (`_C.fpga.simulate`) and the OpenCL datapath (`_C.fpga.Accelerator`, on
PoCL in CI). 1,000 random single-layer configurations (200 per layer type: odd sizes, channels
not multiples of 8, stride 2, pool windows up to 8, shifts 0..31, biases near the int32 limits,
ReLU / ReLU6 / arbitrary clamps). Seed printed; DNNFUSION_TEST_SEED replays it.
"""
import os

import numpy as np
import pytest
import torch

from dnnfusion import _C

SEED = int(os.environ.get("DNNFUSION_TEST_SEED", "20241127"))
TYPES = ("conv3x3", "conv1x1", "dw3x3", "maxpool", "add")
PER_TYPE = 200
HAS_OPENCL = _C.fpga.opencl_unavailable_reason() == ""


def pad8(n):
    return (n + 7) // 8 * 8


def align64(n):
    return (n + 63) // 64 * 64


def out_size(n, kernel, stride, pad):
    return (n + 2 * pad - kernel) // stride + 1


# ---- layouts (ISA.md section 2) ----

def pack_activation(x, rng):
    """x: int8 [C, H, W] -> bytes [CB][H][W][8], padded lanes random."""
    c, h, w = x.shape
    out = rng.integers(-128, 128, size=(pad8(c), h, w)).astype(np.int8)
    out[:c] = x
    return out.reshape(pad8(c) // 8, 8, h, w).transpose(0, 2, 3, 1).reshape(-1).view(np.uint8)


def unpack_activation(b, c, h, w):
    """bytes [CB][H][W][8] -> (int8 [C, H, W], int8 of the padded lanes)."""
    full = b.view(np.int8).reshape(pad8(c) // 8, h, w, 8).transpose(0, 3, 1, 2).reshape(pad8(c), h, w)
    return full[:c], full[c:]


def pack_weights(kind, w):
    """KCRS int8 weights in the datapath's layout, padded positions 0."""
    k, c = w.shape[0], w.shape[1]
    if kind == "conv3x3":
        p = np.zeros((pad8(k), pad8(c), 3, 3), np.int8)
        p[:k, :c] = w
        # byte = ((k/8 * CB + c/8) * 9 + r*3 + s) * 64 + (k%8) * 8 + c%8
        return p.reshape(pad8(k) // 8, 8, pad8(c) // 8, 8, 9).transpose(0, 2, 4, 1, 3).reshape(-1).view(np.uint8)
    if kind == "conv1x1":
        cs = (c + 31) // 32
        p = np.zeros((pad8(k), cs * 32), np.int8)
        p[:k, :c] = w[:, :, 0, 0]
        # byte = ((k/8 * CS + c/32) * 8 + k%8) * 32 + c%32
        return p.reshape(pad8(k) // 8, 8, cs, 32).transpose(0, 2, 1, 3).reshape(-1).view(np.uint8)
    p = np.zeros((pad8(k), 9), np.int8)  # dw3x3: W[c][0][r][s], byte = (c/8 * 9 + r*3 + s) * 8 + c%8
    p[:k] = w.reshape(k, 9)
    return p.reshape(pad8(k) // 8, 8, 9).transpose(0, 2, 1).reshape(-1).view(np.uint8)


def pack_table(cols, n, rng):
    """pad8(n) entries of 4 little-endian int32; entries of padded channels random."""
    t = rng.integers(-2**31, 2**31, size=(pad8(n), 4), dtype=np.int64)
    for j, col in enumerate(cols):
        t[:n, j] = col
    return t.astype("<i4").reshape(-1).view(np.uint8)


# ---- integer semantics (ISA.md section 3) ----

def wrap32(a):
    return ((a + 2**31) % 2**32) - 2**31


def requant(acc, m, shift, lo, hi):
    """acc int64 (int32 values), m/shift broadcast per channel (first axis)."""
    p = acc.astype(np.int64) * m.astype(np.int64).reshape(-1, *([1] * (acc.ndim - 1)))
    s = shift.astype(np.int64).reshape(-1, *([1] * (acc.ndim - 1)))
    rounded = np.where(s > 0, (p + np.left_shift(1, np.maximum(s - 1, 0))) >> s, p)
    return np.clip(rounded, lo, hi)


def conv_ref(x, w, bias, m, shift, stride, pad, lo, hi, depthwise=False):
    c, h, wd = x.shape
    k, _, r, s = w.shape
    ho, wo = out_size(h, r, stride, pad), out_size(wd, s, stride, pad)
    xp = np.zeros((c, h + 2 * pad, wd + 2 * pad), np.int64)
    xp[:, pad:pad + h, pad:pad + wd] = x
    acc = np.zeros((k, ho, wo), np.int64)
    for dr in range(r):
        for ds in range(s):
            patch = xp[:, dr:dr + stride * (ho - 1) + 1:stride, ds:ds + stride * (wo - 1) + 1:stride]
            if depthwise:
                acc += w[:, 0, dr, ds].astype(np.int64)[:, None, None] * patch
            else:
                acc += np.einsum("kc,chw->khw", w[:, :, dr, ds].astype(np.int64), patch)
    acc = wrap32(acc + bias.astype(np.int64)[:, None, None])
    return requant(acc, m, shift, lo, hi)


def maxpool_ref(x, kernel, stride, pad, lo, hi):
    c, h, w = x.shape
    ho, wo = out_size(h, kernel, stride, pad), out_size(w, kernel, stride, pad)
    out = np.empty((c, ho, wo), np.int64)
    for oy in range(ho):
        for ox in range(wo):
            y0, x0 = oy * stride - pad, ox * stride - pad
            win = x[:, max(y0, 0):min(y0 + kernel, h), max(x0, 0):min(x0 + kernel, w)]
            out[:, oy, ox] = win.reshape(c, -1).max(axis=1)
    return np.clip(out, lo, hi)


def add_ref(a, b, ma, sa, mb, sb, lo, hi):
    ta = requant(a.astype(np.int64), ma, sa, -2**31, 2**31 - 1)
    tb = requant(b.astype(np.int64), mb, sb, -2**31, 2**31 - 1)
    return np.clip(ta + tb, lo, hi)


# ---- random layers ----

def multiplier(scale):
    """(M, shift) with M / 2^shift ~= scale, M < 2^31 (any valid pair will do for the semantics)."""
    for shift in range(31, -1, -1):
        m = int(round(scale * 2.0**shift))
        if m < 2**31:
            return m, shift
    return int(round(scale)), 0


def random_requants(rng, n, typical):
    ms, ss = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        if rng.random() < 0.2:  # any field values: every shift 0..31 occurs
            ms[i], ss[i] = rng.integers(0, 2**31), rng.integers(0, 32)
        else:
            ms[i], ss[i] = multiplier(typical * float(np.exp(rng.uniform(-1.5, 1.5))))
    return ms, ss


def random_clamp(rng):
    u = rng.random()
    if u < 0.35:
        return -128, 127
    if u < 0.6:
        return 0, 127
    if u < 0.8:
        return 0, int(rng.integers(1, 128))  # ReLU6 bounds
    lo = int(rng.integers(-128, 128))
    return lo, int(rng.integers(lo, 128))


def random_layer(rng, kind):
    stride = int(rng.integers(1, 3))
    if kind == "maxpool":
        kernel = int(rng.integers(1, 9))
        stride = int(rng.integers(1, 9))
        pad = int(rng.integers(0, kernel))
    elif kind == "conv1x1":
        kernel, pad = 1, 0
    elif kind == "add":
        kernel, pad, stride = 1, 0, 1
    else:
        kernel, pad = 3, int(rng.integers(0, 2))
    lo_hw = max(1, kernel - 2 * pad)
    h, w = int(rng.integers(lo_hw, lo_hw + 12)), int(rng.integers(lo_hw, lo_hw + 12))
    c = int(rng.integers(1, 45))
    k = c if kind in ("dw3x3", "maxpool", "add") else int(rng.integers(1, 45))
    return dict(type=kind, in_channels=c, out_channels=k, in_h=h, in_w=w, kernel=kernel, stride=stride, pad=pad)


def build(rng, d):
    """(memory image uint8, layer dict with offsets, expected int8 output [K, Ho, Wo])."""
    kind, c, k, h, w = d["type"], d["in_channels"], d["out_channels"], d["in_h"], d["in_w"]
    lo, hi = random_clamp(rng)
    d = dict(d, act_lo=lo, act_hi=hi)
    extremes = rng.random() < 0.1
    x = (rng.choice([-128, 127], size=(c, h, w)) if extremes else rng.integers(-128, 128, size=(c, h, w))).astype(np.int8)
    regions = []
    if kind in ("conv3x3", "conv1x1", "dw3x3"):
        r = 1 if kind == "conv1x1" else 3
        wt = rng.integers(-128, 128, size=(k, 1 if kind == "dw3x3" else c, r, r)).astype(np.int8)
        typical = 64.0 * 64.0 * np.sqrt((1 if kind == "dw3x3" else c) * r * r)
        bias = rng.integers(-int(typical), int(typical) + 1, size=k)
        if rng.random() < 0.15:  # near the int32 limits: the accumulator wraps
            bias = rng.choice([2**31 - 1 - int(rng.integers(0, 1000)), -2**31 + int(rng.integers(0, 1000))], size=k)
        m, s = random_requants(rng, k, 100.0 / typical)
        expect = conv_ref(x, wt, bias, m, s, d["stride"], d["pad"], lo, hi, depthwise=kind == "dw3x3")
        regions += [("weight_offset", pack_weights(kind, wt)),
                    ("param_offset", pack_table([bias, m, s, np.zeros(k, np.int64)], k, rng))]
    elif kind == "maxpool":
        expect = maxpool_ref(x.astype(np.int64), d["kernel"], d["stride"], d["pad"], lo, hi)
    else:
        xb = rng.integers(-128, 128, size=(c, h, w)).astype(np.int8)
        ma, sa = random_requants(rng, c, 0.7)
        mb, sb = random_requants(rng, c, 0.7)
        expect = add_ref(x, xb, ma, sa, mb, sb, lo, hi)
        regions += [("param_offset", pack_table([ma, sa, mb, sb], c, rng)),
                    ("input_b_offset", pack_activation(xb, rng))]
    regions.insert(0, ("input_offset", pack_activation(x, rng)))
    ho, wo = expect.shape[1:]
    out_bytes = pad8(k) * ho * wo
    offset, placed = 0, []
    for name, data in regions + [("output_offset", None)]:
        offset += 64 * int(rng.integers(0, 3))  # random gaps
        d[name] = offset
        placed.append((offset, data))
        offset = align64(offset + (out_bytes if data is None else data.size))
    mem = rng.integers(0, 256, size=align64(offset + int(rng.integers(0, 200))), dtype=np.uint8)
    for off, data in placed:
        if data is not None:
            mem[off:off + data.size] = data
    return mem, d, expect.astype(np.int8)


def check(mem_after, mem_before, d, expect, what):
    k = d["out_channels"]
    ho, wo = expect.shape[1:]
    off, n = d["output_offset"], pad8(k) * ho * wo
    got, lanes = unpack_activation(mem_after[off:off + n].copy(), k, ho, wo)
    desc = ", ".join(f"{key}={d[key]}" for key in ("type", "in_channels", "out_channels", "in_h", "in_w", "kernel",
                                                   "stride", "pad", "act_lo", "act_hi"))
    assert np.array_equal(got, expect), f"{what} differs from numpy: {desc} (seed {SEED})"
    assert not lanes.any(), f"{what}: padded output lanes not 0: {desc} (seed {SEED})"
    outside = np.ones(mem_after.size, bool)
    outside[off:off + n] = False
    assert np.array_equal(mem_after[outside], mem_before[outside]), f"{what} wrote outside its output: {desc}"


@pytest.fixture(scope="module")
def accelerator():
    if not HAS_OPENCL:
        return None
    return _C.fpga.Accelerator()


@pytest.mark.parametrize("kind", TYPES)
def test_datapath_matches_numpy(kind, accelerator):
    print(f"seed {SEED} (replay with DNNFUSION_TEST_SEED={SEED})")
    rng = np.random.default_rng([SEED, TYPES.index(kind)])
    for _ in range(PER_TYPE):
        mem, d, expect = build(rng, random_layer(rng, kind))
        words = _C.fpga.encode([d], mem.size)
        sim = torch.from_numpy(mem.copy())
        _C.fpga.simulate(sim, words)
        check(sim.numpy(), mem, d, expect, "simulate")
        if accelerator is not None:
            accelerator.upload(torch.from_numpy(mem.copy()))
            accelerator.run(words)
            dev = accelerator.read(0, mem.size)
            check(dev, mem, d, expect, "OpenCL datapath")
