"""Turn the suite's results (``benchmarks/results/*.json``) into ``docs/benchmarks.md`` with tables and PNG plots.

Runs in the bench virtualenv (matplotlib lives there, not in Airflow's environment). Only reads the JSON files,
so it can be re-run after any single benchmark: ``.venv-bench/bin/python benchmarks/report.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

B1_LABELS = {
    "copy-binary": "PostgreSQL COPY binary (read limit, no write)",
    "bare-spark": "bare Spark copy (no commit, no state)",
    "adbc-append": "pyiceberg append (one process, ADBC read)",
    "dlt": "dlt sql_database → Iceberg",
    "round": "our round (run_round, in-process)",
    "round-no-snapshot": "our round, each split reading its own snapshot of the source",
    "cdc-first-load": "our change stream's first load (slot, exported snapshot)",
    "airflow-task": "our TierTableOperator as an Airflow task",
}
#: The suite's results this page shows (``benchmarks/results/<name>.json``).
REPORTED = ("full_load", "incremental", "tpch_tables", "memory")
#: The alternatives that produce an Iceberg table, which B1's target compares us with.
ICEBERG_ALTERNATIVES = ("adbc-append", "dlt")


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _mark(ok: bool) -> str:
    return "met" if ok else "**missed**"


def full_load_section(full: dict[str, Any], many: dict[str, Any] | None, plots: Path) -> tuple[list[str], dict]:
    rows = full["rows"]
    variants = {name: dict(r) for name, r in full["results"].items() if name != "idle-round"}
    mib = (full["results"].get("copy-binary", {}).get("last", {}).get("bytes") or 0) / 2**20
    if many is not None and many["sf"] == full["sf"]:
        seconds = many["report"]["lineitem_task_seconds"]
        variants["airflow-task"] = {"median_seconds": seconds, "rows_per_second": rows / seconds}
    ours = variants["round"]["rows_per_second"]
    lines = [
        f"## B1 — full load of lineitem ({rows:,} rows, SF {full['sf']:g}) into Iceberg",
        "",
        "Each variant in its own process, median of runs; MB/s over the table's COPY-binary size "
        f"({mib:,.0f} MiB). Ratio = our round's rows/s over the variant's.",
        "",
        "| variant | seconds | rows/s | MB/s | our round / variant |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, r in variants.items():
        rate = r["rows_per_second"]
        ratio = f"{ours / rate:.2f}×" if name != "round" else "—"
        mbs = mib / r["median_seconds"] if mib else 0
        label = B1_LABELS.get(name, name)
        lines.append(f"| {label} | {r['median_seconds']:.2f} | {rate:,.0f} | {mbs:,.1f} | {ratio} |")
    best = max((variants[n]["rows_per_second"] for n in ICEBERG_ALTERNATIVES if n in variants), default=None)
    targets = {}
    if best:
        targets["B1 ≥ 1.0× best Iceberg alternative"] = (ours / best, ours / best >= 1.0)
    if "bare-spark" in variants:
        ratio = ours / variants["bare-spark"]["rows_per_second"]
        targets["B1 ≥ 0.9× bare Spark"] = (ratio, ratio >= 0.9)
    if "cdc-first-load" in variants:
        ratio = variants["cdc-first-load"]["median_seconds"] / variants["round"]["median_seconds"]
        targets["B1 change stream's first load ≤ 1.2× our round's time"] = (ratio, ratio <= 1.2)
    lines += ["", f"![throughput per tool]({plots.name}/throughput.png)", ""]
    _bar_chart(variants, plots / "throughput.png")
    return lines, targets


def incremental_section(inc: dict[str, Any]) -> tuple[list[str], dict]:
    results = inc["results"]
    lines = [
        f"## B2 — incremental round: {inc['new_rows']:,} new rows on a {inc['table_rows']:,}-row table",
        "",
        "Median round time (in a fresh process each, as an Airflow task runs it). `operator` is the writer as the "
        "operator builds it (a round of one split is written without starting Spark); `spark` always starts a "
        "local Spark session.",
        "",
        "| writer | incremental round | first round of a same-size table | incremental / small |",
        "| --- | ---: | ---: | ---: |",
    ]
    targets = {}
    for mode, ratio in inc["ratios"].items():
        incremental = results[f"incremental/{mode}"]["median_seconds"]
        small = results[f"small-first/{mode}"]["median_seconds"]
        lines.append(f"| {mode} | {incremental:.2f} s | {small:.2f} s | {ratio:.2f}× |")
        targets[f"B2 incremental ≤ {inc['ratio_target']:g}× small-table round ({mode})"] = (
            ratio,
            ratio <= inc["ratio_target"],
        )
    if "idle" in results:
        lines += ["", f"A round with nothing new: {results['idle']['median_seconds']:.2f} s."]
    return [*lines, ""], targets


def tpch_tables_section(many: dict[str, Any]) -> tuple[list[str], dict]:
    r = many["report"]
    lines = [
        f"## B3 — {r['tables']} TPC-H tables ({sum(many['rows'].values()):,} rows) in one DAG run",
        "",
        f"A real Airflow (scheduler, LocalExecutor with parallelism {many['parallelism']}); a task whose round "
        "has more than one split starts its own local Spark session.",
        "",
        "| DAG run | seconds |",
        "| --- | ---: |",
        f"| tasks in parallel | {r['parallel_seconds']:.2f} |",
        f"| one table after another | {r['sequential_seconds']:.2f} |",
        "",
        f"Speed-up of one DAG run over one after another: **{r['speedup']:.2f}×**.",
        "",
    ]
    return lines, {}


def memory_section(memory: dict[str, Any], plots: Path) -> tuple[list[str], dict]:
    points = memory["results"]
    mib = 2**20
    lines = [
        f"## B4 — peak memory while tiering (writer: {memory['mode']})",
        "",
        "Peak RSS of the round's task process, the Spark driver JVM, Spark's Python workers (which read and "
        "write the splits) and the whole process tree (forked workers share pages: an upper bound).",
        "",
        "| rows | seconds | task (Python) MiB | JVM MiB | Python workers MiB | whole tree MiB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in points:
        peak = p["peak_rss"]
        lines.append(
            f"| {p['rows']:,} | {p['seconds']:.2f} | {peak['task'] / mib:.0f} | {peak['jvm'] / mib:.0f} "
            f"| {peak['workers'] / mib:.0f} | {peak['tree'] / mib:.0f} |"
        )
    growth = memory["growth_percent"]
    lines += [
        "",
        f"Growth from {points[0]['rows']:,} to {points[-1]['rows']:,} rows: task {growth['task']:+.1f}%, "
        f"JVM {growth['jvm']:+.1f}%, workers {growth['workers']:+.1f}%, tree {growth['tree']:+.1f}% "
        f"(target: within {memory['growth_target_percent']:g}%).",
        "",
        f"![memory versus rows]({plots.name}/memory.png)",
        "",
    ]
    _line_chart(
        {
            label: [(p["rows"], p["peak_rss"][key] / mib) for p in points]
            for key, label in (
                ("task", "task process (Python)"),
                ("jvm", "Spark driver (JVM)"),
                ("workers", "Spark Python workers"),
                ("tree", "whole process tree"),
            )
        },
        "rows tiered",
        "peak RSS (MiB)",
        plots / "memory.png",
    )
    worst = max(abs(growth[k]) for k in ("task", "jvm", "workers", "tree"))
    target = memory["growth_target_percent"]
    return lines, {f"B4 memory within {target:g}% from smallest to largest": (worst, worst <= target)}


def round_time_plot(
    full: dict[str, Any] | None, inc: dict[str, Any] | None, memory: dict[str, Any] | None, plots: Path
) -> list[str]:
    series: dict[str, list[tuple[float, float]]] = {}
    first_rounds = []
    if memory is not None and memory["mode"] == "spark":
        first_rounds += [(p["rows"], p["seconds"]) for p in memory["results"]]
    if inc is not None and "incremental/spark" in inc["results"]:
        first_rounds.append((inc["new_rows"], inc["results"]["small-first/spark"]["median_seconds"]))
        series["incremental round on the full table"] = [
            (inc["new_rows"], inc["results"]["incremental/spark"]["median_seconds"])
        ]
    if full is not None and "round" in full["results"]:
        first_rounds.append((full["rows"], full["results"]["round"]["median_seconds"]))
    if not first_rounds:
        return []
    series["first round of a table of that size"] = sorted(first_rounds)
    _line_chart(series, "new rows in the round", "round seconds", plots / "round_time.png", log_x=True)
    return [
        "## Round time versus new rows (Spark writer)",
        "",
        f"![round time versus new rows]({plots.name}/round_time.png)",
        "",
    ]


def _bar_chart(variants: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(variants)
    values = [variants[n]["rows_per_second"] / 1000 for n in names]
    colors = ["#2b6cb0" if n in ("round", "airflow-task") else "#a0aec0" for n in names]
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.55 * len(names)))
    ax.barh([B1_LABELS.get(n, n) for n in names], values, color=colors)
    ax.invert_yaxis()
    ax.set_xlabel("thousand rows per second (higher is better)")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,.0f}k", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _line_chart(
    series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, path: Path, log_x: bool = False
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in series.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", label=label)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(results: Path, docs: Path) -> str:
    plots = docs.with_suffix("")
    plots.mkdir(parents=True, exist_ok=True)
    full, inc, many, memory = (_load(results, n) for n in REPORTED)
    body: list[str] = []
    targets: dict[str, tuple[float, bool]] = {}
    if full is not None:
        lines, found = full_load_section(full, many, plots)
        body += lines
        targets.update(found)
    if inc is not None:
        lines, found = incremental_section(inc)
        body += lines
        targets.update(found)
    if many is not None:
        lines, _ = tpch_tables_section(many)
        body += lines
    if memory is not None:
        lines, found = memory_section(memory, plots)
        body += lines
        targets.update(found)
    body += round_time_plot(full, inc, memory, plots)
    header = [
        "# Benchmarks",
        "",
        f"Generated by `make bench` ({_measured_at(results):%Y-%m-%d %H:%M} UTC) on this machine: "
        "2 cores, shared and noisy, so read the ratios (same run, same data), not the absolute times. "
        "Data: TPC-H from `tpchgen-cli` in PostgreSQL 15 on 127.0.0.1; lake: pyiceberg SQL catalog on SQLite, "
        "local warehouse; Spark in local mode, its driver JVM mapping the class data sharing archive that "
        "`make spark-cds` recorded (every Spark variant alike).",
        "",
        "| target | measured | |",
        "| --- | ---: | --- |",
    ]
    for name, (value, ok) in targets.items():
        shown = f"{value:.1f}%" if "memory" in name else f"{value:.2f}×"
        header.append(f"| {name} | {shown} | {_mark(ok)} |")
    return "\n".join([*header, "", *body]).rstrip() + "\n" + _kept_by_hand(docs)


def _measured_at(results: Path) -> datetime:
    """When the newest of the results shown here was written (a page rendered again later keeps the run's date)."""
    found = [path.stat().st_mtime for name in REPORTED if (path := results / f"{name}.json").exists()]
    return datetime.fromtimestamp(max(found), UTC) if found else datetime.now(UTC)


#: Everything after this line of ``docs/benchmarks.md`` is written by hand and kept when the page is regenerated.
HAND_KEPT = "<!-- Kept by `make bench`: everything below is measured by hand and not regenerated. -->"


def _kept_by_hand(docs: Path) -> str:
    text = docs.read_text() if docs.exists() else ""
    at = text.find(HAND_KEPT)
    return "" if at < 0 else "\n" + text[at:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    args.docs.parent.mkdir(parents=True, exist_ok=True)
    args.docs.write_text(render(args.results, args.docs))
    print(f"wrote {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
