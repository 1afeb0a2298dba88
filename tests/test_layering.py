"""The package's layers, enforced on its imports (an AST walk over cloudfit/, lazy imports included).

Every import of a cloudfit module must go to the importer's own layer or a lower one; a few pairs in
one layer or across are forbidden outright; packages import one another without cycles; and the
library (everything but ``cli/``) never prints. The layers are data: a change of layout updates
``LAYERS`` (and ``FORBIDDEN``), nothing else.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cloudfit"

#: Bottom to top. A unit is a top-level module or package of cloudfit (``cloudfit.<unit>``).
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("ground", frozenset({"types", "errors", "units", "atomic", "resources", "endpoints", "workload", "cache"})),
    ("catalog", frozenset({"catalog"})),  # offerings, accelerator specs and canonical names, prices
    ("stacks", frozenset({"stacks"})),  # training stacks: a plan's job in each stack's words, their log lines
    ("models", frozenset({"profiling", "perf", "spot", "train", "plot", "llm", "llm_model", "train_llm", "runtime"})),  # measure, predict, preemption, LLMs
    ("search", frozenset({"search"})),  # pure ranking: launches nothing
    ("plan", frozenset({"plan", "executors", "bill"})),  # plans, the executors that run them (siblings), the whole bill
    ("active", frozenset({"active", "explore", "launcher"})),  # plan + a passed-in executor; notebook trade-offs
    ("cli", frozenset({"cli", "__main__"})),  # the only printer
)
#: (importer, imported) pairs never allowed, whatever the layers say.
FORBIDDEN: frozenset[tuple[str, str]] = frozenset({
    ("search", "executors"), ("search", "plan"), ("search", "active"),
    ("plan", "executors"), ("plan", "active"),
    ("perf", "spot"), ("spot", "perf"),
})
#: Units allowed to call print(): the command line, and the training script run on the VMs
#: (its stdout is the job's log).
PRINTERS = frozenset({"cli", "__main__", "train", "train_llm", "runtime"})

RANK = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def _unit(module: str) -> str | None:
    """``cloudfit.search.space`` → ``search``; ``cloudfit`` (the root package) → None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "cloudfit" and len(parts) > 1 else None


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, cloudfit module imported) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "cloudfit"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "cloudfit":
                continue
            for a in node.names:  # `from cloudfit import perf` imports the module cloudfit.perf
                sub = f"{target}.{a.name}"
                out.append((node.lineno, sub if sub in MODULES else target))
    return out


def _edges() -> list[tuple[str, str, str, int]]:
    """(importer unit, imported unit, file, line) for imports across units."""
    edges = []
    for module, path in MODULES.items():
        me = _unit(module)
        if me is None:  # the root package: the public surface, resolved lazily (tests/test_public_api.py)
            continue
        for line, target in _imports(module, path):
            other = _unit(target)
            if other is not None and other != me:
                edges.append((me, other, str(path.relative_to(PACKAGE.parent)), line))
    return edges


EDGES = _edges()


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in MODULES} - {None}
    assert units <= set(RANK), f"give these a layer in LAYERS: {sorted(units - set(RANK))}"


def test_no_import_runs_up_a_layer():
    up = [f"{f}:{line}: {a} ({LAYERS[RANK[a]][0]}) imports {b} ({LAYERS[RANK[b]][0]})"
          for a, b, f, line in EDGES if a in RANK and b in RANK and RANK[b] > RANK[a]]
    assert not up, "imports that run back up:\n" + "\n".join(up)


def test_no_forbidden_import():
    bad = [f"{f}:{line}: {a} imports {b}" for a, b, f, line in EDGES if (a, b) in FORBIDDEN]
    assert not bad, "\n".join(bad)


def test_the_library_never_imports_the_cli():
    bad = [f"{f}:{line}: {a} imports cli" for a, b, f, line in EDGES if b == "cli" and a not in ("cli", "__main__")]
    assert not bad, "\n".join(bad)


def test_no_cycles_between_units():
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in EDGES:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (cycle := visit(v)):
                return cycle
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (cycle := visit(u)):
            pytest.fail("import cycle: " + " → ".join(cycle))


def _module_graph() -> dict[str, set[str]]:
    """Module → the cloudfit modules it imports (at any depth, lazy imports too). ``from cloudfit.a.b import x``
    is an edge to ``cloudfit.a.b`` (the module that runs), not to the packages above it."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        for _, target in _imports(module, path):
            while target not in MODULES and "." in target:  # `from cloudfit.a import name`: the module cloudfit.a
                target = target.rsplit(".", 1)[0]
            if target != module and target in MODULES:
                graph.setdefault(module, set()).add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative): each is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root), on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w), on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_circles_between_modules():
    """No module imports, directly or through others, a module that imports it back (lazy imports count:
    a circle hidden in a function is still two modules that cannot be understood apart)."""
    circles = _circles(_module_graph())
    assert not circles, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in circles)


def test_the_circle_check_finds_circles():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set(), "c": {"c"}}) == []
    assert ("cloudfit.plan.llm", "cloudfit.plan.rank") in {(a, b) for a, bs in _module_graph().items() for b in bs}


def test_the_library_never_prints():
    bad = []
    for module, path in MODULES.items():
        if _unit(module) in PRINTERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not bad, "print() outside cli/ (return values, raise CloudfitError): " + ", ".join(bad)


def test_the_check_sees_imports():
    """The walk finds lazy imports inside functions and `from cloudfit import X` submodules."""
    assert ("search", "perf") in {(a, b) for a, b, _, _ in EDGES}  # build_space imports perf lazily
    assert ("active", "executors") in {(a, b) for a, b, _, _ in EDGES}
