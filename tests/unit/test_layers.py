"""The layering rule (docs/internals.md, "Layout"), read from the source with ``ast``:

    protocol <- storage <- coordinator <- broker <- testing
    client: protocol only (speaking to a broker from outside: connections, TLS/SASL)
    tools, spark_jobs: client and protocol (clients: they talk to a broker over the wire)
    txbroker/ (the ``txbroker`` command): the entry point, may import any layer

An arrow against the layers, or any import cycle between modules (a package's
``__init__`` counts as a module: ``from pkg import mod`` imports ``pkg`` too), fails with the
offending imports as ``file:line``. Every import counts: at module level, inside
functions (imported on use), and under ``if TYPE_CHECKING:`` (a type hint is a
dependency too). Imports a string hides from ``ast`` (importlib, ``-m`` in a
subprocess) are not seen; the product does not hide arrows that way.

Two explicit exceptions, each listed below with its reason:
* PROGRAMS: modules run with ``python -m`` that start a broker to drive a client
  (the Spark demos) and every ``__main__.py``: entry points like ``txbroker/``;
  no other module may import them.
* ALIASES: modules kept at an old import path that docs/ documents for users; they
  re-export from the new home and contain nothing else; no product module may import
  them, and their one import follows the layers like any other (an alias never hides
  an arrow: a module whose new home sits above its old one gets no alias).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "txbroker"
ENTRY = "txbroker"  # the top package: the command line, may import anything
# layer -> the layers its modules may import (besides third-party and the stdlib)
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset({"protocol"}),
    "storage": frozenset({"protocol", "storage"}),
    "coordinator": frozenset({"protocol", "storage", "coordinator"}),
    "broker": frozenset({"protocol", "storage", "coordinator", "broker"}),
    "testing": frozenset({"protocol", "client", "storage", "coordinator", "broker", "testing"}),
    "client": frozenset({"protocol", "client"}),
    "tools": frozenset({"protocol", "client", "tools"}),
    "spark_jobs": frozenset({"protocol", "client", "spark_jobs"}),
}
LAYERS = (*ALLOWED, ENTRY)

# Programs: run, never imported. They orchestrate a broker process and its clients.
PROGRAMS: dict[str, str] = {
    "spark_jobs/demo.py": "`make demo`: starts a broker process (txbroker.testing) for the "
                          "Spark pipeline it demonstrates",
    "spark_jobs/demo_security.py": "`make demo SECURE=1`: the same, with a secured broker",
}
# Old import paths kept for users (docs/internals.md, "Moved modules"): file -> new home.
# None now: the user docs show only the new paths, and the old broker.{testing,process,
# pytest_plugin} aliases were arrows from broker to testing.
ALIASES: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported product module, dotted
    path: str  # file, relative to the root
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} imports {self.target}"


def module_name(root: Path, path: Path) -> str:
    """``broker/handlers/fetch.py`` -> ``txbroker.broker.handlers.fetch`` (the folders
    install under the namespace); ``txbroker/cli.py`` -> ``txbroker.cli``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] != ENTRY:
        parts.insert(0, NAMESPACE)
    return ".".join(parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else ENTRY


def product_modules(root: Path) -> dict[str, Path]:
    out = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            out[module_name(root, path)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imports_of(root: Path, modules: dict[str, Path]) -> tuple[list[Import], list[str]]:
    """Every import of a product module by a product module, and the imports that
    name a layer without the namespace (``import storage``: an application's own
    ``storage`` would answer it)."""
    found, bare = [], []
    for name, path in modules.items():
        rel = str(path.relative_to(root))
        package = name if _is_package(path) else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                # `from pkg import mod` imports pkg.mod when it is a module, and pkg itself
                # (its __init__ runs first, and may import pkg.mod's importer back: a
                # circle through a package's __init__ counts as any other); a package's
                # own `from . import mod` is not an arrow to itself.
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix
                           for a in node.names]
                if prefix != name and prefix not in targets:
                    targets.append(prefix)
            else:
                continue
            for target in targets:
                top = target.split(".")[0]
                if top in ALLOWED:
                    bare.append(f"{rel}:{node.lineno}: import {target} (use {NAMESPACE}.{target})")
                    continue
                if top != NAMESPACE:
                    continue  # stdlib or third-party
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]  # `import a.b.C`: the module a.b
                found.append(Import(name, target, rel, node.lineno))
    return sorted(set(found), key=lambda i: (i.path, i.line, i.target)), bare


def is_entry_point(path: str) -> bool:
    """The txbroker/ package, a ``__main__.py`` or a listed program: run, never imported."""
    return path in PROGRAMS or path.endswith("/__main__.py") or path.startswith(ENTRY + "/")


def against_the_layers(root: Path, imports: list[Import], modules: dict[str, Path]) -> list[str]:
    path_of = {m: str(p.relative_to(root)) for m, p in modules.items()}
    bad = []
    for imp in imports:
        src, dst = layer_of(imp.source), layer_of(imp.target)
        target_path = path_of[imp.target]
        if is_entry_point(target_path) and not is_entry_point(imp.path):
            bad.append(f"{imp} (an entry point: run it, do not import it)")
        elif target_path in ALIASES and imp.path not in ALIASES:
            bad.append(f"{imp} (an alias kept for users: import {ALIASES[target_path]})")
        elif imp.path in ALIASES and imp.target != ALIASES[imp.path]:
            bad.append(f"{imp} (an alias re-exports {ALIASES[imp.path]} only)")
        elif is_entry_point(imp.path):
            continue
        elif dst not in ALLOWED[src]:
            bad.append(f"{imp} ({src} -> {dst}: {src} may import "
                       f"{', '.join(sorted(ALLOWED[src]))})")
    return bad


def cycles(imports: list[Import]) -> list[list[Import]]:
    """The import cycles: one per strongly connected component of the module graph with
    more than one module (or a module importing itself)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
        graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_shortest_cycle(min(c), c, imports) for c in components]


def _shortest_cycle(start: str, component: set[str], imports: list[Import]) -> list[Import]:
    """One shortest cycle through ``start`` inside its component, as its imports (the
    first import statement of each arrow): enough to see where to cut."""
    first: dict[tuple[str, str], Import] = {}
    for imp in imports:
        if imp.source in component and imp.target in component:
            first.setdefault((imp.source, imp.target), imp)
    via: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for (src, dst), imp in sorted(first.items()):
                if src != v:
                    continue
                if dst == start:
                    path = [imp]
                    while path[0].source != start:
                        path.insert(0, via[path[0].source])
                    return path
                if dst not in via:
                    via[dst] = imp
                    nxt.append(dst)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def alias_problems(root: Path) -> list[str]:
    """An alias holds a docstring, imports from its new home and ``__all__``; nothing else."""
    bad = []
    for rel, home in ALIASES.items():
        path = root / rel
        if not path.exists():
            bad.append(f"{rel}: listed in ALIASES but missing")
            continue
        tree = ast.parse(path.read_text())
        for i, node in enumerate(tree.body):
            if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue
            if isinstance(node, ast.ImportFrom) and (node.module == home
                                                     or node.module == "__future__"):
                continue
            if isinstance(node, ast.Assign) and [getattr(t, "id", None)
                                                 for t in node.targets] == ["__all__"]:
                continue
            bad.append(f"{rel}:{node.lineno}: an alias re-exports {home} and does nothing else")
    return bad


def check(root: Path) -> list[str]:
    modules = product_modules(root)
    imports, bare = imports_of(root, modules)
    problems = bare + against_the_layers(root, imports, modules)
    for cycle in cycles(imports):
        problems.append("import cycle:\n    " + "\n    ".join(map(str, cycle)))
    return problems


def test_imports_follow_the_layers_without_cycles():
    problems = check(ROOT) + alias_problems(ROOT)
    assert not problems, "\n" + "\n".join(problems)


def test_the_checker_sees_every_kind_of_import(tmp_path):
    """The rule itself, on a small tree: what it must catch and what it must let be."""
    files = {
        "protocol/__init__.py": "",
        "protocol/a.py": "from typing import TYPE_CHECKING\n"
                         "if TYPE_CHECKING:\n    from txbroker.storage import s\n",
        "storage/__init__.py": "",
        "storage/s.py": "def f():\n    from . import t\n",
        "storage/t.py": "import os\nfrom txbroker.storage.s import f\n",
        "broker/__init__.py": "",
        "broker/b.py": "from txbroker.protocol import a\nimport txbroker.storage.t\n",
        "tools/__init__.py": "",
        "tools/x.py": "from txbroker.broker.b import g\nimport storage.s\n",
        # a circle through a package's __init__: g re-exports m, m imports g (for n)
        "coordinator/__init__.py": "",
        "coordinator/g/__init__.py": "from . import n\nfrom .m import X\n",
        "coordinator/g/m.py": "from txbroker.coordinator.g import n\nX = 1\n",
        "coordinator/g/n.py": "",
        "txbroker/__init__.py": "",
        "txbroker/cli.py": "from txbroker.tools import x\nfrom txbroker.broker import b\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    problems = check(tmp_path)
    assert any(p.startswith("protocol/a.py:3:") and "protocol -> storage" in p
               for p in problems), problems
    assert any(p.startswith("tools/x.py:1:") and "tools -> broker" in p for p in problems)
    assert any(p.startswith("tools/x.py:2: import storage.s") for p in problems)
    cycle = sorted(p for p in problems if p.startswith("import cycle"))
    assert len(cycle) == 2, cycle
    assert "coordinator/g/__init__.py:2" in cycle[0] and "coordinator/g/m.py:1" in cycle[0]
    assert "storage/s.py:2" in cycle[1] and "storage/t.py:2" in cycle[1]
    assert not any("txbroker/cli.py" in p or "broker/b.py" in p for p in problems), problems


def test_aliases_keep_the_old_imports():
    import importlib

    for rel, home in ALIASES.items():
        old = importlib.import_module(module_name(ROOT, ROOT / rel))
        new = importlib.import_module(home)
        assert old.__all__, rel
        for name in old.__all__:
            assert getattr(old, name) is getattr(new, name), (rel, name)
