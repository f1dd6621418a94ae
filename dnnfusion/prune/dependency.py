"""Channel-dependency analysis: which channels of which parameters must be removed together.

Precondition: an ATen-level torch.fx graph (make_fx of the model, or the backend's inference
graph) whose leading placeholders are the model's parameters/buffers, and real inputs to run it.
Postcondition: a union-find over *channel ids* in which two ids share a class exactly when removing
one without the other would break the model (residual add, concat/split, depthwise/grouped conv,
norm layers, flatten -> linear, channel reshapes/shuffles), a set of frozen classes (graph outputs,
unknown ops, ignored layers), and the producers (conv / linear weights) whose output channels
define the prunable classes.

How: every index of every dimension of every parameter gets its own id. Running the graph on real
tensors, each value carries per dimension either None (no channel meaning) or a vector of ids
(-1 = not a channel). Ops combine these: a pointwise op unites the ids meeting at the same index,
a conv unites its input's channel ids with the weight's input-channel ids and outputs the weight's
output-channel ids, a view moves vectors between dimensions. An op we do not understand freezes
every id it touches, so an unknown op can cost pruning opportunities but never correctness.
"""
import operator

import torch
import torch.fx

FROZEN = 0  # the class every frozen id joins

_POINTWISE = {
    "add", "sub", "rsub", "mul", "div", "relu", "relu6", "hardtanh", "hardswish", "hardsigmoid", "sigmoid", "silu",
    "gelu", "tanh", "clamp", "clamp_min", "clamp_max", "where", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "pow",
    "reciprocal", "erf", "leaky_relu", "elu", "mish", "softplus", "maximum", "minimum", "lt", "gt", "le", "ge", "eq",
    "ne", "masked_fill", "_to_copy", "clone", "alias", "detach", "lift_fresh_copy", "copy", "prelu",
    "_prelu_kernel", "square", "sign", "floor", "ceil", "round", "logical_not", "bitwise_not", "fill",
    "_softmax", "_log_softmax", "softmax", "log_softmax", "dropout", "contiguous", "gelu_backward",
}
_BATCH_NORMS = {"native_batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
                "batch_norm", "_batch_norm_with_update", "_batch_norm_no_update", "cudnn_batch_norm"}
_SPATIAL = {  # op -> number of trailing spatial dims it resizes
    "max_pool2d_with_indices": 2, "max_pool2d": 2, "avg_pool2d": 2, "adaptive_avg_pool2d": 2,
    "_adaptive_avg_pool2d": 2, "adaptive_max_pool2d": 2, "max_pool1d": 1, "avg_pool1d": 1,
    "adaptive_avg_pool1d": 1, "max_pool3d_with_indices": 3, "avg_pool3d": 3, "_adaptive_avg_pool3d": 3,
    "upsample_nearest2d": 2, "upsample_bilinear2d": 2, "upsample_nearest1d": 1, "upsample_bicubic2d": 2,
    "constant_pad_nd": None, "reflection_pad2d": 2, "replication_pad2d": 2,
}
_REDUCTIONS = {"mean", "sum", "amax", "amin", "var", "std", "var_mean", "prod", "max", "min"}
_CREATION = {"empty", "zeros", "ones", "full", "arange", "scalar_tensor", "empty_like", "zeros_like", "ones_like",
             "full_like", "rand", "randn", "empty_strided", "new_zeros", "new_ones", "new_empty", "new_full"}


class UnionFind:
    def __init__(self):
        self.parent = [FROZEN]

    def new_ids(self, n):
        start = len(self.parent)
        self.parent.extend(range(start, start + n))
        return torch.arange(start, start + n, dtype=torch.long)

    def find(self, a):
        p = self.parent
        root = a
        while p[root] != root:
            root = p[root]
        while p[a] != root:
            p[a], a = root, p[a]
        return root

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if rb == FROZEN or (ra != FROZEN and rb < ra):
            ra, rb = rb, ra
        self.parent[rb] = ra  # the smaller root wins, FROZEN always wins
        return True

    def roots(self, ids):
        """Class of every entry of an id vector (-1 stays -1)."""
        return torch.tensor([self.find(int(i)) if i >= 0 else -1 for i in ids.tolist()], dtype=torch.long)


class Producer:
    """A weight whose dimension `dim` holds the output channels of op `node` (at `out_dim`)."""

    def __init__(self, param, dim, node, out_dim):
        self.param, self.dim, self.node, self.out_dim = param, dim, node, out_dim
        self.measure_node, self.measure_dim = node, out_dim


def _opname(target):
    return getattr(target, "_opname", None) or getattr(target, "__name__", str(target))


def _is_pointwise(target, name):
    if name in _POINTWISE or name.rstrip("_") in _POINTWISE:
        return True
    return torch.Tag.pointwise in getattr(target, "tags", ())


def _tensors_in(obj):
    out = []
    if isinstance(obj, torch.fx.Node):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            out.extend(_tensors_in(o))
    elif isinstance(obj, dict):
        for o in obj.values():
            out.extend(_tensors_in(o))
    return out


class ChannelAnalysis(torch.fx.Interpreter):
    """Runs the graph once on real inputs and builds the channel classes (see module docstring).

    `num_params` leading placeholders are parameters (ids on every dim); `param_ids[p][d]` is the
    id vector of dim d of parameter p. In check mode (`check_against` = the analysis of the
    unpruned model and `param_ids` given as the kept ids) every union that would join two classes
    that were apart in the original is recorded in `mismatches` instead: the pruned model would
    pair channels differently from the model it was cut from.
    """

    def __init__(self, gm, num_params, param_names=None, param_ids=None, check_against=None):
        super().__init__(gm)
        self.num_params = num_params
        self.param_names = param_names or [f"param{i}" for i in range(num_params)]
        self.uf = check_against.uf if check_against is not None else UnionFind()
        self.check = check_against is not None
        self.mismatches = []
        self.param_ids = param_ids
        self.labels = {}  # node -> labels (per-dim list, or list of those for tuple outputs)
        self.shapes = {}
        self.producers = []
        self.unknown_ops = {}
        self.id_owner = {}  # first id of a param dim vector -> (param, dim)
        self._placeholder_idx = 0
        self._current = None
        self.param_labels = {}  # param index -> id vector per dim

    def param_ids_of(self, p):
        return self.param_labels.get(p)

    def owner_name(self, i):
        """'param name' dim d of an id, for error messages."""
        for p, lab in self.param_labels.items():
            for d, v in enumerate(lab):
                if v.numel() and bool((v == i).any()):
                    return f"'{self.param_names[p]}' (dim {d})"
        return f"channel id {i}"

    # ---- union helpers ----
    def _union(self, a, b):
        if self.check:
            if self.uf.find(a) != self.uf.find(b):
                self.mismatches.append((self._current, a, b))
            return
        self.uf.union(a, b)

    def _freeze_vec(self, v):
        if v is None or self.check:
            return
        for i in torch.unique(v).tolist():
            if i >= 0:
                self.uf.union(FROZEN, i)

    def _freeze_labels(self, lab):
        if lab is None:
            return
        if isinstance(lab, list) and lab and isinstance(lab[0], list):
            for sub in lab:
                self._freeze_labels(sub)
            return
        if isinstance(lab, list):
            for v in lab:
                if isinstance(v, torch.Tensor):
                    self._freeze_vec(v)

    def _unite(self, a, b):
        """Unites two equal-length id vectors position-wise; returns the merged vector. A channel
        meeting a non-channel (-1) at the same index is frozen: it cannot be removed alone."""
        both = (a >= 0) & (b >= 0)
        if both.any():
            pairs = torch.unique(torch.stack([a[both], b[both]], 1), dim=0)
            for x, y in pairs.tolist():
                if x != y:
                    self._union(x, y)
        lone = (a >= 0) ^ (b >= 0)
        if lone.any():
            self._freeze_vec(torch.where(a >= 0, a, b)[lone])
        return torch.where(a >= 0, a, b)

    def _couple_rows(self, m):
        """Unites every row of a 2-D id matrix with its first row (same position, other groups)."""
        for r in range(1, m.shape[0]):
            self._unite(m[0], m[r])
        return m[0].clone()

    def _lab(self, a):
        return self.labels.get(a) if isinstance(a, torch.fx.Node) else None

    # ---- interpreter hooks ----
    def run_node(self, n):
        self._current = n
        value = super().run_node(n)
        if n.op == "placeholder":
            idx = self._placeholder_idx
            self._placeholder_idx += 1
            if idx < self.num_params and isinstance(value, torch.Tensor):
                if self.param_ids is not None and idx < len(self.param_ids) and self.param_ids[idx] is not None:
                    lab = [v.clone() for v in self.param_ids[idx]]
                else:
                    lab = [self.uf.new_ids(s) for s in value.shape]
                for d, v in enumerate(lab):
                    if v.numel():
                        self.id_owner[int(v[0])] = (idx, d)
                self.labels[n] = lab
                self.param_labels[idx] = lab
            elif isinstance(value, torch.Tensor):
                self.labels[n] = [None] * value.dim()
        elif n.op == "call_function":
            self.labels[n] = self._rule(n, value)
        elif n.op == "output":
            for a in _tensors_in(n.args):
                self._freeze_labels(self._lab(a))  # the model's outputs keep all their channels
        if isinstance(value, torch.Tensor):
            self.shapes[n] = tuple(value.shape)
        return value

    # ---- op rules ----
    def _rule(self, n, value):
        t = n.target
        if t is operator.getitem:
            src = self._lab(n.args[0])
            if isinstance(src, list) and src and isinstance(src[0], list):
                return src[n.args[1]]
            self._freeze_labels(src)
            return self._none(value)
        name = _opname(t)
        handler = getattr(self, "_op_" + name, None)
        if handler is not None:
            return handler(n, value)
        if name in _BATCH_NORMS:
            return self._batch_norm(n, value)
        if name in _REDUCTIONS:
            return self._reduction(n, value)
        if name in _SPATIAL:
            return self._spatial(n, value, _SPATIAL[name])
        if name in _CREATION and not any(isinstance(self._lab(a), list) and any(v is not None for v in self._lab(a))
                                         for a in _tensors_in(n.args)):
            return self._none(value)
        if _is_pointwise(t, name) and isinstance(value, torch.Tensor):
            return self._pointwise(n, value)
        return self._unknown(n, value, name)

    def _none(self, value):
        if isinstance(value, torch.Tensor):
            return [None] * value.dim()
        if isinstance(value, (list, tuple)):
            return [self._none(v) for v in value]
        return None

    def _unknown(self, n, value, name):
        ins = _tensors_in(n.args) + _tensors_in(n.kwargs)
        if any(self._lab(a) and any(v is not None for v in self._flat_vecs(self._lab(a))) for a in ins):
            self.unknown_ops[name] = self.unknown_ops.get(name, 0) + 1
        for a in ins:
            self._freeze_labels(self._lab(a))
        return self._none(value)

    @staticmethod
    def _flat_vecs(lab):
        if isinstance(lab, list) and lab and isinstance(lab[0], list):
            return [v for sub in lab for v in sub]
        return lab if isinstance(lab, list) else []

    def _pointwise(self, n, value):
        out_shape = tuple(value.shape)
        nd = len(out_shape)
        out = [None] * nd
        ins = [a for a in _tensors_in(n.args) + _tensors_in(n.kwargs) if a in self.shapes]
        for d in range(nd):
            vecs, unlabeled = [], False
            for a in ins:
                shp, lab = self.shapes[a], self._lab(a)
                k = d - (nd - len(shp))
                if k < 0:
                    continue
                if shp[k] != out_shape[d] or (shp[k] == 1 and out_shape[d] == 1 and (lab is None or lab[k] is None)):
                    continue  # broadcast along this dim: no constraint
                v = lab[k] if lab is not None else None
                if v is None:
                    unlabeled = unlabeled or out_shape[d] > 1
                else:
                    vecs.append(v)
            if not vecs:
                continue
            merged = vecs[0]
            for v in vecs[1:]:
                merged = self._unite(merged, v)
            if unlabeled:
                self._freeze_vec(merged)
            out[d] = merged
        return out

    def _batch_norm(self, n, value):
        x = self._lab(n.args[0])
        ch = x[1] if x is not None and len(x) > 1 else None
        for a in n.args[1:5]:
            la = self._lab(a)
            if la is not None and la[0] is not None:
                ch = la[0] if ch is None else self._unite(ch, la[0])
        out0 = list(x) if x is not None else [None] * value[0].dim()
        if len(out0) > 1:
            out0[1] = ch
        return [out0] + [self._none(v) for v in value[1:]]

    def _op_native_layer_norm(self, n, value):
        x = self._lab(n.args[0])
        k = len(n.args[1])
        out0 = list(x)
        nd = len(out0)
        for a in n.args[2:4]:
            la = self._lab(a)
            if la is None:
                continue
            for j in range(k):
                d = nd - k + j
                if la[j] is not None:
                    out0[d] = la[j] if out0[d] is None else self._unite(out0[d], la[j])
        return [out0] + [self._none(v) for v in value[1:]]

    def _op_native_group_norm(self, n, value):
        x = self._lab(n.args[0])
        groups = n.args[6]
        out0 = list(x)
        ch = out0[1]
        for a in n.args[1:3]:
            la = self._lab(a)
            if la is not None and la[0] is not None:
                ch = la[0] if ch is None else self._unite(ch, la[0])
        if ch is not None and groups > 1:
            # Statistics are per group: channels at the same position in every group go together.
            self._couple_rows(ch.reshape(groups, -1))
        out0[1] = ch
        return [out0] + [self._none(v) for v in value[1:]]

    def _op_convolution(self, n, value):
        x, w, b = (self._lab(a) for a in n.args[:3])
        transposed, groups = n.args[6], n.args[8]
        wshape = self.shapes[n.args[1]]
        out = [None] * value.dim()
        if x is not None and x[0] is not None:
            self._freeze_vec(x[0])
        for d in range(2, len(x or [])):
            self._freeze_vec(x[d])
        if w is None or transposed:
            for lab in (x, w, b):
                self._freeze_labels(lab)
            self.unknown_ops["convolution(transposed)" if transposed else "convolution(non-parameter weight)"] = 1
            return out
        for d in range(2, len(w)):
            self._freeze_vec(w[d])
        cin = x[1] if x is not None and x[1] is not None else None
        in_total = groups * wshape[1]
        depthwise = groups > 1 and wshape[1] == 1 and wshape[0] == in_total
        out_ch = w[0]
        if depthwise:
            # Output channel k reads only input channel k: one class, nothing mixes.
            if cin is None:
                self._freeze_vec(out_ch)  # tied to input channels that cannot be removed
            else:
                out_ch = self._unite(out_ch, cin)
            self._freeze_vec(w[1])
        elif groups == 1:
            if cin is not None:
                self._unite(cin, w[1])
            else:
                self._freeze_vec(w[1])
        else:
            # Grouped: every group must keep the same input and output positions.
            if cin is not None:
                per = cin.reshape(groups, -1)
                for r in range(groups):
                    self._unite(per[r], w[1])
            else:
                self._freeze_vec(w[1])
            self._couple_rows(w[0].reshape(groups, -1))
        if b is not None and b[0] is not None:
            out_ch = self._unite(out_ch, b[0])
        out[1] = out_ch
        self._add_producer(n.args[1], 0, n, 1)
        return out

    def _add_producer(self, wnode, dim, node, out_dim):
        if wnode.op == "placeholder" and not self.check:
            idx = list(self.graph_placeholders()).index(wnode)
            if idx < self.num_params:
                self.producers.append(Producer(idx, dim, node, out_dim))

    def graph_placeholders(self):
        if not hasattr(self, "_phs"):
            self._phs = [p for p in self.module.graph.nodes if p.op == "placeholder"]
        return self._phs

    def _matmul_like(self, n, value, a_node, b_node, bias_node=None):
        a, b = self._lab(a_node), self._lab(b_node)
        nd = value.dim()
        out = [None] * nd
        if a[-1] is not None or b[-2] is not None:
            if a[-1] is None or b[-2] is None:
                self._freeze_vec(a[-1] if a[-1] is not None else b[-2])
            else:
                self._unite(a[-1], b[-2])
        out[-2], out[-1] = a[-2], b[-1]
        for d in range(nd - 2):  # batch dims of bmm
            la, lb = a[d], b[d]
            if la is not None and lb is not None:
                out[d] = self._unite(la, lb)
            else:
                out[d] = la if la is not None else lb
                self._freeze_vec(out[d])
        if bias_node is not None:
            lbias = self._lab(bias_node)
            if lbias is not None and lbias[-1] is not None and self.shapes[bias_node][-1] == value.shape[-1]:
                out[-1] = lbias[-1] if out[-1] is None else self._unite(out[-1], lbias[-1])
            if lbias is not None and len(lbias) == 2 and lbias[0] is not None and self.shapes[bias_node][0] > 1:
                self._freeze_vec(lbias[0])
        # A linear layer: B is t(W) of a parameter W, whose dim 0 holds the output features.
        src = b_node
        if src.op == "call_function" and _opname(src.target) in ("t", "transpose", "permute") and nd == 2:
            self._add_producer(src.args[0], 0, n, nd - 1)
        elif src.op == "placeholder" and nd == 2:
            self._add_producer(src, 1, n, nd - 1)
        return out

    def _op_mm(self, n, value):
        return self._matmul_like(n, value, n.args[0], n.args[1])

    def _op_bmm(self, n, value):
        return self._matmul_like(n, value, n.args[0], n.args[1])

    def _op_addmm(self, n, value):
        return self._matmul_like(n, value, n.args[1], n.args[2], n.args[0])

    def _op_baddbmm(self, n, value):
        return self._matmul_like(n, value, n.args[1], n.args[2], n.args[0])

    def _op_t(self, n, value):
        x = self._lab(n.args[0])
        return list(reversed(x)) if len(x) == 2 else list(x)

    def _op_transpose(self, n, value):
        x = list(self._lab(n.args[0]))
        d0, d1 = (d % max(len(x), 1) for d in n.args[1:3])
        x[d0], x[d1] = x[d1], x[d0]
        return x

    def _op_permute(self, n, value):
        x = self._lab(n.args[0])
        return [x[d % len(x)] for d in n.args[1]]

    def _op_unsqueeze(self, n, value):
        x = list(self._lab(n.args[0]))
        d = n.args[1] % (len(x) + 1)
        return x[:d] + [None] + x[d:]

    def _op_squeeze(self, n, value):
        x = self._lab(n.args[0])
        shp = self.shapes[n.args[0]]
        dims = n.args[1] if len(n.args) > 1 else None
        if dims is None:
            dims = [d for d, s in enumerate(shp) if s == 1]
        elif isinstance(dims, int):
            dims = [dims]
        dims = {d % len(shp) for d in dims if shp[d % len(shp)] == 1}
        return [v for d, v in enumerate(x) if d not in dims]

    def _op_expand(self, n, value):
        x = self._lab(n.args[0])
        shp = self.shapes[n.args[0]]
        nd = value.dim()
        out = [None] * nd
        for k, v in enumerate(x):
            d = nd - len(x) + k
            out[d] = v if shp[k] == value.shape[d] else None
        return out

    def _op_view(self, n, value):
        return self._reshape(self._lab(n.args[0]), self.shapes[n.args[0]], tuple(value.shape))

    _op__unsafe_view = _op_view
    _op_reshape = _op_view

    def _reshape(self, x, in_shape, out_shape):
        labeled = [d for d, v in enumerate(x) if v is not None and in_shape[d] > 1]
        for d, v in enumerate(x):
            if v is not None and in_shape[d] == 1:
                self._freeze_vec(v)
        out = [None] * len(out_shape)
        if not labeled:
            return out
        if len(labeled) > 1:
            # Two channel dims merged or reshuffled together: no per-dim description survives.
            for d in labeled:
                self._freeze_vec(x[d])
            return out
        d = labeled[0]
        idx_shape = [1] * len(in_shape)
        idx_shape[d] = in_shape[d]
        full = x[d].reshape(idx_shape).expand(in_shape).reshape(out_shape)
        varying = [k for k in range(len(out_shape)) if out_shape[k] > 1 and
                   not bool((full.narrow(k, 0, 1) == full).all())]
        if not varying:
            self._freeze_vec(x[d])
            return out
        # The channel ids live on the varying output dims; keep one index of the others.
        sub = full
        for k in reversed(range(len(out_shape))):
            if k not in varying:
                sub = sub.select(k, 0)
        last = varying[-1]
        # Split of a channel dim (channel shuffle, heads): the outer factors stay fixed when the
        # channel count shrinks, so all entries at one inner position go together.
        out[last] = self._couple_rows(sub.reshape(-1, out_shape[last]))
        return out

    def _op_as_strided(self, n, value):
        # Only the restriding that restores a memory format is understood: same shape, and the
        # same strides as a contiguous tensor on every dim longer than 1 (so the same elements).
        shp = self.shapes.get(n.args[0])
        size, stride = list(n.args[1]), list(n.args[2])
        offset = n.args[3] if len(n.args) > 3 else 0
        if shp is not None and tuple(size) == shp and not offset:
            contig, acc = [], 1
            for s in reversed(shp):
                contig.append(acc)
                acc *= s
            contig.reverse()
            if all(s == 1 or a == b for s, a, b in zip(shp, stride, contig)):
                return list(self._lab(n.args[0]))
        return self._unknown(n, value, "as_strided")

    _op_as_strided_ = _op_as_strided

    def _op_cat(self, n, value):
        tensors = [a for a in n.args[0] if a in self.shapes and len(self.shapes[a]) == value.dim()]
        dim = (n.args[1] if len(n.args) > 1 else 0) % value.dim()
        out = [None] * value.dim()
        for k in range(value.dim()):
            if k == dim:
                parts = []
                any_lab = False
                for a in tensors:
                    v = self._lab(a)[k]
                    any_lab = any_lab or v is not None
                    parts.append(v if v is not None else torch.full((self.shapes[a][k],), -1, dtype=torch.long))
                out[k] = torch.cat(parts) if any_lab else None
            else:
                vecs = [self._lab(a)[k] for a in tensors]
                if any(v is not None for v in vecs):
                    merged = None
                    for v in vecs:
                        if v is None:
                            self._freeze_labels([merged])
                            continue
                        merged = v if merged is None else self._unite(merged, v)
                    if any(v is None for v in vecs):
                        self._freeze_vec(merged)
                    out[k] = merged
        return out

    def _split_common(self, n, value, sizes, dim):
        x = self._lab(n.args[0])
        dim = dim % len(x)
        v = x[dim]
        outs = []
        pieces = v.split(sizes) if v is not None else None
        if v is not None:
            if len({p.numel() for p in pieces}) == 1 and len(pieces) > 1:
                # chunk(): equal pieces stay equal only if each keeps the same positions.
                self._couple_rows(torch.stack(list(pieces)))
            elif len(pieces) > 1:
                self._freeze_vec(v)  # unequal literal sizes cannot follow a pruned channel count
        for i in range(len(value)):
            lab = list(x)
            lab[dim] = pieces[i] if pieces is not None else None
            outs.append(lab)
        return outs

    def _op_split(self, n, value):
        dim = n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0)
        size = n.args[1]
        return self._split_common(n, value, size if isinstance(size, int) else list(size), dim)

    def _op_split_with_sizes(self, n, value):
        dim = n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0)
        return self._split_common(n, value, list(n.args[1]), dim)

    def _op_slice(self, n, value):
        x = list(self._lab(n.args[0]))
        dim = (n.args[1] if len(n.args) > 1 else 0) % len(x)
        if value.shape[dim] != self.shapes[n.args[0]][dim] and x[dim] is not None:
            self._freeze_vec(x[dim])  # a literal channel range: cannot follow pruning
            x[dim] = None
        return x

    def _op_select(self, n, value):
        x = list(self._lab(n.args[0]))
        dim = n.args[1] % len(x)
        self._freeze_vec(x[dim])
        return x[:dim] + x[dim + 1:]

    def _op_unbind(self, n, value):
        x = list(self._lab(n.args[0]))
        dim = (n.args[1] if len(n.args) > 1 else 0) % len(x)
        self._freeze_vec(x[dim])
        return [x[:dim] + x[dim + 1:] for _ in value]

    def _reduction(self, n, value):
        if not isinstance(value, torch.Tensor):
            return self._unknown(n, value, _opname(n.target))
        x = self._lab(n.args[0])
        dims = n.args[1] if len(n.args) > 1 else None
        keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(len(x)))
        if isinstance(dims, int):
            dims = [dims]
        dims = {d % len(x) for d in dims}
        if keep:
            return [None if d in dims else v for d, v in enumerate(x)]
        return [v for d, v in enumerate(x) if d not in dims]

    def _spatial(self, n, value, k):
        x = self._lab(n.args[0])
        outs = value if isinstance(value, (tuple, list)) else [value]
        nd = outs[0].dim()
        if k is None:  # padding: the pad list says how many trailing dims change
            k = len(n.args[1]) // 2
        lab = list(x)
        for d in range(nd - k, nd):
            self._freeze_vec(lab[d])
            lab[d] = None
        if isinstance(value, (tuple, list)):
            return [list(lab) for _ in value]
        return lab

    def _op_pixel_shuffle(self, n, value):
        x = list(self._lab(n.args[0]))
        r2 = n.args[1] ** 2
        d = len(x) - 3
        out = [None] * value.dim()
        out[:d] = x[:d]
        for k in (-2, -1):
            self._freeze_vec(x[k])
        if x[d] is not None:
            # r² consecutive input channels become one output channel: they go together.
            out[d] = self._couple_rows(x[d].reshape(-1, r2).t().contiguous())
        return out

    def _op_pixel_unshuffle(self, n, value):
        x = list(self._lab(n.args[0]))
        r2 = n.args[1] ** 2
        d = len(x) - 3
        out = [None] * value.dim()
        out[:d] = x[:d]
        for k in (-2, -1):
            self._freeze_vec(x[k])
        if x[d] is not None:
            out[d] = x[d].repeat_interleave(r2)
        return out

    def _op_channel_shuffle(self, n, value):
        x = list(self._lab(n.args[0]))
        g = n.args[1]
        if x[1] is not None:
            rep = self._couple_rows(x[1].reshape(g, -1))
            x[1] = rep.repeat_interleave(g)
        return x

    _op_native_channel_shuffle = _op_channel_shuffle


def trace(model, example_inputs):
    """The ATen graph of `model` (eval, no grad) as a function of (parameters+buffers, *inputs).

    make_fx traces the real dispatch of one forward run, so Python control flow that defeats
    symbolic tracing (shape checks, data-dependent branches taken at this input) is recorded as it
    ran; functionalization removes in-place ops.
    """
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call, functionalize

    named = dict(model.named_parameters())
    named.update(dict(model.named_buffers()))
    names = list(named)
    values = [named[n].detach() for n in names]

    def f(plist, *inputs):
        return functional_call(model, dict(zip(names, plist)), tuple(inputs))

    with torch.no_grad():
        gm = make_fx(functionalize(f))(values, *example_inputs)
    return gm, names, values
