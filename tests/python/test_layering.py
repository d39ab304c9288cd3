"""The testbed package's module graph has no import cycle, function-level imports included (a cycle through a
function-level import is still one: it only moves the failure to run time)."""
import ast
from pathlib import Path

from conftest import REPO

PKG = REPO / "testbed"


def imports_of(path: Path) -> set[str]:
    """Sibling modules of testbed/ that a module imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            elif node.module == "testbed":
                names = [a.name for a in node.names]
            elif node.module and node.module.startswith("testbed."):
                names = [node.module.split(".")[1]]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("testbed.")]
        out.update(n for n in names if (PKG / f"{n}.py").is_file())
    out.discard(path.stem)
    return out


def find_cycle(graph: dict) -> list | None:
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                return stack[stack.index(d):] + [d]
            if d not in state:
                c = visit(d)
                if c:
                    return c
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def test_no_import_cycle_in_testbed():
    graph = {p.stem: imports_of(p) for p in PKG.glob("*.py")}
    assert len(graph) > 10
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_function_level_imports_count(tmp_path):
    f = tmp_path / "local.py"
    f.write_text("def f():\n    from .selftest import x\n    from testbed import backend\n")
    assert imports_of(f) == {"selftest", "backend"}
