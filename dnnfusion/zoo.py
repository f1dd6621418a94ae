"""The model zoo the project is tested and benchmarked on: torchvision CNNs/ViT built with
``weights=None`` and HuggingFace transformers built from their config classes (random init, no
download). torchvision and transformers are imported only when a model is asked for."""
import time

import torch

TORCHVISION = [
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "vgg16_bn", "efficientnet_b0",
    "densenet121", "squeezenet1_1", "shufflenet_v2_x1_0", "regnet_y_400mf", "convnext_tiny", "vit_b_16",
    "mobilenet_v3_large", "vgg16", "resnext50_32x4d",
]
TRANSFORMERS = ["bert", "distilbert", "gpt2", "albert", "mobilebert"]
ALL = TORCHVISION + TRANSFORMERS

_HF = {
    "bert": ("BertConfig", "BertModel"),
    "distilbert": ("DistilBertConfig", "DistilBertModel"),
    "gpt2": ("GPT2Config", "GPT2Model"),
    "albert": ("AlbertConfig", "AlbertModel"),
    "mobilebert": ("MobileBertConfig", "MobileBertModel"),
}


def build(name, seed=0, **config_overrides):
    """Returns (model in eval mode, input-maker(batch) -> tuple of inputs); the input-maker also takes
    size= (image side, 224 by default) for the torchvision models and seq= (128) for the transformers."""
    torch.manual_seed(seed)
    if name in TORCHVISION:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
        _randomize_zero_weights(model)

        def inputs(batch, size=224, seed=seed):
            g = torch.Generator().manual_seed(seed + 1)
            return (torch.randn(batch, 3, size, size, generator=g),)

        return model, inputs
    if name in _HF:
        import transformers

        cfg_cls, model_cls = (getattr(transformers, n) for n in _HF[name])
        cfg = cfg_cls(**config_overrides)
        model = model_cls(cfg).eval()
        vocab = cfg.vocab_size

        def inputs(batch, seq=128, seed=seed):
            g = torch.Generator().manual_seed(seed + 1)
            return (torch.randint(0, vocab, (batch, seq), generator=g),)

        return model, inputs
    raise ValueError(f"unknown zoo model {name!r}; known: {', '.join(ALL)}")


def _randomize_zero_weights(model):
    """Some torchvision heads start at zero (ViT's classifier): every logit would be 0 and a
    comparison with eager would prove nothing. Give such weights small random values."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, 0.02)


def first_tensor(out):
    """The main output of a zoo model (logits or last hidden state)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    raise TypeError(f"no tensor in output of type {type(out).__name__}")


def all_tensors(out):
    """Every tensor in a (possibly nested) model output, in a stable order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in all_tensors(o)]
    return []


# Thread pools spin for a few ms after a call returns (torch's OpenMP workers after an eager pass,
# ONNX Runtime's, ours) and share the CPUs with whatever runs next: resnet50 at batch 1 on 2 vCPUs
# took 15.4 ms in dnnfusion after an idle gap, 21.7 ms right after an eager call. Every timing
# loop idles this long before each timed call.
IDLE_GAP_S = 0.01


def idle_then_time(fn, *args, gap_s=IDLE_GAP_S):
    """Seconds one call fn(*args) takes, after gap_s seconds of idle time (none if 0)."""
    if gap_s:
        time.sleep(gap_s)
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


class Comparison:
    """A model compiled with dnnfusion, checked against eager, and timed beside it. With `aot`, also
    compiled ahead of time by dnnfusion.compile (`aot_rel_err`, and a third series from time())."""

    def __init__(self, name, model, inputs, threads=None, aot=False):
        import dnnfusion
        from dnnfusion.report import collecting

        self.name, self.model, self.inputs = name, model, inputs
        options = {"threads": threads} if threads else None
        self.compiled = torch.compile(model, backend="dnnfusion", options=options, dynamic=False)
        with torch.no_grad():
            t0 = time.perf_counter()
            with collecting() as graphs:
                self.out = first_tensor(self.compiled(*inputs))
            self.compile_s = time.perf_counter() - t0
            self.ref = first_tensor(model(*inputs))
        self.report = dnnfusion.ExplainReport(graphs)
        self.max_err = (self.out - self.ref).abs().max().item()
        self.rel_err = self.max_err / self.ref.abs().max().item()
        self.aot = None
        if aot:
            self.aot = dnnfusion.compile(model, tuple(inputs), options=options)
            aot_out = first_tensor(self.aot(*inputs))
            self.aot_rel_err = (aot_out - self.ref).abs().max().item() / self.ref.abs().max().item()

    def time(self, runs=20, warmup=3, gap_s=IDLE_GAP_S):
        """Interleaved rounds (eager, dnnfusion, eager, ...) so machine noise hits all alike.
        Returns the per-run seconds of (eager, dnnfusion), then dnnfusion.compile's with `aot`.
        Each timed call follows an idle gap of gap_s (idle_then_time), so that the system timed
        after eager does not pay for eager's spinning threads."""
        fns = [self.model, self.compiled] + ([self.aot] if self.aot else [])
        times = [[] for _ in fns]
        with torch.no_grad():
            for _ in range(warmup):
                for fn in fns:
                    fn(*self.inputs)
            for _ in range(runs):
                for fn, ts in zip(fns, times):
                    ts.append(idle_then_time(fn, *self.inputs, gap_s=gap_s))
        return tuple(times)
