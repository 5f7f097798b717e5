"""The layers of docs/architecture.md, enforced: an import that runs back up fails here.

Every ``import`` in rgwkeeper counts, including those inside functions (a lazy import hides a
cycle, it does not remove it), and importing ``a.b.c`` from outside ``a.b`` counts as importing
the package ``a.b`` too, because Python runs its ``__init__`` first.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "rgwkeeper"

#: Entry points: may import anything (they start the CLI).
ENTRY = {"rgwkeeper.__main__", "rgwkeeper.loadgen.__main__"}
#: Leaf modules: pure helpers and plain data every layer may use; they import only each other.
BASE = {"rgwkeeper", "rgwkeeper.errors", "rgwkeeper.units", "rgwkeeper.names", "rgwkeeper.releases",
        "rgwkeeper.lifecycle", "rgwkeeper.hostid", "rgwkeeper.lifeline", "rgwkeeper.locks", "rgwkeeper.logs", "rgwkeeper.encoding",
        "rgwkeeper.aio"}
#: Configuration and cluster access: files and settings, no Ceph.
SETTINGS = {"rgwkeeper.access", "rgwkeeper.config"}
#: Decisions from plain data: no adapter, no executor, no I/O.
PURE = {"rgwkeeper.actions", "rgwkeeper.snapshot", "rgwkeeper.reconcile", "rgwkeeper.journal",
        "rgwkeeper.purge.layout", "rgwkeeper.loadgen.workload", "rgwkeeper.loadgen.analysis"}


def _package_of(module: str) -> str:
    return module.rsplit(".", 1)[0]


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The rgwkeeper modules ``module`` imports (and the packages whose __init__ that runs)."""
    found: set[str] = set()
    here = module if is_package else _package_of(module)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import mod` imports the module; `from mod import name` the module only.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            if not _in(name, "rgwkeeper"):
                continue
            found.add(name)
            parent = name
            while "." in parent:
                parent = _package_of(parent)
                if parent != "rgwkeeper" and not _in(module, parent):  # its own package is running already
                    found.add(parent)
    found.discard(module)
    return found


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    known = set(sources)
    return {m: imports_of(src, m, pkg, known) for m, (src, pkg) in sources.items()}


def read_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(), p.name == "__init__.py") for p in ROOT.rglob("*.py")}


def violations(graph: dict[str, set[str]]) -> list[str]:
    out: list[str] = []
    for mod, deps in sorted(graph.items()):
        if mod in ENTRY:
            continue
        for dep in sorted(deps):
            why = _rule_broken(mod, dep)
            if why:
                out.append(f"{mod} imports {dep}: {why}")
    out.extend(f"import cycle: {' -> '.join(c)}" for c in cycles(graph))
    return out


def _rule_broken(mod: str, dep: str) -> str | None:
    if _in(dep, "rgwkeeper.cli") and not _in(mod, "rgwkeeper.cli"):
        return "only the CLI and the entry points import the CLI"
    if _in(dep, "rgwkeeper.daemon") and not (_in(mod, "rgwkeeper.daemon") or _in(mod, "rgwkeeper.cli")):
        return "only the CLI starts the daemon"
    if mod in BASE and dep not in BASE:
        return "a leaf module imports only other leaf modules"
    if mod in SETTINGS and dep not in BASE | SETTINGS:
        return "settings and access import only leaf modules"
    if _in(mod, "rgwkeeper.adapters") and not (dep in BASE | SETTINGS or _in(dep, "rgwkeeper.adapters")):
        return "adapters talk to Ceph and depend on nothing above them"
    if (mod in PURE or _in(mod, "rgwkeeper.policy")) and not (
            dep in BASE | SETTINGS | PURE or _in(dep, "rgwkeeper.policy")):
        return "policies and planners decide from plain data"
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), as a readable path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_runs_back_up_the_layers():
    problems = violations(import_graph(read_sources()))
    assert problems == [], "\n".join(problems)


def _graph_of(**modules: str) -> dict[str, set[str]]:
    real = read_sources()
    planted = {name.replace("__", "."): (textwrap.dedent(src), False) for name, src in modules.items()}
    return import_graph({**real, **planted})


@pytest.mark.parametrize("module, source, expected", [
    # a planner formatting through the CLI (what purge/plan.py once did)
    ("rgwkeeper__purge__fmt", "from rgwkeeper.cli.render import human_duration\n",
     "only the CLI and the entry points import the CLI"),
    # an adapter reaching up into a policy, inside a function
    ("rgwkeeper__adapters__x", "def f():\n    from rgwkeeper.policy import scrub\n",
     "adapters talk to Ceph"),
    # a policy doing I/O through an adapter
    ("rgwkeeper__policy__x", "from rgwkeeper.adapters.rados import RadosAdapter\n",
     "policies and planners decide from plain data"),
    # a leaf module importing the purge engine
    ("rgwkeeper__units", "import rgwkeeper.purge.execute\n", "a leaf module imports only"),
])
def test_a_planted_upward_import_is_caught(module, source, expected):
    problems = violations(_graph_of(**{module: source}))
    assert any(expected in p and p.startswith(module.replace("__", ".")) for p in problems), problems


def test_a_lazy_import_cycle_through_a_package_init_is_caught():
    # config importing a purge module runs rgwkeeper/purge/__init__.py, which reaches config
    # again through observe: the cycle the old lazy import in config.py hid.
    problems = violations(_graph_of(rgwkeeper__config="def f():\n    from rgwkeeper.purge import plan\n"))
    assert any(p.startswith("import cycle:") and "rgwkeeper.config" in p and "rgwkeeper.purge" in p
               for p in problems), problems
