"""Python glue of the cpu target (csrc/target/cpu/): its statistics and its explain() section on
NCHW[x]c layouts, Winograd, GEMM weight packing and expand + depthwise fusion."""

STATS_COUNTERS = ("convs_blocked", "convs_winograd_f2", "convs_winograd_f4", "layout_to_blocked", "layout_to_plain",
                  "layout_reblocked", "layout_propagated", "convs_tuned_now", "expand_dw_fused", "se_means_fused",
                  "dw_projects_fused", "gemms_packed", "gemms_bf16x6", "convs_amx",
                  "gemms_amx_declined", "convs_amx_declined")
STATS_NOTES = ("layout_method",)


def total(regions, counter):
    return sum(r.target_counters[counter] for r in regions)


def _amx_line(what, taken, declined, kept):
    """The AMX line of a layer kind: how many run there, and how many timing gave to fp32."""
    if not taken and not declined:
        return []
    line = f"  ... {what}: {taken} (fp32 accuracy from six bf16 products"
    if declined:
        line += f"; {declined} more kept {kept}, which timed faster here"
    return [line + "; option amx='rule' takes every allowed layer, DNNFUSION_AMX=0 none)"]


def explain_lines(regions):
    regions = [r for r in regions if r.target == "cpu"]
    if not regions:
        return []
    methods = sorted({r.target_notes["layout_method"] for r in regions if r.target_counters["convs_blocked"]})
    lines = ["", "layout (NCHW[x]c):"]
    lines.append(f"  convolutions blocked           : {total(regions, 'convs_blocked')}"
                 + (f" (schemes: {', '.join(methods)})" if methods else ""))
    lines += _amx_line("on AMX (bf16x6)            ", total(regions, "convs_amx"),
                       total(regions, "convs_amx_declined"), "on the direct kernel")
    wf2, wf4 = total(regions, "convs_winograd_f2"), total(regions, "convs_winograd_f4")
    if wf2 or wf4:
        lines.append(f"  ... as Winograd                : {wf4} F(4x4, 3x3), {wf2} F(2x2, 3x3) (3x3 stride-1; "
                     "option winograd=False runs them direct)")
    lines.append(f"  activation transforms          : {total(regions, 'layout_to_blocked')} to blocked, "
                 f"{total(regions, 'layout_to_plain')} to NCHW, {total(regions, 'layout_reblocked')} re-blocked")
    lines.append(f"  ops running on blocked tensors : {total(regions, 'layout_propagated')}")
    lines.append(f"  GEMM weights packed at compile : {total(regions, 'gemms_packed')}")
    lines += _amx_line("for the AMX bf16x6 GEMM    ", total(regions, "gemms_bf16x6"),
                       total(regions, "gemms_amx_declined"), "on the fp32 kernel")
    fused_ed = total(regions, "expand_dw_fused")
    if fused_ed:
        lines.append(f"  conv + depthwise fused         : {fused_ed} pairs (the first conv's output is never written)")
    se = total(regions, "se_means_fused")
    if se:
        lines.append(f"  ... with their SE mean         : {se} (summed in the kernel, not re-read)")
    proj = total(regions, "dw_projects_fused")
    if proj:
        lines.append(f"  ... with their 1x1 projection  : {proj} (the depthwise output is never written)")
    tuned = total(regions, "convs_tuned_now")
    if tuned:
        lines.append(f"  conv workloads tuned now       : {tuned} (stored in the tuning database)")
    return lines
