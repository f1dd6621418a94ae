"""dnnfusion.explain(model, *example_inputs): what ran in the core, what fell back and why."""
import collections
import functools

import torch

from .report import collecting


class ExplainReport:
    def __init__(self, graphs):
        self.graphs = graphs

    @property
    def ops_total(self):
        c = collections.Counter()
        for g in self.graphs:
            c.update(g.ops_total)
        return c

    @property
    def ops_core(self):
        c = collections.Counter()
        for g in self.graphs:
            c.update(g.ops_core)
        return c

    @property
    def fallbacks(self):
        out = {}
        for g in self.graphs:
            for op, reasons in g.fallbacks.items():
                out.setdefault(op, collections.Counter()).update(reasons)
        return out

    @property
    def n_total(self):
        return sum(self.ops_total.values())

    @property
    def n_core(self):
        return sum(self.ops_core.values())

    @property
    def coverage(self):
        """Fraction of ATen ops (by count) that run in the core."""
        return self.n_core / self.n_total if self.n_total else 0.0

    @property
    def core_kernels_per_call(self):
        return sum(g.kernels_per_call for g in self.graphs)

    @property
    def kernels_per_call(self):
        """Launches per forward call: core kernels plus the ATen ops that run eagerly."""
        return self.core_kernels_per_call + sum(g.fallback_ops_per_call for g in self.graphs)

    @property
    def regions(self):
        return [r for g in self.graphs for r in g.regions]

    @property
    def peak_bytes(self):
        return max((g.peak_bytes for g in self.graphs), default=0)

    @property
    def notes(self):
        return [n for g in self.graphs for n in g.notes]

    def __str__(self):
        lines = ["dnnfusion.explain", "================="]
        lines.append(f"graphs compiled        : {len(self.graphs)}")
        lines.append(f"ATen ops seen          : {self.n_total}")
        lines.append(f"ops run in the core    : {self.n_core} ({100 * self.coverage:.1f}%)")
        lines.append(f"core regions           : {len(self.regions)}")
        lines.append(f"kernels per call       : {self.kernels_per_call} "
                     f"({self.core_kernels_per_call} core kernels + {self.n_total - self.n_core} eager ATen ops)")
        lines.append(f"peak planned memory    : {self.peak_bytes / 2**20:.2f} MiB "
                     "(largest region arena + scratch; weights excluded)")
        folded = sum(r.get("folded_nodes", 0) for r in self.regions)
        lines.append(f"constant-folded nodes  : {folded}")
        lines.append("")
        lines.append("ops seen (count, in core):")
        core = self.ops_core
        for op, n in sorted(self.ops_total.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {op:<60} {n:5d} {core.get(op, 0):5d}")
        lines.append("")
        fb = self.fallbacks
        if fb:
            lines.append("fallback ops (run eagerly):")
            for op, reasons in sorted(fb.items()):
                for reason, n in reasons.items():
                    lines.append(f"  {op} x{n}: {reason}")
        else:
            lines.append("fallback ops: none")
        if self.notes:
            lines.append("")
            lines.append("notes:")
            lines.extend(f"  {n}" for n in self.notes)
        return "\n".join(lines)

    __repr__ = __str__


def explain(model, *example_inputs, options=None):
    """Compiles `model` with the dnnfusion backend on `example_inputs` (under no_grad) and reports
    the ops seen, the ops run in the core, the fallbacks with reasons, kernels per call and the
    planned peak memory. The model is run once."""
    from .backend import dnnfusion_backend

    backend = functools.partial(dnnfusion_backend, options=options)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with collecting() as graphs, torch.no_grad():
        compiled(*example_inputs)
    return ExplainReport(list(graphs))
