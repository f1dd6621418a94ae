"""torchvision CNNs on the fpga target: what is offloaded, int8 error against fp32 eager, and the
OpenCL datapath against the bit-exact C++ model.

For each model (``weights=None``: random init; no weights can be downloaded here) the script
compiles it with ``dnnfusion.fpga.compile`` on random calibration images, then on other random
images reports: the ops on the accelerator / folded / on the CPU, the accelerator subgraphs, the
relative L2 error of ``fm.simulate(x)`` against fp32 eager and their top-1 agreement, whether the
OpenCL run ``fm(x)`` equals ``fm.simulate(x)`` bit for bit, the cost model's estimated accelerator
cycles per image (ISA.md: 200 MHz, 12.8 GB/s DDR), and the wall time per image of the OpenCL
datapath on this machine's platform (PoCL's CPU device here: a functional stand-in for the card,
so that time says nothing about the accelerator's speed). With ``--prune R`` each model is also
pruned by R (``dnnfusion.prune(..., multiple_of=8)``: no channel padding on the device) and the
estimated cycles of the two are compared (AukC reports 1.6x on its accelerator after pruning).

    python benchmarks/fpga_zoo.py [--models resnet18 mobilenet_v2] [--size 224] [--calibration percentile] [--prune 0.5]
"""
import argparse
import datetime
import json
import os
import platform
import time

import torch
import torchvision

import dnnfusion

HERE = os.path.dirname(os.path.abspath(__file__))


def run(name, size, n_calib, n_eval, calibration, opencl, prune):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    calib = torch.randn(n_calib, 3, size, size)
    pruned_cycles = None
    if prune:
        small = dnnfusion.prune(model, prune, calib[:8], multiple_of=8)
        pruned_cycles = dnnfusion.fpga.compile(small, calib, calibration=calibration).report.total_cycles
    x = torch.randn(n_eval, 3, size, size)
    t0 = time.time()
    fm = dnnfusion.fpga.compile(model, calib, calibration=calibration)
    compile_s = time.time() - t0
    with torch.no_grad():
        ref = model(x)
    t0 = time.time()
    ys = fm.simulate(x)
    simulate_s = (time.time() - t0) / n_eval
    where = {}
    for op in fm.report.ops:
        where[op["target"]] = where.get(op["target"], 0) + 1
    row = dict(model=name, size=size, calibration=calibration, compile_s=compile_s,
               subgraphs=fm.report.num_subgraphs, ops=where,
               cpu_ops=sorted({op["op"] for op in fm.report.ops if op["target"] == "cpu"}),
               rel_err=((ys - ref).norm() / ref.norm()).item(),
               top1_agreement=(ys.argmax(1) == ref.argmax(1)).float().mean().item(),
               cycles=fm.report.total_cycles, simulate_s_per_image=simulate_s)
    if pruned_cycles is not None:
        row.update(prune=prune, pruned_cycles=pruned_cycles, pruned_speedup=fm.report.total_cycles / pruned_cycles)
    if opencl:
        fm(x[:1])  # builds the datapath program once
        t0 = time.time()
        yf = fm(x)
        row["opencl_s_per_image"] = (time.time() - t0) / n_eval
        row["opencl_equals_simulate"] = bool(torch.equal(yf, ys))
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--eval", type=int, default=8)
    ap.add_argument("--calibration", default="percentile")
    ap.add_argument("--prune", type=float, default=0.0)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "fpga_zoo.json"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    opencl = dnnfusion._C.fpga.opencl_unavailable_reason() == ""
    platforms = [p["name"] for p in dnnfusion.fpga.platforms()]
    rows = [run(m, args.size, args.calib, args.eval, args.calibration, opencl, args.prune) for m in args.models]
    print(f"fpga target, {args.size}x{args.size}, calibration {args.calibration}, {args.calib} calibration / "
          f"{args.eval} test images (random), OpenCL platforms: {platforms or 'none'}")
    print(f"{'model':<14} {'fpga ops':>8} {'cpu ops':>7} {'subgr':>5} {'rel err':>8} {'top-1':>6} "
          f"{'OpenCL==sim':>11} {'est. cycles':>12} {'sim s/img':>9} {'OpenCL s/img':>12}")
    for r in rows:
        print(f"{r['model']:<14} {r['ops'].get('fpga', 0):>8} {r['ops'].get('cpu', 0):>7} {r['subgraphs']:>5} "
              f"{r['rel_err']:>8.4f} {r['top1_agreement']:>6.2f} {str(r.get('opencl_equals_simulate', '-')):>11} "
              f"{r['cycles']:>12} {r['simulate_s_per_image']:>9.2f} {r.get('opencl_s_per_image', float('nan')):>12.2f}")
        print(f"{'':<14} on the CPU: {', '.join(r['cpu_ops'])}")
        if "pruned_cycles" in r:
            print(f"{'':<14} pruned {r['prune']:.0%} (multiple_of=8): est. cycles {r['pruned_cycles']} "
                  f"({r['pruned_speedup']:.2f}x fewer)")
    result = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), machine=platform.node(),
                  cpu=platform.processor() or platform.machine(), torch=torch.__version__, platforms=platforms,
                  rows=rows)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
