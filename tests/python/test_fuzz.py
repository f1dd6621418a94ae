"""The short fuzz run: 100 random programs (tests/fuzz/program.py) in all three fusion modes, each
in a worker process, so a crash or a hang counts against its case instead of ending the suite.
The long run is `python tests/fuzz/fuzz.py --seeds 0:10000` (see tests/fuzz/README.md)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ = os.path.join(HERE, "..", "fuzz", "fuzz.py")


def test_program_generation_is_replayable():
    sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
    from program import generate

    a, b = generate(1234), generate(1234)
    assert a.source() == b.source() and a.params == b.params and a.inputs == b.inputs
    assert generate(1235).source() != a.source()
    (m1, x1), (m2, x2) = a.build(), b.build()
    assert all((p.equal(q)) for p, q in zip(m1.parameters(), m2.parameters()))
    assert all(u.equal(v) for u, v in zip(x1, x2))


def test_the_runner_counts_a_crash_and_writes_a_minimized_repro(tmp_path):
    # A worker that dies inside its case (here: told to by the environment) is a crash of that case.
    env = dict(os.environ, DNNFUSION_FUZZ_CRASH_SEED="3")
    r = subprocess.run([sys.executable, FUZZ, "--seeds", "2,3", "--modes", "none", "--jobs", "1", "--out", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["counts"] == {"ok": 1, "crash": 1}
    assert summary["failures"][0]["seed"] == 3 and "signal" in summary["failures"][0]["detail"]
    repro = (tmp_path / "repro_seed3_none.py").read_text()
    assert "class Fuzzed" in repro and "torch.compile" in repro


def test_short_fuzz_run_has_no_crash_hang_fallback_or_wrong_result(tmp_path):
    r = subprocess.run([sys.executable, FUZZ, "--seeds", "0:100", "--jobs", "2", "--timeout", "300", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=1500)
    summary = json.loads((tmp_path / "summary.json").read_text())
    print(f"\nfuzz: {summary['cases']} cases in {summary['seconds']} s: {summary['counts']}")
    assert r.returncode == 0 and summary["counts"].get("ok", 0) + summary["counts"].get("invalid", 0) == 300, \
        json.dumps(summary["failures"], indent=1)[:6000]


# Seeds that once failed (an expanded output view, a region reading an earlier region's output,
# an attention store that moved the innermost dim, regions reading earlier regions, a fused alias
# of a graph input read by a library view, a GEMM template reading the last dim of a 0-d bias, and
# a group norm of one-element groups where eager's float32 is the inaccurate side).
REGRESSIONS = [20, 68, 812, 1727, 1845, 3552, 4324, 5232, 5828]


def test_seeds_that_once_failed_now_match_eager():
    sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
    import fuzz

    results = {(s, m): fuzz.run_case(s, m) for s in REGRESSIONS for m in fuzz.MODES}
    assert all(status == "ok" for status, _ in results.values()), {k: v for k, v in results.items() if v[0] != "ok"}
