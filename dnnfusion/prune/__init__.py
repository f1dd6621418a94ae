"""Structured channel pruning with AukC's combined score and unstructured magnitude
pruning: ``dnnfusion.prune(model, ratio, example_inputs, ...)``.

Layout: dependency.py (channel classes from an ATen trace), criteria.py (scores, fed to the C++
core), plan.py (groups and the channels each keeps), apply.py (physical removal), report.py,
api.py (the entry point, argument checks and the verification of the result), compile_pass.py
(the same pruning applied by the backend to Dynamo's graph: options={"prune": ratio}).
All submodules are imported here, so none is first loaded after ``dnnfusion.prune`` has been
rebound to the function.
"""
from . import apply, compile_pass, criteria, dependency, plan, report  # noqa: F401
from .api import prune
from .report import PruneReport

__all__ = ["prune", "PruneReport"]
