"""Python glue of the cuda target (csrc/target/cuda/): where the NVIDIA tools are, its statistics and
its explain() section — one line per generated sparse convolution kernel."""

STATS_COUNTERS = ("sparse_kernels", "sparse_kernels_reused", "epilogue_ops_fused")
STATS_NOTES = ("sparse_kernel_lines", "execution")


def prepare():
    from ..cuda import _register_wheel_dirs

    _register_wheel_dirs()


def explain_lines(regions):
    regions = [r for r in regions if r.target == "cuda"]
    if not regions:
        return []
    kernels = sum(r.target_counters["sparse_kernels"] for r in regions)
    reused = sum(r.target_counters["sparse_kernels_reused"] for r in regions)
    fused = sum(r.target_counters["epilogue_ops_fused"] for r in regions)
    where = sorted({r.target_notes["execution"] for r in regions if r.target_notes["execution"]})
    lines = ["", "sparse convolutions (cuda target):",
             f"  kernels generated for their weights : {kernels} ({reused} built earlier in this process)",
             f"  epilogue ops run inside them        : {fused} (bias add, residual add, ReLU/ReLU6)",
             f"  running on                          : {'; '.join(where) or '-'}",
             "  dense or too-large convolutions and every other op run on ATen (listed as fallbacks above)"]
    for r in regions:
        for line in r.target_notes["sparse_kernel_lines"].splitlines():
            lines.append("  " + line)
    return lines
