"""dnnfusion.quantize: int8 post-training static quantization for the FPGA accelerator target.

Conventions (the integer rules live in the C++ core, csrc/quant, so the
quantizer, the accelerator model and these functions agree bit for bit):

* Activations: per-tensor symmetric int8, zero point 0. ``scale`` is in real units per int8 step:
  ``real = scale * q``, and ``scale = T / 127`` for a clipping threshold ``T`` chosen from a
  2048-bin histogram of ``|x|`` over calibration data: ``"kl"`` (TensorRT's entropy calibration,
  the default), ``"minmax"`` (``T = max|x|``) or ``"percentile"`` (``T`` = the bin edge below which
  ``percentile`` % of the values lie). All-zero data gives ``T = 1.0`` (scale 1/127).
* Weights: symmetric int8 per output channel (dim 0) or per tensor, ``scale_k = max|w_k| / 127``
  (an all-zero channel gets scale 1.0), ``q = clamp(round_half_away_from_zero(w / scale), -127, 127)``.
* Biases: int32 in accumulator units, ``round_half_away_from_zero(b / (in_scale * w_scale_k))``,
  saturated to ``[-(2**31 - 1), 2**31 - 1]`` with a ``RuntimeWarning`` naming saturated channels.
* Requantization of an int32 accumulator to int8: a real scale ``s = in_scale * w_scale / out_scale``
  becomes ``(multiplier, shift)`` with ``s ~= multiplier / 2**shift``; then
  ``y = clamp((acc * multiplier + 2**(shift-1)) >> shift, lo, hi)`` in 64-bit arithmetic (no
  rounding term when shift is 0; ties round toward +inf), ``[lo, hi]`` = ``[-128, 127]``, ReLU
  ``[0, 127]``, ReLU6 ``[0, min(127, round_half_up(6 / out_scale))]``.

Bad arguments raise ``ValueError`` naming the problem and what is accepted.
"""
import warnings

import torch
import torch.nn as nn

from . import _C

__all__ = [
    "CALIBRATED_MODULES",
    "Histogram",
    "calibrate",
    "threshold",
    "quantize_weight",
    "quantize_bias",
    "requant_params",
    "layer_requant",
    "requantize",
    "fold_bn",
]

Histogram = _C.quant.Histogram

# The modules whose input and output calibrate() records.
CALIBRATED_MODULES = (nn.Conv2d, nn.Linear, nn.ReLU, nn.ReLU6, nn.MaxPool2d, nn.BatchNorm2d)
_ACTIVATIONS = (None, "relu", "relu6")


class _RecordError(ValueError):
    """A calibration tensor that cannot be recorded (raised inside a hook, reported with its batch)."""


def _check_percentile(percentile):
    if isinstance(percentile, bool) or not isinstance(percentile, (int, float)):
        raise ValueError(f"percentile must be a number in (0, 100], got {percentile!r}")
    if not 0 < float(percentile) <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    return float(percentile)


def _calibration_tensor(t, key):
    """The float32 contiguous CPU copy (or view) of an activation that the histogram bins."""
    if isinstance(t, (tuple, list)) and t and isinstance(t[0], torch.Tensor):
        t = t[0]  # MaxPool2d(return_indices=True) returns (values, indices)
    if not isinstance(t, torch.Tensor):
        raise _RecordError(f"'{key}' is a {type(t).__name__}, not a tensor")
    if not t.is_floating_point():
        raise _RecordError(f"'{key}' has dtype {t.dtype}; activation calibration needs floating-point tensors")
    return t.detach().to(device="cpu", dtype=torch.float32).contiguous()


def threshold(hist, method="kl", percentile=99.99):
    """(T, scale) of a :class:`Histogram`: T the clipping value in real units, scale = T / 127."""
    return tuple(_C.quant.threshold(hist, method, percentile))


def calibrate(model, calib_data, method="kl", percentile=99.99):
    """Per-tensor activation scales of ``model`` from calibration data.

    Runs ``model`` in eval mode without gradients over ``calib_data`` (an iterable of input tensors,
    or of ``(input, label, ...)`` tuples whose first element is the input; a DataLoader works) and
    collects a histogram of ``|x|`` for the model input and for the input and output of every
    ``nn.Conv2d``, ``nn.Linear``, ``nn.ReLU``, ``nn.ReLU6``, ``nn.MaxPool2d`` and ``nn.BatchNorm2d``
    submodule. Inputs are recorded before the module runs, so in-place ReLUs are seen correctly.
    A module called several times per forward (a ReLU shared by two places) gets one histogram over
    all its calls. ``calib_data`` is iterated once (a generator is fine); the histogram range grows
    as larger batches arrive (csrc/quant/calibration.h).

    Returns ``{key: scale}`` with ``scale = T / 127`` in real units per int8 step and keys
    ``"input"`` (the model input), ``"<qualified module name>.in"`` and ``"<name>.out"`` (``"model"``
    when the model itself is one of those modules). A module that never ran gets no keys (and a
    warning). The model's training flag is restored afterwards.

    ``method``: ``"kl"``, ``"minmax"`` or ``"percentile"`` (with ``percentile`` in (0, 100]).
    Raises ValueError for empty data ("calibration data is empty"), an unknown method, a batch the
    model cannot run (naming the batch index and the error) or non-finite activations.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"calibrate: model must be a torch.nn.Module, got {type(model).__name__}")
    method = _C.quant.parse_method(method)
    percentile = _check_percentile(percentile)
    if isinstance(calib_data, torch.Tensor):
        raise ValueError("calibrate: calib_data must be an iterable of batches (e.g. [x] or a DataLoader), not one tensor")
    try:
        batches = iter(calib_data)
    except TypeError:
        raise ValueError(f"calibrate: calib_data must be an iterable of batches, got {type(calib_data).__name__}") from None

    hists = {}

    def record(key, t):
        data = _calibration_tensor(t, key)
        h = hists.get(key)
        if h is None:
            h = hists[key] = Histogram()
        try:
            h.add(data)
        except ValueError as e:
            raise _RecordError(f"'{key}': {e}") from e

    handles, hooked = [], []
    for name, module in model.named_modules():
        if isinstance(module, CALIBRATED_MODULES):
            prefix = name or "model"
            hooked.append(prefix)
            handles.append(module.register_forward_pre_hook(
                lambda m, args, key=prefix + ".in": record(key, args[0]) if args else None))
            handles.append(module.register_forward_hook(
                lambda m, args, out, key=prefix + ".out": record(key, out)))

    was_training = model.training
    model.eval()
    count = 0
    try:
        with torch.no_grad():
            for index, item in enumerate(batches):
                x = item[0] if isinstance(item, (tuple, list)) and item else item
                try:
                    if not isinstance(x, torch.Tensor):
                        raise _RecordError(f"the input is a {type(x).__name__}; expected a tensor or an (input, label) tuple")
                    record("input", x)
                    model(x)
                except _RecordError as e:
                    raise ValueError(f"calibrate: batch {index}: {e}") from e
                except Exception as e:
                    raise ValueError(f"calibrate: the model cannot run batch {index}: {type(e).__name__}: {e}") from e
                count += 1
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    if count == 0:
        raise ValueError("calibration data is empty")

    silent = [p for p in hooked if p + ".out" not in hists]
    if silent:
        warnings.warn(f"calibrate: modules never ran on the calibration data, no scales for them: {silent}",
                      RuntimeWarning, stacklevel=2)
    return {key: float(threshold(h, method, percentile)[1]) for key, h in hists.items()}


def _weight_float32(w, what):
    if not isinstance(w, torch.Tensor):
        raise ValueError(f"{what} must be a torch.Tensor, got {type(w).__name__}")
    if not w.is_floating_point():
        raise ValueError(f"{what} must be a floating-point tensor, got {w.dtype}")
    if w.dim() < 1 or w.numel() == 0:
        raise ValueError(f"{what} must have at least one dimension (dim 0 = output channel) and no zero-size dimension, "
                         f"got shape {tuple(w.shape)}")
    return w.detach().to(device="cpu", dtype=torch.float32).contiguous()


def _scales(v):
    """Weight scales (a tensor, sequence or number) as a 1-D float32 CPU tensor."""
    t = v if isinstance(v, torch.Tensor) else torch.as_tensor(v, dtype=torch.float32)
    if not t.is_floating_point() or t.numel() == 0:
        raise ValueError(f"weight scales must be a non-empty set of floating-point numbers, got {t.dtype} "
                         f"of shape {tuple(t.shape)}")
    return t.detach().to(device="cpu", dtype=torch.float32).contiguous().reshape(-1)


def quantize_weight(w, per_channel=True):
    """Symmetric int8 weight: ``(q, scales)``.

    ``w``: a floating-point tensor whose dim 0 is the output channel (Conv2d ``[K, C/g, R, S]``,
    Linear ``[out, in]``). ``scales`` (float32, real units per int8 step) has ``K`` entries per
    channel or 1 per tensor: ``max|w_k| / 127``, 1.0 for an all-zero channel. ``q`` (int8, the shape
    of ``w``) is ``clamp(round_half_away_from_zero(w / scale), -127, 127)``; ``q * scale`` is
    within ``scale / 2`` of ``w``. Results are CPU tensors.
    """
    q, scales = _C.quant.quantize_weights(_weight_float32(w, "weight"), bool(per_channel))
    return q, scales


def quantize_bias(bias, in_scale, weight_scales):
    """int32 bias in accumulator units: ``round_half_away_from_zero(b_k / (in_scale * w_scale_k))``.

    ``weight_scales``: the ``scales`` of :func:`quantize_weight` (K entries or 1). Values beyond
    int32 saturate to ``+-(2**31 - 1)`` with a RuntimeWarning naming the channels (a degenerate layer:
    weights near zero next to a large bias).
    """
    b = _weight_float32(bias, "bias")
    q, saturated = _C.quant.quantize_bias(b.reshape(-1), float(in_scale), _scales(weight_scales))
    if saturated:
        warnings.warn(f"quantize_bias: the bias of channels {list(saturated)} does not fit in int32 at scale "
                      f"in_scale * weight_scale and was saturated", RuntimeWarning, stacklevel=2)
    return q


def requant_params(scale):
    """``(multiplier, shift)`` with ``multiplier / 2**shift ~= scale``: the largest shift in [0, 31]
    whose ``multiplier = round(scale * 2**shift)`` stays below ``2**31`` (error at most
    ``2**-(shift+1)``). ``scale`` must be finite and in (0, 2**31)."""
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(f"requant_params: scale must be one number, got a tensor of shape {tuple(scale.shape)}")
        scale = scale.item()
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"requant_params: scale must be a number, got {type(scale).__name__}")
    m, s = _C.quant.choose_multiplier(float(scale))
    return int(m), int(s)


def layer_requant(in_scale, weight_scales, out_scale):
    """Per-output-channel ``(multipliers, shifts)`` (int32 tensors) for a layer:
    ``requant_params(in_scale * weight_scales[k] / out_scale)`` for each channel k."""
    m, s = _C.quant.layer_requant(float(in_scale), _scales(weight_scales), float(out_scale))
    return m, s


def _activation_bounds(activation, out_scale):
    if activation not in _ACTIVATIONS:
        raise ValueError(f"requantize: activation must be None, 'relu' or 'relu6', not {activation!r}")
    if activation is None:
        return -128, 127
    if activation == "relu":
        return 0, 127
    if out_scale is None:
        raise ValueError("requantize: activation='relu6' needs out_scale (6.0 in output units bounds the result)")
    return 0, _C.quant.relu6_bound(float(out_scale))


def _per_channel_ints(v, what):
    t = torch.as_tensor(v)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"requantize: {what} must be integers, got {t.dtype}")
    lo, hi = (0, 2**31 - 1) if what == "multiplier" else (0, 31)
    if t.numel() and (int(t.min()) < lo or int(t.max()) > hi):
        raise ValueError(f"requantize: {what} values must lie in [{lo}, {hi}]")
    return t.to(device="cpu", dtype=torch.int32).contiguous().reshape(-1)


def requantize(acc, multiplier, shift, activation=None, out_scale=None, channel_dim=1):
    """int8 output of an int32 accumulator by the requantization rule (module docstring).

    ``acc``: an int32 tensor. ``multiplier``/``shift``: ints (one scale for the tensor), or 1-D
    integer tensors with one entry per channel along ``channel_dim`` (default 1: NCHW or
    ``[batch, features]``; use 0 for a 1-D accumulator). ``activation``: None (``[-128, 127]``),
    ``"relu"`` (``[0, 127]``) or ``"relu6"`` (``[0, min(127, round(6 / out_scale))]``, ``out_scale``
    being the output's real units per step). Returns an int8 tensor on ``acc``'s device.
    """
    if not isinstance(acc, torch.Tensor):
        raise ValueError(f"requantize: acc must be a torch.Tensor, got {type(acc).__name__}")
    if acc.dtype != torch.int32:
        raise ValueError(f"requantize: acc must be an int32 tensor (the accumulator), got {acc.dtype}")
    lo, hi = _activation_bounds(activation, out_scale)
    a = acc.to("cpu").contiguous()
    if isinstance(multiplier, torch.Tensor) or isinstance(shift, torch.Tensor):
        m = _per_channel_ints(multiplier, "multiplier")
        s = _per_channel_ints(shift, "shift")
        y = _C.quant.requantize_per_channel(a, m, s, int(channel_dim), lo, hi)
    else:
        for v, name in ((multiplier, "multiplier"), (shift, "shift")):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"requantize: {name} must be an int or a 1-D integer tensor, got {type(v).__name__}")
        y = _C.quant.requantize(a, multiplier, shift, lo, hi)
    return y.to(acc.device)


def fold_bn(conv_weight, conv_bias, bn):
    """Folds an eval-mode batch norm into the convolution before it: ``(w, b)`` float32 tensors.

    With ``a_k = gamma_k / sqrt(running_var_k + eps)``: ``w'_k = w_k * a_k`` and
    ``b'_k = (b_k - running_mean_k) * a_k + beta_k`` (``b = 0`` when ``conv_bias`` is None; gamma 1 and
    beta 0 when the batch norm is not affine), so ``bn(conv(x)) == conv'(x)`` in eval mode.
    Results are on ``conv_weight``'s device; the inputs are not modified.
    """
    if not isinstance(bn, nn.modules.batchnorm._BatchNorm):
        raise ValueError(f"fold_bn: bn must be a torch.nn BatchNorm module, got {type(bn).__name__}")
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError("fold_bn: the batch norm has no running statistics (track_running_stats=False); "
                         "only an eval-mode batch norm with running mean and variance can be folded")
    w = _weight_float32(conv_weight, "conv weight")
    k = w.shape[0]
    if bn.num_features != k:
        raise ValueError(f"fold_bn: the batch norm has {bn.num_features} features, the convolution {k} output channels")

    def vec(t, default):
        if t is None:
            return torch.full((k,), default, dtype=torch.float32)
        return t.detach().to(device="cpu", dtype=torch.float32).contiguous().reshape(-1)

    b = vec(conv_bias, 0.0)
    if b.numel() != k:
        raise ValueError(f"fold_bn: conv bias has {b.numel()} values, the convolution {k} output channels")
    fw, fb = _C.quant.fold_batch_norm(w, b, vec(bn.weight, 1.0), vec(bn.bias, 0.0), vec(bn.running_mean, 0.0),
                                      vec(bn.running_var, 1.0), float(bn.eps))
    return fw.to(conv_weight.device), fb.to(conv_weight.device)
