"""Channel importance: per producer (conv / linear weight) one score per output channel, higher =
more important, and the aggregation of those scores over a coupled channel class.

Precondition: the producer's weight as a (channels, fan_in) float32 matrix and, for "aukc", the
activation L1 of each channel over the calibration data. Postcondition: a float32 vector per
producer, comparable across producers of one group (ranks in [0, 1] for "aukc", values divided by
the layer mean for the norm criteria, uniform draws for "random").
The arithmetic lives in the C++ core (csrc/prune/channel_scores); this file only feeds it.
"""
import torch

from .. import _C

CRITERIA = ("aukc", "l1", "l2", "random", "bn_scale")


def weight_rows(w, dim):
    """The producer weight with its output-channel dim first, one flattened filter per row."""
    return w.detach().movedim(dim, 0).reshape(w.shape[dim], -1).float().contiguous()


def orthogonality(rows):
    return _C.prune_orthogonality(rows)


def l2_norms(rows):
    return _C.prune_row_l2(rows)


def l1_norms(rows):
    return _C.prune_row_l1(rows)


def rank(v):
    return _C.prune_rank(v.float().contiguous())


def aukc(rows, act_l1, omega, lam):
    """S = ω(λ·rank(−orth) + (1−λ)·rank(L2)) + (1−ω)·rank(L1(A)), computed in C++."""
    return _C.prune_combined(orthogonality(rows), l2_norms(rows), act_l1.float().contiguous(), float(omega), float(lam))


def _by_mean(v):
    m = float(v.mean())
    return v / m if m > 0 else torch.ones_like(v)


def producer_scores(criterion, rows, act_l1=None, omega=0.8, lam=0.5, generator=None):
    if criterion == "aukc":
        return aukc(rows, act_l1, omega, lam)
    if criterion in ("l1", "bn_scale"):  # bn_scale: groups without a BN layer fall back to L1
        return _by_mean(l1_norms(rows))
    if criterion == "l2":
        return _by_mean(l2_norms(rows))
    if criterion == "random":
        return torch.rand(rows.shape[0], generator=generator)
    raise ValueError(f"unknown criterion {criterion!r}; valid: {', '.join(CRITERIA)}")


class ActivationL1(torch.fx.Interpreter):
    """Runs the traced graph on calibration batches and adds up |activation| per channel at the
    chosen nodes (the graph-level counterpart of a forward hook), accumulated in C++."""

    def __init__(self, gm, sites):
        super().__init__(gm)
        self.sites = sites  # node -> dim
        self.sums = {}

    def run_node(self, n):
        value = super().run_node(n)
        dim = self.sites.get(n)
        if dim is not None and isinstance(value, torch.Tensor):
            x = value.detach().float().contiguous()
            c = x.shape[dim]
            outer = 1
            for s in x.shape[:dim]:
                outer *= s
            x3 = x.reshape(outer, c, -1)
            acc = self.sums.get(n)
            if acc is None:
                acc = self.sums[n] = torch.zeros(c, dtype=torch.float64)
            _C.prune_accumulate_abs(x3, acc)
        return value
