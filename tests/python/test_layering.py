"""The architecture's boundaries, checked on the source tree (no build needed):
- a particular target (csrc/target/<name>/) is reached only through csrc/target/target.h: nothing
  outside csrc/target/ includes a target's own headers (its tests live in tests/, not csrc/); a
  target's user-facing API (dnnfusion.cuda.sparse_conv2d and the like) is bound by the target's own
  csrc/target/<name>/python/bind_api.cc, which registers itself with the bridge;
- the pipeline, planners, executor and bridge never name a particular target;
- only csrc/python/ includes torch headers; pybind11 only there and in the targets' python/ binders,
  and nothing of the core includes a binder's header (csrc/python/)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CSRC = os.path.join(ROOT, "csrc")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def _sources(top):
    for d, _, files in os.walk(top):
        for f in files:
            if f.endswith((".h", ".cc", ".cpp", ".def")):
                path = os.path.join(d, f)
                with open(path) as fh:
                    yield os.path.relpath(path, ROOT), fh.read()


def _targets():
    base = os.path.join(CSRC, "target")
    return sorted(d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d)))


def test_targets_exist_and_are_listed_one_line_each():
    names = _targets()
    assert {"cpu", "reference"} <= set(names)
    with open(os.path.join(CSRC, "target", "targets.def")) as f:
        listed = re.findall(r"^DNNF_TARGET\((\w+)\)$", f.read(), re.M)
    defined = sorted(n for n in names if _defines_target(n))
    assert sorted(listed) == defined, "every target folder (one that defines make_<name>_target) is one DNNF_TARGET line"
    assert set(listed) <= set(names), "every DNNF_TARGET line has its folder"


def _defines_target(name):
    """Whether csrc/target/<name>/ defines the target itself (a folder may hold a target's parts first)."""
    pattern = re.compile(rf"std::unique_ptr<Target>\s+make_{name}_target\(\)\s*\{{")
    return any(pattern.search(text) for _, text in _sources(os.path.join(CSRC, "target", name)))


def test_no_target_internals_outside_csrc_target():
    leaks = []
    for rel, text in _sources(CSRC):
        if rel.startswith(os.path.join("csrc", "target") + os.sep):
            continue
        for inc in INCLUDE.findall(text):
            if re.match(r"target/([^/]+)/", inc):
                leaks.append(f"{rel} includes {inc}")
    assert not leaks, "only csrc/target/target.h is the way in:\n" + "\n".join(leaks)


def _is_binder(rel):
    """A target's user-API binder: csrc/target/<name>/python/*.cc (built into the extension only)."""
    parts = rel.split(os.sep)
    return len(parts) == 5 and parts[:2] == ["csrc", "target"] and parts[3] == "python" and rel.endswith(".cc")


def test_targets_do_not_include_each_other():
    names = _targets()
    leaks = []
    for rel, text in _sources(os.path.join(CSRC, "target")):
        parts = rel.split(os.sep)
        own = parts[2] if len(parts) > 3 else None
        for inc in INCLUDE.findall(text):
            m = re.match(r"target/([^/]+)/", inc)
            if m and m.group(1) in names and m.group(1) != own:
                leaks.append(f"{rel} includes {inc}")
    assert not leaks, "\n".join(leaks)


def test_pipeline_planners_executor_bridge_never_name_a_target():
    names = [n for n in _targets()]
    shared = [os.path.join("csrc", "pipeline.cc"), os.path.join("csrc", "pipeline.h"),
              os.path.join("csrc", "pass_logger.cc"), os.path.join("csrc", "passes.cc")]
    folders = [os.path.join("csrc", d) for d in ("fusion", "runtime", "python", "codegen", "rewrite", "ecg")]
    offenders = []
    for rel, text in _sources(CSRC):
        if rel not in shared and not any(rel.startswith(f + os.sep) for f in folders):
            continue
        code = re.sub(r"//[^\n]*", "", text)  # comments may mention targets as examples
        for n in names:
            # a lookup or comparison by the target's name, or an include of its folder
            if re.search(rf'(get|require_available)\(\s*"{n}"|==\s*"{n}"|"{n}"\s*==|"target/{n}/', code):
                offenders.append(f"{rel} names target {n!r}")
    assert not offenders, "\n".join(offenders)


def test_only_the_bridge_sees_torch_headers():
    leaks = []
    for rel, text in _sources(CSRC):
        if rel.startswith(os.path.join("csrc", "python") + os.sep):
            continue
        python_side = ("pybind11", "python") if _is_binder(rel) else ()
        for inc in INCLUDE.findall(text):
            top = inc.split("/")[0]
            if top in ("torch", "ATen", "c10", "pybind11", "python") and top not in python_side:
                leaks.append(f"{rel} includes {inc}")
    assert not leaks, "\n".join(leaks)


def test_each_target_binds_its_own_api():
    """The binders are where the layout says, and each registers the submodule of its own target."""
    for rel, text in _sources(os.path.join(CSRC, "target")):
        if "register_target_api(" in text:
            assert _is_binder(rel), f"{rel} registers a user API outside csrc/target/<name>/python/"
            own = rel.split(os.sep)[2]
            assert re.search(rf'register_target_api\(\s*"{own}"', text), f"{rel} registers another target's API"
    binders = [rel for rel, _ in _sources(os.path.join(CSRC, "target")) if _is_binder(rel)]
    assert {b.split(os.sep)[2] for b in binders} >= {"cuda", "fpga"}
