"""Every example in README.md and in the user guide's pages it links (``GUIDE``) is executed or validated, extracted
from the files (never copied here), so a renamed field, function or CLI flag breaks the build.

* Python: a DAG file (``dag = build_…_dag(…)``) is imported by Airflow's ``DagBag`` from a temporary dags folder
  (with the README's YAML files beside it); a spec (``{…}``) or a spec part (``"key": {…}``) is parsed by
  ``TableSpec.parse``; any other block runs in a fresh interpreter against a migrated Airflow home, with ``TABLES``
  (a SQLite hot table tiered once) and ``spark`` (a local session) defined when it uses them.
* YAML: parsed by the product's spec loader (``load_table_specs``).
* Shell: ``airflow …`` lines are parsed by Airflow's real CLI parser, and ``airflow connections add`` lines are run
  (the connection they store is read back: its type must survive); ``export AIRFLOW_CONN_…`` values are parsed as
  Airflow connections; ``pip install`` extras must exist in pyproject.toml; ``make`` targets in the Makefile;
  ``docker compose`` needs docker-compose.yml. A command with no check fails the test.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from airflow_provider_tiering.core.spec import TableSpec, load_table_specs
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.sources.registry import connection_types
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import lake_rows
from testbed.rounds import round_parts

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: README.md and the pages of the user guide it links (the reference material moved out of it).
GUIDE = (
    README,
    *(REPO / "docs" / f"{page}.md" for page in ("tables", "mutable-tables", "operations", "connections", "guarantees")),
    REPO / "docs" / "development.md",
)
#: The connection types the provider's code accepts: hot stores, the Iceberg catalog, Spark.
ACCEPTED_CONN_TYPES = {*connection_types("sql"), *connection_types("files"), "iceberg", "spark", "spark_connect"}
#: A connection type that the README creates with ``--conn-type`` while the provider registering it is not installed
#: here: the extra that installs that provider (checked in pyproject.toml).
TYPE_PROVIDERS = {"postgres": ("postgres", "apache-airflow-providers-postgres")}
#: A spec a spec part (``"maintenance": {...}``) is merged into.
BASE_SPEC = {
    "name": "orders",
    "source": {"conn_id": "sales_pg", "table": "orders", "cursor_column": "id"},
    "lake": {"namespace": "sales", "table": "orders"},
}


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int
    page: str = "README.md"

    @property
    def where(self) -> str:
        return f"{self.page} line {self.line} ({self.language})"

    @property
    def file_name(self) -> str | None:
        """The file a block says it is, by its first line (``# dags/tiering.py``)."""
        match = re.match(r"#\s*(\S+\.(?:py|ya?ml))\s*$", self.text.splitlines()[0]) if self.text.strip() else None
        return match.group(1) if match else None


def page_blocks(page: Path) -> list[Block]:
    blocks, lines = [], page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[i])
        if opening:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            text = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(opening.group(1), text, i + 1, str(page.relative_to(REPO))))
            i = end
        i += 1
    return blocks


def readme_blocks() -> list[Block]:
    """The code blocks of README.md, then of each page of the guide."""
    return [block for page in GUIDE for block in page_blocks(page)]


def of(language: str, pages: tuple[Path, ...] = GUIDE) -> list[Block]:
    return [b for page in pages for b in page_blocks(page) if b.language == language]


def python_kind(block: Block) -> str:
    if block.text.lstrip().startswith('"'):
        return "spec part"
    tree = ast.parse(block.text)
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Dict):
        return "spec"
    builds_dag = any(  # dag = build_tiering_dag(...), or build_table_dags(...) (its DAGs register themselves)
        isinstance(node, (ast.Assign, ast.Expr))
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id.endswith(("_dag", "_dags"))
        for node in tree.body
    )
    return "dag file" if builds_dag else "program"


def heading_anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub writes them (lower case, punctuation dropped, spaces as -)."""
    found, inside = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside and (heading := re.match(r"^#+ (.+)$", line)):
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def test_the_readme_links_every_page_of_the_guide_and_its_links_lead_somewhere() -> None:
    readme = README.read_text()
    for page in GUIDE[1:]:
        assert f"](docs/{page.name})" in readme, page.name
    for page in GUIDE:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", page.read_text()):
            if "://" in target or not (target.endswith(".md") or anchor):
                continue
            destination = (page.parent / target).resolve() if target else page
            assert destination.exists(), (page.name, target)
            assert not anchor or anchor in heading_anchors(destination), (page.name, target, anchor)


def test_every_block_has_a_check() -> None:
    blocks = readme_blocks()
    languages = {b.language for b in blocks}
    # "" is the layout tree (plain text); every other language has tests below.
    assert languages <= {"", "python", "yaml", "bash", "console", "sql"}, languages
    kinds = {python_kind(b) for b in of("python")}
    assert {"spec", "dag file", "program"} <= kinds, kinds
    assert of("yaml") and of("bash") and of("console") and of("sql")


# -- SQL ------------------------------------------------------------------------------------------------------------
def test_sql_examples_run_against_a_status_table(tmp_path: Path) -> None:
    """Each SQL example runs in DuckDB against a real status table (``sys.lake_tiering_status``) and history table
    (``sys.lake_tiering_history``): DuckDB's own as written, its placeholders filled with the table's metadata file;
    an example naming a table through a catalog (``lake.sys.lake_tiering_status``, as Spark or Trino name it)
    through a DuckDB view of that name."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg
    from pyiceberg.catalog import load_catalog

    from airflow_provider_tiering.core.round_history import HistoryRow
    from airflow_provider_tiering.core.state import TableState
    from airflow_provider_tiering.core.status_rows import status_row
    from airflow_provider_tiering.lake.history_table import LakeHistoryTable
    from airflow_provider_tiering.lake.status_table import LakeStatusTable
    from testbed.rounds import catalog

    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    row = status_row(namespace="sales", table="orders", asset="tiering/sales/orders", dag_id="tiering_sales",
                     tiered_table="orders", state=TableState(table="orders"), now=datetime.now(UTC))  # fmt: skip
    LakeStatusTable(catalog(properties).handle()).refresh([row])
    now = datetime.now(UTC)
    round_row = HistoryRow(
        database_name="sales", table_name="orders", tiered_table="orders", airflow_dag_id="tiering_sales",
        airflow_run_id="r", tiering_epoch=1, started_at=now, ended_at=now, outcome="tiered", rows_in=1,
        rows_inserted=None, rows_updated=None, rows_deleted=None, bytes_written=1, snapshot_id=1,
        data_age_before_seconds=1.0, data_age_after_seconds=0.0, error=None,
    )  # fmt: skip
    LakeHistoryTable(catalog(properties).handle()).append([round_row])
    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for package in (duckdb_extension_avro, duckdb_extension_iceberg):
        connection.execute(f"LOAD '{next(Path(package.__file__).parent.rglob('*.duckdb_extension'))}'")
    connection.execute("ATTACH ':memory:' AS lake")
    connection.execute("CREATE SCHEMA lake.sys")
    scans = {}
    for name in ("lake_tiering_status", "lake_tiering_history"):
        metadata = load_catalog("default", **properties).load_table(("sys", name)).metadata_location
        scans[name] = f"iceberg_scan('{metadata.removeprefix('file://')}')"
        connection.execute(f"CREATE VIEW lake.sys.{name} AS SELECT * FROM {scans[name]}")
    for block in of("sql"):
        text = re.sub(r"iceberg_scan\('[^']*?(lake_tiering_\w+)[^']*'\)", lambda m: scans[m.group(1)], block.text)
        found = connection.execute(text).fetchall()
        assert isinstance(found, list), block.where
        if "lake_tiering_history" in block.text:
            assert found, block.where  # the SLO queries find the round


# -- Python ---------------------------------------------------------------------------------------------------------
def test_python_specs_parse() -> None:
    checked = 0
    for block in of("python"):
        kind = python_kind(block)
        if kind == "spec":
            TableSpec.parse(ast.literal_eval(block.text))
        elif kind == "spec part":
            part = ast.literal_eval("{" + block.text + "}")
            TableSpec.parse({**BASE_SPEC, **part})
        else:
            continue
        checked += 1
    assert checked >= 3


def test_yaml_blocks_load_through_the_spec_loader(tmp_path: Path) -> None:
    for block in of("yaml"):
        path = tmp_path / Path(block.file_name or "tables.yaml").name
        path.write_text(block.text)
        specs = load_table_specs(path)
        assert specs, block.where


def _airflow_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
    )
    return env


def _python(code: str, env: dict[str, str], *args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    assert done.returncode == 0, f"{' '.join(args)[:300]}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated Airflow home (SQLite metadata database), as a fresh deployment has."""
    home = tmp_path_factory.mktemp("readme") / "airflow"
    (home / "dags").mkdir(parents=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=_airflow_env(home),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return home


DAGBAG = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=sys.argv[1])
    print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                      "dags": {d: sorted(bag.dags[d].task_ids) for d in bag.dag_ids}}))
    """
)


def test_python_dag_files_are_imported_by_airflow(airflow_home: Path, tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    expected = {}
    for block in of("yaml"):
        if block.file_name:
            (dags / Path(block.file_name).name).write_text(block.text)
    for index, block in enumerate(b for b in of("python") if python_kind(b) == "dag file"):
        name = Path(block.file_name).name if block.file_name else f"readme_dag_{index}.py"
        (dags / name).write_text(block.text)
        call = next(n for n in ast.walk(ast.parse(block.text)) if isinstance(n, ast.Call) and n.args)
        expected[ast.literal_eval(call.args[0])] = block.where
    assert len(expected) >= 2
    found = json.loads(_python(DAGBAG, _airflow_env(airflow_home), str(dags)).splitlines()[-1])
    assert found["errors"] == {}
    # A DAG file's first argument names its DAG, or the group of DAGs build_table_dags makes (the group's status DAG,
    # one DAG per table under it, the group's maintenance DAG).
    assert set(expected) <= set(found["dags"])
    assert all(any(d in (e, f"{e}_maintenance") or d.startswith(f"{e}.") for e in expected) for d in found["dags"])
    # Every table the README's DAG files and YAML files declare is a task of one of the DAGs, and every stream group
    # a DAG of its own whose task reads the group's changes.
    declared = set()
    for block in of("yaml") + [b for b in of("python") if python_kind(b) == "dag file"]:
        if "build_database_dag(" in block.text:  # a database declared once: its tables are found when it runs
            call = next(n for n in ast.walk(ast.parse(block.text)) if isinstance(n, ast.Call) and n.args)
            assert {"discover", "tier", "tiering_summary"} <= set(found["dags"][ast.literal_eval(call.args[0])])
            continue
        declared |= set(re.findall(r'(?:"name": "|- name: )(\w+)', block.text))
    tasks = {task for dag_tasks in found["dags"].values() for task in dag_tasks}
    readers = {dag.rsplit(".", 1)[-1] for dag, dag_tasks in found["dags"].items() if "read_changes" in dag_tasks}
    assert declared and declared <= tasks | readers, (declared, tasks, readers)


PROGRAM = textwrap.dedent(
    """
    import json, sys

    namespace = {"TABLES": json.loads(sys.argv[2])}
    if sys.argv[3] == "spark":
        from pyspark.sql import SparkSession

        namespace["spark"] = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    exec(compile(sys.argv[1], "README.md", "exec"), namespace)
    facts = {}
    if "view" in namespace:
        facts["view_rows"] = namespace["view"].to_arrow().num_rows
        if "spark" in namespace:
            facts["spark_rows"] = namespace["view"].to_spark(namespace["spark"]).count()
    print("FACTS", json.dumps(facts), flush=True)
    """
)


STORE_STATE = textwrap.dedent(
    """
    import sys
    from airflow.models.asset import AssetModel
    from airflow.state import AssetScope, get_state_backend
    from airflow.utils.session import create_session
    from airflow_provider_tiering.hooks.asset_state import STATE_KEY

    with create_session() as session:
        asset = session.query(AssetModel).filter(AssetModel.name == sys.argv[1]).one_or_none()
        assert asset is not None, f"no DAG of the README tiers {sys.argv[1]}: update TABLES in this test"
        get_state_backend().set(AssetScope(asset_id=asset.id), STATE_KEY, sys.argv[2], session=session)
    """
)


def test_python_programs_run(airflow_home: Path, tmp_path: Path) -> None:
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("orders")
    hot.insert("orders", 1, 300)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse"}
    table = {
        "name": "orders",
        "source": {"conn_id": "readme_hot", "table": "orders", "cursor_column": "id"},
        "lake": {"namespace": "sales", "table": "orders"},
    }
    states = JsonFileStateStore(tmp_path / "state")
    with round_parts(TableSpec.parse(table), hot, catalog) as parts:
        parts.run(states)
    state = states.load()
    assert state is not None and len(lake_rows(catalog, ("sales", "orders"), COLUMNS)) == 300
    hot.insert("orders", 301, 20)  # the hot tail, not tiered yet
    env = _airflow_env(airflow_home)
    # The README's DAG files, parsed into the metadata database (their assets), and the round's state document
    # stored under its table's asset as the task would: the status examples then have a table to show.
    for block in of("yaml") + [b for b in of("python") if python_kind(b) == "dag file"]:
        if block.file_name:
            (airflow_home / "dags" / Path(block.file_name).name).write_text(block.text)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "dags", "reserialize"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    _python(STORE_STATE, env, "tiering/sales/orders", json.dumps(state.to_json()))
    env["AIRFLOW_CONN_README_HOT"] = json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "hot.db")})
    env["AIRFLOW_CONN_ICEBERG_DEFAULT"] = json.dumps({"conn_type": "iceberg", "extra": {**catalog, "name": "default"}})
    programs = [b for b in of("python") if python_kind(b) == "program"]
    assert len(programs) >= 3
    for block in programs:
        uses_spark = re.search(r"\bspark\b", block.text.replace("to_spark", "")) is not None
        out = _python(PROGRAM, env, block.text, json.dumps([table]), "spark" if uses_spark else "")
        facts = json.loads(next(line for line in out.splitlines() if line.startswith("FACTS "))[6:])
        if "list_tiering_statuses" in block.text:  # the table, as the status surfaces show it
            assert re.search(r"^orders TIERED 1 ", out, re.MULTILINE), (block.where, out[-2000:])
        if "read_table_across_tiers" in block.text:  # both tiers, each row once
            assert facts["view_rows"] == 320, (block.where, facts)
            assert facts.get("spark_rows", 320) == 320, (block.where, facts)


# -- shell ----------------------------------------------------------------------------------------------------------
def shell_commands(block: Block) -> list[list[str]]:
    """The commands of a bash or console block: continuation lines joined, comments and prompts dropped."""
    text = re.sub(r"\\\n", " ", block.text)
    commands = []
    pending = ""
    for line in text.splitlines():
        line = line.strip()
        if block.language == "console" and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        pending = f"{pending}\n{line}" if pending else line
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quoted value goes on over the next lines (a JSON connection)
            continue
        pending = ""
        if words:
            commands.append(words)
    assert not pending, f"{block.where}: unclosed quote in {pending!r}"
    return commands


def all_shell_commands() -> list[tuple[Block, list[str]]]:
    return [(b, c) for b in of("bash") + of("console") for c in shell_commands(b)]


def _conn_type(words: list[str]) -> str:
    """The type of the connection an ``airflow connections add`` line creates."""
    if "--conn-type" in words:
        return words[words.index("--conn-type") + 1]
    if "--conn-uri" in words:
        return words[words.index("--conn-uri") + 1].split("://", 1)[0]
    return json.loads(words[words.index("--conn-json") + 1])["conn_type"]


def test_shell_lines_that_are_not_airflow_commands() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    makefile = (REPO / "Makefile").read_text()
    checked = set()
    for block, words in all_shell_commands():
        command = words[0]
        if command == "airflow":
            continue
        if command == "make":
            assert re.search(rf"^{re.escape(words[1])}:", makefile, re.MULTILINE), (block.where, words)
        elif command == "pip":
            assert words[1] == "install", (block.where, words)
            package = next(w for w in words[2:] if not w.startswith("-"))
            name, _, wanted = package.partition("[")
            assert name == pyproject["project"]["name"], (block.where, words)
            unknown = {e for e in wanted.rstrip("]").split(",") if e} - set(extras)
            assert not unknown, (block.where, unknown)
        elif command == "export":
            key, _, value = words[1].partition("=")
            assert key.startswith("AIRFLOW_CONN_"), (block.where, words)
            from airflow.models.connection import Connection

            connection = Connection.from_json(value, conn_id=key.removeprefix("AIRFLOW_CONN_").lower())
            assert connection.conn_type in ACCEPTED_CONN_TYPES, (block.where, connection.conn_type)
        elif command == "docker":
            assert words[1:3] == ["compose", "up"], (block.where, words)
            assert yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"], block.where
        else:
            raise AssertionError(f"{block.where}: no check for the command {words}")
        checked.add(command)
    assert {"make", "pip", "export", "docker"} <= checked


CLI = textwrap.dedent(
    """
    import json, sys
    from airflow.cli.cli_parser import get_parser
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    parser = get_parser()
    stored = {}
    for words in json.loads(sys.argv[1]):
        try:
            args = parser.parse_args(words)
        except SystemExit as exc:
            raise SystemExit(f"the CLI refuses {words}: exit {exc.code}")
        if words[:2] == ["connections", "add"]:
            args.func(args)
            with create_session() as session:
                conn = session.query(Connection).filter(Connection.conn_id == args.conn_id).one()
                stored[args.conn_id] = {"conn_type": conn.conn_type, "extra": conn.extra, "host": conn.host}
    print(json.dumps(stored))
    """
)


def test_airflow_commands_parse_and_connections_are_created_as_written(airflow_home: Path) -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    lines = [words[1:] for _, words in all_shell_commands() if words[0] == "airflow"]
    assert any(w[:2] == ["connections", "add"] for w in lines) and any(w[:1] == ["tiering"] for w in lines)
    stored = json.loads(_python(CLI, _airflow_env(airflow_home), json.dumps(lines)).splitlines()[-1])
    registered = json.loads(
        _python(
            "import json; from airflow.providers_manager import ProvidersManager; "
            "print(json.dumps(sorted(ProvidersManager().hooks)))",
            _airflow_env(airflow_home),
        ).splitlines()[-1]
    )
    for words in (w for w in lines if w[:2] == ["connections", "add"]):
        conn_id, declared = words[2], _conn_type(words)
        assert declared in ACCEPTED_CONN_TYPES, words
        if "--conn-type" in words and declared not in registered:
            # Stored as "generic" here; the README's extra installs the provider that registers it.
            extra, provider = TYPE_PROVIDERS[declared]
            assert any(r.startswith(provider) for r in pyproject["project"]["optional-dependencies"][extra])
            assert stored[conn_id]["conn_type"] == "generic"
            continue
        assert stored[conn_id]["conn_type"] == declared, (words, stored[conn_id])
        if "--conn-extra" in words:
            assert json.loads(stored[conn_id]["extra"]) == json.loads(words[words.index("--conn-extra") + 1])
