// The tiering REST API (airflow_provider_tiering/plugins/api.py) as the page uses it. Requests carry Airflow's
// sign-in cookie; the API decides what the user may read and do, and its refusals are shown as it words them.

export const STATUSES = ["NEW", "INITIALIZED", "SCHEDULED", "PENDING", "TIERING", "TIERED", "FAILED"] as const;
export type TableStatus = (typeof STATUSES)[number];

export type Offsets = Record<string, unknown>;

export interface Maintenance {
  last_run_at: string | null;
  last_outcome: string | null;
  data_files: number | null;
  snapshots: number | null;
  delete_files: number | null;
  deleted_rows: number | null;
  last_compaction_at: string | null;
  files_before_compaction: number | null;
  files_after_compaction: number | null;
  snapshots_expired: number;
  snapshots_expired_total: number;
  orphans_removed: number;
  orphans_removed_total: number;
  consecutive_failures: number;
  last_error: string | null;
  last_error_time: string | null;
}

export interface ChangeStream {
  /** Every stream's: the lake's position in the log, the log the table still needs, what a capped round left. */
  position?: string | null;
  log_needed_bytes?: number | null;
  log_backlog_bytes?: number | null;
  /** PostgreSQL's slot. */
  slot?: string | null;
  exists?: boolean | null;
  confirmed_flush_lsn?: string | null;
  retained_wal_bytes?: number | null;
  max_retained_wal_bytes?: number | null;
  /** A MariaDB or MySQL binlog's. */
  binlog_end?: string | null;
  oldest_binlog_file?: string | null;
  binlog_files?: number | null;
  /** A table of a stream group: its group, the change log's position, its changes waiting there. */
  stream_group?: string | null;
  change_log?: string | null;
  log_position?: string | null;
  joined_at?: string | null;
  log_backlog_changes?: number | null;
}

/** A table's stream group: its reader (one read of the database's log for all its tables) and the table in it. */
export interface StreamGroup {
  name: string;
  status: string;
  position: string | null;
  lag_seconds: number | null;
  last_read_time: string | null;
  last_error: string | null;
  last_error_time: string | null;
  consecutive_failures: number;
  log: ChangeStream | null;
  joined_at: string | null;
  backlog_changes: number | null;
  backlog_counted_at: string | null;
  note: string | null;
}

export interface InPlaceChanges {
  updated_since_last_round: number | null;
  deleted_since_last_round: number | null;
  updated_total: number | null;
  deleted_total: number | null;
  watched_since: string | null;
}

export interface ShapeChange {
  at: string | null;
  changes: string | null;
  reload: string | null;
}

/** One table's status: the REST API's ``TableStatusRecord`` (its fields this page shows). */
export interface TieredTable {
  table: string;
  namespace: string;
  lake_table: string;
  asset: string;
  dag_id: string | null;
  task_id: string | null;
  status: TableStatus;
  epoch: number;
  last_tiered_time: string | null;
  last_checked_time: string | null;
  staleness_seconds: number | null;
  newest_data_age_seconds: number | null;
  backlog_rows: number | null;
  last_round_rows: number | null;
  committed_offsets: Offsets | null;
  /** 64-bit: kept as its exact digits (see ``parseJSON``). */
  snapshot_id: string | number | null;
  consecutive_failures: number;
  next_retry_at: string | null;
  quarantined: boolean;
  quarantined_since: string | null;
  last_error: string | null;
  last_error_time: string | null;
  watermark_blockers: Record<string, unknown>[];
  note: string | null;
  evicted_rows_total: number;
  eviction_note: string | null;
  maintenance: Maintenance | null;
  mode: string | null;
  merge_key: string[] | null;
  last_round_inserted_rows: number | null;
  last_round_updated_rows: number | null;
  last_round_deleted_rows: number | null;
  change_stream: ChangeStream | null;
  stream_group: StreamGroup | null;
  in_place_changes: InPlaceChanges | null;
  shape_change: ShapeChange | null;
  lake_delete_files: number | null;
  lake_deleted_rows: number | null;
}

/** One successful round, as its asset event recorded it (the API's ``TieringRound``). */
export interface TieringRound {
  timestamp: string;
  epoch: number | null;
  snapshot_id: string | number | null;
  rows: number;
  bytes: number;
  files: number;
  duration_seconds: number | null;
  lag_seconds: number | null;
  start_offsets: Offsets | null;
  end_offsets: Offsets | null;
  dag_id: string | null;
  run_id: string | null;
  task_id: string | null;
}

/** One round as the lake's history table (sys.lake_tiering_history) holds it, failed ones included. */
export interface DataAgeRound {
  started_at: string;
  ended_at: string;
  outcome: string;
  epoch: number;
  rows_in: number | null;
  data_age_before_seconds: number | null;
  data_age_after_seconds: number | null;
}

export interface DataAges {
  table: string;
  rounds: DataAgeRound[];
  unavailable: string | null;
}

export interface TriggeredRun {
  dag_id: string;
  run_id: string;
  tasks: Record<string, string>;
  paused: boolean;
}

/** The API's root: under Airflow's own base URL (the page's ``<base href>``), wherever Airflow is served. */
const apiRoot = (): string => new URL("tiering/api", document.baseURI).pathname;

// JSON.parse's reviver sees a number's source text (Chromium 114+); older browsers round 64-bit snapshot ids.
type ReviverContext = { source?: string };
const parseJSON = (text: string): unknown =>
  JSON.parse(text, (key: string, value: unknown, context?: ReviverContext) =>
    key === "snapshot_id" && typeof value === "number" && context?.source ? context.source : value,
  );

async function request<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await fetch(apiRoot() + path, {
    credentials: "same-origin",
    ...init,
    headers: { Accept: "application/json", ...(init?.body ? { "Content-Type": "application/json" } : {}) },
  });
  const text = await response.text();
  if (!response.ok) {
    let detail: unknown = response.statusText;
    try {
      detail = (JSON.parse(text) as { detail?: unknown }).detail ?? detail;
    } catch {
      // not JSON: keep the status text
    }
    const reading = !init?.method;
    const hint =
      response.status === 401
        ? " (signed out? reload the page)"
        : response.status === 403 && reading
          ? " (reading tiered tables needs read access to assets, which your Airflow role lacks: ask an admin)"
          : "";
    throw new Error(`${response.status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}${hint}`);
  }
  return parseJSON(text) as T;
}

const enc = encodeURIComponent;

const fetchList = async (): Promise<TieredTable[]> => (await request<{ tables: TieredTable[] }>("/tables")).tables;

// Asked for as soon as Airflow's UI loads the page's bundle onto the list, while React mounts the page: the list's
// first load takes it if it is fresh (a few seconds old at most); every other load asks again.
const PREFETCH_FRESH_MS = 5_000;
const opensOnList = !new URLSearchParams(window.location.search).has("table");
let prefetched: { list: Promise<TieredTable[]>; at: number } | null = opensOnList
  ? { list: fetchList(), at: Date.now() }
  : null;
prefetched?.list.catch(() => undefined); // a failure is reported by the load that takes it

export const listTables = (): Promise<TieredTable[]> => {
  const first = prefetched;
  prefetched = null;
  return first && Date.now() - first.at < PREFETCH_FRESH_MS ? first.list : fetchList();
};

export const getTable = (name: string): Promise<TieredTable> => request(`/tables/${enc(name)}`);

export const getHistory = async (name: string, limit = 50): Promise<TieringRound[]> =>
  (await request<{ rounds: TieringRound[] }>(`/tables/${enc(name)}/history?limit=${limit}`)).rounds;

export const getDataAges = (name: string, hours = 24): Promise<DataAges> =>
  request(`/tables/${enc(name)}/data-age?hours=${hours}`);

export const resetTable = (name: string): Promise<TieredTable> => request(`/tables/${enc(name)}/reset`, { method: "POST" });

export const triggerTables = async (tables: string[]): Promise<TriggeredRun[]> =>
  (await request<{ runs: TriggeredRun[] }>("/trigger", { method: "POST", body: JSON.stringify({ tables }) })).runs;
