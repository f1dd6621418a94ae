"""Cheaper per-call guards for the graphs dnnfusion compiles.

Every call of a torch.compile'd model first runs Dynamo's guards, one check per parameter, buffer
and module attribute the trace read: about 5,800 checks on mobilenet_v3_large, 0.25 ms per call
(cProfile), 7 % of that model's inference on 2 cores and time ONNX Runtime or OpenVINO never spend.
Dynamo can instead compare each nn.Module's ``__dict__`` version tag with the one it saw at compile
time and skip the module's whole subtree of guards while it is unchanged
(``torch._dynamo.config.use_recursive_dict_tags_for_guards``, off by default in torch): 0.11 ms.
Any attribute assignment on a module (a new parameter, ``.train()``, a swapped submodule) changes
the tag, and the full guards then run as before.

What that check cannot see is a change of a tensor's metadata in place (``p.data = t`` with another
shape or dtype, ``p.requires_grad_()``). Values are a separate matter: dnnfusion freezes the weights
into the compiled graph and checks on every call, guards or not, that each is still the same tensor
at the same version (backend._FrozenGraph). ``options={"fast_guards": False}`` keeps Dynamo's own
setting for models whose parameters' metadata changes in place.

The setting is switched on from inside the backend, where Dynamo builds the guards of the frame it
is compiling right after the backend returns, and restored when that compile ends (Dynamo's
end-of-compile callback): other backends and later compiles see the user's setting.
"""
import torch

_saved = None  # the user's setting (a bool) while a dnnfusion compile has it switched on


def enable_for_this_compile():
    """Switches the dict-tag guard check on for the frame Dynamo is compiling now."""
    global _saved
    cfg = torch._dynamo.config
    if _saved is None:
        _saved = cfg.use_recursive_dict_tags_for_guards
    cfg.use_recursive_dict_tags_for_guards = True


def _restore(_args=None):
    global _saved
    if _saved is not None:
        torch._dynamo.config.use_recursive_dict_tags_for_guards = _saved
        _saved = None


torch._dynamo.callback_handler.register_end_callback(_restore)
