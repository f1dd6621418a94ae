"""Physical channel removal: slices parameters/buffers and updates the layers' size attributes.

Precondition: `model` is a private copy (it is modified in place) and `keep[name] = {dim: indices}`
lists, for each parameter/buffer name, the indices to keep along each dim that shrinks.
Postcondition: every listed tensor is replaced by its slice (Parameters stay Parameters with their
requires_grad), and Conv/Linear/BatchNorm/LayerNorm/GroupNorm/PReLU layers report their new sizes
(in_channels, groups, num_features, ...), so the model's own forward runs on the smaller tensors.
"""
import torch
import torch.nn as nn


def _owner(model, name):
    mod_name, _, attr = name.rpartition(".")
    return (model.get_submodule(mod_name) if mod_name else model), attr, mod_name


def slice_tensors(model, keep):
    """Returns {module name: module} of every module whose tensors changed, with old shapes."""
    touched = {}
    for name, dims in keep.items():
        mod, attr, mod_name = _owner(model, name)
        old = getattr(mod, attr)
        touched.setdefault(mod_name, (mod, {}))[1][attr] = tuple(old.shape)
        new = old.detach()
        for d, idx in sorted(dims.items()):
            new = new.index_select(d, idx)
        new = new.clone().contiguous()
        if isinstance(old, nn.Parameter):
            setattr(mod, attr, nn.Parameter(new, requires_grad=old.requires_grad))
        else:
            mod._buffers[attr] = new
    for mod_name, (mod, old_shapes) in touched.items():
        _update_sizes(mod, old_shapes)
    return touched


def _update_sizes(mod, old_shapes):
    if isinstance(mod, nn.modules.conv._ConvNd):
        w = mod.weight
        old_w = old_shapes.get("weight", tuple(w.shape))
        old_in = mod.in_channels
        depthwise = mod.groups > 1 and old_w[1] == 1 and mod.groups == old_in and old_w[0] == old_in
        if depthwise:
            mod.groups = mod.in_channels = mod.out_channels = w.shape[0]
        else:
            mod.out_channels = w.shape[0]
            mod.in_channels = w.shape[1] * mod.groups
    elif isinstance(mod, nn.Linear):
        mod.out_features, mod.in_features = mod.weight.shape
    elif isinstance(mod, nn.modules.batchnorm._NormBase):
        ref = mod.weight if mod.weight is not None else mod.running_mean
        mod.num_features = ref.shape[0]
    elif isinstance(mod, nn.LayerNorm) and mod.weight is not None:
        mod.normalized_shape = tuple(mod.weight.shape)
    elif isinstance(mod, nn.GroupNorm) and mod.weight is not None:
        mod.num_channels = mod.weight.shape[0]
    elif isinstance(mod, nn.PReLU):
        mod.num_parameters = mod.weight.shape[0]


def magnitude_prune(model, ratio, ignored, global_pruning):
    """Unstructured pruning: zeroes the smallest-|w| entries of every conv/linear weight (not in
    `ignored`) so that a `ratio` fraction of each layer (or of all layers together with
    `global_pruning`) is zero. Ties are broken by position (stable sort), so the result is
    deterministic. Returns [(layer name, numel, zeros)]."""
    layers = [(n, m) for n, m in model.named_modules()
              if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear)) and n not in ignored]
    with torch.no_grad():
        if global_pruning and layers:
            flat = torch.cat([m.weight.detach().abs().flatten() for _, m in layers])
            k = int(ratio * flat.numel())
            order = torch.argsort(flat, stable=True)
            mask = torch.ones_like(flat, dtype=torch.bool)
            mask[order[:k]] = False
            off = 0
            for _, m in layers:
                n = m.weight.numel()
                m.weight.mul_(mask[off:off + n].view_as(m.weight))
                off += n
        else:
            for _, m in layers:
                flat = m.weight.detach().abs().flatten()
                k = int(ratio * flat.numel())
                order = torch.argsort(flat, stable=True)
                mask = torch.ones_like(flat, dtype=torch.bool)
                mask[order[:k]] = False
                m.weight.mul_(mask.view_as(m.weight))
    return [(n, m.weight.numel(), int((m.weight == 0).sum())) for n, m in layers]
