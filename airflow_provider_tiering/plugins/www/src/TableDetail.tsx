// One table: what its state says (offsets, errors, backlog, mode, slot, maintenance), its recent rounds as a chart
// and a table, and the two operations the REST API offers on it (Tier now, and Reset of a quarantine).
import { Box, Button, DataList, HStack, Heading, Link, Table, Text } from "@chakra-ui/react";
import type { ReactNode } from "react";
import { useState } from "react";
import { Link as RouterLink } from "react-router-dom";

import { type DataAges, type TieredTable, type TieringRound, resetTable, triggerTables } from "./api";
import {
  DASH,
  backlog,
  dataAge,
  errorIsPast,
  fmtBytes,
  fmtInt,
  fmtSeconds,
  fmtTime,
  lakeName,
  offsetsText,
} from "./format";
import { ErrorText } from "./ErrorText";
import { DataAgeChart, DataAgeLegend } from "./DataAgeChart";
import { ChartLegend, RoundsChart } from "./RoundsChart";
import { StatusBadge } from "./StatusBadge";

const enc = encodeURIComponent;

/** A link into Airflow's own pages, moved by its router (no reload). */
const AirflowLink = ({ to, children }: { to: string; children: ReactNode }) => (
  <Link asChild color="fg.info">
    <RouterLink to={to} data-airflow-route="">
      {children}
    </RouterLink>
  </Link>
);

type Fact = [label: string, value: ReactNode];

function Facts({ facts, id }: { facts: Fact[]; id?: string }) {
  return (
    <DataList.Root className="facts" id={id} orientation="horizontal" size="sm" gap={2} mb={4}>
      {facts.map(([label, value]) => (
        <DataList.Item key={label} alignItems="flex-start">
          <DataList.ItemLabel minW="48">{label}</DataList.ItemLabel>
          <DataList.ItemValue display="block" wordBreak="break-word">
            {value}
          </DataList.ItemValue>
        </DataList.Item>
      ))}
    </DataList.Root>
  );
}

function lastError(t: TieredTable): ReactNode {
  if (!t.last_error) return DASH;
  const past = errorIsPast(t);
  return (
    <Box className={past ? "past-error" : undefined} color={past ? "fg.muted" : "fg.error"}>
      <Text color="fg.muted" fontSize="xs">
        {fmtTime(t.last_error_time)}
        {past ? " (past: a later round tiered)" : ""}
      </Text>
      <ErrorText text={t.last_error} current={!past} />
    </Box>
  );
}

function shapeFacts(t: TieredTable): Fact[] {
  const c = t.shape_change;
  if (!c) return [];
  const reload = c.reload ? `; the whole table read again: ${c.reload}` : "";
  return [["Last change of shape", <span id="shape-change">{`${c.changes || "no column changed"} (${fmtTime(c.at)})${reload}`}</span>]];
}

function inPlaceFacts(t: TieredTable): Fact[] {
  const c = t.in_place_changes;
  if (!c) return [];
  const recent = (c.updated_since_last_round ?? 0) + (c.deleted_since_last_round ?? 0);
  const text =
    `${fmtInt(c.updated_since_last_round)} updated, ${fmtInt(c.deleted_since_last_round)} deleted since the round before ` +
    `(${fmtInt(c.updated_total)} / ${fmtInt(c.deleted_total)} since ${fmtTime(c.watched_since)})` +
    (recent ? " \u2014 the lake keeps first versions: tier it by key (merge) or change stream" : "");
  return [
    [
      "Changed in place",
      <Text as="span" id="in-place-changes" className={recent ? "error" : undefined} color={recent ? "fg.error" : undefined}>
        {text}
      </Text>,
    ],
  ];
}

/** A merge or change-stream table: its mode and key, what its last round did to the lake's rows, its slot. */
function modeFacts(t: TieredTable): Fact[] {
  if (!t.mode || t.mode === "append") return [["Mode", "append"], ...shapeFacts(t), ...inPlaceFacts(t)];
  const found: Fact[] = [["Mode", `${t.mode.replace("_", " ")}, key ${(t.merge_key ?? []).join(", ")}`], ...shapeFacts(t)];
  if (t.last_round_inserted_rows !== null) {
    found.push([
      "Rows changed (last round)",
      `${fmtInt(t.last_round_inserted_rows)} inserted, ${fmtInt(t.last_round_updated_rows)} updated, ` +
        `${fmtInt(t.last_round_deleted_rows)} deleted`,
    ]);
  }
  if (t.lake_delete_files !== null && t.lake_delete_files !== undefined) {
    found.push([
      "Delete files",
      <span id="delete-files">{`${fmtInt(t.lake_delete_files)} in the lake, deleting ${fmtInt(t.lake_deleted_rows)} rows (compaction applies them)`}</span>,
    ]);
  }
  const s = t.change_stream;
  if ((s && s.stream_group) || t.stream_group) {
    return [...found, ...streamGroupFacts(t)];
  }
  if (s && !s.slot) {
    found.push(["Binlog position", `${s.position || DASH} (the server's ends at ${s.binlog_end || DASH})`]);
    found.push([
      "Binlog needed",
      <span id="binlog-needed">
        {`${s.log_needed_bytes === null || s.log_needed_bytes === undefined ? DASH : fmtBytes(s.log_needed_bytes)} ` +
          `from the lake's position; the server holds ${s.binlog_files ?? DASH} files from ${s.oldest_binlog_file || DASH}`}
      </span>,
    ]);
  }
  if (s && s.slot) {
    found.push(["Replication slot", `${s.slot}${s.exists === false ? " (missing)" : ""} at ${s.confirmed_flush_lsn || DASH}`]);
    if (s.retained_wal_bytes !== null && s.retained_wal_bytes !== undefined) {
      const over = Boolean(s.max_retained_wal_bytes && s.retained_wal_bytes > s.max_retained_wal_bytes);
      found.push([
        "Retained WAL",
        <Text as="span" id="retained-wal" className={over ? "error" : undefined} color={over ? "fg.error" : undefined}>
          {`${fmtBytes(s.retained_wal_bytes)} (bound ${fmtBytes(s.max_retained_wal_bytes)})${over ? " \u2014 over the bound" : ""}`}
        </Text>,
      ]);
    }
  }
  return found;
}

/** A table of a stream group: where its lake and the group's change log stand, its changes waiting there, and the
 * group's reader (its lag, its error, the server's side of the stream). */
function streamGroupFacts(t: TieredTable): Fact[] {
  const s = t.change_stream ?? {};
  const g = t.stream_group;
  const waiting = s.log_backlog_changes ?? g?.backlog_changes ?? null;
  const found: Fact[] = [
    ["Stream group", `${g?.name ?? s.stream_group ?? DASH}: change log ${s.change_log || DASH}, joined at ${g?.joined_at || s.joined_at || DASH}`],
    ["Log position", `lake at ${s.position || DASH}, change log at ${g?.position || s.log_position || DASH}`],
    ["Backlog (change log)", <span id="stream-backlog">{waiting === null ? DASH : `${fmtInt(waiting)} changes`}</span>],
  ];
  if (g) {
    const failing = g.consecutive_failures > 0;
    found.push([
      "Group reader",
      <Text as="span" id="stream-reader" color={failing ? "fg.error" : undefined}>
        {`${g.status}, read to the log's end ${fmtSeconds(g.lag_seconds)} ago` +
          (failing ? `; failing (${g.consecutive_failures} runs): ${g.last_error ?? ""}` : "")}
      </Text>,
    ]);
    const log = g.log;
    if (log && log.slot) {
      found.push(["Group slot", `${log.slot} at ${log.confirmed_flush_lsn || DASH}, retaining ${fmtBytes(log.retained_wal_bytes)} of WAL`]);
    } else if (log && log.binlog_end) {
      found.push(["Group binlog", `at ${log.position || DASH} of ${log.binlog_end}; ${fmtBytes(log.log_needed_bytes)} still needed`]);
    }
    if (g.note) found.push(["Stream note", g.note]);
  }
  return found;
}

function tableFacts(t: TieredTable): Fact[] {
  const waiting = backlog(t);
  const age = dataAge(t);
  const task = t.dag_id && t.task_id ? (
    <AirflowLink to={`/dags/${enc(t.dag_id)}/tasks/${enc(t.task_id)}`}>{`${t.dag_id} / ${t.task_id}`}</AirflowLink>
  ) : (
    DASH
  );
  const tiered = t.last_tiered_time ? `${fmtTime(t.last_tiered_time)} (${fmtSeconds(t.staleness_seconds)} ago)` : DASH;
  const blockers = t.watermark_blockers.length ? <ErrorText text={JSON.stringify(t.watermark_blockers, null, 2)} /> : DASH;
  const evicted = `${fmtInt(t.evicted_rows_total)} rows${t.eviction_note ? ` (${t.eviction_note})` : ""}`;
  return [
    ["Table", t.table],
    ["Asset", t.asset],
    ["DAG / task", task],
    ["Epoch", fmtInt(t.epoch)],
    ["Last tiered", tiered],
    ["Committed offsets", offsetsText(t.committed_offsets)],
    ["Snapshot", t.snapshot_id === null ? DASH : String(t.snapshot_id)],
    ["Backlog", <span title={waiting.meaning}>{`${waiting.text} (${waiting.meaning})`}</span>],
    ["Newest data age", `${age.text} (${age.meaning})`],
    ["Consecutive failures", fmtInt(t.consecutive_failures)],
    ["Next retry", fmtTime(t.next_retry_at)],
    ["Quarantined", t.quarantined ? `since ${fmtTime(t.quarantined_since)}` : "no"],
    ["Last error", lastError(t)],
    ["Watermark blockers", blockers],
    ["Note", t.note || DASH],
    ["Evicted from the hot store", evicted],
    ...modeFacts(t),
  ];
}

function Maintenance({ t }: { t: TieredTable }) {
  const m = t.maintenance;
  if (!m) {
    return (
      <Text id="maintenance" color="fg.muted" mb={4}>
        Not maintained yet.
      </Text>
    );
  }
  const compaction = m.last_compaction_at
    ? `${fmtTime(m.last_compaction_at)}: ${fmtInt(m.files_before_compaction)} \u2192 ${fmtInt(m.files_after_compaction)} data files`
    : "never";
  const error = m.last_error ? (
    <Box>
      <Text color="fg.muted" fontSize="xs">
        {fmtTime(m.last_error_time)}
      </Text>
      <ErrorText text={m.last_error} current={m.consecutive_failures > 0} />
    </Box>
  ) : (
    DASH
  );
  return (
    <Facts
      id="maintenance"
      facts={[
        ["Last run", m.last_run_at ? `${fmtTime(m.last_run_at)} (${m.last_outcome})` : DASH],
        [
          "Lake now",
          `${fmtInt(m.data_files)} data files, ${fmtInt(m.delete_files ?? 0)} delete files ` +
            `(${fmtInt(m.deleted_rows ?? 0)} rows), ${fmtInt(m.snapshots)} snapshots`,
        ],
        ["Last compaction", compaction],
        ["Snapshots expired", `${fmtInt(m.snapshots_expired)} last run, ${fmtInt(m.snapshots_expired_total)} in all`],
        ["Orphan files removed", `${fmtInt(m.orphans_removed)} last run, ${fmtInt(m.orphans_removed_total)} in all`],
        ["Last error", error],
      ]}
    />
  );
}

function RoundsTable({ rounds }: { rounds: TieringRound[] }) {
  const head = ["Time", "Epoch", "Rows", "Bytes", "Files", "Duration", "Lag", "Offsets", "Task instance / logs"];
  return (
    <Table.ScrollArea borderWidth="1px" borderRadius="md">
      <Table.Root id="rounds" size="sm">
        <Table.Header>
          <Table.Row>
            {head.map((h) => (
              <Table.ColumnHeader key={h}>{h}</Table.ColumnHeader>
            ))}
          </Table.Row>
        </Table.Header>
        <Table.Body>
          {rounds.map((r, i) => (
            <Table.Row key={i} data-epoch={r.epoch ?? undefined}>
              <Table.Cell whiteSpace="nowrap">{fmtTime(r.timestamp)}</Table.Cell>
              <Table.Cell textAlign="end">{fmtInt(r.epoch)}</Table.Cell>
              <Table.Cell textAlign="end">{fmtInt(r.rows)}</Table.Cell>
              <Table.Cell textAlign="end">{fmtInt(r.bytes)}</Table.Cell>
              <Table.Cell textAlign="end">{fmtInt(r.files)}</Table.Cell>
              <Table.Cell textAlign="end">{fmtSeconds(r.duration_seconds)}</Table.Cell>
              <Table.Cell textAlign="end">{fmtSeconds(r.lag_seconds)}</Table.Cell>
              <Table.Cell wordBreak="break-all">{`${offsetsText(r.start_offsets)} \u2192 ${offsetsText(r.end_offsets)}`}</Table.Cell>
              <Table.Cell>
                {r.dag_id && r.run_id && r.task_id ? (
                  <AirflowLink to={`/dags/${enc(r.dag_id)}/runs/${enc(r.run_id)}/tasks/${enc(r.task_id)}`}>
                    {r.run_id}
                  </AirflowLink>
                ) : (
                  DASH
                )}
              </Table.Cell>
            </Table.Row>
          ))}
        </Table.Body>
      </Table.Root>
    </Table.ScrollArea>
  );
}

export interface Feedback {
  notice: (text: string | null) => void;
  error: (err: Error | null) => void;
  reload: () => Promise<void>;
}

/** "Tier now" starts a run of the table's DAG for this table alone; "Reset" lifts a quarantine. Both are the REST
 * API's operations, with its permissions: a user who may not gets its 403 reason in the banner. */
function Actions({ t, feedback }: { t: TieredTable; feedback: Feedback }) {
  const [busy, setBusy] = useState(false);
  const run = async (action: () => Promise<string>) => {
    setBusy(true);
    try {
      feedback.notice(await action());
      feedback.error(null);
      await feedback.reload();
    } catch (err) {
      feedback.notice(null);
      feedback.error(err instanceof Error ? err : new Error(String(err)));
    } finally {
      setBusy(false);
    }
  };
  const tierNow = async () => {
    const runs = await triggerTables([t.table]);
    return runs
      .map(
        (r) =>
          `Started run ${r.run_id} of ${r.dag_id}` +
          (r.paused ? " (the DAG is paused: the run waits until it is unpaused)" : ""),
      )
      .join("; ");
  };
  const reset = async () => {
    await resetTable(lakeName(t));
    return `${t.table}: quarantine lifted; its next round runs`;
  };
  return (
    <HStack className="actions" gap={2} mb={4}>
      <Button id="trigger-table" size="sm" colorPalette="blue" disabled={busy} onClick={() => run(tierNow)}>
        Tier now
      </Button>
      {t.quarantined ? (
        <Button id="reset-table" size="sm" variant="outline" disabled={busy} onClick={() => run(reset)}>
          Reset
        </Button>
      ) : null}
    </HStack>
  );
}

export function TableDetail(props: { t: TieredTable; rounds: TieringRound[]; ages: DataAges; feedback: Feedback }) {
  const { t, rounds, ages, feedback } = props;
  return (
    <Box id="detail-view">
      <Heading size="lg" mb={3}>
        {lakeName(t)} <StatusBadge status={t.status} />
      </Heading>
      <Actions t={t} feedback={feedback} />
      <Facts facts={tableFacts(t)} />
      <Heading size="md" mt={6} mb={2}>
        Lake maintenance
      </Heading>
      <Maintenance t={t} />
      <Heading size="md" mt={6} mb={2}>
        Data age, last 24 hours
      </Heading>
      {ages.rounds.length ? (
        <>
          <Text fontSize="sm" color="fg.muted">
            <DataAgeLegend />
          </Text>
          <DataAgeChart rounds={ages.rounds} />
        </>
      ) : (
        <Text id="data-age-none" color="fg.muted">
          {ages.unavailable ?? "No round in the history table (sys.lake_tiering_history) in the last 24 hours."}
        </Text>
      )}
      <Heading size="md" mt={6} mb={2}>
        {`Recent rounds (${rounds.length})`}
      </Heading>
      {rounds.length ? (
        <>
          <Text fontSize="sm" color="fg.muted">
            <ChartLegend />
          </Text>
          <RoundsChart rounds={rounds} />
          <RoundsTable rounds={rounds} />
        </>
      ) : (
        <Text color="fg.muted">No round has tiered rows yet.</Text>
      )}
    </Box>
  );
}
