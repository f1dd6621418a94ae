"""Pruning quality and speed: AukC's combined score against established criteria.

Quality: scikit-learn's digits (8x8 images, 1797 samples, shipped with the package). Per seed: train
a small ResNet-style CNN to convergence, prune 50% of the channels of every prunable group with each
criterion (dnnfusion.prune: aukc, l1, l2, random, bn_scale; Torch-Pruning's MagnitudeImportance on
the same model), fine-tune every pruned model with the same fixed budget, report test accuracy
before/after; plus the ablations ω=1, λ=1 and ω=0 of the combined score.
Speed: resnet50 pruned at 0.5 vs unpruned, batch 1 at 224x224, eager and dnnfusion, interleaved
rounds (each call after a 10 ms idle gap), median.

    pip install -r benchmarks/requirements.txt
    python benchmarks/prune_eval.py --seeds 0 1 2 [--no-latency]
"""
import argparse
import copy
import json
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import dnnfusion
from dnnfusion.zoo import idle_then_time


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.short is None else self.short(x)))


class SmallResNet(nn.Module):
    def __init__(self, width=32, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = nn.Sequential(Block(width, width, 1), Block(width, width, 1))
        self.layer2 = nn.Sequential(Block(width, 2 * width, 2), Block(2 * width, 2 * width, 1))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def load_digits(seed):
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    d = sk_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    return xtr, ytr, xte, yte


def train(model, x, y, epochs, lr, seed, batch=64):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs * ((len(x) + batch - 1) // batch))
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
    model.eval()
    return model


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    return 100.0 * (model(x).argmax(1) == y).float().mean().item()


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def torch_pruning_magnitude(model, example, ratio):
    import torch_pruning as tp

    m = copy.deepcopy(model).eval()
    pruner = tp.pruner.BasePruner(m, example, importance=tp.importance.MagnitudeImportance(p=2),
                                  pruning_ratio=ratio, ignored_layers=[m.fc])
    pruner.step()
    return m


METHODS = [
    ("aukc (ω=0.8, λ=0.5)", dict(criterion="aukc")),
    ("l1", dict(criterion="l1")),
    ("l2", dict(criterion="l2")),
    ("random", dict(criterion="random")),
    ("bn_scale", dict(criterion="bn_scale")),
    ("Torch-Pruning magnitude (L2)", None),
    ("ablation ω=1 (weights only)", dict(criterion="aukc", omega=1.0)),
    ("ablation λ=1 (orth. + act.)", dict(criterion="aukc", lam=1.0)),
    ("ablation ω=0 (activation only)", dict(criterion="aukc", omega=0.0)),
]


def quality(seeds, ratio, train_epochs, ft_epochs):
    rows = {name: [] for name, _ in METHODS}
    base_acc, base_params = [], 0
    for seed in seeds:
        xtr, ytr, xte, yte = load_digits(seed)
        torch.manual_seed(seed)
        base = train(SmallResNet(), xtr, ytr, train_epochs, 3e-3, seed)
        base_acc.append(accuracy(base, xte, yte))
        base_params = n_params(base)
        calib = [xtr[i:i + 64] for i in range(0, 256, 64)]
        example = xtr[:64]
        for name, kw in METHODS:
            t0 = time.perf_counter()
            if kw is None:
                pruned = torch_pruning_magnitude(base, example, ratio)
            else:
                pruned = dnnfusion.prune(base, ratio, example, calib_data=calib, seed=seed, **kw)
            prune_s = time.perf_counter() - t0
            acc0 = accuracy(pruned, xte, yte)
            torch.manual_seed(seed)
            tuned = train(pruned, xtr, ytr, ft_epochs, 1e-3, seed + 100)
            rows[name].append(dict(seed=seed, acc_pruned=acc0, acc_finetuned=accuracy(tuned, xte, yte),
                                   params=n_params(pruned), prune_s=prune_s))
        print(f"seed {seed}: unpruned {base_acc[-1]:.2f}% " +
              ", ".join(f"{n.split(' ')[0]} {rows[n][-1]['acc_finetuned']:.2f}" for n, _ in METHODS), flush=True)
    return base_acc, base_params, rows


def latency(runs, threads):
    import torchvision

    torch.set_num_threads(threads)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    pruned, rep = dnnfusion.prune(model, 0.5, x, return_report=True)
    prune_s = time.perf_counter() - t0
    systems = {}
    with torch.no_grad():
        for tag, m in (("unpruned", model), ("pruned 0.5", pruned)):
            systems[f"{tag} eager"] = m
            torch._dynamo.reset()
            c = torch.compile(m, backend="dnnfusion", options={"threads": threads}, dynamic=False)
            c(x)
            systems[f"{tag} dnnfusion"] = c
        for f in systems.values():  # warm-up
            f(x)
            f(x)
        times = {k: [] for k in systems}
        for _ in range(runs):  # interleaved rounds
            for k, f in systems.items():
                times[k].append(1e3 * idle_then_time(f, x))
    return dict(prune_s=prune_s, params_before=rep.params_before, params_after=rep.params_after,
                flops_before=rep.flops_before, flops_after=rep.flops_after,
                median_ms={k: statistics.median(v) for k, v in times.items()}, times_ms=times)


def markdown(base_acc, base_params, rows, lat):
    def ms(v):
        return f"{statistics.mean(v):.2f} ± {statistics.pstdev(v):.2f}"

    out = []
    if rows:
        out = ["| method | params | acc. after pruning (no fine-tune) | acc. after fine-tune | Δ vs unpruned |",
               "|---|---|---|---|---|",
               f"| unpruned | {base_params:,} | {ms(base_acc)} | — | — |"]
        for name, _ in METHODS:
            r = rows[name]
            ft = [e["acc_finetuned"] for e in r]
            out.append(f"| {name} | {r[0]['params']:,} | {ms([e['acc_pruned'] for e in r])} | {ms(ft)} | "
                       f"{statistics.mean(ft) - statistics.mean(base_acc):+.2f} |")
    text = "\n".join(out)
    if lat:
        m = lat["median_ms"]
        text += ("\n\n| resnet50, batch 1, 224x224 | eager ms | dnnfusion ms |\n|---|---|---|\n"
                 f"| unpruned ({lat['params_before'] / 1e6:.1f} M params, {lat['flops_before'] / 1e9:.2f} GFLOP) | "
                 f"{m['unpruned eager']:.1f} | {m['unpruned dnnfusion']:.1f} |\n"
                 f"| pruned 0.5 ({lat['params_after'] / 1e6:.1f} M params, {lat['flops_after'] / 1e9:.2f} GFLOP) | "
                 f"{m['pruned 0.5 eager']:.1f} | {m['pruned 0.5 dnnfusion']:.1f} |")
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--train-epochs", type=int, default=30)
    ap.add_argument("--ft-epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--no-quality", action="store_true", help="only the resnet50 latency part")
    ap.add_argument("--out", default=None, help="JSON file (default benchmarks/results/prune_eval[_latency].json)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base_acc, base_params, rows = ([], 0, {}) if args.no_quality else quality(args.seeds, args.ratio,
                                                                                args.train_epochs, args.ft_epochs)
    lat = None if args.no_latency else latency(args.runs, args.threads)
    if args.out is None:
        stem = "prune_eval_latency" if args.no_quality else "prune_eval"
        args.out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", stem + ".json")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(dict(args=vars(args), unpruned_acc=base_acc, unpruned_params=base_params, methods=rows,
                       latency=lat), f, indent=1)
    print(markdown(base_acc, base_params, rows, lat))


if __name__ == "__main__":
    main()
