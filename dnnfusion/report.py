"""What happened to each graph the backend compiled: ops seen, ops run in the core, fallbacks
with their reasons, kernels per call and planned memory. explain() prints these."""
import collections
import contextlib
import threading
from dataclasses import dataclass, field, fields


class FallbackWarning(RuntimeWarning):
    """A region of ops the core supports runs eagerly because compiling it failed (the reason is
    in the message and in explain()). Issued once per reason per process."""


_warned = set()
_warned_lock = threading.Lock()


def warn_fallback(reason, what="that region"):
    """Warns once per distinct reason that `what` runs eagerly. Reasons that differ only in file
    paths (each compile has its own source file) are one reason."""
    import re
    import warnings

    text = " | ".join(line.strip() for line in reason.splitlines() if line.strip())
    key = re.sub(r"\S*/\S*", "<path>", text)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    if len(text) > 1200:
        text = text[:1200] + " ..."
    warnings.warn(f"dnnfusion: {text}; {what} runs eagerly", FallbackWarning, stacklevel=2)


@dataclass(frozen=True)
class RegionStats:
    """What the core reports for one compiled region (csrc/python/module.cc region_stats, from
    CompileStats and the executor's ExecStats). Built from the core's dict with every key required
    and no other allowed, so a renamed or missing field fails here, loudly, not as a silent 0."""
    handle: int
    target: str
    threads: int
    # executor
    num_nodes: int
    kernels_per_call: int
    aliased_views: int
    arena_bytes: int
    naive_bytes: int
    scratch_bytes: int
    flops: int
    blocks: int
    irs_bytes: int
    generated_steps: int
    hooked_steps: int
    # compile
    passes: list  # (name, ms, detail) per pass, in order
    folded_nodes: int
    ops_imported: int
    ops_after_rewrite: int
    rules_applied: dict
    edge_rules: dict
    generated_functions: int
    profiled_pairs: int
    codegen_compile_ms: float
    codegen_cache_hit: bool
    generated_source: str
    target_counters: dict  # names declared by the target's glue (dnnfusion/targets/<name>.py)
    target_notes: dict
    fusion_blocks: list  # per block: ops, type, dominant, inputs_from, steps, internal_bytes
    plan_log: list

    @classmethod
    def from_core(cls, d, handle):
        names = {f.name for f in fields(cls)}
        given = set(d) | {"handle"}
        if given != names:
            raise RuntimeError(f"dnnfusion: the core's region stats do not match RegionStats: missing "
                               f"{sorted(names - given)}, unknown {sorted(given - names)}")
        from .targets import glue

        glue(d["target"]).check_stats(d)
        return cls(handle=handle, **d)

    @property
    def compile_ms(self):
        return sum(ms for _, ms, _ in self.passes)


@dataclass
class GraphReport:
    ops_total: collections.Counter = field(default_factory=collections.Counter)  # ATen op -> count
    ops_core: collections.Counter = field(default_factory=collections.Counter)
    fallbacks: dict = field(default_factory=dict)  # ATen op -> {reason: count}
    regions: list = field(default_factory=list)  # RegionStats, one per region
    notes: list = field(default_factory=list)  # whole-graph events (eager fallback, recompiles)
    prune: object = None  # PruneReport of the compile-time pass (options={"prune": r}), None if not applied
    frozen_numel: int = 0  # elements of the parameters/buffers handed to lowering as compile-time constants
    target_sections: list = field(default_factory=list)  # (title, text) of a target that compiled the whole graph

    def add_fallback(self, op, reason):
        self.fallbacks.setdefault(op, collections.Counter())[reason] += 1

    def clear_lowering(self):
        """Forgets what a lowering recorded (ops, fallbacks, regions), before the graph is lowered again."""
        for part in (self.ops_total, self.ops_core, self.fallbacks, self.regions):
            part.clear()

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
        return sum(r.kernels_per_call for r in self.regions)

    @property
    def peak_bytes(self):
        return max((r.arena_bytes + r.scratch_bytes for r in self.regions), default=0)


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
