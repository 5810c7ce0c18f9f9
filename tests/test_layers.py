"""The import rules of docs/architecture.md, read from the source with ``ast``.

Every import of an sbxc module counts, at any depth: module level, inside functions,
``from . import x``, and ``__import__("sbxc....")`` with a literal name (the runner and
command tables). A failure names the edge (importer, imported, line)."""
from __future__ import annotations

import ast
import os

import pytest

SRC = os.path.join(os.path.dirname(__file__), "..", "src", "sbxc")

# Leaves: import nothing of sbxc but other leaves, so that every layer may use them and the
# exec hot path can load them cheaply.
LEAVES = frozenset({
    "sbxc.layout",      # folder layout, names, backend names, versions
    "sbxc.fastos",      # os for the exec hot path, without importing os
    "sbxc.hostfacts",   # facts about a host that a plan assumes
    "sbxc.planfile",    # the plan file's layout
    "sbxc.verdict",     # the enforcement-report verdict type
    "sbxc.cache",       # per-project cache names, paths and variables
    "sbxc.discovery",   # where a policy file is looked for
    "sbxc.denylist",    # the builtin syscall deny list and its reasons
    "sbxc.landlock_abi",  # Landlock's access rights per ABI
    "sbxc.linkwalk",    # resolving a path link by link
    "sbxc.hostnames",   # host names and addresses of `allow` rules (compiler and proxy)
    "sbxc.libseccomp",  # pyseccomp, imported with the system folders alone on PATH
    "sbxc.printable",   # text escaped for a terminal (diagnostics and runtime messages)
})

# What each layer may import besides itself and the leaves.
ALLOWED = {
    "sbxc.compiler": frozenset(),
    "sbxc.backends": frozenset({"sbxc.compiler.plan", "sbxc.compiler.decide"}),
    "sbxc.runtime": frozenset(),
    "sbxc.commands": frozenset({"sbxc.compiler", "sbxc.backends", "sbxc.runtime"}),
    # The package itself (the public API) and the command-line entry points sit on top.
    "sbxc": frozenset({"sbxc.commands", "sbxc.compiler", "sbxc.backends", "sbxc.runtime", "sbxc.cli",
                       "sbxc.session"}),
    # sbxc.Session runs the sbxc command itself: it imports nothing of sbxc.
    "sbxc.session": frozenset(),
    "sbxc.cli": frozenset({"sbxc.commands", "sbxc.runtime", "sbxc"}),
    "sbxc.__main__": frozenset({"sbxc.cli"}),
}


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(SRC))[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _modules() -> dict[str, str]:
    out = {}
    for folder, _dirs, files in os.walk(SRC):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(folder, f)
                out[_module_name(p)] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The sbxc module ``name`` refers to: itself, or the module holding it (``a.b.func``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(mod: str, path: str):
    """(imported module, line) for every sbxc import in ``path``."""
    is_pkg = path.endswith("__init__.py")
    package = mod if is_pkg else mod.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # `from pkg import mod` imports pkg.mod when it is a module; otherwise a name in pkg.
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        elif isinstance(node, ast.Dict):
            # Tables of lazily imported modules: {"exec": ("sbxc.runtime.launch", "exec_entry")}.
            for v in node.values:
                if isinstance(v, ast.Tuple) and v.elts and isinstance(v.elts[0], ast.Constant):
                    s = v.elts[0].value
                    if isinstance(s, str) and s.startswith("sbxc.") and s in MODULES:
                        names.append(s)
                elif isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value in MODULES:
                    names.append(v.value)
        for n in names:
            if n == "sbxc" or n.startswith("sbxc."):
                r = _resolve(n)
                if r and r != mod:
                    yield r, node.lineno


def _edges():
    return sorted({(m, t, line) for m, p in MODULES.items() for t, line in _imports(m, p)})


def _layer(mod: str) -> str:
    if mod in LEAVES:
        return "leaf"
    for layer in ("sbxc.compiler", "sbxc.backends", "sbxc.runtime", "sbxc.commands"):
        if mod == layer or mod.startswith(layer + "."):
            return layer
    return mod


def _allowed(src: str, dst: str) -> bool:
    if dst in LEAVES:
        return True
    ls, ld = _layer(src), _layer(dst)
    if ls == "leaf":
        return False
    if ls == ld:
        return True
    allowed = ALLOWED.get(ls)
    if allowed is None:
        return False
    return any(dst == a or dst.startswith(a + ".") for a in allowed)


def test_every_module_has_a_layer():
    unknown = sorted(m for m in MODULES if _layer(m) not in ALLOWED and m not in LEAVES)
    assert not unknown, f"modules outside every layer (add them to a layer or to LEAVES): {unknown}"


def test_no_forbidden_edge():
    bad = [f"{s} -> {d} (line {line})" for s, d, line in _edges() if not _allowed(s, d)]
    assert not bad, "imports against docs/architecture.md:\n  " + "\n  ".join(bad)


def test_no_cycle():
    graph: dict[str, set[str]] = {}
    for s, d, _line in _edges():
        graph.setdefault(s, set()).add(d)
    # Tarjan's strongly connected components, iteratively (no recursion limit).
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(MODULES):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    assert not out, "import cycles: " + "; ".join(" <-> ".join(c) for c in out)


def test_leaves_import_nothing_else():
    bad = [f"{s} -> {d} (line {line})" for s, d, line in _edges() if s in LEAVES and d not in LEAVES]
    assert not bad, "leaf modules must import only other leaves:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("edge", [("sbxc.compiler.api", "sbxc.backends", True),
                                  ("sbxc.backends.bwrap", "sbxc.runtime.probe", True),
                                  ("sbxc.runtime.plancache", "sbxc.compiler.api", True),
                                  ("sbxc.backends.landlock", "sbxc.compiler.plan", False),
                                  ("sbxc.commands.compile", "sbxc.backends", False)])
def test_the_rules_see_a_forbidden_edge(edge):
    """Control: the checker itself refuses the edges the rules forbid."""
    src, dst, forbidden = edge
    assert _allowed(src, dst) is (not forbidden)
