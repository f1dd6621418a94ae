"""dnnfusion.explain(model, *example_inputs): what ran in the core, what fell back and why."""
import collections
import functools

import torch

from .report import collecting


class ExplainReport:
    def __init__(self, graphs, mode="dnnfusion", per_mode=None, graph_file=None):
        self.graphs = graphs
        self.mode = mode
        # fusion mode -> {"kernels", "irs_bytes", "blocks", "compile_ms"} for the modes compared
        self.per_mode = per_mode or {}
        self.graph_file = graph_file

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

    # ---- fusion (DNNFusion Table 5 quantities) ----
    @property
    def ops_imported(self):
        return sum(r.ops_imported for r in self.regions)

    @property
    def ops_after_rewrite(self):
        return sum(r.ops_after_rewrite for r in self.regions)

    @property
    def rules_applied(self):
        c = collections.Counter()
        for r in self.regions:
            c.update(r.rules_applied)
        return c

    @property
    def irs_bytes(self):
        """Bytes of intermediate results written to memory per call (all regions)."""
        return sum(r.irs_bytes for r in self.regions)

    @property
    def fusion_blocks(self):
        return [b for r in self.regions for b in r.fusion_blocks]

    @property
    def edge_rules(self):
        c = collections.Counter()
        for r in self.regions:
            c.update(r.edge_rules)
        return c

    @property
    def compile_ms(self):
        return sum(r.compile_ms for r in self.regions)

    @property
    def codegen_compile_ms(self):
        return sum(r.codegen_compile_ms for r in self.regions)

    def _fusion_lines(self):
        lines = ["", f"fusion (mode {self.mode!r}):"]
        lines.append(f"  ops imported / after rewriting : {self.ops_imported} / {self.ops_after_rewrite}")
        rules = self.rules_applied
        if rules:
            lines.append("  rewrite rules applied          : " +
                         ", ".join(f"{k} x{v}" for k, v in sorted(rules.items(), key=lambda kv: -kv[1])))
        else:
            lines.append("  rewrite rules applied          : none")
        blocks = self.fusion_blocks
        multi = [b for b in blocks if len(b["ops"]) > 1]
        lines.append(f"  blocks                         : {len(blocks)} ({len(multi)} fused, "
                     f"{sum(len(b['ops']) for b in multi)} ops inside them)")
        lines.append(f"  IRS bytes materialized / call  : {self.irs_bytes / 2**20:.2f} MiB")
        cached = all(r.codegen_cache_hit for r in self.regions if r.generated_functions)
        lines.append(f"  compile time                   : {self.compile_ms:.0f} ms "
                     f"(system compiler {self.codegen_compile_ms:.0f} ms{', kernel cache hit' if cached else ''})")
        if self.per_mode:
            lines.append("  per mode                       : mode        kernels   IRS MiB   blocks   compile ms")
            for m, d in self.per_mode.items():
                lines.append(f"                                   {m:<10} {d['kernels']:8d} {d['irs_bytes'] / 2**20:9.2f}"
                             f" {d['blocks']:8d} {d['compile_ms']:12.0f}")
        if self.edge_rules:
            lines.append("  in-block edges (producer -> consumer: code-generation rule):")
            for k, v in sorted(self.edge_rules.items(), key=lambda kv: -kv[1]):
                lines.append(f"    {k:<58} {v:5d}")
        if multi:
            lines.append("  fused blocks (type, dominant op: ops -> steps):")
            for i, b in enumerate(multi[:60]):
                dom = b["dominant"] or "-"
                lines.append(f"    [{b['type']}, {dom}] {' + '.join(b['ops'])} -> {', '.join(b.get('steps', []))}")
            if len(multi) > 60:
                lines.append(f"    ... {len(multi) - 60} more")
        if self.graph_file:
            lines.append(f"  fused graph drawn to           : {self.graph_file}")
        return lines

    def _target_lines(self):
        """Each target's own section (dnnfusion/targets/<name>.py), for the targets that ran here."""
        from .targets import glue

        lines = []
        for name in sorted({r.target for r in self.regions}):
            lines.extend(glue(name).explain_lines(self.regions))
        return lines

    @property
    def targets(self):
        return sorted({r.target for r in self.regions})

    def __str__(self):
        lines = ["dnnfusion.explain", "================="]
        lines.append(f"graphs compiled        : {len(self.graphs)}")
        lines.append(f"ATen ops seen          : {self.n_total}")
        lines.append(f"ops run in the core    : {self.n_core} ({100 * self.coverage:.1f}%)")
        lines.append(f"core regions           : {len(self.regions)}"
                     + (f" (target {', '.join(self.targets)})" if self.regions else ""))
        lines.append(f"kernels per call       : {self.kernels_per_call} "
                     f"({self.core_kernels_per_call} core kernels + {self.n_total - self.n_core} eager ATen ops)")
        lines.append(f"peak planned memory    : {self.peak_bytes / 2**20:.2f} MiB "
                     "(largest region arena + scratch; weights excluded)")
        folded = sum(r.folded_nodes for r in self.regions)
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
        lines.extend(self._fusion_lines())
        lines.extend(self._target_lines())
        for g in self.graphs:
            for title, text in g.target_sections:
                lines.extend(["", f"{title}:"] + [f"  {line}" for line in text.splitlines()])
        if self.notes:
            lines.append("")
            lines.append("notes:")
            lines.extend(f"  {n}" for n in self.notes)
        return "\n".join(lines)

    __repr__ = __str__


def _compile_and_collect(model, example_inputs, options):
    from .backend import dnnfusion_backend

    torch._dynamo.reset()
    backend = functools.partial(dnnfusion_backend, options=options)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with collecting() as graphs, torch.no_grad():
        compiled(*example_inputs)
    return list(graphs)


def explain(model, *example_inputs, options=None, compare_modes=True, graph=None):
    """Compiles `model` with the dnnfusion backend on `example_inputs` (under no_grad) and reports
    the ops seen, the ops run in the core, the fallbacks with reasons, kernels per call, planned peak
    memory, and the fusion section: ops before/after rewriting, rules applied, the fused blocks with
    their mapping types, IRS bytes and compile time. With `compare_modes` the model is also compiled
    in the other fusion modes for a kernels/IRS comparison. `graph="fused.svg"` draws the fused
    graph (graphviz `dot` if installed, else a text rendering written to that path).
    A model from ``dnnfusion.compile`` is reported as it was compiled (its options, its last input
    signature; inputs given here are run through it first, compiling their signature if new)."""
    from .compiled_model import CompiledModel

    if isinstance(model, CompiledModel):
        report = _explain_compiled(model, example_inputs, options)
    else:
        report = _explain_module(model, example_inputs, options, compare_modes)
    if graph:
        from .fused_graph import draw_fused_graph

        report.graph_file = draw_fused_graph(report, graph)
    return report


def _explain_module(model, example_inputs, options, compare_modes):
    from .options import parse_options

    if not example_inputs:
        raise TypeError("dnnfusion.explain(model, *example_inputs): no example inputs given; the model is compiled "
                        "on them (e.g. dnnfusion.explain(model, x))")
    opts = dict(options or {})
    mode = parse_options(opts).fusion
    per_mode = {}
    graphs = None
    modes = ("none", "tvm", "dnnfusion") if compare_modes else (mode,)
    for m in modes:
        gs = _compile_and_collect(model, example_inputs, dict(opts, fusion=m))
        regions = [r for g in gs for r in g.regions]
        per_mode[m] = dict(kernels=sum(g.kernels_per_call for g in gs),
                           irs_bytes=sum(r.irs_bytes for r in regions),
                           blocks=sum(r.blocks for r in regions),
                           compile_ms=sum(r.compile_ms for r in regions))
        if m == mode:
            graphs = gs
    if graphs is None:
        graphs = _compile_and_collect(model, example_inputs, opts)
    return ExplainReport(graphs, mode=mode, per_mode=per_mode if compare_modes else None)


def _explain_compiled(compiled, example_inputs, options):
    if options is not None:
        raise ValueError("dnnfusion.explain: a model from dnnfusion.compile keeps the options it was compiled with; "
                         "pass options=None (or explain the original module with these options)")
    if example_inputs:
        with torch.no_grad():
            compiled(*example_inputs)
    return compiled.explain()
