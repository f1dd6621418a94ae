"""The report of a pruning run: per-layer channels (or sparsity) before/after, parameter and FLOP
counts, the groups that were pruned and what kept channels from being pruned."""
from dataclasses import dataclass, field

import torch


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def count_flops(model, example_inputs):
    """FLOPs of one forward at the example inputs (torch's flop counter: conv/matmul/attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(*example_inputs)
    return fc.get_total_flops()


@dataclass
class LayerChange:
    name: str
    kind: str
    before: tuple
    after: tuple


@dataclass
class PruneReport:
    criterion: str
    ratio: float
    structured: bool
    params_before: int = 0
    params_after: int = 0
    flops_before: int = 0
    flops_after: int = 0
    layers: list = field(default_factory=list)  # LayerChange: (out, in) channels, or (numel, zeros)
    groups: int = 0
    classes_before: int = 0
    classes_after: int = 0
    frozen_by: dict = field(default_factory=dict)  # op name -> count of ops that froze channels
    kept: dict = field(default_factory=dict)  # tensor name -> {dim: kept indices} (structured)

    @property
    def param_reduction(self):
        return 1.0 - self.params_after / self.params_before if self.params_before else 0.0

    @property
    def flop_reduction(self):
        return 1.0 - self.flops_after / self.flops_before if self.flops_before else 0.0

    def __str__(self):
        lines = [f"dnnfusion.prune: criterion={self.criterion} ratio={self.ratio} "
                 f"{'structured' if self.structured else 'unstructured'}",
                 f"  parameters {self.params_before:,} -> {self.params_after:,} "
                 f"(-{100 * self.param_reduction:.1f}%)",
                 f"  FLOPs      {self.flops_before:,} -> {self.flops_after:,} (-{100 * self.flop_reduction:.1f}%)"]
        if self.structured:
            lines.append(f"  {self.groups} prunable groups, {self.classes_before} -> {self.classes_after} channel classes")
            if self.frozen_by:
                lines.append("  channels kept whole by ops the analysis does not model: "
                             + ", ".join(f"{k} x{v}" for k, v in sorted(self.frozen_by.items())))
            lines.append("  layer: out_channels before -> after, in_channels before -> after")
        else:
            lines.append("  layer: sparsity")
        for l in self.layers:
            if self.structured:
                lines.append(f"    {l.name} ({l.kind}): out {l.before[0]} -> {l.after[0]}, in {l.before[1]} -> {l.after[1]}")
            else:
                lines.append(f"    {l.name} ({l.kind}): {l.after[1] / max(l.after[0], 1):.3f} of {l.after[0]} zero")
        return "\n".join(lines)
