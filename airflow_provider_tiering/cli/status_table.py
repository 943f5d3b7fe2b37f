"""``airflow tiering status`` for people: one line per table that fits the terminal (80 to 120 columns), times to the
second, durations and counts in human units. ``--output json|yaml`` keeps every field, raw, for scripts."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_provider_tiering.core.units import count, duration, size, timestamp

MIN_WIDTH, MAX_WIDTH = 80, 120
#: The error column is left out below this width (``status <table>`` shows it whole); a layout is made more compact
#: to give it ``GOOD_ERROR_WIDTH``.
MIN_ERROR_WIDTH = 12
GOOD_ERROR_WIDTH = 24
LEGEND = (
    "BACKLOG: rows the last round left for later (max_rows_per_round), 'held' while open transactions hold rows "
    "back; rows that arrived since are not counted. DATA AGE: age of the newest tiered row (time cursors only)."
)


def _time(value: str | None) -> datetime | None:
    return None if not value else datetime.fromisoformat(value)


def status_cell(record: Mapping[str, Any]) -> str:
    return "QUARANTINED" if record.get("quarantined") else str(record["status"])


def backlog_cell(record: Mapping[str, Any]) -> str:
    """What is known of the rows waiting beyond the committed offsets."""
    if record.get("watermark_blockers"):
        return "held"
    backlog = record.get("backlog_rows")
    return count(backlog) if backlog else "-"


def error_is_past(record: Mapping[str, Any]) -> bool:
    """The last error is older than the last tiered round, and the table is not failing now."""
    error_time, tiered = _time(record.get("last_error_time")), _time(record.get("last_tiered_time"))
    return (
        record.get("status") != "FAILED"
        and not record.get("consecutive_failures")
        and error_time is not None
        and tiered is not None
        and tiered > error_time
    )


def _first_line(text: Any) -> str:
    return " ".join(str(text).splitlines()[0].split()) if text else ""


def maintenance_text(record: Mapping[str, Any]) -> str:
    """The last maintenance run in one line: what the lake holds after it, or its error."""
    m = record.get("maintenance")
    if not m:
        return "-"
    if m.get("last_outcome") == "failed":
        return f"failed: {_first_line(m.get('last_error'))}"
    when = timestamp(_time(m.get("last_run_at")))
    return f"{m.get('last_outcome')}: {m.get('data_files')} files, {m.get('snapshots')} snapshots ({when})"


def error_cell(record: Mapping[str, Any]) -> str:
    """The table's last error (marked past once a later round tiered); else a failed maintenance run's."""
    error = record.get("last_error")
    if not error:
        maintenance = record.get("maintenance") or {}
        return f"maintenance {maintenance_text(record)}" if maintenance.get("last_outcome") == "failed" else ""
    if error_is_past(record):
        return f"(past) {_first_line(error)}"
    return _first_line(error)


def _tiered_at(record: Mapping[str, Any]) -> str:
    return timestamp(_time(record.get("last_tiered_time")))


def _tiered_ago(record: Mapping[str, Any]) -> str:
    """The narrow form of LAST TIERED: how long ago (``31m 24s``)."""
    age = record.get("staleness_seconds")
    return "-" if age is None else duration(age)


Cell = Callable[[Mapping[str, Any]], str]
#: header, cell, right-aligned; LAST TIERED is replaced by its age where the full time does not fit.
COLUMNS: Sequence[tuple[str, Cell, bool]] = (
    ("TABLE", lambda r: str(r["table"]), False),
    ("STATUS", status_cell, False),
    ("EPOCH", lambda r: str(r["epoch"]), True),
    ("LAST TIERED", _tiered_at, False),
    ("ROWS", lambda r: count(r.get("last_round_rows")), True),
    ("BACKLOG", backlog_cell, True),
    ("DATA AGE", lambda r: duration(r.get("newest_data_age_seconds")), True),
    ("FAILS", lambda r: str(r.get("consecutive_failures", 0)), True),
)
ERROR_HEADER = "LAST ERROR"
#: From the roomiest layout to the most compact: (longest table name shown, LAST TIERED as a time, gap).
_LAYOUTS = ((24, True, "  "), (14, True, "  "), (14, False, "  "), (12, False, " "))


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def terminal_width() -> int:
    return max(MIN_WIDTH, min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns))


def render(records: Sequence[Mapping[str, Any]], width: int | None = None, *, header: bool = True) -> str:
    """The status table of ``records`` (``TieringStatus.to_json()``), no line longer than ``width`` (at least 80)."""
    width = terminal_width() if width is None else width
    errors = any(error_cell(r) for r in records)
    layouts = []
    for name_width, full_time, gap in _LAYOUTS:
        columns = [
            (("TIERED AGO", _tiered_ago, True) if name == "LAST TIERED" and not full_time else (name, cell, right))
            for name, cell, right in COLUMNS
        ]
        cells = [[cell(r) for _, cell, _ in columns] for r in records]
        widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, (name, _, _) in enumerate(columns)]
        widths[0] = min(widths[0], name_width)  # a long table name is cut rather than pushing the rest off the line
        layouts.append((columns, cells, widths, sum(widths) + len(gap) * (len(widths) - 1), gap))

    # The roomiest layout with a good error column, else with a narrow one, else one that fits (or the most compact).
    def room(layout: tuple[Any, ...]) -> int:
        return width - layout[3] - len(layout[4])

    wanted = (GOOD_ERROR_WIDTH, MIN_ERROR_WIDTH) if errors else ()
    columns, cells, widths, fixed, gap = next(
        (layout for need in wanted for layout in layouts if room(layout) >= need),
        next((layout for layout in layouts if layout[3] <= width), layouts[-1]),
    )
    error_width = width - fixed - len(gap)
    with_errors = errors and error_width >= MIN_ERROR_WIDTH

    def line(values: Sequence[str], errors: str | None) -> str:
        parts = [
            _fit(v, w).rjust(w) if right else _fit(v, w).ljust(w)
            for v, w, (_, _, right) in zip(values, widths, columns, strict=True)
        ]
        if errors is not None:
            parts.append(_fit(errors, error_width))
        return gap.join(parts).rstrip()

    lines = []
    if header:
        lines.append(line([name for name, _, _ in columns], ERROR_HEADER if with_errors else None))
    for record, row in zip(records, cells, strict=True):
        lines.append(line(row, error_cell(record) if with_errors else None))
    return "\n".join(lines)


def changes_fields(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A merge or change-stream table's mode and key, what its last round did to the lake's rows, and its
    replication slot (with the WAL it holds back on the hot server)."""
    mode = record.get("mode")
    found = _shape_fields(record)
    if mode in (None, "append"):
        return ([("mode", "append")] if mode else []) + found + _in_place_fields(record)
    found.insert(0, ("mode", f"{mode.replace('_', ' ')}, key {', '.join(record.get('merge_key') or [])}"))
    if record.get("last_round_inserted_rows") is not None:
        found.append(
            (
                "rows changed (last round)",
                f"{count(record['last_round_inserted_rows'])} inserted, "
                f"{count(record.get('last_round_updated_rows'))} updated, "
                f"{count(record.get('last_round_deleted_rows'))} deleted",
            )
        )
    merge = record.get("last_round_merge")
    if merge:
        tasks = merge["tasks"]
        found.append(
            (
                "files rewritten (last round)",
                f"{count(merge['files_rewritten'])} lake files, "
                f"{'by the task process' if merge['ran_on'] == 'task_process' else 'on Spark'} "
                f"in {tasks} {'task' if tasks == 1 else 'tasks'}: "
                f"{size(merge['bytes_read'])} read, {size(merge['bytes_written'])} written",
            )
        )
        if merge.get("files_given_deletes"):
            found.append(
                (
                    "rows deleted by position (last round)",
                    f"{count(merge['rows_deleted_by_position'])} rows of {count(merge['files_given_deletes'])} lake "
                    f"files, in {count(merge.get('delete_files_written'))} delete files",
                )
            )
    if record.get("lake_delete_files") is not None:
        found.append(
            (
                "delete files (lake)",
                f"{count(record['lake_delete_files'])}, deleting {count(record.get('lake_deleted_rows'))} rows "
                "(compaction applies them)",
            )
        )
    stream = record.get("change_stream")
    if record.get("stream_group") or (stream and stream.get("stream_group")):
        return found + _stream_group_fields(record)
    if stream and stream.get("slot"):  # PostgreSQL's: a slot and the WAL it holds back
        held, bound = stream.get("retained_wal_bytes"), stream.get("max_retained_wal_bytes")
        state = "" if stream.get("exists", True) else " (missing)"
        found.append(("replication slot", f"{stream.get('slot')}{state} at {stream.get('confirmed_flush_lsn') or '-'}"))
        if held is not None:
            over = " — over the bound" if bound is not None and held > bound else ""
            found.append(("retained WAL", f"{size(held)} (bound {size(bound) if bound else '-'}){over}"))
    elif stream:  # a binlog's: the lake's position in it, and how much of it the table still needs
        found.append(("binlog position", f"{stream.get('position') or '-'} (the server's ends at "
                                         f"{stream.get('binlog_end') or '-'})"))  # fmt: skip
        needed, files = stream.get("log_needed_bytes"), stream.get("binlog_files")
        kept = stream.get("binlog_expire_logs_seconds")
        found.append((
            "binlog needed",
            f"{size(needed) if needed is not None else '-'} from the lake's position; the server holds {files or '-'} "
            f"files from {stream.get('oldest_binlog_file') or '-'}, kept "
            f"{duration(kept) if kept else 'until purged by hand'}",
        ))  # fmt: skip
    left = None if not stream else stream.get("log_backlog_bytes") or stream.get("backlog_wal_bytes")
    if stream and left:  # the last round was capped: what it left for the next ones (older records: the WAL's key)
        log_kind = "WAL" if stream.get("slot") else "binlog"
        found.append(("backlog", f"~{count(record.get('backlog_rows'))} changes in {size(left)} of {log_kind}"))
    return found


def _stream_group_fields(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A table of a stream group: where its lake and the group's change log stand, what waits for it there, and the
    group's reader (its slot or binlog, its lag, its error)."""
    stream, group = record.get("change_stream") or {}, record.get("stream_group") or {}
    name = group.get("name") or stream.get("stream_group")
    waiting = stream.get("log_backlog_changes")
    if group.get("backlog_changes") is not None and waiting is None:
        waiting = group["backlog_changes"]
    joined = group.get("joined_at") or stream.get("joined_at") or "-"
    log_at = group.get("position") or stream.get("log_position") or "-"
    found = [
        ("stream group", f"{name}: change log {stream.get('change_log') or '-'}, joined at {joined}"),
        ("log position", f"lake at {stream.get('position') or '-'}, change log at {log_at}"),
        ("backlog (change log)", f"{count(waiting)} changes" if waiting is not None else "-"),
    ]
    if group:
        reader = f"{group.get('status')}, read to the log's end {duration(group.get('lag_seconds'))} ago"
        if group.get("consecutive_failures"):
            reader += f"; failing ({group['consecutive_failures']} runs): {_first_line(group.get('last_error'))}"
        found.append(("group reader", reader))
        log = group.get("log") or {}
        if log.get("slot"):
            held, bound = log.get("retained_wal_bytes"), log.get("max_retained_wal_bytes")
            retained = f"{size(held) if held is not None else '-'} of WAL (bound {size(bound) if bound else '-'})"
            found.append(
                ("group slot", f"{log['slot']} at {log.get('confirmed_flush_lsn') or '-'}, retaining {retained}")
            )
        elif log.get("binlog_end"):
            needed = log.get("log_needed_bytes")
            still = f"{size(needed) if needed is not None else '-'} of binlog still needed"
            found.append(("group binlog", f"at {log.get('position') or '-'} of {log['binlog_end']}; {still}"))
    if group.get("note"):
        found.append(("stream note", str(group["note"])))
    return found


def _shape_fields(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The last change of the hot table's shape the lake followed."""
    change = record.get("shape_change")
    if not change:
        return []
    text = f"{change.get('changes') or 'no column changed'} (at {change.get('at')})"
    if change.get("reload"):
        text += f"; the whole table read again: {change['reload']}"
    return [("last change of shape", text)]


def _in_place_fields(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """An append table's rows changed in place behind the lake's back, with what to do about it."""
    found = record.get("in_place_changes")
    if not found:
        return []
    recent = int(found.get("updated_since_last_round", 0)) + int(found.get("deleted_since_last_round", 0))
    hint = " — the lake keeps first versions: tier it by key (merge) or change stream" if recent else ""
    return [
        (
            "changed in place",
            f"{count(found.get('updated_since_last_round'))} updated, {count(found.get('deleted_since_last_round'))} "
            f"deleted since the round before ({count(found.get('updated_total'))} / "
            f"{count(found.get('deleted_total'))} since {found.get('watched_since')}){hint}",
        )
    ]


def render_one(record: Mapping[str, Any]) -> str:
    """One table, field by field: what the list shows, plus its offsets, retry, blockers, note and whole error."""
    fields: list[tuple[str, str]] = [
        ("table", str(record["table"])),
        ("lake table", f"{record['namespace']}.{record['lake_table']}"),
        ("dag / task", f"{record.get('dag_id') or '-'} / {record.get('task_id') or '-'}"),
        ("status", status_cell(record)),
        ("epoch", str(record["epoch"])),
        ("last tiered", timestamp(_time(record.get("last_tiered_time")))),
        ("last checked", timestamp(_time(record.get("last_checked_time")))),
        ("rows (last round)", count(record.get("last_round_rows"))),
        ("backlog", backlog_cell(record)),
        ("data age", duration(record.get("newest_data_age_seconds"))),
        ("committed offsets", str(record.get("committed_offsets") or "-")),
        ("snapshot", str(record.get("snapshot_id") or "-")),
        ("consecutive failures", str(record.get("consecutive_failures", 0))),
        ("next retry", timestamp(_time(record.get("next_retry_at")))),
        ("quarantined since", timestamp(_time(record.get("quarantined_since")))),
        ("maintenance", maintenance_text(record)),
    ]
    fields += changes_fields(record)
    if record.get("watermark_blockers"):
        fields.append(("held back by", "; ".join(str(b) for b in record["watermark_blockers"])))
    if record.get("note"):
        fields.append(("note", str(record["note"])))
    if record.get("last_error"):
        when = timestamp(_time(record.get("last_error_time")))
        fields.append(("last error", f"{'(past) ' if error_is_past(record) else ''}{when}"))
    label = max(len(name) for name, _ in fields)
    text = "\n".join(f"{name.ljust(label)}  {value}" for name, value in fields)
    if record.get("last_error"):
        text += "\n\n" + str(record["last_error"])
    return text
