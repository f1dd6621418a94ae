"""fp32 CPU inference latency of dnnfusion against its peers, side by side in one process.

Systems (same thread count everywhere): eager PyTorch, torch.compile default (Inductor), Inductor
with freezing, ONNX Runtime's CPU execution provider, OpenVINO's runtime (convert_model +
compile_model, latency hint) with fp32 pinned ("openvino") and at its default precision
("openvino-default": bf16 where the CPU has AMX / AVX512-BF16; the precision it picked is recorded),
OpenVINO's torch.compile backend (fp32), Apache TVM's Relax flow ("tvm": untuned default schedules
unless --tvm-trials N runs meta-schedule), and dnnfusion in its three fusion modes through
torch.compile ("dnnf-MODE") and compiled ahead of time by dnnfusion.compile ("dnnf-aot"), plus
any `--variant NAME=JSON` (dnnfusion with extra compile options, for ablations). Every system runs
the same model object on the same input tensors; after a warm-up the systems are interleaved round
by round (a fresh seeded order each round, each call after a short idle gap) so machine noise hits
them alike. Reports median
and inter-quartile range per system, the ratio of dnnfusion's best mode to each peer per model and
as a geomean, compile/export time, max relative error against eager, and the machine's measured
FMA peak and STREAM-triad bandwidth (benchmarks/peak_probe.cc) with each system's attained
GFLOP/s. A system that fails for a model is reported with a one-line reason; the run goes on.

Writes benchmarks/results/compare_<date>.json and compare_<date>_b<batch>.png (speedup over eager)
and prints markdown tables for benchmarks/RESULTS.md.

    python benchmarks/compare.py --models resnet18,distilbert --batches 1 --runs 3 --warmup 1
    python benchmarks/compare.py --variant nolayout='{"layout": false}'
    python benchmarks/compare.py --peak-only
"""
import argparse
import datetime
import gc
import hashlib
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
from tqdm import tqdm

import dnnfusion
from dnnfusion import _C, zoo
from latency import cpu_name, quartiles  # benchmarks/ is the script directory, so on sys.path

DEFAULT_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "vgg16", "efficientnet_b0",
                  "densenet121", "bert", "distilbert", "gpt2"]
ALIASES = {"bert-base": "bert"}  # zoo's "bert" is BertConfig() = bert-base
MODES = ("none", "tvm", "dnnfusion")
# dnnf-MODE: torch.compile(backend="dnnfusion") in each fusion mode; dnnf-aot: dnnfusion.compile (torch.export
# once, called without Dynamo's per-call guards), fusion mode dnnfusion.
DNNF = tuple(f"dnnf-{m}" for m in MODES) + ("dnnf-aot",)
PEERS = ("eager", "inductor", "inductor-freezing", "onnxruntime", "openvino", "openvino-default", "openvino-compile",
         "tvm")
BUILTIN = PEERS + DNNF
HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------------
# Machine roofline: benchmarks/peak_probe.cc, compiled for this CPU and cached by content hash.

def _cpu_signature():
    """Model name and ISA flags: a binary built with -march=native is only valid on such a CPU."""
    keep = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    keep.append(line.strip())
                if len(keep) == 2:
                    break
    except OSError:
        pass
    return "\n".join(keep)


def _probe_exe():
    """benchmarks/peak_probe.cc built for this CPU (cached by content hash): (path, None) or (None, reason)."""
    src = os.path.join(HERE, "peak_probe.cc")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        return None, "no C++ compiler (c++/g++ or $CXX) to build benchmarks/peak_probe.cc"
    cmd = [cxx, "-O3", "-march=native", "-std=c++17", "-pthread"]
    with open(src, "rb") as f:
        key = hashlib.sha256(f.read() + " ".join(cmd).encode() + _cpu_signature().encode()).hexdigest()[:16]
    cache = os.path.join(os.environ.get("DNNFUSION_CACHE_DIR") or os.path.expanduser("~/.cache/dnnfusion"), "bench")
    exe = os.path.join(cache, f"peak_probe_{key}")
    if not os.path.exists(exe):
        os.makedirs(cache, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            built = os.path.join(tmp, "peak_probe")
            r = subprocess.run(cmd + [src, "-o", built], capture_output=True, text=True)
            if r.returncode != 0:
                return None, f"compiling peak_probe.cc failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
            shutil.copy2(built, exe + ".tmp")
            os.replace(exe + ".tmp", exe)  # atomic: a concurrent run sees the old or the new file
    return exe, None


def _run_probe(probe_args):
    try:
        exe, err = _probe_exe()
        if err:
            return {"error": err}
        r = subprocess.run([exe, *probe_args], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return {"error": f"peak_probe exited {r.returncode}: {r.stderr.strip()}"}
        return json.loads(r.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as e:
        return {"error": f"peak_probe: {type(e).__name__}: {e}"}


def peak_probe(threads):
    """Measured fp32 FMA peak and triad bandwidth with `threads` threads, and the core-to-core round
    trip, or {"error": reason}."""
    return _run_probe([str(threads)])


def core_to_core_ns():
    """The cache-line round trip between the first two CPUs right now (ns), or None: whether the host
    has the vCPUs on cores that share a last-level cache (see benchmarks/peak_probe.cc)."""
    v = _run_probe(["--latency"]).get("core_to_core_ns")
    return v if v is not None and v >= 0 else None


# ---------------------------------------------------------------------------------------------
# Systems. Each builder returns (run: () -> output, first output, info dict with compile times).

class MainOutput(torch.nn.Module):
    """The model returning only its main output (logits / last_hidden_state, as zoo.first_tensor
    picks it). Every system runs this same module, so every compiler gets the same graph (the
    HF pooler / GPT-2 key-value outputs are dead in all of them) and the ONNX graph has one output."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        return zoo.first_tensor(self.model(*args))


def one_line(exc):
    """The innermost cause of an exception on one line: Dynamo wraps backend errors
    (BackendCompilerFailed) in a multi-line message whose cause names the real problem."""
    root = exc
    while True:
        inner = getattr(root, "inner_exception", None) or root.__cause__
        if inner is None:
            break
        root = inner
    text = " ".join(str(root).split())
    text = text.split(" Set TORCHDYNAMO_VERBOSE=1")[0]
    return f"{type(root).__name__}: {text}"[:600]


def build_eager(model, inputs, threads):
    t0 = time.perf_counter()
    out = model(*inputs)
    return (lambda: model(*inputs)), out, {"compile_s": time.perf_counter() - t0}


def _compiled(model, inputs, freezing=False, **compile_kwargs):
    compiled = torch.compile(model, dynamic=False, **compile_kwargs)
    saved = torch._inductor.config.freezing
    # freezing is read outside the backend's own config patch, so it must be set globally while
    # compiling (the first call); the compiled code keeps its frozen weights after the reset.
    torch._inductor.config.freezing = freezing
    try:
        t0 = time.perf_counter()
        out = compiled(*inputs)
        compile_s = time.perf_counter() - t0
    finally:
        torch._inductor.config.freezing = saved
    return (lambda: compiled(*inputs)), out, {"compile_s": compile_s}


def build_inductor(model, inputs, threads):
    return _compiled(model, inputs)


def build_inductor_freezing(model, inputs, threads):
    # options={"freezing": True} alone does not freeze (see _compiled), but it makes this backend
    # differ from plain Inductor's: Dynamo would otherwise reuse the unfrozen compiled code.
    return _compiled(model, inputs, freezing=True, options={"freezing": True})


def build_dnnfusion(options):
    def build(model, inputs, threads):
        return _compiled(model, inputs, backend="dnnfusion", options={"threads": threads, **options})
    return build


def build_dnnfusion_aot(model, inputs, threads):
    t0 = time.perf_counter()
    compiled = dnnfusion.compile(model, tuple(inputs), options={"threads": threads})
    out = compiled(*inputs)
    return (lambda: compiled(*inputs)), out, {"compile_s": time.perf_counter() - t0}


def build_onnxruntime(model, inputs, threads, tmpdir):
    import onnxruntime as ort

    path = os.path.join(tmpdir, "model.onnx")
    names = [f"input_{i}" for i in range(len(inputs))]
    errors = []
    t0 = time.perf_counter()
    for dynamo in (False, True):  # the TorchScript exporter first; the dynamo exporter needs onnxscript
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, tuple(inputs), path, dynamo=dynamo, input_names=names, output_names=["output"])
            break
        except Exception as e:  # noqa: BLE001 - any exporter failure is reported, the other one tried
            errors.append(f"dynamo={dynamo}: {one_line(e)}")
    else:
        raise RuntimeError("torch.onnx.export failed: " + " | ".join(errors))
    export_s = time.perf_counter() - t0
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # ORT's workers keep spinning for tens of ms after run() returns; on 2 cores the system timed
    # next ran 2x slower (resnet18 eager 25 -> 52 ms). This stops them when run() returns and costs
    # ORT nothing measurable (17.1 vs 17.0 ms).
    so.add_session_config_entry("session.force_spinning_stop", "1")
    t1 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    session_s = time.perf_counter() - t1
    declared = [i.name for i in sess.get_inputs()]
    if declared != names:
        raise RuntimeError(f"exported graph takes inputs {declared}, expected {names}")
    feeds = {n: x.numpy() for n, x in zip(names, inputs)}  # converted once: only run() is timed
    out = torch.from_numpy(sess.run(None, feeds)[0])
    return (lambda: sess.run(None, feeds)), out, {"compile_s": export_s + session_s, "export_s": export_s,
                                                   "session_s": session_s}


def _peer_versions():
    out = {}
    for name, module in (("openvino", "openvino"), ("tvm", "tvm")):
        try:
            out[name] = __import__(module).__version__
        except ImportError:
            out[name] = "not installed"
    return out


def _openvino_config(threads, precision):
    """Latency mode on `threads` threads; precision "f32" pins fp32 (the other systems' precision),
    None leaves OpenVINO's default (bf16 on CPUs with AMX or AVX512-BF16)."""
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    return config


def build_openvino(precision):
    """OpenVINO's own runtime: convert_model (the PyTorch frontend) + compile_model on the CPU."""
    def build(model, inputs, threads):
        import openvino as ov

        t0 = time.perf_counter()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            ov_model = ov.convert_model(model, example_input=tuple(inputs))
        convert_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        compiled = ov.Core().compile_model(ov_model, "CPU", _openvino_config(threads, precision))
        compile_s = time.perf_counter() - t1
        request = compiled.create_infer_request()
        feeds = [x.numpy() for x in inputs]  # converted once: only infer() is timed
        port = compiled.output(0)
        out = torch.from_numpy(request.infer(feeds)[port].copy())
        picked = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
        return (lambda: request.infer(feeds)), out, {"compile_s": convert_s + compile_s, "export_s": convert_s,
                                                      "precision": picked.split("'")[1] if "'" in picked else picked}
    return build


def build_openvino_compile(model, inputs, threads):
    """OpenVINO's torch.compile backend, fp32 pinned."""
    import openvino.torch  # noqa: F401 - registers backend "openvino"

    config = {k: str(v) for k, v in _openvino_config(threads, "f32").items()}
    return _compiled(model, inputs, backend="openvino", options={"device": "CPU", "config": config})


def build_tvm(trials):
    """Apache TVM's Relax flow: torch.export -> from_exported_program -> the "zero" pipeline (no
    tuning: TVM's default schedules) or, with trials > 0, meta-schedule tuning of that many trials
    ("static_shape_tuning") -> tvm.compile for this CPU's LLVM target -> the Relax VM.
    Threads: TVM_NUM_THREADS, set by main() before TVM's thread pool starts."""
    def build(model, inputs, threads):
        import tvm
        from tvm import relax
        from tvm.relax.frontend.torch import from_exported_program

        t0 = time.perf_counter()
        exported = torch.export.export(model, tuple(inputs))
        mod = from_exported_program(exported, keep_params_as_input=False)
        target = tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
                                    "num-cores": threads})
        with target:
            if trials > 0:
                with tempfile.TemporaryDirectory(prefix="dnnf_tvm_tune_") as work:
                    mod = relax.get_pipeline("static_shape_tuning", target=target, work_dir=work,
                                             total_trials=trials)(mod)
            else:
                mod = relax.get_pipeline("zero")(mod)
            executable = tvm.compile(mod, target)
        vm = relax.VirtualMachine(executable, tvm.cpu())
        args = [tvm.runtime.tensor(x.numpy()) for x in inputs]
        compile_s = time.perf_counter() - t0

        def run():
            return vm["main"](*args)

        res = run()
        first = res[0] if not hasattr(res, "numpy") else res
        out = torch.from_numpy(first.numpy().copy())
        return run, out, {"compile_s": compile_s, "tuning_trials": trials}
    return build


# ---------------------------------------------------------------------------------------------
# One (model, batch) cell: build every system, check it against eager, time them interleaved.

def rel_err(out, ref):
    out = zoo.first_tensor(out)
    if tuple(out.shape) != tuple(ref.shape):
        raise RuntimeError(f"output shape {tuple(out.shape)} differs from eager's {tuple(ref.shape)}")
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def model_flops(model, inputs):
    """FLOPs of one eager call (convolutions, matmuls, attention: what torch's counter covers)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        model(*inputs)
    return counter.get_total_flops()


def _graphs_compiled():
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def measure(name, batch, systems, args):
    torch._dynamo.reset()
    cell = {"model": name, "batch": batch, "systems": {}, "gflop": None}
    try:
        model, make_inputs = zoo.build(name)
        model = MainOutput(model).eval()
        inputs = make_inputs(batch)
        with torch.no_grad():
            ref = model(*inputs)
    except Exception as e:  # noqa: BLE001 - no reference, so no system can run; the next model can
        reason = "building the model or its eager reference: " + one_line(e)
        cell["systems"] = {k: {"status": "failed", "reason": reason} for k in systems}
        tqdm.write(f"  {name} b{batch}: FAILED {reason}")
        return cell
    try:
        with torch.no_grad():
            cell["gflop"] = model_flops(model, inputs) / 1e9
    except Exception as e:  # noqa: BLE001 - the efficiency table shows "-" for this model
        tqdm.write(f"  {name} b{batch}: no FLOP count: {one_line(e)}")
    runners = {}
    with tempfile.TemporaryDirectory(prefix="dnnf_compare_") as tmpdir, torch.no_grad():
        for sysname, builder in systems.items():
            gc.collect()
            try:
                if sysname == "onnxruntime":
                    run, out, info = builder(model, inputs, args.threads, tmpdir)
                else:
                    run, out, info = builder(model, inputs, args.threads)
                info["rel_err"] = rel_err(out, ref)
            except Exception as e:  # noqa: BLE001 - a failing system is a result, not the end of the run
                cell["systems"][sysname] = {"status": "failed", "reason": one_line(e)}
                tqdm.write(f"  {name} b{batch} {sysname}: FAILED {one_line(e)}")
                continue
            cell["systems"][sysname] = {"status": "ok", **info}
            runners[sysname] = run
            tqdm.write(f"  {name} b{batch} {sysname}: compile {info['compile_s']:.1f} s, rel err {info['rel_err']:.1e}")
        times = {k: [] for k in runners}
        for _ in range(args.warmup):
            for k in list(runners):
                _call(k, runners, cell)
        graphs_before = _graphs_compiled()
        # A fresh order each round: the threads of the system that ran just before may still spin
        # (OpenMP, ONNX Runtime, our pool), and a fixed order would always charge it to the same system.
        # The gap lets them go to sleep, so each call starts on a quiet machine: without it, on 2
        # cores, mobilenet_v3_large measured ORT 9.8 ms (IQR 8.1-13.1) and dnnfusion 16.9 ms; with
        # 10 ms, 4.1 (4.1-4.3) and 10.5 ms.
        rng = random.Random(0)
        c2c_before = core_to_core_ns()
        for _ in range(args.runs):
            order = list(runners)
            rng.shuffle(order)
            for k in order:
                if args.gap_ms:
                    time.sleep(args.gap_ms / 1e3)
                t = time.perf_counter()
                if _call(k, runners, cell):
                    times[k].append(time.perf_counter() - t)
        # The host's vCPU placement before and after the rounds (two values that differ: it moved
        # during them): every system is slower with the vCPUs on cores that share no cache.
        cell["core_to_core_ns"] = [v for v in (c2c_before, core_to_core_ns()) if v is not None]
        if _graphs_compiled() != graphs_before:
            cell["warning"] = "Dynamo recompiled during the timed runs: some times include compilation"
            tqdm.write(f"  {name} b{batch}: WARNING {cell['warning']}")
        for k, ts in times.items():
            s = cell["systems"][k]
            if s["status"] != "ok" or not ts:
                continue
            s["ms"] = 1e3 * statistics.median(ts)
            s["iqr_ms"] = [1e3 * q for q in quartiles(ts)] if len(ts) >= 2 else [s["ms"], s["ms"]]
            s["times_ms"] = [round(1e3 * t, 4) for t in ts]
        runners.clear()
    torch._dynamo.reset()
    gc.collect()
    return cell


def _call(k, runners, cell):
    try:
        runners[k]()
        return True
    except Exception as e:  # noqa: BLE001
        cell["systems"][k] = {**cell["systems"][k], "status": "failed", "reason": "at run time: " + one_line(e)}
        tqdm.write(f"  {cell['model']} b{cell['batch']} {k}: FAILED at run time {one_line(e)}")
        del runners[k]
        return False


# ---------------------------------------------------------------------------------------------
# Reporting.

def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _ms(s):
    return s.get("ms") if s and s.get("status") == "ok" else None


def best_mode(cell):
    cands = [(cell["systems"][k]["ms"], k) for k in DNNF if _ms(cell["systems"].get(k))]
    return min(cands)[1] if cands else None


def ratio_table(rows, peers, batch):
    """Peer ms / ms of dnnfusion's fastest fusion mode, per model and as a geomean over the models
    where both ran."""
    lines = ["", f"### dnnfusion (best of its fusion modes) vs each peer, batch {batch}: peer ms / dnnfusion ms "
                 "(> 1: dnnfusion faster)", "",
             "| model | best mode | " + " | ".join(f"vs {p}" for p in peers) + " |",
             "|---" * (len(peers) + 2) + "|"]
    best = "best fp32 peer"
    cols_of = peers + [best]
    lines[-2] = "| model | best mode | " + " | ".join(f"vs {p}" for p in cols_of) + " |"
    lines[-1] = "|---" * (len(cols_of) + 2) + "|"
    ratios = {p: [] for p in cols_of}
    for c in rows:
        b = best_mode(c)
        if b is None:
            lines.append(f"| {c['model']} | failed | " + " | ".join("-" for _ in cols_of) + " |")
            continue
        bms = c["systems"][b]["ms"]
        cols = []
        for p in peers:
            pm = _ms(c["systems"].get(p))
            if pm:
                ratios[p].append(pm / bms)
                cols.append(f"{pm / bms:.2f}x")
            else:
                cols.append("-")
        fp32 = [(_ms(c["systems"].get(p)), p) for p in peers if p != "eager" and _is_fp32(c["systems"].get(p))]
        fp32 = [(ms, p) for ms, p in fp32 if ms]
        if fp32:
            ms, p = min(fp32)
            ratios[best].append(ms / bms)
            cols.append(f"{ms / bms:.2f}x ({p})")
        else:
            cols.append("-")
        lines.append(f"| {c['model']} | {b[5:]} | " + " | ".join(cols) + " |")
    lines.append("| **geomean** | | " + " | ".join(
        f"**{geomean(ratios[p]):.2f}x** (n={len(ratios[p])})" if ratios[p] else "-" for p in cols_of) + " |")
    return lines


def _is_fp32(system):
    """A peer that computes in fp32 (OpenVINO at its default precision may pick bf16)."""
    return bool(system) and system.get("precision", "f32") in ("f32", "fp32", "float32")


def markdown(result, system_names):
    machine, cells = result["machine"], result["cells"]
    lines = []
    peak = machine.get("peak", {})
    lines.append(f"Machine: {machine['cpu']}, {machine['cores']} logical CPUs, dnnfusion ISA {machine['isa']}, "
                 f"torch {machine['torch']}, onnxruntime {machine['onnxruntime']}, {machine['threads']} threads, "
                 f"{machine['date']}.")
    if "error" in peak:
        lines.append(f"Measured roofline: unavailable ({peak['error']}).")
    else:
        lines.append(f"Measured roofline ({peak['threads']} threads, benchmarks/peak_probe.cc): fp32 FMA peak "
                     f"{peak['fma_peak_gflops']:.1f} GFLOP/s ({peak['isa']}), STREAM triad {peak['triad_gbs']:.1f} GB/s.")
    peers = [s for s in system_names if s not in DNNF]
    c2c = [v for c in cells for v in c.get("core_to_core_ns", [])]
    if c2c:
        lines.append(f"Core-to-core round trip during the timed rounds (benchmarks/peak_probe.cc --latency): "
                     f"{min(c2c):.0f}-{max(c2c):.0f} ns" + (
                         "; the host moved the vCPUs between cores that share a cache and cores that do not "
                         "during the run, and every system runs slower in the second placement: compare the "
                         "cells' core_to_core_ns in the JSON" if max(c2c) > 2 * min(c2c) else "") + ".")
    picked = sorted({c["systems"].get("openvino-default", {}).get("precision") for c in cells} - {None})
    if picked:
        lines.append(f"openvino-default ran at precision {', '.join(picked)} (not fp32 peers unless f32).")
    for batch in result["args"]["batches"]:
        rows = [c for c in cells if c["batch"] == batch]
        lines += ["", f"### Latency, batch {batch}: median ms (inter-quartile range)", "",
                  "| model | " + " | ".join(system_names) + " |", "|---" * (len(system_names) + 1) + "|"]
        for c in rows:
            cols = []
            for k in system_names:
                s = c["systems"].get(k)
                cols.append(f"{s['ms']:.1f} ({s['iqr_ms'][0]:.1f}-{s['iqr_ms'][1]:.1f})" if _ms(s) else "failed")
            lines.append(f"| {c['model']} | " + " | ".join(cols) + " |")

        if any(k in DNNF for k in system_names):
            lines += ratio_table(rows, peers, batch)

        if "error" not in peak:
            lines += ["", f"### Attained GFLOP/s (% of the measured FMA peak), batch {batch}", "",
                      "GFLOP/call counts every convolution as direct multiply-adds. dnnfusion runs 3x3 stride-1 "
                      "convolutions as Winograd F(4x4, 3x3) / F(2x2, 3x3) (4x / 2.25x fewer multiplies), so its "
                      "rate can exceed the peak: read it as effective throughput.", "",
                      "| model | GFLOP/call | " + " | ".join(system_names) + " |", "|---" * (len(system_names) + 2) + "|"]
            for c in rows:
                cols = []
                for k in system_names:
                    ms = _ms(c["systems"].get(k))
                    if ms and c["gflop"]:
                        rate = c["gflop"] / (ms / 1e3)
                        cols.append(f"{rate:.0f} ({100 * rate / peak['fma_peak_gflops']:.0f}%)")
                    else:
                        cols.append("-")
                gflop = f"{c['gflop']:.2f}" if c["gflop"] else "-"
                lines.append(f"| {c['model']} | {gflop} | " + " | ".join(cols) + " |")

    compiled = [k for k in system_names if k != "eager"]
    lines += ["", "### Compile / export time, s (onnxruntime: export + session creation)", "",
              "| model | batch | " + " | ".join(compiled) + " |", "|---" * (len(compiled) + 2) + "|"]
    for c in cells:
        cols = [f"{c['systems'][k]['compile_s']:.1f}" if c["systems"].get(k, {}).get("status") == "ok" else "failed"
                for k in compiled]
        lines.append(f"| {c['model']} | {c['batch']} | " + " | ".join(cols) + " |")
    lines += ["", "### Max relative error vs eager, max|out - ref| / max|ref|", "",
              "| model | batch | " + " | ".join(compiled) + " |", "|---" * (len(compiled) + 2) + "|"]
    for c in cells:
        cols = [f"{c['systems'][k]['rel_err']:.1e}" if "rel_err" in c["systems"].get(k, {}) else "failed"
                for k in compiled]
        lines.append(f"| {c['model']} | {c['batch']} | " + " | ".join(cols) + " |")
    failures = [(c, k, s) for c in cells for k, s in c["systems"].items() if s["status"] == "failed"]
    if failures:
        lines += ["", "### Failures", ""]
        lines += [f"- {c['model']} batch {c['batch']}, {k}: {s['reason']}" for c, k, s in failures]
    warned = [c for c in cells if "warning" in c]
    lines += [f"- {c['model']} batch {c['batch']}: {c['warning']}" for c in warned]
    return "\n".join(lines)


def chart(result, system_names, batch, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [c for c in result["cells"] if c["batch"] == batch]
    # A system that failed everywhere gets no slot; a failure on one model is an "x" on the axis.
    shown = [k for k in system_names if k != "eager" and any(_ms(c["systems"].get(k)) for c in rows)]
    width = 0.8 / max(1, len(shown))
    colors = plt.get_cmap("tab10" if len(shown) <= 10 else "tab20").colors
    fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(rows) * max(1, len(shown))), 4.8))
    for i, k in enumerate(shown):
        xs, ys, failed = [], [], []
        for j, c in enumerate(rows):
            x = j + (i - (len(shown) - 1) / 2) * width
            e, m = _ms(c["systems"].get("eager")), _ms(c["systems"].get(k))
            if e and m:
                xs.append(x)
                ys.append(e / m)
            else:
                failed.append(x)
        precisions = {c["systems"].get(k, {}).get("precision") for c in rows} - {None, "f32"}
        label = f"{k} ({', '.join(sorted(precisions))})" if precisions else k
        bars = ax.bar(xs, ys, width=width, label=label, color=colors[i % len(colors)])
        ax.bar_label(bars, fmt="%.2f", fontsize=6, rotation=90, padding=2)
        ax.plot(failed, [0.03] * len(failed), "x", color=colors[i % len(colors)])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylim(0, 1.15 * max([1.0] + [p.get_height() for p in ax.patches]))
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([c["model"] for c in rows], rotation=30, ha="right")
    ax.set_ylabel("speedup over eager (eager ms / system ms)")
    m = result["machine"]
    ax.set_title(f"inference (fp32 unless marked), batch {batch}, {m['threads']} threads, {m['cpu']}", fontsize=10)
    dead = [k for k in system_names if k != "eager" and k not in shown]
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title=f"failed on all: {', '.join(dead)}" if dead else None, title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated zoo names")
    ap.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    ap.add_argument("--runs", type=int, default=20, help="timed rounds per system")
    ap.add_argument("--warmup", type=int, default=3, help="untimed rounds per system after compiling")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gap-ms", type=float, default=1e3 * zoo.IDLE_GAP_S,
                    help="idle time before each timed call, so the previous system's spinning threads sleep")
    ap.add_argument("--systems", default=",".join(BUILTIN),
                    help=f"comma-separated subset of {', '.join(BUILTIN)} (eager always runs: it is the reference)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON_OPTIONS",
                    help="an extra dnnfusion system dnnf-NAME compiled with options={'fusion': 'dnnfusion', "
                         "'threads': T, **JSON_OPTIONS}; repeatable")
    ap.add_argument("--tvm-trials", type=int, default=0,
                    help="meta-schedule tuning trials per model for the tvm peer (default 0: untuned, TVM's default "
                         "schedules; tuning takes hours per model on 2 cores)")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--peak-only", action="store_true", help="print the measured FMA peak and triad bandwidth only")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    if args.peak_only:
        return args

    models = [ALIASES.get(m.strip(), m.strip()) for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in zoo.ALL]
    if unknown or not models:
        ap.error(f"--models: unknown {unknown or 'empty list'}; known: {', '.join(zoo.ALL)} (alias bert-base = bert)")
    args.models = models
    text = args.batches
    try:
        args.batches = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        args.batches = []
    if not args.batches or min(args.batches) < 1:
        ap.error(f"--batches must be comma-separated positive integers, got {text!r}")
    if args.runs < 1:
        ap.error(f"--runs must be >= 1, got {args.runs}")
    if args.gap_ms < 0:
        ap.error(f"--gap-ms must be >= 0, got {args.gap_ms}")
    if args.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {args.warmup}")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in systems if s not in BUILTIN]
    if bad:
        ap.error(f"--systems: unknown {bad}; valid: {', '.join(BUILTIN)}")
    args.systems = ["eager"] + [s for s in BUILTIN if s in systems and s != "eager"]
    args.variants = {}
    for v in args.variant:
        name, sep, text = v.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.]+", name):
            ap.error(f"--variant must be NAME=JSON_OPTIONS with NAME of letters, digits, '_' or '.', got {v!r}")
        if f"dnnf-{name}" in BUILTIN or f"dnnf-{name}" in args.variants:
            ap.error(f"--variant name {name!r} is taken; the system would be dnnf-{name}")
        try:
            options = json.loads(text)
        except json.JSONDecodeError as e:
            ap.error(f"--variant {name}: JSON_OPTIONS is not valid JSON ({e}): {text!r}")
        if not isinstance(options, dict):
            ap.error(f"--variant {name}: JSON_OPTIONS must be a JSON object, got {text!r}")
        args.variants[f"dnnf-{name}"] = {"fusion": "dnnfusion", **options}
    return args


def main(argv=None):
    args = parse_args(argv)
    # Once, before any parallel work: a later call of set_num_interop_threads is an error.
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    peak = peak_probe(args.threads)
    if args.peak_only:
        print(json.dumps(peak, indent=1))
        return 0 if "error" not in peak else 1
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # read when TVM's thread pool starts
    # Every system adds a Dynamo cache entry for the same forward (reset per model and batch).
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 256)
    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = "not installed"
    builders = {"eager": build_eager, "inductor": build_inductor, "inductor-freezing": build_inductor_freezing,
                "onnxruntime": build_onnxruntime, "openvino": build_openvino("f32"),
                "openvino-default": build_openvino(None), "openvino-compile": build_openvino_compile,
                "tvm": build_tvm(args.tvm_trials),
                **{f"dnnf-{m}": build_dnnfusion({"fusion": m}) for m in MODES}, "dnnf-aot": build_dnnfusion_aot,
                **{k: build_dnnfusion(o) for k, o in args.variants.items()}}
    system_names = args.systems + list(args.variants)
    systems = {k: builders[k] for k in system_names}
    date = datetime.date.today().isoformat()
    machine = {"cpu": cpu_name(), "cores": os.cpu_count(), "isa": _C.isa(), "torch": torch.__version__,
               "onnxruntime": ort_version, **_peer_versions(), "python": sys.version.split()[0], "threads": args.threads,
               "interop_threads": 1, "date": date, "peak": peak,
               "dnnfusion_path": os.path.dirname(dnnfusion.__file__)}  # which checkout was measured
    result = {"machine": machine,
              "args": {"models": args.models, "batches": args.batches, "runs": args.runs, "warmup": args.warmup,
                       "gap_ms": args.gap_ms,
                       "systems": system_names, "variants": args.variants},
              "cells": []}
    print(json.dumps(machine))
    for name, batch in tqdm([(m, b) for b in args.batches for m in args.models], desc="model x batch"):
        result["cells"].append(measure(name, batch, systems, args))

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"compare_{date}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print()
    print(markdown(result, system_names))
    print(f"\nwritten {path}")
    for batch in args.batches:
        png = os.path.join(args.out_dir, f"compare_{date}_b{batch}.png")
        try:
            chart(result, system_names, batch, png)
            print(f"written {png}")
        except ImportError as e:
            print(f"no chart for batch {batch}: {e} (pip install -r benchmarks/requirements.txt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
