"""How a model's batch-1 latency depends on what happened before the call, for dnnfusion and ONNX
Runtime side by side in one process.

Conditions, each timed for every system in interleaved rounds:
- back to back: calls follow each other;
- idle 1 ms / idle 5 ms: the process sleeps before each call (worker threads go to sleep, as in
  benchmarks/compare.py, which idles 10 ms before every call);
- cold caches: 5 ms idle and 768 MB written before each call, which evicts the weights, the
  activations, the code and the Python objects a call touches from every cache level (as when other
  work runs between inferences, e.g. the other systems of compare.py's interleaved rounds).

dnnfusion is timed three ways: through torch.compile (Dynamo's guards, the AOT wrapper and the Python
around the compiled region included), compiled ahead of time by dnnfusion.compile (no Dynamo: an
input-signature check, the AOT wrapper and the frozen-weights check), and as a direct call of its
compiled region (the core alone).
The model must lower to one region (the zoo's CNNs do).

    python benchmarks/call_conditions.py --model mobilenet_v3_large [--rounds 3] [--calls 15] [--threads 2]
"""
import argparse
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CONDITIONS = (("back to back", 0.0, False), ("idle 1 ms", 0.001, False), ("idle 5 ms", 0.005, False),
              ("cold caches", 0.005, True))


def build_systems(model, x, threads, tmpdir):
    """dnnfusion and ONNX Runtime built exactly as compare.py builds them; dnnfusion's compiled
    region is captured on the way for the direct call."""
    import compare
    from dnnfusion import lowering

    lowered = []
    orig = lowering.lower

    def capture(gm, frozen, opts, report):
        out = orig(gm, frozen, opts, report)
        lowered.append(out)
        return out

    lowering.lower = capture
    try:
        with torch.no_grad():
            compiled, _, _ = compare.build_dnnfusion({})(model, x, threads)
    finally:
        lowering.lower = orig
    runs = [n for gm in lowered for n in gm.graph.nodes if n.target is torch.ops.dnnfusion.run.default]
    if len(runs) != 1 or len(x) != 1:
        raise SystemExit(f"the model lowered to {len(runs)} regions; this benchmark needs one region and one input")
    handle = runs[0].args[0]
    ort_run, _, _ = compare.build_onnxruntime(model, x, threads, tmpdir)
    aot, _, _ = compare.build_dnnfusion_aot(model, x, threads)
    return {
        "dnnfusion (torch.compile call)": compiled,
        "dnnfusion (dnnfusion.compile call)": aot,
        "dnnfusion (its region called directly)": lambda: torch.ops.dnnfusion.run.default(handle, [x[0]]),
        "ONNX Runtime": ort_run,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mobilenet_v3_large")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=15, help="timed calls per system, condition and round")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    import compare
    from dnnfusion import zoo

    torch.set_num_threads(args.threads)
    model, make = zoo.build(args.model)
    model = compare.MainOutput(model).eval()
    x = make(1)
    tmpdir = tempfile.mkdtemp(prefix="dnnf_call_conditions_")
    systems = build_systems(model, x, args.threads, tmpdir)
    junk = torch.empty(768 * 1024 * 1024 // 4)
    times = {}
    with torch.no_grad():
        for fn in systems.values():
            for _ in range(5):
                fn()
        for rnd in range(args.rounds):
            for cond, gap, cold in CONDITIONS:
                for name, fn in systems.items():
                    fn()
                    for i in range(args.calls):
                        if cold:
                            junk.fill_(float(i))
                        if gap:
                            time.sleep(gap)
                        t = time.perf_counter()
                        fn()
                        times.setdefault((name, cond), []).append(1e3 * (time.perf_counter() - t))
    print(f"{args.model}, batch 1, {args.threads} threads: median ms of {args.rounds * args.calls} calls")
    print("| system | " + " | ".join(c for c, _, _ in CONDITIONS) + " |")
    print("|---" * (len(CONDITIONS) + 1) + "|")
    for name in systems:
        row = []
        for cond, _, _ in CONDITIONS:
            v = sorted(times[(name, cond)])
            row.append(f"{v[len(v) // 2]:.2f}")
        print(f"| {name} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
