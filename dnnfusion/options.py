"""Validation of ``torch.compile(..., options={...})`` for the dnnfusion backend."""
from dataclasses import dataclass

# Every option the backend understands, with what it accepts. Options of later capabilities
# (fusion modes, tuning, targets, pruning) are added here when they are implemented.
VALID_OPTIONS = {
    "threads": "positive int: worker threads of the core (default: one per physical core)",
    "fusion": "'dnnfusion' (default) | 'tvm' | 'none': operator-fusion planner",
    "profile": "bool: measure yellow fusion cells into the profile database (default True; False: never fuse them)",
}

FUSION_MODES = ("dnnfusion", "tvm", "none")


@dataclass(frozen=True)
class Options:
    threads: int = 0
    fusion: str = "dnnfusion"
    profile: bool = True


def parse_options(options) -> Options:
    if options is None:
        return Options()
    if not isinstance(options, dict):
        raise ValueError(f"dnnfusion: options must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(VALID_OPTIONS))
    if unknown:
        valid = "; ".join(f"{k}: {v}" for k, v in VALID_OPTIONS.items())
        raise ValueError(f"dnnfusion: unknown option(s) {unknown}. Valid options are: {valid}")
    threads = options.get("threads", 0)
    if "threads" in options and (isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024):
        raise ValueError(f"dnnfusion: option 'threads' must be an int in 1..1024, got {threads!r}")
    fusion = options.get("fusion", "dnnfusion")
    if fusion not in FUSION_MODES:
        raise ValueError(f"dnnfusion: option 'fusion' must be one of {list(FUSION_MODES)}, got {fusion!r}")
    profile = options.get("profile", True)
    if not isinstance(profile, bool):
        raise ValueError(f"dnnfusion: option 'profile' must be True or False, got {profile!r}")
    return Options(threads=threads, fusion=fusion, profile=profile)
