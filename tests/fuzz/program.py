"""Random PyTorch programs from a seed, for fuzzing the backend.

A program is straight-line Python over variables v0, v1, ...: the inputs, then one op per line.
Each line is kept only if eager PyTorch runs it, so every program is valid; shapes include 0 and 1.
Weights are module parameters (the backend freezes them), so weight-only paths (packing, folding)
are exercised too. The same seed always gives the same program and the same tensors.
"""
import random
import re

import torch
import torch.nn as nn

SIZES = [0, 1, 1, 2, 3, 4, 5, 7, 8, 16, 33]
MAX_NUMEL = 40_000


class Program:
    def __init__(self, seed):
        self.seed = seed
        self.inputs = []   # shapes
        self.params = []   # shapes
        self.lines = []    # "vK = expression"
        self.outputs = []  # variable indices

    def source(self, keep=None):
        """The program as a module class definition (keep: which lines to keep, by index)."""
        lines = [l for i, l in enumerate(self.lines) if keep is None or i in keep]
        args = ", ".join(f"v{i}" for i in range(len(self.inputs)))
        body = "\n".join("        " + l for l in lines) or "        pass"
        outs = ", ".join(f"v{i}" for i in self.outputs)
        return (f"class Fuzzed(nn.Module):\n"
                f"    def __init__(self, params):\n"
                f"        super().__init__()\n"
                f"        for i, p in enumerate(params):\n"
                f"            self.register_parameter(f'p{{i}}', nn.Parameter(p, requires_grad=False))\n\n"
                f"    def forward(self, {args}):\n{body}\n        return ({outs},)\n")

    def build(self, keep=None):
        """(module, inputs): a fresh module and input tensors, deterministic in the seed."""
        g = torch.Generator().manual_seed(self.seed)
        params = [torch.randn(s, generator=g) for s in self.params]
        inputs = [torch.randn(s, generator=g) for s in self.inputs]
        ns = {"nn": nn, "torch": torch, "F": torch.nn.functional}
        exec(self.source(keep), ns)  # noqa: S102 - our own generated code
        return ns["Fuzzed"](params).eval(), inputs


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _rand_shape(rng, rank=None):
    rank = rng.randint(1, 4) if rank is None else rank
    for _ in range(20):
        s = [rng.choice(SIZES) for _ in range(rank)]
        if _numel(s) <= MAX_NUMEL:
            return s
    return [1] * rank


class _Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.prog = Program(seed)
        self.vals = []    # eager tensors, one per variable
        self.params = []  # eager parameter tensors
        self.tg = torch.Generator().manual_seed(seed)

    # ---- helpers ----
    def param(self, shape):
        self.prog.params.append(list(shape))
        return f"self.p{len(self.prog.params) - 1}"

    def pick(self, pred=lambda t: True):
        """A variable satisfying pred, most often the newest one, so ops chain and fuse."""
        cands = [i for i, t in enumerate(self.vals) if pred(t)]
        if not cands:
            return None
        return cands[-1] if self.rng.random() < 0.6 else self.rng.choice(cands)

    def dim(self, t):
        return self.rng.randrange(t.dim()) - (t.dim() if self.rng.random() < 0.3 else 0) if t.dim() else 0

    # ---- op kinds: each returns an expression string or None ----
    def unary(self):
        i = self.pick()
        f = self.rng.choice(["torch.relu({})", "torch.sigmoid({})", "torch.tanh({})", "F.gelu({})",
                             "F.gelu({}, approximate='tanh')", "F.silu({})", "F.hardswish({})", "F.hardsigmoid({})",
                             "torch.exp({}.clamp(max=10))", "torch.abs({})", "(-{})", "torch.sqrt(torch.abs({}))",
                             "torch.log(torch.abs({}) + 1)", "F.leaky_relu({}, 0.2)", "F.elu({})", "F.relu6({})",
                             "torch.clamp({}, -0.5, 0.7)", "F.softplus({})", "torch.erf({})", "torch.floor({})",
                             "torch.rsqrt(torch.abs({}) + 1)", "F.mish({})", "({} * {})", "torch.sign({})"])
        return f.format(*[f"v{i}"] * f.count("{}"))

    def binary(self):
        i = self.pick()
        a = self.vals[i]
        op = self.rng.choice(["+", "-", "*", "/", "max", "min", "where", "pow"])
        r = self.rng.random()
        if r < 0.3:
            other = repr(round(self.rng.uniform(-3, 3), 3))
        elif r < 0.6:
            shape = list(a.shape[self.rng.randrange(a.dim() + 1):]) if a.dim() else []
            shape = [1 if self.rng.random() < 0.3 else s for s in shape]
            other = self.param(shape)
        else:
            j = self.pick(lambda t: _broadcastable(t.shape, a.shape))
            other = f"v{j}"
        if op in "+-*/":
            if op == "/" and not other.startswith("v") and not other.startswith("self"):
                other = other if float(other) != 0 else "2.0"
            return f"(v{i} {op} {other})"
        if op == "max":
            return f"torch.maximum(v{i}, torch.as_tensor({other}))" if other[0] not in "vs" else f"torch.maximum(v{i}, {other})"
        if op == "min":
            return f"torch.minimum(v{i}, torch.as_tensor({other}))" if other[0] not in "vs" else f"torch.minimum(v{i}, {other})"
        if op == "pow":
            return f"torch.pow(v{i}, {self.rng.choice([2, 3, 0.5, -1, 2.5])})" if op == "pow" else None
        return f"torch.where(v{i} > 0, v{i}, {other})"

    def conv(self):
        i = self.pick(lambda t: t.dim() == 4)
        if i is None:
            return None
        x = self.vals[i]
        c = x.shape[1]
        groups = self.rng.choice([g for g in (1, 2, 3, c) if g > 0 and c % g == 0] or [1])
        k = self.rng.choice([1, 1, 2, 3, 5])
        out = self.rng.choice([1, 2, 4, 8, 16]) * groups if groups > 1 else self.rng.choice([1, 3, 8, 16])
        if groups == c and self.rng.random() < 0.5:
            out = c
        w = self.param([out, c // groups if groups else c, k, k])
        b = self.param([out]) if self.rng.random() < 0.6 else "None"
        stride, pad, dil = self.rng.choice([1, 1, 2, 3]), self.rng.choice([0, 1, 2]), self.rng.choice([1, 1, 2])
        return f"F.conv2d(v{i}, {w}, {b}, stride={stride}, padding={pad}, dilation={dil}, groups={groups})"

    def linear(self):
        i = self.pick(lambda t: t.dim() >= 1)
        x = self.vals[i]
        k, n = x.shape[-1], self.rng.choice([1, 2, 5, 16, 33])
        kind = self.rng.random()
        if kind < 0.4:
            return f"F.linear(v{i}, {self.param([n, k])}, {self.param([n]) if self.rng.random() < 0.6 else 'None'})"
        if kind < 0.7:
            return f"(v{i} @ {self.param([k, n])})"
        j = self.pick(lambda t: t.dim() >= 2 and x.dim() >= 2 and t.shape[-2] == k)
        if j is not None and _batch_ok(x, self.vals[j]):
            return f"torch.matmul(v{i}, v{j})"
        if x.dim() >= 2:
            return f"(v{i} @ v{i}.transpose(-1, -2))"
        return None

    def norm(self):
        i = self.pick(lambda t: t.dim() >= 1)
        x = self.vals[i]
        kind = self.rng.choice(["ln", "bn", "gn", "softmax", "log_softmax"])
        if kind == "ln":
            d = x.shape[-1]
            return f"F.layer_norm(v{i}, [{d}], {self.param([d])}, {self.param([d])})"
        if kind == "bn" and x.dim() in (2, 3, 4) and x.shape[1] > 0:
            c = x.shape[1]
            return (f"F.batch_norm(v{i}, {self.param([c])}.abs() * 0, {self.param([c])}.abs() + 0.5, "
                    f"{self.param([c])}, {self.param([c])}, False, 0.1, 1e-5)")
        if kind == "gn" and x.dim() >= 2 and x.shape[1] > 0:
            c = x.shape[1]
            g = self.rng.choice([d for d in (1, 2, c) if c % d == 0])
            return f"F.group_norm(v{i}, {g}, {self.param([c])}, {self.param([c])})"
        if kind == "log_softmax":
            return f"torch.log_softmax(v{i}, dim={self.dim(x)})"
        return f"torch.softmax(v{i}, dim={self.dim(x)})"

    def reduce(self):
        i = self.pick(lambda t: t.dim() >= 1)
        x = self.vals[i]
        f = self.rng.choice(["sum", "mean", "amax", "amin", "var"])
        nd = self.rng.randint(1, x.dim())
        dims = sorted(self.rng.sample(range(x.dim()), nd))
        kd = self.rng.random() < 0.5
        return f"v{i}.{f}(dim={dims}, keepdim={kd})"

    def movement(self):
        i = self.pick()
        x = self.vals[i]
        kind = self.rng.choice(["reshape", "permute", "transpose", "cat", "split", "slice", "select", "unsqueeze",
                                "squeeze", "expand", "flatten", "pad", "contiguous"])
        if kind == "reshape":
            return f"v{i}.reshape({_refactor(self.rng, list(x.shape))})"
        if kind == "flatten":
            return f"v{i}.flatten({self.rng.randrange(max(x.dim(), 1))})" if x.dim() else None
        if kind == "permute" and x.dim() >= 2:
            p = list(range(x.dim()))
            self.rng.shuffle(p)
            return f"v{i}.permute({p})"
        if kind == "transpose" and x.dim() >= 2:
            a, b = self.rng.sample(range(x.dim()), 2)
            return f"v{i}.transpose({a}, {b})"
        if kind == "contiguous" and x.dim() >= 2:
            return f"v{i}.transpose(0, -1).contiguous()"
        if kind == "cat" and x.dim() >= 1:
            d = self.rng.randrange(x.dim())
            j = self.pick(lambda t: t.dim() == x.dim() and all(t.shape[k] == x.shape[k] for k in range(x.dim()) if k != d))
            return f"torch.cat([v{i}, v{j}], dim={d})"
        if kind == "split" and x.dim() >= 1:
            d = self.rng.randrange(x.dim())
            sz = max(1, self.rng.randint(1, max(1, x.shape[d])))
            n = max(1, -(-x.shape[d] // sz))
            return f"torch.split(v{i}, {sz}, dim={d})[{self.rng.randrange(n)}]"
        if kind == "slice" and x.dim() >= 1:
            d = self.rng.randrange(x.dim())
            n = x.shape[d]
            a = self.rng.randint(0, n)
            b = self.rng.randint(a, n)
            step = self.rng.choice([1, 1, 2, 3])
            idx = ", ".join([":"] * d + [f"{a}:{b}:{step}"])
            return f"v{i}[{idx}]"
        if kind == "select" and x.dim() >= 1:
            d = self.rng.randrange(x.dim())
            if x.shape[d] == 0:
                return None
            return f"v{i}.select({d}, {self.rng.randrange(-x.shape[d], x.shape[d])})"
        if kind == "unsqueeze":
            return f"v{i}.unsqueeze({self.rng.randint(0, x.dim())})"
        if kind == "squeeze" and x.dim() >= 1:
            return f"v{i}.squeeze({self.rng.randrange(x.dim())})"
        if kind == "expand" and x.dim() >= 1:
            shape = [self.rng.choice([1, 2, 3]) if s == 1 else -1 for s in x.shape]
            return f"v{i}.expand({[self.rng.choice([2, 3])] + shape})"
        if kind == "pad" and x.dim() >= 1:
            pads = [self.rng.choice([0, 1, 2]) for _ in range(2 * self.rng.randint(1, min(2, x.dim())))]
            return f"F.pad(v{i}, {pads}, value={self.rng.choice([0.0, 1.5])})"
        return None

    def pool(self):
        i = self.pick(lambda t: t.dim() == 4)
        if i is None:
            return None
        kind = self.rng.choice(["max", "avg", "adaptive", "interp_nearest", "interp_bilinear"])
        k, s, p = self.rng.choice([1, 2, 3]), self.rng.choice([1, 2]), self.rng.choice([0, 1])
        if kind == "max":
            return f"F.max_pool2d(v{i}, {k}, {s}, {min(p, k // 2)}, ceil_mode={self.rng.random() < 0.3})"
        if kind == "avg":
            return f"F.avg_pool2d(v{i}, {k}, {s}, {min(p, k // 2)}, count_include_pad={self.rng.random() < 0.5})"
        if kind == "adaptive":
            return f"F.adaptive_avg_pool2d(v{i}, {self.rng.choice([1, 2, 3])})"
        mode = "nearest" if kind == "interp_nearest" else "bilinear"
        extra = ", align_corners=False" if mode == "bilinear" else ""
        return f"F.interpolate(v{i}, scale_factor={self.rng.choice([2, 0.5])}, mode='{mode}'{extra})"

    def index(self):
        i = self.pick(lambda t: t.dim() >= 1 and t.shape[0] > 0)
        if i is None:
            return None
        x = self.vals[i]
        n = self.rng.randint(0, 6)
        ids = [self.rng.randrange(x.shape[0]) for _ in range(n)]
        if self.rng.random() < 0.5:
            return f"torch.index_select(v{i}, 0, torch.tensor({ids}, dtype=torch.long))"
        if x.dim() == 2:
            return f"F.embedding(torch.tensor({ids}, dtype=torch.long), v{i})"
        return f"v{i}[torch.tensor({ids}, dtype=torch.long)]"

    def attention(self):
        i = self.pick(lambda t: t.dim() == 4)
        if i is None:
            return None
        return f"F.scaled_dot_product_attention(v{i}, v{i}, v{i}, is_causal={self.rng.random() < 0.3})"

    KINDS = [("unary", 4), ("binary", 4), ("conv", 3), ("linear", 3), ("norm", 2), ("reduce", 2), ("movement", 5),
             ("pool", 2), ("index", 1), ("attention", 1)]

    def step(self):
        names = [k for k, _ in self.KINDS]
        weights = [w for _, w in self.KINDS]
        for _ in range(30):
            kind = self.rng.choices(names, weights)[0]
            n_params = len(self.prog.params)
            expr = getattr(self, kind)()
            if expr is None or not self._try(expr):
                del self.prog.params[n_params:]
                del self.params[n_params:]
                continue
            return True
        return False

    def _try(self, expr):
        while len(self.params) < len(self.prog.params):
            self.params.append(torch.randn(self.prog.params[len(self.params)], generator=self.tg))
        ns = {"torch": torch, "F": torch.nn.functional, "self": _Params(self.params)}
        ns.update({f"v{k}": v for k, v in enumerate(self.vals)})
        try:
            with torch.no_grad():
                out = eval(expr, ns)  # noqa: S307 - our own generated code
        except Exception:
            return False
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or out.numel() > MAX_NUMEL:
            return False
        if out.numel() and not torch.isfinite(out).all():
            return False
        self.prog.lines.append(f"v{len(self.vals)} = {expr}")
        self.vals.append(out)
        return True


class _Params:
    def __init__(self, params):
        for i, p in enumerate(params):
            setattr(self, f"p{i}", p)


def _broadcastable(a, b):
    for x, y in zip(reversed(list(a)), reversed(list(b))):
        if x != y and x != 1 and y != 1:
            return False
    return len(a) <= len(b)


def _batch_ok(x, y):
    try:
        torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
        return True
    except RuntimeError:
        return False


def _refactor(rng, shape):
    n = _numel(shape)
    if n == 0:
        return shape[::-1] if shape else [0]
    out, rest = [], n
    for _ in range(rng.randint(0, 3)):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = rng.choice(divs)
        out.append(d)
        rest //= d
    out.append(rest)
    if rng.random() < 0.3:
        out[rng.randrange(len(out))] = -1
    return out


def generate(seed):
    """The random program of `seed`: 1-2 inputs, 2-8 ops, 1-2 outputs."""
    gen = _Gen(seed)
    n_in = gen.rng.choice([1, 1, 2])
    for _ in range(n_in):
        rank = gen.rng.choice([1, 2, 3, 4, 4, 4])
        shape = _rand_shape(gen.rng, rank)
        if rank == 4 and gen.rng.random() < 0.8:  # image-like, mostly non-empty
            shape = [gen.rng.choice([0, 1, 1, 2]), gen.rng.choice([1, 2, 3, 4, 8]), gen.rng.choice([1, 3, 5, 8, 12]),
                     gen.rng.choice([1, 4, 7, 8, 12])]
        gen.prog.inputs.append(shape)
        gen.vals.append(torch.randn(shape, generator=gen.tg))
    # Inputs are drawn by Program.build from the generator first; keep generation's tensors apart.
    for _ in range(gen.rng.randint(2, 8)):
        gen.step()
    # Outputs: the values no later line reads (the newest three), so no line is dead code.
    used = set()
    for line in gen.prog.lines:
        rhs = line.split("=", 1)[1]
        used.update(k for k in range(len(gen.vals)) if re.search(rf"\bv{k}\b", rhs))
    sinks = [k for k in range(n_in, len(gen.vals)) if k not in used] or [len(gen.vals) - 1]
    gen.prog.outputs = sinks[-3:]
    return gen.prog
