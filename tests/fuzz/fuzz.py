"""Fuzzes the dnnfusion backend with random programs (tests/fuzz/program.py).

    python tests/fuzz/fuzz.py --seeds 0:10000                  # the long run (all fusion modes)
    python tests/fuzz/fuzz.py --seeds 17 --modes tvm           # replay one case
    python tests/fuzz/fuzz.py --seeds 0:100 --jobs 2 --out fuzz-out

Each case compiles a program with torch.compile(backend="dnnfusion") in one fusion mode and
compares it with eager; a region the core accepted but failed to compile (a FallbackWarning) is a
failure too. Cases run in worker processes, so a crash (a signal) or a hang (no answer
within --timeout seconds) is counted against its case and the next worker goes on. Every failure
is minimized (lines dropped while it still fails the same way) and written as a standalone
repro script under --out. Exit status 0 only if every case matched eager.
"""
import argparse
import collections
import json
import os
import selectors
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("none", "tvm", "dnnfusion")


# ---------------------------------------------------------------- worker (one process, many cases)

def _compare(got, want):
    import torch

    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {tuple(a.shape)} {a.dtype}, eager {tuple(b.shape)} {b.dtype}"
        scale = max(1.0, float(b[torch.isfinite(b)].abs().max())) if b.numel() and torch.isfinite(b).any() else 1.0
        try:
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4 * scale, equal_nan=True)
        except AssertionError as e:
            return f"output {k}: " + str(e).splitlines()[0] + " " + " ".join(str(e).split("\n")[1:4])
    return None


def run_case(seed, mode, keep=None):
    """('ok' | 'wrong' | 'error', detail) for one program in one mode."""
    import torch

    sys.path.insert(0, HERE)
    from program import generate

    torch._dynamo.reset()
    import dnnfusion.backend
    import dnnfusion.report

    dnnfusion.report._warned.clear()  # each case sees its own fallback warnings
    dnnfusion.backend._warned.clear()
    prog = generate(seed)
    model, inputs = prog.build(keep)
    with torch.no_grad():
        try:
            want = model(*inputs)
        except Exception as e:  # a reduced program may no longer run in eager: not a backend failure
            return "invalid", f"{type(e).__name__}: {e}"
        import warnings

        from dnnfusion import FallbackWarning

        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FallbackWarning)
                f = torch.compile(model, backend="dnnfusion", options={"fusion": mode}, dynamic=False)
                got = f(*inputs)
        except Exception as e:
            return "error", f"{type(e).__name__}: {str(e)[:400]}"
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    if fallbacks:  # a region the core accepted but could not compile: a bug, not a fallback
        return "fallback", fallbacks[0][:400]
    bad = _compare(got, want)
    if bad and _matches_float64(model, inputs, got):
        return "ok", ""
    return ("wrong", bad) if bad else ("ok", "")


def _matches_float64(model, inputs, got):
    """Whether the compiled outputs match the program run in float64: eager's float32 result can be
    the inaccurate one (a group norm of one element divides rounding noise by sqrt(eps)), and a
    compiled result closer to the exact one is not a wrong answer."""
    import copy

    import torch

    try:
        m64 = copy.deepcopy(model).double()
        with torch.no_grad():
            ref = m64(*[x.double() if x.is_floating_point() else x for x in inputs])
    except Exception:  # a program that does not run in float64: no second opinion
        return False
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    if len(ref) != len(got):
        return False
    ref = [r.to(g.dtype) if r.is_floating_point() and g.is_floating_point() else r for r, g in zip(ref, got)]
    return _compare(list(got), ref) is None


def worker_main():
    import signal
    import warnings

    crash_seed = os.environ.get("DNNFUSION_FUZZ_CRASH_SEED")  # the runner's own test: die in this case

    warnings.simplefilter("ignore")  # eager's own warnings; run_case records dnnfusion's
    for line in sys.stdin:
        job = json.loads(line)
        print(json.dumps({"start": job}), flush=True)
        if crash_seed is not None and job["seed"] == int(crash_seed):
            os.kill(os.getpid(), signal.SIGSEGV)
        status, detail = run_case(job["seed"], job["mode"], set(job["keep"]) if job.get("keep") is not None else None)
        print(json.dumps({"done": job, "status": status, "detail": detail}), flush=True)


# ---------------------------------------------------------------- parent

class Worker:
    def __init__(self, env):
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, bufsize=1)
        self.job = None
        self.started = None
        self.buf = ""

    def submit(self, job):
        self.job = job
        self.started = time.monotonic()
        self.p.stdin.write(json.dumps(job) + "\n")
        self.p.stdin.flush()

    def kill(self):
        try:
            self.p.kill()
        finally:
            self.p.wait()

    def stderr_tail(self):
        try:
            return self.p.stderr.read()[-1500:]
        except Exception:
            return ""


def run_jobs(jobs, n_workers, timeout, env, on_result):
    """Runs jobs over worker processes; calls on_result(job, status, detail) for each."""
    pending = collections.deque(jobs)
    sel = selectors.DefaultSelector()
    workers = []

    def spawn():
        w = Worker(env)
        sel.register(w.p.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        feed(w)

    def feed(w):
        if pending:
            w.submit(pending.popleft())
        else:
            w.job = None

    def retire(w, status, detail):
        on_result(w.job, status, detail)
        sel.unregister(w.p.stdout)
        w.kill()
        workers.remove(w)
        if pending:
            spawn()

    for _ in range(min(n_workers, len(pending))):
        spawn()
    while workers:
        busy = [w for w in workers if w.job is not None]
        if not busy:
            for w in list(workers):
                sel.unregister(w.p.stdout)
                w.p.stdin.close()
                w.kill()
                workers.remove(w)
            break
        for key, _ in sel.select(timeout=1.0):
            w = key.data
            line = w.p.stdout.readline()
            if not line:  # the worker died inside its job
                rc = w.p.wait()
                status = "crash"
                detail = f"worker exited with {rc} (signal {-rc})" if rc < 0 else f"worker exited with {rc}"
                retire(w, status, detail + "\n" + w.stderr_tail())
                continue
            msg = json.loads(line)
            if "done" in msg:
                on_result(w.job, msg["status"], msg["detail"])
                feed(w)
        now = time.monotonic()
        for w in [w for w in workers if w.job is not None and now - w.started > timeout]:
            retire(w, "hang", f"no answer within {timeout} s")


def minimize(seed, mode, status, timeout, env):
    """Drops program lines one at a time while the case still fails with `status`; returns kept lines."""
    sys.path.insert(0, HERE)
    from program import generate

    prog = generate(seed)
    keep = list(range(len(prog.lines)))
    i = len(keep) - 1
    while i >= 0:
        trial = keep[:i] + keep[i + 1:]
        result = {}
        run_jobs([{"seed": seed, "mode": mode, "keep": trial}], 1, timeout, env,
                 lambda job, s, d: result.update(status=s))
        if result.get("status") == status:
            keep = trial
        i -= 1
    return keep


def write_repro(out_dir, seed, mode, status, detail, keep):
    sys.path.insert(0, HERE)
    from program import generate

    prog = generate(seed)
    path = os.path.join(out_dir, f"repro_seed{seed}_{mode}.py")
    with open(path, "w") as f:
        f.write(f'"""Fuzz failure: seed {seed}, fusion mode {mode}: {status}.\n\n{detail}\n"""\n')
        f.write("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nimport dnnfusion  # noqa: F401\n\n")
        f.write(prog.source(set(keep)))
        f.write(f"\n\ng = torch.Generator().manual_seed({seed})\n")
        f.write(f"params = [torch.randn(s, generator=g) for s in {prog.params}]\n")
        f.write(f"inputs = [torch.randn(s, generator=g) for s in {prog.inputs}]\n")
        f.write("model = Fuzzed(params).eval()\n")
        f.write("with torch.no_grad():\n    want = model(*inputs)\n")
        f.write(f"    got = torch.compile(model, backend='dnnfusion', options={{'fusion': '{mode}'}}, dynamic=False)(*inputs)\n")
        f.write("for a, b in zip(got, want):\n    torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, equal_nan=True)\n")
        f.write("print('matches eager')\n")
    return path


def parse_seeds(s):
    if ":" in s:
        a, b = s.split(":")
        return list(range(int(a), int(b)))
    return [int(x) for x in s.split(",")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0:100", help="A:B (half-open range) or a comma list")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--timeout", type=float, default=180, help="seconds one case may take")
    ap.add_argument("--out", default="fuzz-out", help="where repro scripts and summary.json go")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main()
        return 0
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown fusion mode {m!r} (allowed: {', '.join(MODES)})")
    seeds = parse_seeds(args.seeds)
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    jobs = [{"seed": s, "mode": m} for s in seeds for m in modes]
    counts = collections.Counter()
    failures = []
    t0 = time.monotonic()

    def write_summary(repros=()):
        summary = {"cases": len(jobs), "done": sum(counts.values()), "counts": dict(counts),
                   "seconds": round(time.monotonic() - t0, 1),
                   "failures": [{"seed": j["seed"], "mode": j["mode"], "status": s, "detail": d[:2000]}
                                for j, s, d in failures], "repros": list(repros)}
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        return summary

    def on_result(job, status, detail):
        counts[status] += 1
        if sum(counts.values()) % 500 == 0:  # a long run's partial result survives an interruption
            write_summary()
        if status not in ("ok", "invalid"):
            failures.append((job, status, detail))
            print(f"\nFAIL seed {job['seed']} mode {job['mode']}: {status}: {detail.splitlines()[0] if detail else ''}",
                  file=sys.stderr, flush=True)
        done = sum(counts.values())
        end = "\r" if sys.stderr.isatty() else "\n"  # one updating line on a terminal
        if sys.stderr.isatty() or done % 50 == 0 or done == len(jobs):
            print(f"fuzz: {done}/{len(jobs)} cases, {dict(counts)}, {time.monotonic() - t0:.0f} s", end=end,
                  file=sys.stderr, flush=True)

    run_jobs(jobs, args.jobs, args.timeout, env, on_result)
    repros = []
    for job, status, detail in failures:
        keep = list(range(999)) if args.no_minimize else minimize(job["seed"], job["mode"], status, args.timeout, env)
        repros.append(write_repro(args.out, job["seed"], job["mode"], status, detail, keep))
    summary = write_summary(repros)
    print(f"\nfuzz: {len(jobs)} cases in {summary['seconds']} s: {dict(counts)}; "
          f"{len(failures)} failures{'; repros in ' + args.out if failures else ''}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
