"""When a table's lake has fallen too far behind its hot store, and why, so that alerts fire.

A table is stale once ``TableSpec.staleness_bound_seconds`` have passed since the lake last caught up with the hot
store (``TableState.caught_up_time``: a round left nothing behind, or found nothing new with no open transaction
holding the watermark back). Its task then fails instead of skipping, and the DAG run's summary names it, whatever
keeps it behind: open transactions holding the watermark back, a quarantine, failing rounds, or a backlog larger
than the per-round cap. A table that has never caught up is not measured (its first rounds fail loudly or tier).
"""

from __future__ import annotations

from datetime import datetime

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState
from airflow_provider_tiering.core.stream_state import StreamGroupState


def stale_for_seconds(state: TableState | None, now: datetime) -> float | None:
    """Seconds since the lake last caught up (None: never)."""
    if state is None or state.caught_up_time is None:
        return None
    return (now - state.caught_up_time).total_seconds()


def why_behind(state: TableState) -> str:
    """What keeps the lake behind, as the state document tells it."""
    if state.quarantined_since is not None:
        return (
            f"quarantined since {state.quarantined_since.isoformat()} after {state.consecutive_failures} failed "
            f"rounds (last error: {state.last_error}); reset it to tier it again"
        )
    if state.watermark_blockers:
        held = "; ".join(_blocker(b) for b in state.watermark_blockers)
        return f"held back by open transactions that may still commit rows below the watermark: {held}"
    if state.consecutive_failures:
        return f"its last {state.consecutive_failures} round(s) failed (last error: {state.last_error})"
    backlog = None if state.last_round is None else state.last_round.backlog_rows
    if backlog:
        return (
            f"its rounds leave rows behind ({backlog} at the last one): raise max_rows_per_round or run it more often"
        )
    return "no round has caught up since (is its DAG paused, or its task not running?)"


def _blocker(blocker: dict[str, object]) -> str:
    who = f"prepared transaction {blocker['prepared']!r}" if blocker.get("prepared") else f"pid {blocker.get('pid')}"
    age = blocker.get("age_seconds")
    since = f", open {age} s" if age is not None else ""
    return f"{who}{since}"


def staleness_alert(spec: TableSpec, state: TableState | None, now: datetime) -> str | None:
    """The alert for a table stale past its bound, naming it and why; None when it is not."""
    age = stale_for_seconds(state, now)
    bound = spec.staleness_bound_seconds
    if state is None or age is None or age <= bound:
        return None
    return (
        f"table {spec.name!r} is stale: the lake last caught up with the hot store {age:.0f} s ago "
        f"(staleness bound {bound:g} s): {why_behind(state)}"
    )


def retained_wal_alert(spec: TableSpec, state: TableState | None) -> str | None:
    """The alert for a change-stream table whose replication slot holds back more WAL on the hot server than its
    bound (``source.max_retained_wal_mb``), as the last round saw it; None when it does not."""
    stream = None if state is None else state.change_stream
    if state is None or not stream:
        return None
    held, bound = stream.get("retained_wal_bytes"), stream.get("max_retained_wal_bytes")
    if held is None or bound is None or held <= bound:
        return None
    mib = 1024 * 1024
    return (
        f"table {spec.name!r}: replication slot {stream.get('slot')} holds back {held / mib:.0f} MiB of WAL on the "
        f"hot server (bound {bound / mib:.0f} MiB, source.max_retained_wal_mb), which fills its disk until a round "
        f"advances the slot: {why_behind(state)}. To let the server free it without tiering, drop the lake table "
        "and the slot (the next round loads the table again)"
    )


def stream_backlog_alert(spec: TableSpec, state: TableState | None) -> str | None:
    """The alert for a table of a stream group with more changes waiting in the group's change log than the group's
    bound (``backlog_alert_changes``), as its last round counted them; None when it has not."""
    stream = None if state is None else state.change_stream
    if state is None or not stream:
        return None
    waiting, bound = stream.get("log_backlog_changes"), stream.get("backlog_alert_changes")
    if not isinstance(waiting, int) or not isinstance(bound, int) or waiting <= bound:
        return None
    return (
        f"table {spec.name!r}: {waiting} of its changes wait in stream group {stream.get('stream_group')}'s change log "
        f"{stream.get('change_log')} (bound {bound}, backlog_alert_changes): {why_behind(state)}. They wait there, "
        "not on the hot server; the table catches up once its rounds succeed"
    )


def group_backlog_alert(spec: TableSpec, group: StreamGroupState | None) -> str | None:
    """The alert for a table of a stream group with more changes waiting in the group's change log than the group's
    bound, as the group's reader last counted them (a quarantined table's own rounds count nothing); None when not."""
    bound = spec.source.stream_group()
    member = None if group is None else group.table_named(spec.name)
    if bound is None or member is None or member.backlog_changes is None:
        return None
    if member.backlog_changes <= bound.backlog_alert_changes:
        return None
    return (
        f"table {spec.name!r}: {member.backlog_changes} of its changes wait in stream group {bound.name}'s change log "
        f"(counted {member.backlog_counted_at}; bound {bound.backlog_alert_changes}, backlog_alert_changes): its "
        "rounds are not applying them (see its last error). They wait in the lake, not on the hot server"
    )
