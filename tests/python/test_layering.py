"""The testbed package's layers (testbed.LAYERS): every module lives in one, imports only from its own layer or
those below it, and the module graph has no cycle. Function-level imports count (an upward or circular import
inside a function only moves the failure to run time)."""
import ast
from pathlib import Path

import pytest

from conftest import REPO

PKG = REPO / "testbed"
LAYERS = ("core", "analysis", "cluster", "runs", "sweeps", "cli")


def module_name(path: Path, root: Path = PKG) -> str:
    """'runs.lifecycle' for testbed/runs/lifecycle.py; a package's __init__ is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = PKG) -> set[str]:
    """The testbed modules (or layer packages) a module imports, anywhere in it, as module_name()s."""
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = base + (node.module.split(".") if node.module else [])
            elif node.module == "testbed" or (node.module or "").startswith("testbed."):
                mod = node.module.split(".")[1:]
            else:
                continue
            for a in node.names:  # `from testbed.runs import lifecycle` imports testbed.runs.lifecycle
                sub = mod + [a.name]
                named = root.joinpath(*sub)
                out.add(".".join(sub if named.with_suffix(".py").is_file() or named.is_dir() else mod))
        elif isinstance(node, ast.Import):
            out.update(".".join(a.name.split(".")[1:]) for a in node.names if a.name.startswith("testbed."))
    out.discard(module_name(path, root))
    out.discard("")
    return out


def graph_of(root: Path = PKG) -> dict:
    return {module_name(p, root): imports_of(p, root) for p in root.rglob("*.py") if p != root / "__init__.py"}


def layer(mod: str) -> int:
    return LAYERS.index(mod.split(".")[0])


def upward_imports(graph: dict) -> list[str]:
    return sorted(f"{m} imports {d}" for m, deps in graph.items() for d in deps if layer(d) > layer(m))


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


def test_the_layers_are_the_packages():
    import testbed
    assert testbed.LAYERS == LAYERS
    on_disk = {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    assert on_disk == set(LAYERS)
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside every layer: {loose}"


def test_no_module_imports_a_higher_layer():
    graph = graph_of()
    assert len(graph) > 30
    assert upward_imports(graph) == []


def test_no_import_cycle_in_testbed():
    cycle = find_cycle(graph_of())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


@pytest.fixture
def fake_pkg(tmp_path):
    root = tmp_path / "testbed"
    for layer_name in ("core", "runs"):
        (root / layer_name).mkdir(parents=True)
        (root / layer_name / "__init__.py").write_text("")
    (root / "runs" / "selftest.py").write_text("")
    (root / "runs" / "backend.py").write_text("")
    return root


def test_every_kind_of_import_is_seen(fake_pkg):
    f = fake_pkg / "core" / "config.py"
    f.write_text("import testbed.runs.backend\n"
                 "def f():\n    from ..runs.selftest import x\n    from testbed.runs import backend\n"
                 "    from testbed import runs\n")
    assert imports_of(f, fake_pkg) == {"runs.backend", "runs.selftest", "runs"}


def test_an_upward_import_is_reported(fake_pkg):
    (fake_pkg / "core" / "config.py").write_text("def f():\n    from testbed.runs import selftest\n")
    (fake_pkg / "runs" / "backend.py").write_text("from testbed.core import config\nfrom . import selftest\n")
    assert upward_imports(graph_of(fake_pkg)) == ["core.config imports runs.selftest"]
