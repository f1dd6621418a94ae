"""dnnfusion: an operator-fusion inference compiler for PyTorch with a C++17 core.

Use it through ``torch.compile(model, backend="dnnfusion")`` (registered by the package's
``torch_dynamo_backends`` entry point, so no import is needed) and ``dnnfusion.explain``, or compile
ahead of time with ``dnnfusion.compile(model, example_inputs)`` (torch.export once, no Dynamo
guards per call).
Importing this package registers nothing with Dynamo a second time. Errors the caller acts on are
their own classes: CompilerNotFound, TargetUnavailable (set-up problems), CompilerTimeout (a
generated-kernel compile ran past $DNNFUSION_COMPILE_TIMEOUT), UnknownTarget and InvalidInput (also
ValueErrors), UnsupportedOp; all derive from CoreError (a RuntimeError). A region that should have
compiled but runs eagerly raises a FallbackWarning (once per reason) and says why in explain().
"""
from ._C import (CoreError, CompilerNotFound, CompilerTimeout, InvalidInput, TargetUnavailable, UnknownTarget,
                 UnsupportedOp)
from .report import FallbackWarning
from .options import VALID_OPTIONS
from .explain import explain, ExplainReport
from .compiled_model import compile, CompiledModel  # noqa: A004 - dnnfusion.compile, as torch.compile
from .prune import prune, PruneReport  # dnnfusion.prune is the function; the package is dnnfusion.prune.*
from . import targets
from . import cuda  # sparse convolution kernels for NVIDIA GPUs (dnnfusion.cuda.sparse_conv2d)
from . import quantize  # int8 post-training quantization (calibration, weights, requantization)
from . import fpga  # int8 CNN accelerator through OpenCL (dnnfusion.fpga.compile)

__all__ = ["compile", "CompiledModel", "explain", "ExplainReport", "VALID_OPTIONS", "prune", "PruneReport", "targets", "cuda", "quantize", "fpga", "CoreError",
           "CompilerNotFound", "CompilerTimeout", "FallbackWarning", "InvalidInput", "TargetUnavailable", "UnknownTarget", "UnsupportedOp"]
__version__ = "0.1.0"

