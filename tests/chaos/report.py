"""What a chaos run records (faults, rounds, the final check of each table) and the report it prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class FaultRecord:
    kind: str
    detail: str
    start: float
    end: float = 0.0
    rounds_hit: int = 0
    table: str | None = None  # the table a lake commit race targeted
    phase: str | None = None  # the round phase it was injected at ("any": a random moment)
    seconds: float | None = None  # how long the part stayed broken
    commits: int | None = None  # a lake commit race's competing commits


def summarize(faults: list[FaultRecord]) -> str:
    """One line for the faults of one kind: phases they struck at, how long parts stayed broken, competing commits."""
    phases = Counter(f.phase for f in faults if f.phase)
    parts = []
    if phases:
        parts.append("at " + ", ".join(f"{phase} ×{n}" for phase, n in phases.most_common()))
    durations = [f.seconds for f in faults if f.seconds is not None]
    if durations:
        parts.append(f"broken {min(durations):.1f}–{max(durations):.1f} s")
    commits = [f.commits for f in faults if f.commits is not None]
    if commits:
        parts.append(f"{sum(commits)} competing commits")
    return "; ".join(parts)


@dataclass
class RoundRecord:
    table: str
    start: float
    end: float
    outcome: str  # tiered, nothing_to_tier, failed, fenced, killed
    rows: int = 0
    error_type: str | None = None
    error: str | None = None
    commit_retries: int = 0
    phase: str | None = None  # the last phase reached (for killed rounds)


@dataclass
class TableCheck:
    table: str
    hot_rows: int
    lake_rows: int
    acknowledged: int
    lost: int
    duplicated: int
    unacknowledged_missing: int
    digests_equal: bool
    external_rows: int  # committed by the competing writer, not tiered
    external_lost: int
    external_duplicated: int
    orphan_files: list[str]
    state_problems: list[str]


@dataclass
class Report:
    seconds: float
    seed: int
    rounds: dict[str, int]
    round_errors: dict[str, int]
    rows_tiered: int
    faults: dict[str, dict[str, Any]]
    unexplained_failures: list[dict[str, Any]]
    commit_retries: int
    competing_commits: int
    writer_transactions: dict[str, int]
    final_rounds: dict[str, int]
    tables: list[TableCheck] = field(default_factory=list)
    skipped_kinds: dict[str, str] = field(default_factory=dict)

    @property
    def rows_checked(self) -> int:
        return sum(t.hot_rows for t in self.tables)

    @property
    def lost(self) -> int:
        return sum(t.lost + t.unacknowledged_missing + t.external_lost for t in self.tables)

    @property
    def duplicated(self) -> int:
        return sum(t.duplicated + t.external_duplicated for t in self.tables)

    @property
    def consistent(self) -> bool:
        return all(
            t.digests_equal
            and not t.lost
            and not t.duplicated
            and not t.unacknowledged_missing
            and not t.external_lost
            and not t.external_duplicated
            and not t.orphan_files
            and not t.state_problems
            for t in self.tables
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "rows_checked": self.rows_checked,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "consistent": self.consistent,
        }

    def text(self) -> str:
        lines = [
            f"chaos run: {self.seconds:.0f} s, seed {self.seed}, {len(self.tables)} tables",
            "",
            "| rounds | count |",
            "| --- | ---: |",
            *(f"| {k} | {v} |" for k, v in sorted(self.rounds.items())),
            f"| rows tiered | {self.rows_tiered} |",
            f"| commit retries after a lost catalog swap | {self.commit_retries} |",
            "",
            "| fault | injected | rounds hit | details |",
            "| --- | ---: | ---: | --- |",
        ]
        for kind, info in self.faults.items():
            lines.append(f"| {kind} | {info['injected']} | {info['rounds_hit']} | {info['summary']} |")
        for kind, why in self.skipped_kinds.items():
            lines.append(f"| {kind} | skipped | | {why} |")
        lines += [
            "",
            "round errors by type: " + (", ".join(f"{k} {v}" for k, v in sorted(self.round_errors.items())) or "none"),
            f"failed rounds no fault explains: {len(self.unexplained_failures)}",
            "writer transactions: " + ", ".join(f"{k} {v}" for k, v in sorted(self.writer_transactions.items())),
            f"competing lake commits: {self.competing_commits}",
            "",
            "| table | hot rows | lake rows (tiered) | acknowledged | lost | duplicated | other writer's rows"
            " | orphan files | state |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for t in self.tables:
            state = "; ".join(t.state_problems) or "matches lake"
            lines.append(
                f"| {t.table} | {t.hot_rows} | {t.lake_rows} | {t.acknowledged} | "
                f"{t.lost + t.unacknowledged_missing + t.external_lost} | {t.duplicated + t.external_duplicated} | "
                f"{t.external_rows} | {len(t.orphan_files)} | {state} |"
            )
        lines += [
            "",
            f"rows checked: {self.rows_checked}, lost: {self.lost}, duplicated: {self.duplicated}, "
            f"lake consistent with hot store and state: {'yes' if self.consistent else 'NO'}",
        ]
        return "\n".join(lines)
