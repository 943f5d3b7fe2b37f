"""A MariaDB table of a stream group: its changes read from the group's change log (``change_stream/group_member.py``),
placed by name and typed as its own binlog stream's (``change_stream_source.py``).

Its first load is its own stream's: consistent snapshots whose binlog positions MariaDB tells, rolled back to one
position ``P`` with the binlog between them (a short read of the server's binlog, by this task). The change log then
carries every change of the table after ``P``, as long as ``P`` is not before the table joined the group (the load
waits for the reader to take the table in; ``P`` is taken after). A table moving in from a stream of its own reads
the binlog from its lake's position up to where it joined, as its own stream did, while the server still holds it.
"""

from __future__ import annotations

from contextlib import closing

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.source_specs import MySqlCdcSourceSpec
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.sources.change_stream.group_member import GroupMember
from airflow_provider_tiering.sources.change_stream.plans import ChangePlan
from airflow_provider_tiering.sources.mysql.binlog_positions import unpack
from airflow_provider_tiering.sources.mysql.change_stream_source import MySqlCdcSource


class MySqlGroupMember(GroupMember, MySqlCdcSource):
    """A MariaDB table read through its stream group's change log (see the module's description)."""

    def __init__(self, spec: MySqlCdcSourceSpec, connection: ConnectionInfo) -> None:
        super().__init__(spec, connection)
        group = spec.stream
        if group is None:
            raise SourceError(f"{self.display_name}: not a table of a stream group")
        self.stream: StreamGroupSpec = group
        self.member_table = f"{self.table.database}.{spec.table}"
        self.display_name = f"mysql table {self.member_table} (stream group {group.name})"

    def _check_table(self) -> None:
        """Its key: the binlog's changes are told apart by it (the server and privileges with its identity)."""
        self.server.check_key(self.table.table_ref, self.merge_key, self.table.unique_keys())

    def _own_log_holds(self, position: int) -> bool:
        """The server still holds the binlog from the lake's position (its own stream's, before it joined)."""
        with closing(self.table._connect()) as conn:
            end = self._read_end(conn)
        return unpack(position)[0] in end.sizes and position <= end.position

    def _plan_first_load(self) -> ChangePlan:
        _, member = self._member_state(wait=True)
        plan = super()._plan_first_load()
        if plan.end < member.held_from:
            raise SourceError(
                f"{self.display_name}: the first load's snapshot stands at {self.describe_position(plan.end)}, before "
                f"the change log holds the table's changes ({self.describe_position(member.held_from)}): the next "
                "round takes another"
            )
        return plan
