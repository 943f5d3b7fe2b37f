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
    cdc_rounds_hit: int = 0  # of them, rounds of change-stream tables
    target: str | None = None  # the table whose round it was aimed at (None: any table's)
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
class CdcTableCheck:
    """A change-stream table checked by key: its rows change, so there is no list of acknowledged inserts."""

    table: str
    hot_rows: int
    lake_rows: int  # tiered rows (the competing writer's left out)
    lost_keys: int  # in the hot table, not in the lake
    extra_keys: int  # in the lake, not in the hot table (deleted, or an old key of a row whose key changed)
    differing_keys: int  # in both, with different values
    duplicated_keys: int  # a key the lake holds more than once
    digests_equal: bool  # count and content hash, read with pyiceberg
    parquet_digests_equal: bool  # the same, read from the current snapshot's data files with pyarrow
    slot_lsn: str | None  # the replication slot's confirmed_flush_lsn
    lake_lsn: str | None  # the LSN in the latest tiering snapshot's end offsets
    slot_ahead: bool  # the slot is ahead of the lake (or gone): changes in between could be lost for good
    transactions: dict[str, int]  # the writer's: committed, rolled back, lost with a broken session
    changes: dict[str, int]  # committed changes by kind (insert, update, key_update, delete, reinsert, toast)
    external_rows: int
    external_lost: int
    external_duplicated: int
    orphan_files: list[str]
    state_problems: list[str]

    @property
    def consistent(self) -> bool:
        return (
            self.digests_equal
            and self.parquet_digests_equal
            and not (self.lost_keys or self.extra_keys or self.differing_keys or self.duplicated_keys)
            and not self.slot_ahead
            and not (self.external_lost or self.external_duplicated)
            and not self.orphan_files
            and not self.state_problems
        )


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
    cdc_rounds: dict[str, int] = field(default_factory=dict)  # rounds of change-stream tables by outcome
    tables: list[TableCheck] = field(default_factory=list)
    cdc_tables: list[CdcTableCheck] = field(default_factory=list)
    skipped_kinds: dict[str, str] = field(default_factory=dict)
    #: What a change-stream table is not put through, and why.
    cdc_not_applicable: dict[str, str] = field(default_factory=dict)

    @property
    def rows_checked(self) -> int:
        return sum(t.hot_rows for t in self.tables) + sum(t.hot_rows for t in self.cdc_tables)

    @property
    def lost(self) -> int:
        return sum(t.lost + t.unacknowledged_missing + t.external_lost for t in self.tables) + sum(
            t.lost_keys + t.external_lost for t in self.cdc_tables
        )

    @property
    def duplicated(self) -> int:
        return sum(t.duplicated + t.external_duplicated for t in self.tables) + sum(
            t.duplicated_keys + t.external_duplicated for t in self.cdc_tables
        )

    @property
    def extra(self) -> int:
        """Keys a change-stream table's lake holds that its hot table no longer does."""
        return sum(t.extra_keys for t in self.cdc_tables)

    @property
    def differing(self) -> int:
        return sum(t.differing_keys for t in self.cdc_tables)

    @property
    def consistent(self) -> bool:
        return all(t.consistent for t in self.cdc_tables) and all(
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
            "extra": self.extra,
            "differing": self.differing,
            "consistent": self.consistent,
        }

    def text(self) -> str:
        cdc_rounds = ", ".join(f"{k} {v}" for k, v in sorted(self.cdc_rounds.items()))
        lines = [
            f"chaos run: {self.seconds:.0f} s, seed {self.seed}, {len(self.tables)} cursor tables, "
            f"{len(self.cdc_tables)} change-stream tables",
            "",
            "| rounds | count |",
            "| --- | ---: |",
            *(f"| {k} | {v} |" for k, v in sorted(self.rounds.items())),
            f"| rows tiered | {self.rows_tiered} |",
            f"| commit retries after a lost catalog swap | {self.commit_retries} |",
            *([f"| of them change-stream rounds | {cdc_rounds} |"] if self.cdc_rounds else []),
            "",
            "| fault | injected | rounds hit | change-stream rounds hit | details |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for kind, info in self.faults.items():
            lines.append(
                f"| {kind} | {info['injected']} | {info['rounds_hit']} | {info.get('cdc_rounds_hit', 0)} "
                f"| {info['summary']} |"
            )
        for kind, why in self.skipped_kinds.items():
            lines.append(f"| {kind} | skipped | | | {why} |")
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
        if self.cdc_tables:
            lines += [
                "",
                "| change-stream table | hot rows | lake rows (tiered) | lost keys | extra keys | differing keys"
                " | duplicated keys | hash (pyiceberg / Parquet) | slot LSN | lake LSN | other writer's rows"
                " | orphan files | state |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | --- |",
            ]
            for c in self.cdc_tables:
                hashes = "/".join("equal" if ok else "DIFFERS" for ok in (c.digests_equal, c.parquet_digests_equal))
                lsn = f"{c.slot_lsn}{' (AHEAD)' if c.slot_ahead else ''}"
                lines.append(
                    f"| {c.table} | {c.hot_rows} | {c.lake_rows} | {c.lost_keys + c.external_lost} | {c.extra_keys}"
                    f" | {c.differing_keys} | {c.duplicated_keys + c.external_duplicated} | {hashes} | {lsn}"
                    f" | {c.lake_lsn} | {c.external_rows} | {len(c.orphan_files)}"
                    f" | {'; '.join(c.state_problems) or 'matches lake'} |"
                )
            for c in self.cdc_tables:
                lines.append(
                    f"{c.table}: committed changes "
                    + ", ".join(f"{k} {v}" for k, v in c.changes.items())
                    + "; writer transactions "
                    + ", ".join(f"{k} {v}" for k, v in sorted(c.transactions.items()))
                )
            lines += [f"not for change-stream tables: {what}: {why}" for what, why in self.cdc_not_applicable.items()]
        lines += [
            "",
            f"rows checked: {self.rows_checked}, lost: {self.lost}, duplicated: {self.duplicated}, "
            f"extra keys: {self.extra}, differing keys: {self.differing}, "
            f"lake consistent with hot store and state: {'yes' if self.consistent else 'NO'}",
        ]
        return "\n".join(lines)
