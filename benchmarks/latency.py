"""Latency of eager PyTorch vs torch.compile(backend="dnnfusion") on the model zoo.

Both systems run in the same process with the same thread count, interleaved round by round after
a warm-up, so machine noise hits them alike; reports median and inter-quartile spread, the ratio,
compile time and the max error against eager. Writes benchmarks/results/latency_<date>.json and
prints a markdown table (paste into benchmarks/RESULTS.md).

    python benchmarks/latency.py --models resnet50,distilbert --batch 1 --threads 2 --runs 20
"""
import argparse
import datetime
import json
import os
import platform
import statistics

import torch
from tqdm import tqdm

from dnnfusion import _C
from dnnfusion import zoo


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def quartiles(xs):
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(zoo.ALL))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    machine = {"cpu": cpu_name(), "cores": os.cpu_count(), "isa": _C.isa(), "torch": torch.__version__,
               "threads": args.threads, "batch": args.batch, "date": datetime.date.today().isoformat()}
    rows = []
    for name in tqdm(args.models.split(","), desc="models"):
        model, make_inputs = zoo.build(name)
        inputs = make_inputs(args.batch)
        torch._dynamo.reset()
        c = zoo.Comparison(name, model, inputs, threads=args.threads)
        te, td = c.time(runs=args.runs, warmup=args.warmup)
        rep, rel, compile_s = c.report, c.rel_err, c.compile_s
        rows.append({"model": name, "eager_ms": 1e3 * statistics.median(te), "eager_iqr_ms": [1e3 * q for q in quartiles(te)],
                     "dnnfusion_ms": 1e3 * statistics.median(td), "dnnfusion_iqr_ms": [1e3 * q for q in quartiles(td)],
                     "compile_s": compile_s, "rel_err": rel, "coverage": rep.coverage,
                     "kernels_per_call": rep.kernels_per_call, "peak_mib": rep.peak_bytes / 2**20})
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", f"latency_b{args.batch}_{machine['date']}.json")
    with open(path, "w") as f:
        json.dump({"machine": machine, "rows": rows}, f, indent=1)
    print(f"\n{machine}\n")
    print("| model | eager ms (IQR) | dnnfusion ms (IQR) | eager/dnnfusion | compile s | max rel err | core ops | kernels/call | arena MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['eager_ms']:.1f} ({r['eager_iqr_ms'][0]:.1f}-{r['eager_iqr_ms'][1]:.1f}) "
              f"| {r['dnnfusion_ms']:.1f} ({r['dnnfusion_iqr_ms'][0]:.1f}-{r['dnnfusion_iqr_ms'][1]:.1f}) "
              f"| {r['eager_ms'] / r['dnnfusion_ms']:.2f}x | {r['compile_s']:.1f} | {r['rel_err']:.1e} "
              f"| {100 * r['coverage']:.0f}% | {r['kernels_per_call']} | {r['peak_mib']:.1f} |")
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
