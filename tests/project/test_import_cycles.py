"""No import circles between the project's modules, lazy and annotation-only imports included.

Every ``import`` and ``from ... import`` anywhere in a module is an edge: inside functions,
and under ``if TYPE_CHECKING:`` too (two modules that name each other's types are one knot,
whether or not Python trips on it at run time); ``from package import name`` is an edge to
the submodule ``package.name`` when there is one, else to the package. A circle is a
strongly connected group of two or more modules, found by Tarjan's algorithm over that
graph.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"conveyor": ROOT / "client", "conveyor_server": ROOT / "server"}


def modules() -> dict[str, Path]:
    """Every hand-written module of the two distributions: dotted name -> file."""
    found = {}
    for top, base in PACKAGES.items():
        for path in (base / top).rglob("*.py"):
            if "_pb2" in path.name:
                continue
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The known modules that module ``name`` (at ``path``) imports anywhere in its text."""
    out: set[str] = set()
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = full if full in known else base
                if target in known:
                    out.add(target)
    out.discard(name)
    return out


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more nodes (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_finder_sees_lazy_relative_and_type_checking_imports(
        tmp_path: Path) -> None:
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from p import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from .d import Y\n"
                              "from .c import X\n")
    (pkg / "c.py").write_text("import p.a\n")
    (pkg / "d.py").write_text("from p import a\n")
    known = {f"p.{m}": pkg / f"{m}.py" for m in "abcd"} | {"p": pkg / "__init__.py"}
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph["p.a"] == {"p.b"} and graph["p.b"] == {"p.c", "p.d"}
    assert graph["p.c"] == {"p.a"} and graph["p.d"] == {"p.a"}
    assert circles(graph) == [["p.a", "p.b", "p.c", "p.d"]]


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": ["b"], "b": ["c"], "c": []}, []),
    ({"a": ["b"], "b": ["a"], "c": ["a"]}, [["a", "b"]]),
    ({"a": ["a"]}, []),
])
def test_circles_are_groups_of_two_or_more(graph: dict[str, list[str]],
                                           expected: list[list[str]]) -> None:
    assert circles(graph) == expected
