"""Imports point one way: each package of spanner_cdc imports its own package and the floors below it, never above or
beside; no package imports itself in a circle; the files outside the package import what their role allows, by names
that exist; local_spanner imports only the vocabulary. Lazy imports, `importlib.import_module("...")` and
`__import__("...")` count (a name built at run time, as the CLI's discovery of its commands, cannot be read); imports under
`if TYPE_CHECKING:` count for the floors but not for circles."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Lowest floor first. docs/architecture.md draws the same floors. Packages on one floor are siblings: neither imports
# the other (each imports only its own package and the floors below), except the pairs in SIBLING_IMPORTS.
LAYERS: list[set[str]] = [
    {"errors", "names", "masking", "times", "json_text", "compat"},  # vocabulary, formats, error types, other libraries' internals: import nothing of the project
    # configuration: the validators of values, the settings, the streams' tables, what lands; the shipped files (read as data)
    {"validators", "settings", "stream_config", "policy", "read_options", "resources"},
    {"lineage", "model"},  # pure: the partition rules; the typed records and their dispatch
    {"source", "store"},  # adapters: the change stream (queries, decoding, the reader); Postgres (lineage, manifest)
    {"lake"},  # layout, envelope rows, publication, markers
    {"spark"},  # sessions, the data source, token jobs
    {"extract"},  # plan, waves, close
    {"orchestration"},  # Airflow task bodies and connections
    {"ui"},  # the monitoring UI inside Airflow's API server
    {"airflow"},  # the DAG factory and the UI plugin Airflow loads
    {"local_spanner"},  # the local Spanner server (tests and the dev stack only)
    {"devstack", "cli", "__init__", "__main__"},  # the dev stack, and the command line that starts it
]
SIBLING_IMPORTS = {
    ("settings", "validators"),  # one set of validators for both
    ("stream_config", "validators"),
    ("stream_config", "settings"),  # a stream's settings are the global ones with its values on top
    ("settings", "policy"),  # the landing policy is a setting (and a stream table's key)
    ("stream_config", "policy"),
    ("settings", "read_options"),  # Data Boost, priority and directed reads are settings (and a stream table's keys)
    ("stream_config", "read_options"),
    ("cli", "devstack"),  # the command line starts the dev stack; never the other way
    ("__main__", "cli"),
}
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}
VOCABULARY = LAYERS[0]
ONLY_VOCABULARY = {"local_spanner"}  # a server of its own: it shares only the vocabulary with the pipeline


@dataclass(frozen=True)
class Outside:
    """What the files of a folder outside the package may import: at their top level, and inside functions."""

    top: frozenset[str]
    lazy: frozenset[str]


def _at_or_below(part: str) -> frozenset[str]:
    return frozenset(name for name, rank in RANK.items() if rank <= RANK[part] and name not in ONLY_VOCABULARY | {"devstack"})


EVERYTHING = frozenset(RANK)
SHIPPED_DAG_FILES = "spanner_cdc/resources/dags"
OUTSIDE = {
    # parsing a DAG file stays cheap: the configuration and the vocabulary; task bodies import the orchestration
    # a DAG file calls the package's DAG factory (whose own top-level imports stay light: test_dag_integrity.py)
    "dags": Outside(frozenset({"airflow"}), frozenset({"airflow"})),
    SHIPPED_DAG_FILES: Outside(frozenset({"airflow"}), frozenset({"airflow"})),  # the DAG file `spanner-cdc init` writes
    "spark_jobs": Outside(_at_or_below("cli") - {"devstack"}, _at_or_below("cli") - {"devstack"}),  # spark-submit's entry: the CLI
    "bench": Outside(EVERYTHING, EVERYTHING),  # the benchmarks drive the dev stack's servers
}


@dataclass(frozen=True)
class Import:
    module: str  # the spanner_cdc module imported (a package's __init__ by the package's name)
    lazy: bool  # inside a function
    type_only: bool  # under `if TYPE_CHECKING:`
    names: tuple[str, ...] = ()  # the names of `from module import ...`


def part_of(module: str) -> str:
    """`spanner_cdc.store.url` -> `store`; a top-level module is its own part."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _walk(node: ast.AST, lazy: bool = False, type_only: bool = False) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every node below `node`, with whether it sits inside a function (lazy) and under `if TYPE_CHECKING:`."""
    inside = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    for child in ast.iter_child_nodes(node):
        yield child, inside, type_only
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for stmt in child.body:  # its else branch runs
                yield stmt, inside, True
                yield from _walk(stmt, inside, True)
            for stmt in child.orelse:
                yield stmt, inside, type_only
                yield from _walk(stmt, inside, type_only)
        else:
            yield from _walk(child, inside, type_only)


def _literal_module(call: ast.Call) -> str | None:
    """The module a literal `importlib.import_module("...")` or `__import__("...")` names."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def imports_of(source: str) -> list[Import]:
    """Every spanner_cdc module a file imports, at any depth."""
    found: list[Import] = []
    for node, lazy, type_only in _walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "spanner_cdc":  # `from spanner_cdc import names`
            found += [Import(f"spanner_cdc.{alias.name}", lazy, type_only) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "spanner_cdc":
            found.append(Import(node.module, lazy, type_only, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            found += [Import(a.name, lazy, type_only) for a in node.names if a.name.split(".")[0] == "spanner_cdc"]
        elif isinstance(node, ast.Call) and (module := _literal_module(node)) and module.split(".")[0] == "spanner_cdc":
            found.append(Import(module, lazy, type_only))
    return found


class Tree:
    """The modules of a checkout (`root/spanner_cdc/...`) and the files outside the package."""

    def __init__(self, root: Path) -> None:
        self.root = root
        package = root / "spanner_cdc"
        self.files: dict[str, Path] = {}
        for path in sorted(package.rglob("*.py")):
            if path.is_relative_to(root / SHIPPED_DAG_FILES):  # data the package ships: checked as DAG files, below
                continue
            parts = path.relative_to(root).with_suffix("").parts
            self.files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        self.sources = {module: path.read_text() for module, path in self.files.items()}
        self.imports = {module: imports_of(source) for module, source in self.sources.items()}

    def targets(self, imp: Import) -> list[str]:
        """The modules an import reaches: `from pkg import mod` reaches pkg.mod where that is a module."""
        if imp.names and all(f"{imp.module}.{name}" in self.files for name in imp.names):
            return [f"{imp.module}.{name}" for name in imp.names]
        return [imp.module] + [f"{imp.module}.{name}" for name in imp.names if f"{imp.module}.{name}" in self.files]

    def defines(self, module: str, name: str) -> bool:
        """Whether `from module import name` finds something: a submodule, or a name bound at the module's top level."""
        if f"{module}.{name}" in self.files:
            return True
        source = self.sources.get(module)
        if source is None:
            return False
        return name in _top_level_names(ast.parse(source))


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If | ast.Try | ast.With):
            stack += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            stack += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
    return names


def floor_violations(module: str, imports: list[Import]) -> list[str]:
    """`importer -> imported` for each import that points up the floors, beside them, or out of the vocabulary."""
    here = part_of(module)
    out = []
    for imp in imports:
        there = part_of(imp.module)
        if there == here or (here, there) in SIBLING_IMPORTS:
            continue
        if here in ONLY_VOCABULARY and there not in VOCABULARY:
            out.append(f"{module} -> {imp.module} ({here} imports only the vocabulary: {', '.join(sorted(VOCABULARY))})")
        elif RANK[there] > RANK[here]:
            out.append(f"{module} -> {imp.module} ({here} may not import {there})")
        elif RANK[there] == RANK[here]:
            out.append(f"{module} -> {imp.module} ({here} and {there} are siblings: neither imports the other)")
    return out


def circles(tree: Tree) -> list[str]:
    """Each set of modules that import each other in a circle (runtime imports, lazy ones too), as `a -> b -> a`."""
    graph = {
        module: sorted({t for imp in imports if not imp.type_only for t in tree.targets(imp) if t in tree.files and t != module})
        for module, imports in tree.imports.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[str] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(" <-> ".join(sorted(component)))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def outside_violations(tree: Tree) -> list[str]:
    """The files outside the package: what each folder may import, and every imported name exists."""
    out = []
    for folder, allowed in OUTSIDE.items():
        for path in sorted((tree.root / folder).rglob("*.py")):
            where = path.relative_to(tree.root)
            for imp in imports_of(path.read_text()):
                there = part_of(imp.module)
                if there not in (allowed.lazy if imp.lazy else allowed.top):
                    out.append(f"{where} -> {imp.module} ({folder}/ may not import {there}{'' if imp.lazy else ' at its top level'})")
                out += [f"{where} -> {imp.module}.{name} (no such name)" for name in imp.names if not tree.defines(imp.module, name)]
                if not imp.names and imp.module not in tree.files:
                    out.append(f"{where} -> {imp.module} (no such module)")
    return out


def violations(root: Path) -> list[str]:
    tree = Tree(root)
    found = [f"package without a floor: {part_of(module)}" for module in tree.files if part_of(module) not in RANK]
    if found:
        return found
    found += [line for module, imports in tree.imports.items() for line in floor_violations(module, imports)]
    found += [f"circle: {circle}" for circle in circles(tree)]
    return found + outside_violations(tree)


def test_the_tree_keeps_every_rule() -> None:
    assert violations(ROOT) == []


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"spanner_cdc/__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


OK_TREE = {
    "spanner_cdc/names.py": "X = 1\n",
    "spanner_cdc/spark/__init__.py": "",
    "spanner_cdc/spark/session.py": "from spanner_cdc.names import X\n",
    "spanner_cdc/spark/fast_start.py": "from spanner_cdc import names\n",
    "spanner_cdc/orchestration/__init__.py": "",
    "spanner_cdc/orchestration/hourly.py": "from spanner_cdc.spark.session import X\n",
    "spanner_cdc/airflow/__init__.py": "",
    "spanner_cdc/airflow/dags.py": "from spanner_cdc.names import X\n\ndef task():\n    from spanner_cdc.orchestration import hourly\n",
    "dags/hourly.py": "from spanner_cdc.airflow.dags import task\n",
}


@pytest.mark.parametrize(
    ("files", "found"),
    [
        ({}, None),  # the tiny tree itself keeps every rule
        ({"spanner_cdc/names.py": "from spanner_cdc.spark.session import X\n"}, "names may not import spark"),
        ({"spanner_cdc/names.py": "def f():\n    import spanner_cdc.spark.session\n"}, "names may not import spark"),
        ({"spanner_cdc/names.py": "import importlib\nM = importlib.import_module('spanner_cdc.spark.session')\n"},
         "names may not import spark"),
        ({"spanner_cdc/store/__init__.py": "", "spanner_cdc/source/__init__.py": "",
          "spanner_cdc/store/a.py": "from spanner_cdc.source import reader\n", "spanner_cdc/source/reader.py": ""},
         "store and source are siblings"),
        ({"spanner_cdc/local_spanner/__init__.py": "", "spanner_cdc/local_spanner/server.py": "from spanner_cdc.settings import S\n",
          "spanner_cdc/settings.py": "S = 1\n"}, "local_spanner imports only the vocabulary"),
        ({"spanner_cdc/spark/fast_start.py": "def f():\n    from spanner_cdc.spark.session import X\n",
          "spanner_cdc/spark/session.py": "from spanner_cdc.spark import fast_start\n"},
         "circle: spanner_cdc.spark.fast_start <-> spanner_cdc.spark.session"),
        ({"dags/hourly.py": "from spanner_cdc.orchestration import hourly\n"}, "dags/ may not import orchestration at its top level"),
        ({"dags/hourly.py": "def task():\n    from spanner_cdc.spark.session import X\n"}, "dags/ may not import spark"),
        ({"spark_jobs/job.py": "from spanner_cdc.devstack import demo\n"}, "spark_jobs/ may not import devstack"),
        ({"bench/b.py": "from spanner_cdc.spark.session import gone\n"}, "spanner_cdc.spark.session.gone (no such name)"),
        ({"spark_jobs/job.py": "import spanner_cdc.spark.nothing\n"}, "spanner_cdc.spark.nothing (no such module)"),
        ({"spanner_cdc/newpart/__init__.py": ""}, "package without a floor: newpart"),
    ],
)  # fmt: skip
def test_each_rule_fails_when_broken(tmp_path: Path, files: dict[str, str], found: str | None) -> None:
    result = violations(write(tmp_path, {**OK_TREE, **files}))
    if found is None:
        assert result == []
    else:
        assert any(found in line for line in result), result


def test_imports_under_type_checking_count_for_the_floors_but_not_for_circles(tmp_path: Path) -> None:
    files = {
        "spanner_cdc/spark/fast_start.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from spanner_cdc.spark.session import X\n",
        "spanner_cdc/spark/session.py": "from spanner_cdc.spark import fast_start\n",
    }
    assert violations(write(tmp_path, {**OK_TREE, **files})) == []
    upward = {"spanner_cdc/names.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from spanner_cdc.spark.session import X\n"}
    assert violations(write(tmp_path, {**OK_TREE, **upward})) != []
