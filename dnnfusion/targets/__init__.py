"""Python glue of the execution targets (csrc/target/<name>/): for a target that reports its own
statistics or needs its own explain() section, ``dnnfusion/targets/<name>.py`` defines

- ``STATS_COUNTERS`` / ``STATS_NOTES``: the names of the counters and notes its C++ side puts into
  CompileStats::target_counters / target_notes (checked on every region: a missing or unknown name
  is an error, never a silent 0);
- ``explain_lines(regions)``: the lines of its explain() section (may be empty);
- ``prepare()``: called before each compile for the target (e.g. telling the core where tools are).

A target without such a file has no counters and no section. Nothing here names a particular target.
"""
import importlib
from types import SimpleNamespace

from .. import _C

_cache = {}


def registered(with_reasons=True):
    """[{name, description, device_type, fuses, unavailable_reason}] in registration order (first = default).
    with_reasons=False leaves out unavailable_reason, whose check may load a device driver."""
    return list(_C.targets(with_reasons))


def names():
    return [t["name"] for t in registered(False)]


def info(name):
    """One target's entry, with what this machine lacks for it ("" when it runs here)."""
    for t in registered(False):
        if t["name"] == name:
            return dict(t, unavailable_reason=_C.target_unavailable_reason(name))
    raise ValueError(f"dnnfusion: unknown target {name!r}; registered targets: {names()}")


class _Glue:
    def __init__(self, name, module):
        self.name = name
        self.counters = tuple(getattr(module, "STATS_COUNTERS", ()))
        self.notes = tuple(getattr(module, "STATS_NOTES", ()))
        self._explain = getattr(module, "explain_lines", None)
        self._prepare = getattr(module, "prepare", None)
        # A target that compiles whole graphs itself: compile_graph(gm, example_inputs, opts, report).
        self.compile_graph = getattr(module, "compile_graph", None)

    def prepare(self):
        """Before a compile for this target: whatever it needs set up first (tool locations, ...)."""
        if self._prepare:
            self._prepare()

    def check_stats(self, d):
        for key, want in (("target_counters", self.counters), ("target_notes", self.notes)):
            have = set(d[key])
            if have != set(want):
                raise RuntimeError(f"dnnfusion: target {self.name!r} reported {key} {sorted(have)}, its glue "
                                   f"(dnnfusion/targets/{self.name}.py) declares {sorted(want)}")

    def explain_lines(self, regions):
        return self._explain(regions) if self._explain else []


def glue(name):
    """The glue of target `name` (an empty one when the target has no Python file)."""
    if name not in _cache:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            module = SimpleNamespace()
        _cache[name] = _Glue(name, module)
    return _cache[name]
