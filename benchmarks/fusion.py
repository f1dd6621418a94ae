"""The fusion table (DNNFusion Table 5 shape) and the latency of the three fusion modes.

For every zoo model: ATen ops in the inference graph (what eager launches), kernels per call in
dnnfusion's modes none / tvm / dnnfusion, the kernels Inductor launches for the same model
(counted from its generated code: cpp_fused_* kernels plus extern/aten calls in `call()`), the
intermediate-result bytes each mode writes to memory per call, and the latency of the three modes
side by side (same process, same thread count, interleaved rounds, each call after a 10 ms idle
gap, median of --runs), plus the dnnfusion mode with GEMM epilogues called back per tile row by
the library kernel instead of inlined into the generated GEMM template (DNNFUSION_NO_GEMM_TEMPLATE=1; the template's ablation). Every
compiled output is checked against eager (max|out-ref| / max|ref|). Writes
benchmarks/results/fusion_b<batch>_<date>.json and prints the markdown tables for RESULTS.md.

    python benchmarks/fusion.py --models resnet50,bert --batch 1 --threads 2 --runs 20
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import time

import torch
from tqdm import tqdm

import dnnfusion
from dnnfusion import _C, zoo
from dnnfusion.report import collecting
from dnnfusion.zoo import idle_then_time
from latency import cpu_name  # benchmarks/ is the script directory, so on sys.path

MODES = ("none", "tvm", "dnnfusion")


_CALL = re.compile(r"^\s+(?:buf\w*\s*=\s*)?(cpp_fused_\w+|extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\(")


def inductor_kernels(model, inputs):
    """Kernel launches per call of Inductor's generated code (fused C++ kernels + library calls)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(model)
    with torch.no_grad():
        _, codes = run_and_get_code(compiled, *inputs)
    n = 0
    for code in codes:
        body = code.split("def call(", 1)[-1]
        body = body.split("\ndef ", 1)[0]
        n += sum(1 for line in body.splitlines() if _CALL.match(line))
    torch._dynamo.reset()
    return n


def compile_mode(model, inputs, mode, threads, ref, hook_epilogues=False):
    """hook_epilogues: GEMM epilogues as the library kernel's per-tile callback instead of inlined
    into the generated GEMM template (the ablation of the template instantiation)."""
    compiled = torch.compile(model, backend="dnnfusion", options={"fusion": mode, "threads": threads}, dynamic=False)
    if hook_epilogues:
        os.environ["DNNFUSION_NO_GEMM_TEMPLATE"] = "1"
    try:
        with torch.no_grad(), collecting() as graphs:
            t0 = time.perf_counter()
            out = zoo.first_tensor(compiled(*inputs))
            compile_s = time.perf_counter() - t0
    finally:
        os.environ.pop("DNNFUSION_NO_GEMM_TEMPLATE", None)
    rep = dnnfusion.ExplainReport(list(graphs), mode=mode)
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    return compiled, dict(kernels=rep.kernels_per_call, irs_mib=rep.irs_bytes / 2**20, blocks=len(rep.fusion_blocks),
                          compile_s=compile_s, rel_err=err, aten_ops=rep.n_total, coverage=rep.coverage,
                          ops_after_rewrite=rep.ops_after_rewrite)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(zoo.ALL))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--inductor-models", default="", help="count Inductor kernels only for these (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    machine = {"cpu": cpu_name(), "cores": os.cpu_count(), "isa": _C.isa(), "torch": torch.__version__,
               "threads": args.threads, "batch": args.batch, "date": datetime.date.today().isoformat()}
    rows = []
    for name in tqdm(args.models.split(","), desc="models"):
        model, make_inputs = zoo.build(name)
        inputs = make_inputs(args.batch)
        with torch.no_grad():
            ref = zoo.first_tensor(model(*inputs))
        row = {"model": name}
        wanted = args.inductor_models.split(",") if args.inductor_models else None
        if not args.no_inductor and (wanted is None or name in wanted):
            row["inductor_kernels"] = inductor_kernels(model, inputs)
        torch._dynamo.reset()
        fns = {}
        for m in MODES:
            fns[m], row[m] = compile_mode(model, inputs, m, args.threads, ref)
        fns["dnnfusion_hook"], row["dnnfusion_hook"] = compile_mode(model, inputs, "dnnfusion", args.threads, ref,
                                                                    hook_epilogues=True)
        row["aten_ops"] = row["none"]["aten_ops"]
        times = {m: [] for m in ("eager",) + tuple(fns)}
        runners = {"eager": model, **fns}
        with torch.no_grad():
            for _ in range(args.warmup):
                for f in runners.values():
                    f(*inputs)
            for _ in range(args.runs):
                for k, f in runners.items():
                    times[k].append(idle_then_time(f, *inputs))
        for k, ts in times.items():
            row.setdefault(k, {})["ms"] = 1e3 * statistics.median(ts)
            q = statistics.quantiles(ts, n=4)
            row[k]["iqr_ms"] = [1e3 * q[0], 1e3 * q[2]]
        rows.append(row)
        torch._dynamo.reset()
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", f"fusion_b{args.batch}_{machine['date']}.json")
    with open(path, "w") as f:
        json.dump({"machine": machine, "rows": rows}, f, indent=1)
    print(f"\n{machine}\n")
    print("| model | ATen ops (eager) | ops after rewrite | kernels none | tvm | dnnfusion | Inductor | IRS MiB none | tvm | dnnfusion |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ind = r.get("inductor_kernels", "-")
        print(f"| {r['model']} | {r['aten_ops']} | {r['dnnfusion']['ops_after_rewrite']} | {r['none']['kernels']} | {r['tvm']['kernels']} "
              f"| {r['dnnfusion']['kernels']} | {ind} | {r['none']['irs_mib']:.1f} | {r['tvm']['irs_mib']:.1f} "
              f"| {r['dnnfusion']['irs_mib']:.1f} |")
    print()
    print("| model | eager ms | none ms | tvm ms | dnnfusion ms | dnnfusion vs none | dnnfusion vs tvm | max rel err (none/tvm/dnnf) | compile s (none/tvm/dnnf) | GEMM epilogue hooked ms | inlined vs hooked |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    g_none, g_tvm = [], []
    for r in rows:
        d = r["dnnfusion"]["ms"]
        g_none.append(r["none"]["ms"] / d)
        g_tvm.append(r["tvm"]["ms"] / d)
        print(f"| {r['model']} | {r['eager']['ms']:.1f} | {r['none']['ms']:.1f} | {r['tvm']['ms']:.1f} | {d:.1f} "
              f"| {r['none']['ms'] / d:.2f}x | {r['tvm']['ms'] / d:.2f}x "
              f"| {r['none']['rel_err']:.0e}/{r['tvm']['rel_err']:.0e}/{r['dnnfusion']['rel_err']:.0e} "
              f"| {r['none']['compile_s']:.1f}/{r['tvm']['compile_s']:.1f}/{r['dnnfusion']['compile_s']:.1f} "
              f"| {r['dnnfusion_hook']['ms']:.1f} | {r['dnnfusion_hook']['ms'] / d:.2f}x |")
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    print(f"\ngeomean gain: dnnfusion vs none {gm(g_none):.2f}x, dnnfusion vs tvm {gm(g_tvm):.2f}x")
    print(f"written {path}")


if __name__ == "__main__":
    main()
