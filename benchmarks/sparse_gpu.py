"""Sparse convolutions on NVIDIA GPUs: kernels generated for their weights (dnnfusion.cuda) against
cuDNN, per layer and end to end.

Per layer (ResNet-50's and VGG-16's 3x3/1x1 convolutions and the kinds of layers the ICT paper
measures), batch sizes and sparsities given on the command line, it times with CUDA events:

  ours        dnnfusion.cuda.sparse_conv2d at that sparsity (zero weights cost no instruction)
  dense_tpl   our own template at sparsity 0 (what the rewrite starts from)
  cudnn_fp32  torch.nn.functional.conv2d with TF32 off
  cudnn_tf32  the same with TF32 on (Ampere and later)
  cusparse    im2col (F.unfold) + torch.sparse.mm with the weights as CSR (cuSPARSE SpMM)

and end to end a 90%-pruned resnet50 (dnnfusion.prune(..., structured=False)) compiled with
torch.compile(backend="dnnfusion") against eager (cuDNN FP32 and TF32). Every generated kernel's
output is checked against cuDNN FP32 before it is timed.

Without a GPU, --compile-only reports what can be measured on any machine: per layer and sparsity the
template compile (once per shape, cached on disk), the rewrite and ptxas times per weight set, and the
SASS FFMA count against the dense template's.

    python benchmarks/sparse_gpu.py --suite resnet50 --batches 1,8,64 --sparsities 0.5,0.7,0.9,0.95,0.99
    python benchmarks/sparse_gpu.py --compile-only --suite resnet50 --sparsities 0.9 --arch sm_90
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dnnfusion  # noqa: E402
from dnnfusion import cuda  # noqa: E402

# (name, C, K, R, stride, padding, H=W)
SUITES = {
    "resnet50": [
        ("res2_3x3", 64, 64, 3, 1, 1, 56), ("res2_1x1_in", 256, 64, 1, 1, 0, 56), ("res2_1x1_out", 64, 256, 1, 1, 0, 56),
        ("res3_3x3", 128, 128, 3, 1, 1, 28), ("res3_1x1_in", 512, 128, 1, 1, 0, 28),
        ("res4_3x3", 256, 256, 3, 1, 1, 14), ("res4_1x1_in", 1024, 256, 1, 1, 0, 14),
        ("res5_3x3", 512, 512, 3, 1, 1, 7),
    ],
    "vgg16": [
        ("conv1_2", 64, 64, 3, 1, 1, 224), ("conv2_2", 128, 128, 3, 1, 1, 112), ("conv3_2", 256, 256, 3, 1, 1, 56),
        ("conv4_2", 512, 512, 3, 1, 1, 28), ("conv5_2", 512, 512, 3, 1, 1, 14),
    ],
    # The paper's kinds of layers: small-channel 3x3 at high resolution, strided 3x3, 5x5, 1x1.
    "paper": [
        ("3x3_c32", 32, 32, 3, 1, 1, 112), ("3x3_s2_c64", 64, 128, 3, 2, 1, 56), ("5x5_c32", 32, 64, 5, 1, 2, 28),
        ("1x1_c128", 128, 128, 1, 1, 0, 28),
    ],
}


def sparse_weight(k, c, r, sparsity, gen):
    w = torch.randn(k, c, r, r, generator=gen) / (c * r * r) ** 0.5
    return w * (torch.rand(w.shape, generator=gen) >= sparsity).float()


def cuda_time_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def cusparse_conv(x, w, stride, padding):
    """im2col + CSR SpMM: y[k, (n, p)] = W_csr[k, (c, r, s)] @ cols[(c, r, s), (n, p)]."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    oh = (h + 2 * padding - r) // stride + 1
    ow = (wd + 2 * padding - s) // stride + 1
    w_csr = w.reshape(k, -1).to_sparse_csr()

    def run():
        cols = F.unfold(x, (r, s), padding=padding, stride=stride)  # (n, c*r*s, oh*ow)
        cols = cols.permute(1, 0, 2).reshape(c * r * s, n * oh * ow)
        y = torch.sparse.mm(w_csr, cols)
        return y.reshape(k, n, oh, ow).permute(1, 0, 2, 3)
    return run


def layer_rows(args, gen):
    rows = []
    dev = torch.device("cuda")
    arch = cuda._C.cuda.device_arch(0)
    for suite in args.suite.split(","):
        for name, c, k, r, stride, pad, hw in SUITES[suite]:
            for batch in [int(b) for b in args.batches.split(",")]:
                x = torch.randn(batch, c, hw, hw, generator=gen).to(dev)
                dense_tpl = None
                for sp in [float(s) for s in args.sparsities.split(",")]:
                    w = sparse_weight(k, c, r, sp, gen)
                    row = dict(suite=suite, layer=name, C=c, K=k, R=r, stride=stride, HW=hw, batch=batch, sparsity=sp)
                    try:
                        kern = cuda.sparse_conv2d(w, None, input_shape=tuple(x.shape), stride=stride, padding=pad,
                                                  arch=arch)
                        if dense_tpl is None and args.dense_template:
                            dense_tpl = cuda.sparse_conv2d(torch.randn(k, c, r, r, generator=gen), None,
                                                           input_shape=tuple(x.shape), stride=stride, padding=pad,
                                                           arch=arch)
                    except dnnfusion.UnsupportedOp as e:
                        row["note"] = str(e)
                        rows.append(row)
                        print(f"{suite:8s} {name:12s} b{batch:<3d} {sp:.2f}  skipped: {e}", flush=True)
                        continue
                    wd = w.to(dev)
                    ref = F.conv2d(x, wd, stride=stride, padding=pad)
                    got = kern(x)
                    err = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item()
                    if err > 1e-4:
                        raise SystemExit(f"{name} b{batch} sparsity {sp}: our kernel differs from cuDNN (rel {err:.2e})")
                    torch.backends.cudnn.allow_tf32 = False
                    row["cudnn_fp32_ms"] = cuda_time_ms(lambda: F.conv2d(x, wd, stride=stride, padding=pad), args.reps)
                    torch.backends.cudnn.allow_tf32 = True
                    row["cudnn_tf32_ms"] = cuda_time_ms(lambda: F.conv2d(x, wd, stride=stride, padding=pad), args.reps)
                    torch.backends.cudnn.allow_tf32 = False
                    row["ours_ms"] = cuda_time_ms(lambda: kern(x), args.reps)
                    if dense_tpl is not None:
                        row["dense_tpl_ms"] = cuda_time_ms(lambda: dense_tpl(x), args.reps)
                    row["cusparse_ms"] = cuda_time_ms(cusparse_conv(x, wd, stride, pad), args.reps)
                    st = kern.stats
                    row.update(sass_ffma=st["sass_ffma"], registers=st["registers"], rewrite_s=st["rewrite_s"],
                               ptxas_s=st["ptxas_s"], max_rel_err=err)
                    row["speedup_fp32"] = row["cudnn_fp32_ms"] / row["ours_ms"]
                    row["speedup_tf32"] = row["cudnn_tf32_ms"] / row["ours_ms"]
                    rows.append(row)
                    print(f"{suite:8s} {name:12s} b{batch:<3d} {sp:.2f}  ours {row['ours_ms']:.3f} ms  "
                          f"cuDNN fp32 {row['cudnn_fp32_ms']:.3f} ({row['speedup_fp32']:.2f}x)  "
                          f"tf32 {row['cudnn_tf32_ms']:.3f} ({row['speedup_tf32']:.2f}x)  "
                          f"cuSPARSE {row['cusparse_ms']:.3f}", flush=True)
    return rows


def compile_rows(args, gen):
    rows = []
    for suite in args.suite.split(","):
        for name, c, k, r, stride, pad, hw in SUITES[suite]:
            for sp in [float(s) for s in args.sparsities.split(",")]:
                w = sparse_weight(k, c, r, sp, gen)
                row = dict(suite=suite, layer=name, C=c, K=k, R=r, stride=stride, HW=hw, batch=1, sparsity=sp,
                           arch=args.arch)
                t = time.perf_counter()
                try:
                    kern = cuda.sparse_conv2d(w, None, input_shape=(1, c, hw, hw), stride=stride, padding=pad,
                                              arch=args.arch)
                except dnnfusion.UnsupportedOp as e:
                    row["note"] = str(e)
                    rows.append(row)
                    print(f"{suite:8s} {name:12s} {sp:.2f}  refused: {e}", flush=True)
                    continue
                st = kern.stats
                row.update(total_s=time.perf_counter() - t, template_s=st["template_s"],
                           template_cached=st["template_cache_hit"], rewrite_s=st["rewrite_s"], ptxas_s=st["ptxas_s"],
                           per_weight_set_s=st["rewrite_s"] + st["ptxas_s"], sass_ffma=st["sass_ffma"],
                           ptx_fma_dense=st["ptx_fma_dense"], nonzeros=st["nonzeros"], registers=st["registers"],
                           cubin_bytes=st["cubin_bytes"])
                rows.append(row)
                print(f"{suite:8s} {name:12s} {sp:.2f}  template {st['template_s']:7.2f} s"
                      f"{' (cached)' if st['template_cache_hit'] else ''}  rewrite {st['rewrite_s']:.3f} s  "
                      f"ptxas {st['ptxas_s']:.2f} s  SASS FFMA {st['sass_ffma']} of {st['ptx_fma_dense']} dense",
                      flush=True)
    return rows


def end_to_end(args):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(args.e2e_batch, 3, 224, 224)
    pruned = dnnfusion.prune(model, 0.9, x, structured=False).eval().cuda()
    xc = x.cuda()
    with torch.no_grad():
        torch.backends.cudnn.allow_tf32 = False
        ref = pruned(xc)
        eager_fp32 = cuda_time_ms(lambda: pruned(xc), args.reps)
        torch.backends.cudnn.allow_tf32 = True
        eager_tf32 = cuda_time_ms(lambda: pruned(xc), args.reps)
        torch.backends.cudnn.allow_tf32 = False
        t = time.perf_counter()
        compiled = torch.compile(pruned, backend="dnnfusion")
        out = compiled(xc)
        compile_s = time.perf_counter() - t
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        ours = cuda_time_ms(lambda: compiled(xc), args.reps)
    row = dict(model="resnet50", prune=0.9, batch=args.e2e_batch, eager_fp32_ms=eager_fp32, eager_tf32_ms=eager_tf32,
               dnnfusion_ms=ours, compile_s=compile_s, max_rel_err=err)
    print(f"resnet50 90% pruned, batch {args.e2e_batch}: dnnfusion {ours:.2f} ms, eager cuDNN fp32 {eager_fp32:.2f} ms "
          f"({eager_fp32 / ours:.2f}x), tf32 {eager_tf32:.2f} ms ({eager_tf32 / ours:.2f}x); compile {compile_s:.0f} s; "
          f"max rel err vs eager {err:.1e}")
    print(dnnfusion.explain(pruned, xc))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="resnet50,vgg16,paper", help=f"comma list of {sorted(SUITES)}")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--sparsities", default="0.5,0.7,0.9,0.95,0.99")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--dense-template", action="store_true", help="also time our template at sparsity 0")
    ap.add_argument("--compile-only", action="store_true", help="no GPU: template/rewrite/ptxas times, SASS counts")
    ap.add_argument("--arch", default="sm_90", help="ptxas target with --compile-only")
    ap.add_argument("--e2e-batch", type=int, default=1)
    ap.add_argument("--no-e2e", action="store_true")
    ap.add_argument("--out", default="benchmarks/results/sparse_gpu.json")
    args = ap.parse_args()
    for s in args.suite.split(","):
        if s not in SUITES:
            ap.error(f"unknown suite {s!r}; choose from {sorted(SUITES)}")
    gen = torch.Generator().manual_seed(0)
    tc = cuda.toolchain()
    result = dict(date=datetime.date.today().isoformat(), host=platform.node(), cpu=platform.processor(),
                  torch=torch.__version__, toolchain={k: tc[k] for k in ("nvrtc", "ptxas", "nvdisasm")})
    if args.compile_only:
        result["compile"] = compile_rows(args, gen)
    else:
        if tc["driver"] or not torch.cuda.is_available():
            raise SystemExit(f"no usable GPU here ({tc['driver'] or 'torch.cuda.is_available() is False'}); "
                             "--compile-only measures what a machine without a GPU can")
        result["gpu"] = torch.cuda.get_device_name(0)
        result["layers"] = layer_rows(args, gen)
        if not args.no_e2e:
            result["end_to_end"] = end_to_end(args)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
