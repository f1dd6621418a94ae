"""dnnfusion quickstart: compile real models with torch.compile(backend="dnnfusion") and ahead of
time with dnnfusion.compile, check both against eager PyTorch, and time all three (median of
interleaved runs, each after a 10 ms idle gap, same thread count).

    python examples/quickstart.py [--threads 2] [--runs 20] [--models resnet50,distilbert]
"""
import argparse
import statistics

import torch

import dnnfusion
from dnnfusion import _C
from dnnfusion import zoo


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--models", default="resnet50,distilbert")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, dnnfusion {dnnfusion.__version__}, {args.threads} threads, "
          f"core ISA {_C.isa()}, batch {args.batch}\n")
    rows = []
    for name in args.models.split(","):
        model, make_inputs = zoo.build(name)
        inputs = make_inputs(args.batch)
        c = zoo.Comparison(name, model, inputs, threads=args.threads, aot=True)
        te, td, ta = c.time(runs=args.runs)
        out, err, rel, report, compile_s = c.out, c.max_err, c.rel_err, c.report, c.compile_s
        me, md, ma = statistics.median(te), statistics.median(td), statistics.median(ta)
        rel = max(rel, c.aot_rel_err)
        rows.append((name, rel, report, me, md, ma))
        print(f"{name}: output {tuple(out.shape)}, max|out-eager| = {err:.3e} ({rel:.2e} of max|eager|), "
              f"{report.n_core}/{report.n_total} ATen ops in the core ({100 * report.coverage:.1f}%), "
              f"{report.kernels_per_call} kernels/call, compile {compile_s:.1f} s")
        print(f"  median latency: eager {1e3 * me:.2f} ms, torch.compile {1e3 * md:.2f} ms -> {me / md:.2f}x, "
              f"dnnfusion.compile {1e3 * ma:.2f} ms -> {me / ma:.2f}x\n")
    print(f"{'model':<12} {'rel.err':>9} {'core ops':>9} {'eager ms':>9} {'compile ms':>11} {'speedup':>8} "
          f"{'aot ms':>9} {'speedup':>8}")
    for name, rel, rep, me, md, ma in rows:
        print(f"{name:<12} {rel:9.2e} {100 * rep.coverage:8.1f}% {1e3 * me:9.2f} {1e3 * md:11.2f} {me / md:7.2f}x "
              f"{1e3 * ma:9.2f} {me / ma:7.2f}x")
    print("compile: torch.compile(backend='dnnfusion'); aot: dnnfusion.compile (no Dynamo guards per call)")
    ok = all(rel <= 2e-4 for _, rel, *_ in rows)
    print("\nall outputs match eager within 2e-4 * max|ref|" if ok else "\nMISMATCH against eager")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
