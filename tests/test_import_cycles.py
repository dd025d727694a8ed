"""No import cycles among offrl's modules, counting imports inside functions too (a lazy import
cycle is still two modules that cannot be understood, or split, one without the other)."""

import ast
from pathlib import Path

import offrl

#: cycles owned outside this check's first users, to be removed by their owners (then this set is empty).
KNOWN_CYCLES: set[tuple[str, str]] = set()


def module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``, anywhere in the file (``from P import M``
    counts as importing ``P.M`` when that is a module, else ``P``)."""
    names = module_names(root)
    graph = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    edges.add(target if target in names else base)
        graph[name] = {e for e in edges if e in names and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import pkg.c\ndef f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .. import a\n")
    (pkg / "c.py").write_text("")
    assert cycles(import_graph(pkg)) == [("pkg.a", "pkg.sub.b")]


def test_offrl_has_no_import_cycles():
    found = set(cycles(import_graph(Path(offrl.__file__).parent)))
    assert found - KNOWN_CYCLES == set(), sorted(found - KNOWN_CYCLES)
