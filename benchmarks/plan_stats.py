"""What the compiler produced, per model and fusion mode: kernels per call, intermediate-result
bytes, fusion blocks, generated and hooked steps, arena bytes. Two builds that should plan alike
(a refactoring, a move between files) give identical JSON; diff them with --compare.

    python benchmarks/plan_stats.py --models resnet50,bert --out before.json      # one build
    python benchmarks/plan_stats.py --models resnet50,bert --out after.json       # the other
    python benchmarks/plan_stats.py --compare before.json after.json

Yellow fusion cells are measured (timing noise can flip them), so point both builds at one profile
database holding the first build's answers ($DNNFUSION_PROFILE_DB; copy it before the second run),
and at no tuning database ($DNNFUSION_TUNING_DB=, heuristic conv knobs) so neither measures anything.
"""
import argparse
import json
import sys

FIELDS = ("kernels_per_call", "irs_bytes", "blocks", "generated_steps", "hooked_steps", "arena_bytes")


def collect(models, batch):
    import torch

    from dnnfusion import zoo
    from dnnfusion.report import collecting

    torch.set_num_threads(2)
    out = {}
    for name in models:
        model, make_inputs = zoo.build(name)
        x = make_inputs(batch)
        for mode in ("none", "tvm", "dnnfusion"):
            torch._dynamo.reset()
            f = torch.compile(model, backend="dnnfusion", options={"fusion": mode, "layout": mode != "none"}, dynamic=False)
            with torch.no_grad(), collecting() as graphs:
                f(*x)
            regions = [r for g in graphs for r in g.regions]
            # regions are RegionStats; builds before it reported plain dicts
            field = lambda r, k: r[k] if isinstance(r, dict) else getattr(r, k)  # noqa: E731
            out[f"{name}/{mode}"] = {k: sum(field(r, k) for r in regions) for k in FIELDS}
            print(name, mode, out[f"{name}/{mode}"], flush=True)
    return out


def compare(a_path, b_path):
    a, b = (json.load(open(p)) for p in (a_path, b_path))
    differ = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    for k in differ:
        print(f"DIFF {k}: {a.get(k)} vs {b.get(k)}")
    print(f"{len(set(a) | set(b))} model/mode pairs compared, {len(differ)} differ")
    return 1 if differ else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,efficientnet_b0,bert,vit_b_16,convnext_tiny")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", help="write the JSON here")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two JSON files and exit")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    stats = collect(args.models.split(","), args.batch)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(stats, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
