"""int8 accuracy of the fpga target on scikit-learn's digits, and the effect of 50 % pruning.

Trains the small digits CNN of tests/python/fpga_digits.py (3x3, depthwise + 1x1 with a residual
add, strided 3x3, max pool, global average pool + linear), then compiles it with
dnnfusion.fpga.compile for every calibration method (kl / minmax / percentile) x weight
granularity (per-channel / per-tensor) and measures held-out accuracy through the bit-exact
accelerator model (fm.simulate; the OpenCL run equals it bit for bit, checked on a slice when an
OpenCL platform is present). Then prunes the model 50 % (dnnfusion.prune, multiple_of=8),
fine-tunes it briefly, quantizes it the same way and compares accuracy and the cost model's
estimated accelerator cycles with the unpruned model.

    python benchmarks/quant_eval.py [--width 32] [--epochs 10] [--json benchmarks/results/quant_eval.json]
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import dnnfusion  # noqa: E402
import fpga_digits as fd  # noqa: E402


def evaluate(model, xtr, xte, yte, method, per_channel, opencl):
    fm = dnnfusion.fpga.compile(model, xtr[:200], calibration=method, per_channel=per_channel, cpu_backend="eager")
    acc = fd.accuracy(fm.simulate, xte, yte)
    exact = None
    if opencl:
        xs = xte[:32]
        exact = bool(torch.equal(fm(xs), fm.simulate(xs)))
    return fm, acc, exact


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--finetune-epochs", type=int, default=4)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "quant_eval.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    opencl = dnnfusion._C.fpga.opencl_unavailable_reason() == ""

    t0 = time.time()
    xtr, ytr, xte, yte = fd.load_digits_split()
    model = fd.train(fd.DigitsNet(args.width), xtr, ytr, epochs=args.epochs, lr=1e-2)
    fp32 = fd.accuracy(model, xte, yte)
    rows = []
    for method in ("kl", "minmax", "percentile"):
        for per_channel in (True, False):
            fm, acc, exact = evaluate(model, xtr, xte, yte, method, per_channel, opencl)
            rows.append(dict(method=method, per_channel=per_channel, accuracy=acc, delta=acc - fp32,
                             cycles=fm.report.total_cycles, opencl_equals_simulate=exact))

    example = xtr[:8]
    pruned = dnnfusion.prune(model, 0.5, example, multiple_of=8)
    pruned_raw = fd.accuracy(pruned, xte, yte)
    pruned = fd.train(pruned, xtr, ytr, epochs=args.finetune_epochs, lr=3e-3, seed=1)
    pruned_fp32 = fd.accuracy(pruned, xte, yte)
    base_fm, base_acc, _ = evaluate(model, xtr, xte, yte, "percentile", True, opencl)
    pr_fm, pr_acc, pr_exact = evaluate(pruned, xtr, xte, yte, "percentile", True, opencl)
    cyc_base, cyc_pr = base_fm.report.total_cycles, pr_fm.report.total_cycles
    overhead = 2000 * sum(len(sg["layers"]) for sg in base_fm.report.subgraphs)
    prune = dict(fp32_before_finetune=pruned_raw, fp32=pruned_fp32, int8=pr_acc, int8_unpruned=base_acc,
                 cycles_unpruned=cyc_base, cycles_pruned=cyc_pr, speedup=cyc_base / cyc_pr,
                 speedup_without_layer_overhead=(cyc_base - overhead) / max(1, cyc_pr - overhead),
                 opencl_equals_simulate=pr_exact, calibration="percentile")

    result = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), machine=platform.node(),
                  cpu=platform.processor() or platform.machine(), torch=torch.__version__,
                  width=args.width, epochs=args.epochs, test_images=len(yte), calib_images=200,
                  fp32_accuracy=fp32, rows=rows, prune=prune, seconds=time.time() - t0)
    print(f"digits held-out ({len(yte)} images), DigitsNet(width={args.width}), fp32 {fp32:.2f} %")
    print(f"{'calibration':<12} {'weights':<12} {'int8 acc %':>10} {'vs fp32':>8} {'OpenCL==sim':>12}")
    for r in rows:
        print(f"{r['method']:<12} {'per-channel' if r['per_channel'] else 'per-tensor':<12} {r['accuracy']:>10.2f} "
              f"{r['delta']:>+8.2f} {str(r['opencl_equals_simulate']):>12}")
    p = prune
    print(f"50% pruned (multiple_of=8): fp32 {p['fp32_before_finetune']:.2f} % before / {p['fp32']:.2f} % after "
          f"fine-tune, int8 {p['int8']:.2f} % (unpruned int8 {p['int8_unpruned']:.2f} %)")
    print(f"estimated accelerator cycles: unpruned {p['cycles_unpruned']}, pruned {p['cycles_pruned']}: "
          f"{p['speedup']:.2f}x ({p['speedup_without_layer_overhead']:.2f}x without the 2000-cycle per-layer overhead)")
    print(f"machine {result['machine']} ({result['cpu']}), {result['date']}, {result['seconds']:.0f} s")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
