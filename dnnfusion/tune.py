"""``python -m dnnfusion.tune <model> [...]``: pre-fills the convolution tuning database.

Compiles each named zoo model (or ``module:attr`` returning an nn.Module) with
``options={"tune": True}``: every convolution workload's NCHW[x]c candidates that the database
lacks are measured (progress bar) and stored, so later compiles on this kind of machine — same CPU,
ISA and thread count — pick tuned kernels and run the global layout search without measuring.
"""
import argparse
import importlib
import sys
import time

import torch


def _load(name, batch, shape):
    from . import zoo

    if name in zoo.ALL:
        model, make = zoo.build(name)
        return model, make(batch)
    if ":" in name:
        mod, attr = name.split(":", 1)
        model = getattr(importlib.import_module(mod), attr)()
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"{name} did not return an nn.Module")
        return model.eval(), (torch.randn(batch, *shape),)
    raise ValueError(f"unknown model {name!r}: a zoo model ({', '.join(zoo.ALL)}) or module:factory")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dnnfusion.tune", description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="zoo model names (e.g. resnet50) or module:factory")
    ap.add_argument("--batch", type=int, default=1, help="batch size to tune for (default 1)")
    ap.add_argument("--shape", default="3,224,224",
                    help="input shape without the batch, for module:factory models (default 3,224,224)")
    ap.add_argument("--threads", type=int, default=None, help="worker threads (default: physical cores)")
    ap.add_argument("--db", default=None, help="tuning database file (default $DNNFUSION_TUNING_DB or "
                                                 "~/.cache/dnnfusion/tuning_db.txt)")
    args = ap.parse_args(argv)
    if args.batch < 1:
        ap.error("--batch must be >= 1")
    try:
        shape = tuple(int(d) for d in args.shape.split(","))
        assert all(d > 0 for d in shape)
    except (ValueError, AssertionError):
        ap.error(f"--shape must be positive comma-separated ints, got {args.shape!r}")
    from .report import collecting
    from .backend import dnnfusion_backend
    import functools

    opts = {"tune": True}
    if args.threads:
        opts["threads"] = args.threads
    if args.db is not None:
        opts["tuning_db"] = args.db
    for name in args.models:
        try:
            model, inputs = _load(name, args.batch, shape)
        except Exception as e:
            print(f"[tune] {name}: {e}", file=sys.stderr)
            return 2
        torch._dynamo.reset()
        t0 = time.time()
        compiled = torch.compile(model, backend=functools.partial(dnnfusion_backend, options=opts), dynamic=False)
        with collecting() as graphs, torch.no_grad():
            compiled(*inputs)
        regions = [r for g in graphs for r in g.regions]
        tuned = sum(r.target_counters["convs_tuned_now"] for r in regions)
        convs = sum(r.target_counters["convs_blocked"] for r in regions)
        methods = sorted({r.target_notes["layout_method"] for r in regions if r.target_counters["convs_blocked"]})
        print(f"[tune] {name} batch {args.batch}: {convs} convolutions, {tuned} workload/block entries measured "
              f"now, schemes {', '.join(methods) or '-'}, {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
