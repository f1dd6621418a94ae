"""What happened to each graph the backend compiled: ops seen, ops run in the core, fallbacks
with their reasons, kernels per call and planned memory. explain() prints these."""
import collections
import contextlib
import threading
from dataclasses import dataclass, field


@dataclass
class GraphReport:
    ops_total: collections.Counter = field(default_factory=collections.Counter)  # ATen op -> count
    ops_core: collections.Counter = field(default_factory=collections.Counter)
    fallbacks: dict = field(default_factory=dict)  # ATen op -> {reason: count}
    regions: list = field(default_factory=list)  # stats dicts from the core, one per region
    notes: list = field(default_factory=list)  # whole-graph events (eager fallback, recompiles)
    prune: object = None  # PruneReport of the compile-time pass (options={"prune": r}), None if not applied
    frozen_numel: int = 0  # elements of the parameters/buffers handed to lowering as compile-time constants

    def add_fallback(self, op, reason):
        self.fallbacks.setdefault(op, collections.Counter())[reason] += 1

    @property
    def n_total(self):
        return sum(self.ops_total.values())

    @property
    def n_core(self):
        return sum(self.ops_core.values())

    @property
    def fallback_ops_per_call(self):
        return self.n_total - self.n_core

    @property
    def kernels_per_call(self):
        return sum(r["kernels_per_call"] for r in self.regions)

    @property
    def peak_bytes(self):
        return max((r["arena_bytes"] + r["scratch_bytes"] for r in self.regions), default=0)


_local = threading.local()


def current_collector():
    return getattr(_local, "collector", None)


@contextlib.contextmanager
def collecting():
    """Collects a GraphReport for every graph compiled inside the block (explain() uses this)."""
    prev = current_collector()
    reports = []
    _local.collector = reports
    try:
        yield reports
    finally:
        _local.collector = prev


def publish(report: GraphReport):
    c = current_collector()
    if c is not None:
        c.append(report)
