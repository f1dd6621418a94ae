"""Validation of ``torch.compile(..., options={...})`` for the dnnfusion backend."""
import numbers
from dataclasses import dataclass, field

# Every option the backend understands, with what it accepts. Options of later capabilities
# (fusion modes, tuning, targets, pruning) are added here when they are implemented.
VALID_OPTIONS = {
    "target": "str: execution target, one of dnnfusion.targets.names() (default: the first registered target "
              "whose device type is the example inputs' — 'cpu': NCHW[x]c CPU kernels; 'cuda': sparse convolutions "
              "as kernels generated for their weights, the rest on ATen; 'reference': every op on the plain reference "
              "kernels, unfused, to tell an optimized kernel's error from a model's own)",
    "threads": "positive int: worker threads of the core (default: one per physical core)",
    "fusion": "'dnnfusion' (default) | 'tvm' | 'none': operator-fusion planner",
    "profile": "bool: measure yellow fusion cells into the profile database (default True; False: never fuse them)",
    "layout": "True (= 'global', default) | 'local' | 'convs-only' | False (= 'off'): NCHW[x]c convolutions with "
              "layout propagation; 'local' skips the global block search, 'convs-only' transforms around every "
              "conv (ablations); off runs NCHW everywhere",
    "tune": "bool: measure the convolution candidates the tuning database lacks and store them (default False)",
    "tuning_db": "str: tuning database file (default $DNNFUSION_TUNING_DB or ~/.cache/dnnfusion/tuning_db.txt); "
                 "'' = none (heuristic kernel knobs)",
    "pack_gemm_weights": "bool: pack linear-layer weights into the GEMM micro-kernel's panels once at compile time "
                         "(default True; False packs them on every call, for measuring what packing buys)",
    "fuse_expand_depthwise": "bool: run a 1x1 expand conv, its activation and the depthwise conv after it as one "
                             "kernel that never writes the expanded tensor, and where the depthwise output is large "
                             "the 1x1 projection after it too (default True; DNNFusion mode with layout on; False "
                             "for the ablation)",
    "winograd": "bool: run 3x3 stride-1 convolutions with enough work as Winograd F(2x2, 3x3) (2.25x fewer "
                "multiplies; default True, layout on; False: the direct kernel everywhere, for the ablation)",
    "amx": "'measure' (default) | 'rule' | 'off': on a CPU with AMX, the linear layers and convolutions the shape "
           "rules allow run as fp32-accurate bf16x6 products on the tile unit; 'measure' times that kernel against "
           "the fp32 one on each such layer's shape when compiling (once per shape and process) and keeps the "
           "faster, 'rule' takes every allowed layer, 'off' none (DNNFUSION_AMX=0 switches AMX off process-wide)",
    "sparse_threshold": "float in [0, 1]: cuda target — a convolution gets a kernel generated for its weights when at "
                        "least this fraction of them is zero (default 0.7); denser ones stay on ATen (cuDNN)",
    "sparse_max_weights": "positive int: cuda target — the most weights (K*C*R*S) a convolution may have to get a "
                          "generated kernel (default 1048576); the kernel template's one-time compile grows faster "
                          "than linearly with it (64->64 3x3: ~10 s, 256->256 3x3: ~5 min, then cached on disk)",
    "calib_data": "fpga target — calibration images [N, C, H, W] or an iterable of input batches (required there)",
    "calibration": "'kl' (default) | 'minmax' | 'percentile': fpga target — how activation scales are calibrated",
    "per_channel": "bool: fpga target — int8 weight scales per output channel (default True) or per tensor",
    "fpga_platform": "str or None: fpga target — OpenCL platform, a substring of its name or vendor (default "
                     "$DNNFUSION_OPENCL_PLATFORM, else PoCL)",
    "fpga_binary": "str or None: fpga target — a vendor device binary of the datapath kernels (.aocx / .xclbin); "
                   "None builds them from OpenCL C source",
    "fast_guards": "bool: Dynamo checks an unchanged nn.Module's guards by its dict version tag instead of one by one "
                   "(default True: 0.1-0.3 ms less per call; False keeps torch's own setting, for a model whose "
                   "parameters' metadata is changed in place after compiling)",
    "prune": "float in (0, 1) or None: AukC channel pruning of that fraction at compile time, calibrated on the "
             "example inputs (default None: off)",
}

FUSION_MODES = ("dnnfusion", "tvm", "none")
LAYOUT_MODES = ("global", "local", "convs-only", "off")
AMX_MODES = ("measure", "rule", "off")


@dataclass(frozen=True)
class Options:
    target: str = "cpu"
    threads: int = 0
    fusion: str = "dnnfusion"
    profile: bool = True
    layout: str = "global"
    tune: bool = False
    tuning_db: str = "<default>"
    pack_gemm_weights: bool = True
    fuse_expand_depthwise: bool = True
    winograd: bool = True
    amx: str = "measure"
    fast_guards: bool = True
    prune: float = None  # None: no compile-time pruning
    sparse_threshold: float = 0.7
    sparse_max_weights: int = 1 << 20
    calib_data: object = field(default=None, compare=False, repr=False)
    calibration: str = "kl"
    per_channel: bool = True
    fpga_platform: str = None
    fpga_binary: str = None

FPGA_OPTIONS = ("calib_data", "calibration", "per_channel", "fpga_platform", "fpga_binary")


def parse_options(options, device_type=None) -> Options:
    """`device_type`: the example inputs' device type; without an explicit target, the first registered
    target running on it is chosen (the first registered target when none does, or when None)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ValueError(f"dnnfusion: options must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(VALID_OPTIONS))
    if unknown:
        valid = "; ".join(f"{k}: {v}" for k, v in VALID_OPTIONS.items())
        raise ValueError(f"dnnfusion: unknown option(s) {unknown}. Valid options are: {valid}")
    from .targets import names, registered

    default = names()[0]  # the first registered target, unless one runs where the inputs are
    if device_type is not None:
        default = next((t["name"] for t in registered(False) if t["device_type"] == device_type), default)
    target = options.get("target", default)
    if not isinstance(target, str) or target not in names():
        raise ValueError(f"dnnfusion: option 'target' must be one of the registered targets {names()}, got {target!r}")
    threads = options.get("threads", 0)
    if "threads" in options and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024):
        raise ValueError(f"dnnfusion: option 'threads' must be an int in 1..1024, got {threads!r}")
    fusion = options.get("fusion", "dnnfusion")
    if fusion not in FUSION_MODES:
        raise ValueError(f"dnnfusion: option 'fusion' must be one of {list(FUSION_MODES)}, got {fusion!r}")
    profile = _bool_option(options, "profile", True)
    layout = options.get("layout", True)
    if isinstance(layout, bool):
        layout = "global" if layout else "off"
    if layout not in LAYOUT_MODES:
        raise ValueError(f"dnnfusion: option 'layout' must be True, False or one of {list(LAYOUT_MODES)}, got {layout!r}")
    tune = _bool_option(options, "tune", False)
    tuning_db = options.get("tuning_db", "<default>")
    if not isinstance(tuning_db, str):
        raise ValueError(f"dnnfusion: option 'tuning_db' must be a file path (str), got {tuning_db!r}")
    pack = _bool_option(options, "pack_gemm_weights", True)
    fuse_ed = _bool_option(options, "fuse_expand_depthwise", True)
    winograd = _bool_option(options, "winograd", True)
    amx = options.get("amx", "measure")
    if amx not in AMX_MODES:
        raise ValueError(f"dnnfusion: option 'amx' must be one of {list(AMX_MODES)}, got {amx!r}")
    fast_guards = _bool_option(options, "fast_guards", True)
    prune = options.get("prune", None)
    if prune is not None:
        if isinstance(prune, bool) or not isinstance(prune, numbers.Real) or not 0.0 < prune < 1.0:
            raise ValueError(f"dnnfusion: option 'prune' must be a float in (0, 1) (the fraction of channels "
                             f"removed) or None, got {prune!r}")
        prune = float(prune)
    sparse_threshold = options.get("sparse_threshold", 0.7)
    if isinstance(sparse_threshold, bool) or not isinstance(sparse_threshold, numbers.Real) \
            or not 0.0 <= sparse_threshold <= 1.0:
        raise ValueError(f"dnnfusion: option 'sparse_threshold' must be a float in [0, 1] (the least fraction of zero "
                         f"weights for a generated sparse kernel), got {sparse_threshold!r}")
    sparse_max_weights = options.get("sparse_max_weights", 1 << 20)
    if isinstance(sparse_max_weights, bool) or not isinstance(sparse_max_weights, int) or sparse_max_weights < 1:
        raise ValueError(f"dnnfusion: option 'sparse_max_weights' must be a positive int, got {sparse_max_weights!r}")
    fpga = _parse_fpga_options(options, target)
    return Options(target=target, threads=threads, fusion=fusion, profile=profile, layout=layout, tune=tune, tuning_db=tuning_db,
                   pack_gemm_weights=pack, fuse_expand_depthwise=fuse_ed, winograd=winograd, amx=amx,
                   fast_guards=fast_guards, prune=prune, sparse_threshold=float(sparse_threshold), sparse_max_weights=sparse_max_weights, **fpga)


def _bool_option(options, name, default):
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise ValueError(f"dnnfusion: option {name!r} must be True or False, got {value!r}")
    return value


def _parse_fpga_options(options, target):
    """The fpga target's options, checked for type (calib_data itself is checked when it is used)."""
    given = [k for k in FPGA_OPTIONS if k in options]
    if given and target != "fpga":
        raise ValueError(f"dnnfusion: option(s) {given} apply to target 'fpga' only (target is {target!r})")
    from .fpga import CALIBRATION_METHODS

    out = {k: options[k] for k in given}
    if out.get("calibration", "kl") not in CALIBRATION_METHODS:
        raise ValueError(f"dnnfusion: option 'calibration' must be one of {list(CALIBRATION_METHODS)}, "
                         f"got {out['calibration']!r}")
    _bool_option(out, "per_channel", True)
    for k in ("fpga_platform", "fpga_binary"):
        if out.get(k) is not None and not isinstance(out[k], str):
            raise ValueError(f"dnnfusion: option {k!r} must be a str or None, got {out[k]!r}")
    return out


def core_options(opts: Options):
    """The options the C++ core reads, as the one struct that crosses the bridge."""
    from . import _C

    o = _C.CompileOptions()
    for name in ("target", "threads", "fusion", "profile", "layout", "tune", "tuning_db", "pack_gemm_weights",
                 "fuse_expand_depthwise", "winograd", "amx", "sparse_threshold", "sparse_max_weights"):
        setattr(o, name, getattr(opts, name))
    return o
