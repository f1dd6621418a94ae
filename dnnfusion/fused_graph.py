"""Draws the fused graph of an explain() report: one box per fusion block (its ops, mapping type,
dominant op), edges where a block reads another's output. Graphviz `dot` renders it when installed;
otherwise the same graph is written as text (one line per block with its inputs)."""
import os
import shutil
import subprocess


def _dot_source(report):
    lines = ["digraph fused {", "  rankdir=TB; node [shape=box, fontname=monospace, fontsize=9];"]
    base = 0
    for r_i, region in enumerate(report.regions):
        blocks = region.fusion_blocks
        for b_i, b in enumerate(blocks):
            ops = b["ops"]
            label = f"{b['type']}" + (f" [{b['dominant']}]" if b["dominant"] else "") + "\\n" + "\\n".join(ops[:12])
            if len(ops) > 12:
                label += f"\\n... +{len(ops) - 12}"
            color = "lightblue" if len(ops) > 1 else "white"
            lines.append(f'  b{base + b_i} [label="{label}", style=filled, fillcolor={color}];')
            for src in b.get("inputs_from", []):
                lines.append(f"  b{base + src} -> b{base + b_i};")
        base += len(blocks)
    lines.append("}")
    return "\n".join(lines)


def _text(report):
    out = []
    base = 0
    for region in report.regions:
        blocks = region.fusion_blocks
        for b_i, b in enumerate(blocks):
            ins = ", ".join(f"b{base + s}" for s in b.get("inputs_from", [])) or "inputs"
            dom = f" [{b['dominant']}]" if b["dominant"] else ""
            out.append(f"b{base + b_i} <- {ins}: {b['type']}{dom}: {' + '.join(b['ops'])}")
        base += len(blocks)
    return "\n".join(out) + "\n"


def draw_fused_graph(report, path):
    """Writes the drawing to `path` and returns the path actually written (a .txt beside it when
    graphviz is missing and an image format was asked for)."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    dot = shutil.which("dot")
    if dot and ext in ("svg", "png", "pdf"):
        src = _dot_source(report)
        subprocess.run([dot, f"-T{ext}", "-o", path], input=src.encode(), check=True)
        return path
    if ext == "svg":  # no graphviz: the text rendering, as an SVG of monospace lines
        from xml.sax.saxutils import escape

        rows = _text(report).splitlines()
        width = 8 * max((len(r) for r in rows), default=10) + 20
        body = "".join(f'<text x="10" y="{16 * (i + 1)}">{escape(r)}</text>' for i, r in enumerate(rows))
        with open(path, "w") as f:
            f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{16 * len(rows) + 10}" '
                    f'font-family="monospace" font-size="13">{body}</svg>\n')
        return path
    if ext in ("png", "pdf"):
        path = path + ".txt"
    with open(path, "w") as f:
        f.write(_text(report) if ext != "dot" else _dot_source(report))
    return path
