"""Validation of ``torch.compile(..., options={...})`` for the dnnfusion backend."""
from dataclasses import dataclass

# Every option the backend understands, with what it accepts. Options of later capabilities
# (fusion modes, tuning, targets, pruning) are added here when they are implemented.
VALID_OPTIONS = {
    "threads": "positive int: worker threads of the core (default: one per physical core)",
}


@dataclass(frozen=True)
class Options:
    threads: int = 0


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
    return Options(threads=threads)
