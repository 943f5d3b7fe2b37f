"""Where a full round's CPU goes, per process: the task process, Spark's JVM, Spark's Python workers and the
PostgreSQL server, beside the read limit (``COPY ... (FORMAT binary)`` to nowhere) on the same table.

Each variant of ``bench_round`` (``--variants``, default ``copy-binary,round``) runs as a child process, as
``bench_round`` runs it; a poller reads every process's CPU time (``psutil``, every 0.1 s) and files it by kind:
the child itself (the task process), the JVM it starts (``java``), Spark's Python workers (the ``pyspark.daemon``
and its forks) and the server's backends (every ``postgres`` process on the machine, the benchmark's own server
being the only busy one). A process that ends between two polls loses at most its last 0.1 s. The machine's busy
CPU over the variant (``/proc/stat``), less this process's own (the poller's, shown apart), is shown beside the
processes' sum (the rest: the kernel's work for the loopback network and the disks, the CPU of processes that ended
between two polls, anything else running); rows per CPU-second divide the table's rows by the machine's.

    python -m benchmarks.round_cpu --sf 1 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

KINDS = ("task process", "Spark JVM", "Spark Python workers", "PostgreSQL")


def _kind(pid: int, processes: dict[int, dict[str, Any]], child: int, server: int | None, cmdline: str) -> str | None:
    """The kind of process ``pid`` (None: neither the round's nor its server's), from one poll's ``processes`` (pid
    -> name and parent). ``server``: the benchmark's own postmaster (None: count every ``postgres`` process)."""
    lineage, at = [], pid
    while at in processes and at not in lineage:
        lineage.append(at)
        at = processes[at]["ppid"]
    name = processes[pid]["name"] or ""
    if name.startswith("postgres"):
        return "PostgreSQL" if server is None or server in lineage else None
    if child not in lineage:
        return None
    if name == "java":
        return "Spark JVM"
    if pid != child and ("pyspark" in cmdline or "python" in name):
        return "Spark Python workers"
    return "task process"


def postmaster(directory: Path) -> int | None:
    """The pid of the PostgreSQL server whose data lives under ``directory`` (None: not found)."""
    import psutil

    for process in psutil.process_iter(["name", "cmdline"]):
        if (process.info["name"] or "").startswith("postgres") and str(directory) in " ".join(
            process.info["cmdline"] or []
        ):
            return int(process.pid)
    return None


@contextmanager
def cpu_by_kind(child: int, server: int | None, found: dict[str, float], interval: float = 0.1) -> Iterator[None]:
    """Poll every process's CPU time while the block runs; on exit ``found`` holds the CPU-seconds each kind used
    meanwhile (processes that existed before, the server's, counted from the block's start).

    A poll reads each process once (its name, parent and CPU times) and a process's command line once in its life:
    asking psutil for every process's lineage and command line on each poll cost 0.17 CPU-s per second of wall."""
    import psutil

    cmdlines: dict[int, str] = {}

    def poll() -> dict[int, tuple[str, float]]:
        processes = {p.pid: p.info for p in psutil.process_iter(["name", "ppid", "cpu_times"])}
        kinds: dict[int, tuple[str, float]] = {}
        for pid, info in processes.items():
            if info["cpu_times"] is None:  # gone meanwhile
                continue
            if pid not in cmdlines and "python" in (info["name"] or ""):
                try:
                    cmdlines[pid] = " ".join(psutil.Process(pid).cmdline())
                except Exception:
                    continue
            kind = _kind(pid, processes, child, server, cmdlines.get(pid, ""))
            if kind is not None:
                kinds[pid] = (kind, float(info["cpu_times"].user + info["cpu_times"].system))
        return kinds

    start = {pid: used for pid, (_kind_of, used) in poll().items()}
    last: dict[int, tuple[str, float]] = {}
    stop = threading.Event()

    def poll_until_stopped() -> None:
        while True:
            last.update(poll())
            if stop.wait(interval):
                return

    poller = threading.Thread(target=poll_until_stopped, daemon=True)
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join()
        for kind in KINDS:
            found[kind] = 0.0
        for pid, (kind, now) in last.items():
            found[kind] += max(0.0, now - start.get(pid, 0.0))


def machine_cpu_seconds() -> float:
    """The machine's busy CPU time so far (``/proc/stat``: user, nice, system, irq, softirq, steal)."""
    import os

    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run(variant: str, dsn: str, workdir: Path, server: int | None) -> dict[str, Any]:
    import subprocess

    from benchmarks.bench_round import child_command

    command, env = child_command(variant, dsn, workdir)
    options: dict[str, Any] = {"env": env, "cwd": REPO, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    found: dict[str, float] = {}
    started, machine, own = time.perf_counter(), machine_cpu_seconds(), time.process_time()
    with subprocess.Popen(command, text=True, **options) as proc, cpu_by_kind(proc.pid, server, found):
        out, _ = proc.communicate()
    seconds, machine = time.perf_counter() - started, machine_cpu_seconds() - machine
    own = time.process_time() - own  # this process's: the poller's, which is not the variant's
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{variant} failed ({proc.returncode}): {out[-2000:]}")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    return {"seconds": seconds, "cpu": found, "machine_cpu": machine - own, "benchmark_cpu": own, "result": result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (1 = 6M lineitem rows)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variants", default="copy-binary,round", help="bench_round variants, comma-separated")
    parser.add_argument("--dsn", help="PostgreSQL DSN; default: a throw-away server on 127.0.0.1")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    from benchmarks.scratch import postgres_scratch
    from benchmarks.tpch_data import load_lineitem

    variants = args.variants.split(",")
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with postgres_scratch(args.workdir, args.dsn, "tiering-round-cpu-") as (workdir, dsn):
        rows = load_lineitem(dsn, args.sf, workdir)
        server = None if args.dsn else postmaster(workdir)
        for repeat in range(args.repeat):
            for variant in variants:  # interleaved
                found = run(variant, dsn, workdir, server)
                runs[variant].append(found)
                cpu = found["cpu"]
                shares = ", ".join(f"{kind} {cpu[kind]:.1f}" for kind in KINDS)
                print(
                    f"  run {repeat + 1} {variant:<12} {found['seconds']:6.2f}s  CPU-s: {shares}; "
                    f"machine (/proc/stat) {found['machine_cpu']:.1f}",
                    flush=True,
                )
    print(f"\nlineitem SF {args.sf}: {rows:,} rows; medians of {args.repeat} runs")
    heads = " ".join(f"{k:>21}" for k in KINDS)
    print(f"{'variant':<12} {'wall s':>7} {heads} {'sum':>6} {'machine':>8} {'rows/machine CPU-s':>19} {'poller':>7}")
    summary: dict[str, Any] = {}
    for variant, found_runs in runs.items():
        median = {k: statistics.median(f["cpu"][k] for f in found_runs) for k in KINDS}
        total = sum(median.values())
        machine = statistics.median(f["machine_cpu"] for f in found_runs)
        poller = statistics.median(f["benchmark_cpu"] for f in found_runs)
        wall = statistics.median(f["seconds"] for f in found_runs)
        summary[variant] = {
            "seconds": wall, "cpu": median, "processes_cpu": total, "machine_cpu": machine,
            "rows_per_machine_cpu_second": rows / machine, "benchmark_cpu": poller,
        }  # fmt: skip
        cells = " ".join(f"{median[k]:>21.1f}" for k in KINDS)
        rates = f"{rows / machine:>19,.0f} {poller:>7.2f}"
        print(f"{variant:<12} {wall:>7.2f} {cells} {total:>6.1f} {machine:>8.1f} {rates}")
    if args.output:
        args.output.write_text(json.dumps({"sf": args.sf, "rows": rows, "runs": runs, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
