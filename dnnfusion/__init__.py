"""dnnfusion: an operator-fusion inference compiler for PyTorch with a C++17 core.

Use it through ``torch.compile(model, backend="dnnfusion")`` (registered by the package's
``torch_dynamo_backends`` entry point, so no import is needed) and ``dnnfusion.explain``.
Importing this package registers nothing with Dynamo a second time.
"""
from .options import VALID_OPTIONS
from .explain import explain, ExplainReport
from .prune import prune, PruneReport  # dnnfusion.prune is the function; the package is dnnfusion.prune.*

__all__ = ["explain", "ExplainReport", "VALID_OPTIONS", "prune", "PruneReport"]
__version__ = "0.1.0"

