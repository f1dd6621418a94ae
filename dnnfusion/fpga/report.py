"""The compile report of the fpga target: what ran where and why, the boundaries, and per
accelerator layer its instruction words and the analytic cost model's cycles and DDR bytes."""
from dataclasses import dataclass, field

from .. import _C


@dataclass
class FpgaReport:
    ops: list = field(default_factory=list)         # dicts: node, op, target ("fpga"/"cpu"/"folded"), subgraph, detail
    subgraphs: list = field(default_factory=list)   # dicts: index, layers, inputs, outputs, memory/constant bytes, totals
    calibration: str = "kl"
    per_channel: bool = True
    platform: str = ""

    @property
    def num_subgraphs(self):
        return len(self.subgraphs)

    @property
    def total_cycles(self):
        return sum(sg["cycles"] for sg in self.subgraphs)

    @property
    def total_ddr_bytes(self):
        return sum(sg["ddr_bytes"] for sg in self.subgraphs)

    @property
    def boundary_bytes(self):
        """Device bytes written (quantized inputs) and read (outputs to dequantize) per image."""
        return sum(p["device_bytes"] for sg in self.subgraphs for p in sg["inputs"] + sg["outputs"])

    def counts(self):
        c = {}
        for op in self.ops:
            c[op["target"]] = c.get(op["target"], 0) + 1
        return c

    def __str__(self):
        lines = [f"dnnfusion.fpga report: {self.num_subgraphs} accelerator subgraph(s); ops "
                 + ", ".join(f"{k}: {v}" for k, v in sorted(self.counts().items()))
                 + f"; calibration={self.calibration}, {'per-channel' if self.per_channel else 'per-tensor'} weights"
                 + (f"; platform {self.platform}" if self.platform else "")]
        lines.append("")
        lines.append(f"{'node':<32} {'op':<22} {'ran on':<7} {'subgraph':<8} why / as")
        for op in self.ops:
            sg = "" if op["subgraph"] is None else str(op["subgraph"])
            lines.append(f"{op['node']:<32} {op['op']:<22} {op['target']:<7} {sg:<8} {op['detail']}")
        for sg in self.subgraphs:
            lines.append("")
            lines.append(f"subgraph {sg['index']}: {len(sg['layers'])} layers, {sg['words']} instruction words, "
                         f"device memory {sg['memory_bytes']} B ({sg['constant_bytes']} B constants), "
                         f"estimated {sg['cycles']} cycles = {sg['seconds'] * 1e3:.3f} ms at 200 MHz, "
                         f"{sg['ddr_bytes']} DDR bytes")
            for p in sg["inputs"]:
                lines.append(f"  in  quantize   {p['node']:<28} {p['shape']} scale {p['scale']:.6g}: "
                             f"{p['host_bytes']} B fp32 -> {p['device_bytes']} B int8 per image")
            for p in sg["outputs"]:
                lines.append(f"  out dequantize {p['node']:<28} {p['shape']} scale {p['scale']:.6g}: "
                             f"{p['device_bytes']} B int8 -> {p['host_bytes']} B fp32 per image")
            for i, layer in enumerate(sg["layers"]):
                d = layer["desc"]
                lines.append(f"  [{i}] {layer['name']}: {d['type']} {d['in_channels']}x{d['in_h']}x{d['in_w']} -> "
                             f"{d['out_channels']}x{layer['out_h']}x{layer['out_w']} k{d['kernel']} s{d['stride']} "
                             f"p{d['pad']} clamp[{d['act_lo']},{d['act_hi']}]  cycles {layer['cycles']} "
                             f"(compute {layer['compute_cycles']}, memory {layer['memory_cycles']}), "
                             f"DDR {layer['ddr_bytes']} B, MACs {layer['macs']}")
                lines.append("      words " + " ".join(f"{w:08x}" for w in layer["words"]))
        lines.append("")
        lines.append(f"total: {self.total_cycles} estimated accelerator cycles, {self.total_ddr_bytes} DDR bytes, "
                     f"{self.boundary_bytes} boundary bytes per image")
        return "\n".join(lines)

    def __repr__(self):
        return f"FpgaReport(subgraphs={self.num_subgraphs}, ops={self.counts()}, cycles={self.total_cycles})"


def port_dict(port):
    c, h, w = port.shape
    return dict(node=port.node.name, shape=tuple(port.shape), scale=port.scale, offset=port.offset,
                device_bytes=port.device_bytes, host_bytes=c * h * w * 4)


def subgraph_dict(plan):
    layers = []
    for p in plan.layers:
        sizes = _C.fpga.layer_sizes(p.desc)
        layers.append(dict(name=p.layer.name, desc=dict(p.desc), out_h=sizes["out_h"], out_w=sizes["out_w"],
                           in_scale=p.in_scale, out_scale=p.out_scale, words=list(p.words), **p.cost))
    return dict(index=plan.index, layers=layers, inputs=[port_dict(x) for x in plan.inputs],
                outputs=[port_dict(x) for x in plan.outputs], memory_bytes=plan.memory_bytes,
                constant_bytes=plan.constant_bytes, words=int(plan.program.numel()),
                cycles=sum(x["cycles"] for x in layers), ddr_bytes=sum(x["ddr_bytes"] for x in layers),
                seconds=sum(x["seconds"] for x in layers))
