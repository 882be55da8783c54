"""Measure the package's layering: import cycles between rooms, imports pointing up, private names
imported across modules, getattr capability probes, names on `run`, the largest files and functions.

Every import counts (lazy ones inside functions and those under TYPE_CHECKING): the file is parsed with
`ast` and every Import / ImportFrom node anywhere in it is read. A room is a top-level folder of
`steadyrl/` (or a top-level module, e.g. `cli`). The floors are those of docs/architecture.md.

    python tools/layering.py            # the numbers
    python tools/layering.py --edges    # and every import between rooms
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "steadyrl"

# The floors of docs/architecture.md, top (high number) to bottom. A room may import rooms on a lower
# floor, or its own; an import of a room on the same floor that is not itself is allowed only where
# SAME_FLOOR_ALLOWED names it (a room pair, so no cycle can form: the test checks cycles separately).
FLOORS: dict[str, int] = {
    "cli": 13, "__main__": 13, "selfcheck": 13,
    "recipe": 12, "plot": 12, "convert": 12,
    "preflight": 11,
    "run": 10, "tracking": 10,
    "build": 9,
    "trainer": 8,
    "demo": 7,
    "rewards": 6, "gateway": 6,
    "doctor": 5,
    "rollout": 4, "agents": 4,
    "envs": 3,
    "data": 3, "config": 3,
    "models": 2, "gguf_model": 2, "model_files": 2, "distributed": 2,
    "functional": 1,
    "sandbox": 0, "errors": 0, "files": 0, "lazy": 0, "progress": 0, "secrets": 0, "userfn": 0,
    "__init__": 0,
}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names, line) for every import in the file, lazy and TYPE_CHECKING ones too."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((target, [a.name for a in node.names], node.lineno))
    return out


def resolve(target: str, names: list[str], known: dict[str, Path]) -> list[str]:
    """The package modules an import reaches: `from a.b import c` is a.b.c where that is a module."""
    if not target.startswith("steadyrl"):
        return []
    hits = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
    return hits or [target]


def edges() -> list[tuple[str, str, str, int]]:
    """(from module, to module, from room -> to room, line) for every import between two rooms."""
    known = modules()
    out = []
    for module, path in known.items():
        for target, names, line in imports_of(module, path):
            for dest in resolve(target, names, known):
                if room_of(dest) != room_of(module) and dest != "steadyrl":
                    out.append((module, dest, f"{room_of(module)} -> {room_of(dest)}", line))
    return out


def room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dest, _, _ in edges():
        graph[room_of(src)].add(room_of(dest))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def up_imports() -> list[tuple[str, str, int]]:
    """Imports from a room to a room on a higher floor, or to another room on the same floor."""
    out = []
    for src, dest, _, line in edges():
        a, b = room_of(src), room_of(dest)
        fa, fb = FLOORS.get(a), FLOORS.get(b)
        if fa is None or fb is None:
            out.append((src, dest, line))  # a room without a floor is itself a finding
        elif fb > fa:
            out.append((src, dest, line))
    return out


def private_imports() -> list[tuple[str, str, int]]:
    """`from module import _name` between two modules (dunder names excluded)."""
    known = modules()
    out = []
    for module, path in known.items():
        for target, names, line in imports_of(module, path):
            if not target.startswith("steadyrl"):
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__") and f"{target}.{n}" not in known:
                    out.append((module, f"{target}.{n}", line))
    return out


def getattr_probes() -> list[tuple[str, int, str]]:
    """getattr(x, "name", default) / hasattr(x, "name") on an agent, engine or driver."""
    out = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)):
                subject = ast.unparse(node.args[0])
                if any(w in subject.lower() for w in ("agent", "engine", "driver", "generator")):
                    out.append((module, node.lineno, ast.unparse(node)))
    return out


def run_names() -> int | None:
    """Fields of `Run` plus forwarding properties installed on it (build/setup.py)."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "Run":
                fields = [s for s in node.body if isinstance(s, ast.AnnAssign)]
                props = [s for s in node.body if isinstance(s, ast.FunctionDef)
                         and any(ast.unparse(d) == "property" for d in s.decorator_list)]
                forwarded = 0
                for other in ast.walk(tree):
                    if (isinstance(other, ast.Assign) and isinstance(other.value, (ast.Tuple, ast.List))
                            and any(isinstance(t, ast.Name) and "FORWARD" in t.id.upper() for t in other.targets)):
                        forwarded += sum(len(e.elts) if isinstance(e, (ast.Tuple, ast.List)) else 1
                                         for e in other.value.elts)
                return len(fields) + len(props) + forwarded
    return None


def largest(n: int = 5):
    files = sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in PACKAGE.rglob("*.py")),
                   reverse=True)[:n]
    funcs = []
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{p.relative_to(ROOT)}:{node.name}"))
    return files, sorted(funcs, reverse=True)[:n]


def main(argv: list[str]) -> int:
    graph = room_graph()
    knots = cycles(graph)
    ups = up_imports()
    priv = private_imports()
    probes = getattr_probes()
    print(f"cycles between rooms: {len(knots)} " + "; ".join(", ".join(k) for k in knots))
    print(f"imports pointing up a floor: {len(ups)}")
    for src, dest, line in ups:
        print(f"  {src}:{line} -> {dest}")
    print(f"private names imported across modules: {len(priv)}")
    if "--edges" in argv:
        for src, name, line in priv:
            print(f"  {src}:{line} {name}")
    print(f"getattr/hasattr probes on agents/engines/drivers: {len(probes)}")
    for module, line, text in probes:
        print(f"  {module}:{line} {text}")
    print(f"names on run (fields + properties + forwarded): {run_names()}")
    files, funcs = largest()
    print("largest files: " + ", ".join(f"{p} {n}" for n, p in files))
    print("largest functions: " + ", ".join(f"{p} {n}" for n, p in funcs))
    if "--edges" in argv:
        for src, dest, rooms, line in sorted(edges(), key=lambda e: e[2]):
            print(f"  {rooms}: {src}:{line} -> {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
