"""benchmarks/peak_probe.cc, the harness's machine probe: its core-to-core round trip (what says
whether a table was taken with the two vCPUs on cores that share a cache) and its argument errors."""
import json
import os
import shutil
import subprocess

import pytest

PROBE_SRC = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "peak_probe.cc")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    assert cxx, "the benchmarks need a C++ compiler, as the fused kernels do"
    exe = str(tmp_path_factory.mktemp("probe") / "peak_probe")
    r = subprocess.run([cxx, "-O2", "-std=c++17", "-pthread", PROBE_SRC, "-o", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _latency(probe, cpus=None):
    r = subprocess.run([probe, "--latency"], capture_output=True, text=True, timeout=60,
                       preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["core_to_core_ns"]


def test_round_trip_between_two_cpus(probe):
    allowed = sorted(os.sched_getaffinity(0))
    ns = _latency(probe)
    if len(allowed) >= 2:
        # A cache line's trip to another core and back: tens to hundreds of ns on any machine.
        assert 5 < ns < 100_000
    else:
        assert ns == -1


def test_one_cpu_has_no_round_trip(probe):
    assert _latency(probe, {sorted(os.sched_getaffinity(0))[0]}) == -1


@pytest.mark.parametrize("args", [[], ["0"], ["2", "0"], ["2", "1", "extra"], ["many"]])
def test_bad_arguments_are_refused_with_usage(probe, args):
    r = subprocess.run([probe, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "peak_probe" in r.stderr
