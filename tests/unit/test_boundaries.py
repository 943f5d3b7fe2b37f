"""The package's boundaries (``docs/design.md``, "Architecture"), checked on its code."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_tiering"
REGISTRIES = {PACKAGE / "sources" / "registry.py", PACKAGE / "core" / "source_specs.py"}
SOURCE_CLASSES = (
    r"(PostgresSource|SqliteSource|MySqlSource|FileSource|SqlSource|SqlSourceSpec|FileSourceSpec|PostgresCdcSource|"
    r"PostgresCdcSourceSpec|StreamedTable|DatabaseTableSpec)"
)


def python_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "node_modules" not in p.parts)


def test_no_function_is_longer_than_80_lines_and_a_round_than_60() -> None:
    """A function reads in one screen; a round, the kernel's sequence of phases, in less."""
    long = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                limit = 60 if (path.name, node.name) == ("round.py", "run_round") else 80
                if lines > limit:
                    long.append(f"{path.relative_to(PACKAGE)}: {node.name} has {lines} lines (limit {limit})")
    assert not long, long


def test_the_kernel_imports_neither_airflow_spark_pyiceberg_nor_pyarrow() -> None:
    modules = sorted(f"airflow_provider_tiering.core.{p.stem}" for p in (PACKAGE / "core").glob("*.py"))
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "heavy = ('airflow', 'pyspark', 'pyiceberg', 'pyarrow', 'py4j')\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy})))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == []


def test_a_task_that_skips_imports_no_lake_and_no_spark() -> None:
    """What a tiering task imports before it knows whether it runs a round (the operator, its hooks, the sources'
    registry) stays free of the lake's and Spark's libraries: a task with nothing new pays for none of them."""
    code = (
        "import json, sys\n"
        "import airflow_provider_tiering.operators.tier_table, airflow_provider_tiering.sources.registry\n"
        "from airflow_provider_tiering.hooks.tiering import TieringHook\n"
        "heavy = ('pyspark', 'pyiceberg', 'pyarrow', 'py4j')\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy})))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == []


def test_no_switch_on_source_kinds_outside_the_registries() -> None:
    switches = re.compile(
        rf"isinstance\([^)]*{SOURCE_CLASSES}|(source|spec)\.kind\s*(==|!=|in)\s|conn_type\b[^=]*(==|!=|\sin\s)|"
        r"frozenset\(\{\"(postgres|sqlite|mysql|mariadb)\""
    )
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in python_files()
        if path not in REGISTRIES
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if switches.search(line)
    ]
    assert found == []


def test_no_module_reaches_into_another_ones_private_names() -> None:
    private = re.compile(r"\b(?!self\b|cls\b)\w+\._(latest_tiering_commit|data_file|append|schema|table|catalog)\b")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in python_files()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if private.search(line)
    ]
    assert found == []


def test_the_ports_name_no_any_but_the_source_of_whichever_kind() -> None:
    """The ports' signatures are typed through (offsets by kind, JSON, key values): ``Any`` appears only in
    ``AnySource`` (see docs/design.md, "Where the ports keep Any")."""
    tree = ast.parse((PACKAGE / "core" / "ports.py").read_text())
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "AnySource":
            allowed.add(node.lineno)
    used = []
    for node in ast.walk(tree):
        annotations: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = [
                *node.args.posonlyargs,
                *node.args.args,
                *node.args.kwonlyargs,
                node.args.vararg,
                node.args.kwarg,
            ]
            annotations = [a.annotation for a in arguments if a is not None] + [node.returns]
        elif isinstance(node, ast.AnnAssign) and node.lineno not in allowed:
            annotations = [node.annotation]
        for annotation in annotations:
            if annotation is not None and re.search(r"\bAny\b", ast.unparse(annotation)):
                used.append(f"line {annotation.lineno}: {ast.unparse(annotation)}")
    assert not used, used


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_at_load(path: Path, name: str) -> set[str]:
    """The package's modules a module imports when it is loaded: its module-level imports, not those inside a
    function or under ``if TYPE_CHECKING``."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m.startswith("airflow_provider_tiering")}


def test_no_module_imports_itself_back_through_others() -> None:
    """No import circles: a module never needs, while it loads, a module that needs it (each file's imports point
    one way, so each part can be read, tested and moved on its own)."""
    modules = {_module_name(p): p for p in python_files()}
    graph = {name: _imported_at_load(path, name) & set(modules) - {name} for name, path in modules.items()}
    circles = []
    for start in sorted(graph):  # a depth-first walk back to the start finds the circle it is on
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for following in sorted(graph[node]):
                if following == start:
                    circles.append(" -> ".join([*trail, start]))
                elif following not in seen:
                    seen.add(following)
                    stack.append((following, [*trail, following]))
    assert not circles, circles[:5]
