"""Pruning plan: from the channel analysis and the scores to the indices each tensor keeps.

Precondition: a finished ChannelAnalysis (classes, frozen set, producers) of a graph whose first
placeholders are the tensors named `names`, plus per-producer scores (criteria.py).
Postcondition: `keep[name] = {dim: kept indices}` for every tensor that shrinks, chosen per group
(classes linked by a shared producer) as the highest-scoring classes, their number given by
keep_count (ratio, multiple_of) in C++; plus group/class counts for the report.
"""
from dataclasses import dataclass, field

import torch

from .. import _C
from .dependency import FROZEN, UnionFind


@dataclass
class Plan:
    keep: dict = field(default_factory=dict)  # tensor name -> {dim: LongTensor of kept indices}
    removed: set = field(default_factory=set)  # removed class roots
    groups: int = 0
    classes_before: int = 0
    classes_after: int = 0


def candidate_classes(an, producers):
    """Root of every producer channel that is not frozen, per producer (-1 where frozen)."""
    uf = an.uf
    frozen_root = uf.find(FROZEN)
    out = []
    for pr in producers:
        ids = an.param_ids_of(pr.param)[pr.dim]
        roots = uf.roots(ids)
        roots[roots == frozen_root] = -1
        out.append(roots)
    return out


def make_plan(an, names, producers, prod_scores, ratio, multiple_of, global_pruning, class_bonus=None):
    """class_bonus: optional {class root: score} replacing the producer-mean (bn_scale)."""
    roots_per_prod = candidate_classes(an, producers)
    # Classes linked by a shared producer form one group (a ratio applies per group).
    groups_uf = UnionFind()
    class_index = {}
    for roots in roots_per_prod:
        for r in torch.unique(roots).tolist():
            if r >= 0 and r not in class_index:
                class_index[r] = len(class_index)
                groups_uf.new_ids(1)
    for roots in roots_per_prod:
        rs = [class_index[r] + 1 for r in torch.unique(roots).tolist() if r >= 0]
        for r in rs[1:]:
            groups_uf.union(rs[0], r)
    # Class score: mean of its producer channels' scores.
    total = torch.zeros(len(class_index), dtype=torch.float64)
    count = torch.zeros(len(class_index), dtype=torch.float64)
    for roots, sc in zip(roots_per_prod, prod_scores):
        mask = roots >= 0
        if not mask.any():
            continue
        ci = torch.tensor([class_index[r] for r in roots[mask].tolist()], dtype=torch.long)
        total.index_add_(0, ci, sc[mask].double())
        count.index_add_(0, ci, torch.ones_like(ci, dtype=torch.float64))
    score = (total / count.clamp(min=1)).float()
    if class_bonus:
        for r, s in class_bonus.items():
            if r in class_index:
                score[class_index[r]] = s
    members = {}
    for r, ci in class_index.items():
        members.setdefault(groups_uf.find(ci + 1), []).append(ci)
    plan = Plan(groups=len(members), classes_before=len(class_index))
    keep_class = torch.ones(len(class_index), dtype=torch.bool)
    if global_pruning:
        budget = int(ratio * len(class_index) + 1e-9)
        floor = {g: _C.prune_keep_count(len(ms), 0.999, multiple_of) for g, ms in members.items()}
        order = torch.argsort(score, stable=True).tolist()
        left = {g: len(ms) for g, ms in members.items()}
        group_of = {ci: g for g, ms in members.items() for ci in ms}
        for ci in order:
            if budget == 0:
                break
            g = group_of[ci]
            if left[g] > floor[g]:
                keep_class[ci] = False
                left[g] -= 1
                budget -= 1
        for g, ms in members.items():  # round each group's count up to multiple_of
            ms_t = torch.tensor(ms)
            k = min(len(ms), -(-left[g] // multiple_of) * multiple_of)
            kept = _C.prune_select_keep(score[ms_t].contiguous(), k)
            keep_class[ms_t] = False
            keep_class[ms_t[kept]] = True
    else:
        for g, ms in members.items():
            ms_t = torch.tensor(ms)
            k = _C.prune_keep_count(len(ms), float(ratio), int(multiple_of))
            kept = _C.prune_select_keep(score[ms_t].contiguous(), k)
            keep_class[ms_t] = False
            keep_class[ms_t[torch.tensor(kept, dtype=torch.long)]] = True
    roots_of = {ci: r for r, ci in class_index.items()}
    plan.removed = {roots_of[ci] for ci in range(len(class_index)) if not keep_class[ci]}
    plan.classes_after = int(keep_class.sum())
    for p, name in enumerate(names):
        ids = an.param_ids_of(p)
        if ids is None:
            continue
        dims = {}
        for d, v in enumerate(ids):
            if v.numel() == 0:
                continue
            roots = an.uf.roots(v)
            gone = torch.tensor([int(r) in plan.removed for r in roots.tolist()], dtype=torch.bool)
            if gone.any():
                dims[d] = torch.nonzero(~gone).flatten()
        if dims:
            plan.keep[name] = dims
    return plan
