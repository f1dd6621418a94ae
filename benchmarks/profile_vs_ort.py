"""Where a model's time goes in dnnfusion and in ONNX Runtime, side by side, grouped by kind of work.

dnnfusion: the executor's per-step timer (DNNFUSION_STEP_PROFILE, printed when the compiled graph
is freed), read back from stderr. ONNX Runtime: its own profiler (SessionOptions.enable_profiling),
per node. Both time their kernels only; the call overhead outside them (Dynamo's guards and the
Python around a torch.compile'd call; ORT's run() bookkeeping) is the wall time minus that sum.
dnnfusion's steps are grouped by kind (a fused block under its dominant op: `conv2d_nchwc`,
`conv2d_nchwc_expand_dw` = a 1x1 expand conv, its activation and the depthwise conv as one kernel,
`mm_packed`, generated loops, ...), ONNX Runtime's nodes by op type. ORT's profiler adds its own
cost to every node, so its per-node sum can exceed its unprofiled wall time: read its column as
shares, and the two wall times (unprofiled, measured alike) as the comparison.

    python benchmarks/profile_vs_ort.py --model efficientnet_b0 [--batch 1] [--calls 200] [--threads 2]

Run it on an idle machine; it runs the dnnfusion side in a child process (the step profile is
printed at interpreter exit).
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import os, sys, time, torch
sys.path.insert(0, {here!r})
from dnnfusion import zoo
import compare
torch.set_num_threads({threads})
model, make = zoo.build({model!r})
model = compare.MainOutput(model).eval()
x = make({batch})
f = torch.compile(model, backend="dnnfusion", options={{"threads": {threads}}}, dynamic=False)
with torch.no_grad():
    for _ in range(10):
        f(*x)
    t = time.perf_counter()
    for _ in range({calls}):
        f(*x)
    print("WALL_MS", 1e3 * (time.perf_counter() - t) / {calls}, flush=True)
torch._dynamo.reset()
del f
import gc; gc.collect()
"""


def group_of(label):
    """A step's kind: its label without block numbers, generated-function names and output shape."""
    s = re.sub(r" -> .*", "", label)
    s = re.sub(r"^block \d+:? ?", "", s)
    return "generated loop" if s.startswith("loop ") else s


def dnnfusion_profile(args):
    code = CHILD.format(here=HERE, threads=args.threads, model=args.model, batch=args.batch, calls=args.calls)
    env = dict(os.environ, DNNFUSION_STEP_PROFILE="100000")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=HERE)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    wall = float(re.search(r"WALL_MS ([0-9.]+)", p.stdout).group(1))
    groups, total, steps = collections.Counter(), 0.0, 0
    for line in p.stderr.splitlines():
        m = re.match(r"\s+([0-9.]+) ms\s+[0-9.]+%\s+(.*)", line)
        if m:
            ms, label = float(m.group(1)), m.group(2)
            groups[group_of(label)] += ms
            total += ms
            steps += 1
    return wall, total, steps, groups


def ort_profile(args):
    import onnxruntime as ort
    import torch

    sys.path.insert(0, HERE)
    import compare
    from dnnfusion import zoo

    torch.set_num_threads(args.threads)
    model, make = zoo.build(args.model)
    model = compare.MainOutput(model).eval()
    x = make(args.batch)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        names = [f"input_{i}" for i in range(len(x))]
        with torch.no_grad():
            torch.onnx.export(model, tuple(x), path, dynamo=False, input_names=names, output_names=["output"])
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.force_spinning_stop", "1")
        feeds = {n: t.numpy() for n, t in zip(names, x)}
        plain = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        for _ in range(10):
            plain.run(None, feeds)
        t = time.perf_counter()
        for _ in range(args.calls):
            plain.run(None, feeds)
        wall = 1e3 * (time.perf_counter() - t) / args.calls
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "prof")
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        for _ in range(10):
            sess.run(None, feeds)
        for _ in range(args.calls):
            sess.run(None, feeds)
        events = json.load(open(sess.end_profiling()))
    groups, total, nodes = collections.Counter(), 0.0, set()
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        ms = e["dur"] / 1e3
        groups[e.get("args", {}).get("op_name", "?")] += ms
        total += ms
        nodes.add(e["name"])
    n_calls = args.calls + 10
    return wall, total / n_calls, len(nodes), Counter_div(groups, n_calls)


def Counter_div(c, n):
    return collections.Counter({k: v / n for k, v in c.items()})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="efficientnet_b0")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    d_wall, d_total, d_steps, d_groups = dnnfusion_profile(args)
    o_wall, o_total, o_nodes, o_groups = ort_profile(args)
    print(f"{args.model}, batch {args.batch}, {args.threads} threads, {args.calls} calls (ms per call)")
    print("dnnfusion steps by kind:")
    for g, ms in d_groups.most_common():
        print(f"  {g:<40} {ms:8.3f}")
    print(f"  {'kernels, sum':<40} {d_total:8.3f}  ({d_steps} steps)")
    print(f"  {'outside the kernels (guards, Python)':<40} {d_wall - d_total:8.3f}")
    print(f"  {'wall':<40} {d_wall:8.3f}")
    print("ONNX Runtime nodes by op type (profiled run):")
    for g, ms in o_groups.most_common():
        print(f"  {g:<40} {ms:8.3f}")
    print(f"  {'nodes, sum (profiled)':<40} {o_total:8.3f}  ({o_nodes} nodes)")
    print(f"  {'wall (unprofiled)':<40} {o_wall:8.3f}")
    print(f"dnnfusion / ORT wall: {d_wall / o_wall:.2f}")


if __name__ == "__main__":
    main()
