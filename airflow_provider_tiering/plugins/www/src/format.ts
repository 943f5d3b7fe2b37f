// How the page words values: times in the browser's zone, durations, counts, sizes, and what a table's numbers mean.
import type { TieredTable } from "./api";

export const DASH = "\u2013";

const pad = (n: number): string => String(n).padStart(2, "0");

export function fmtTime(iso: string | null | undefined): string {
  if (!iso) return DASH;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

export function fmtSeconds(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return DASH;
  const s = Math.abs(seconds);
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

export const fmtInt = (n: number | null | undefined): string =>
  n === null || n === undefined ? DASH : Number(n).toLocaleString("en-US");

export function fmtBytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return DASH;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

export const ageSeconds = (iso: string | null): number | null =>
  iso ? (Date.now() - new Date(iso).getTime()) / 1000 : null;

export const offsetsText = (offsets: unknown): string => (offsets ? JSON.stringify(offsets) : DASH);

/** The error is from before the last tiered round, and nothing failed since: history, not a problem now. */
export const errorIsPast = (t: TieredTable): boolean =>
  Boolean(t.last_error) &&
  t.status !== "FAILED" &&
  !t.consecutive_failures &&
  Boolean(t.last_error_time && t.last_tiered_time) &&
  new Date(t.last_tiered_time as string) > new Date(t.last_error_time as string);

/** A value as shown, and what it means (a cell's title). */
export interface Explained {
  text: string;
  meaning: string;
}

/**
 * Rows waiting beyond the committed offsets, as far as they are known: what the last round left for later (its
 * max_rows_per_round cap), or "held back" while open transactions hold the watermark. Rows that arrived since the
 * last round are not counted anywhere (a round only probes for them), so no number is shown for them.
 */
export function backlog(t: TieredTable): Explained {
  if (t.watermark_blockers.length) {
    const n = t.watermark_blockers.length;
    return { text: "held back", meaning: `open transactions hold rows back (${n}); see the table's detail` };
  }
  if (t.backlog_rows) {
    const when = fmtTime(t.last_checked_time);
    return {
      text: fmtInt(t.backlog_rows),
      meaning: `the last round (${when}) left these rows for later rounds (max_rows_per_round)`,
    };
  }
  if (t.last_round_rows === null) return { text: DASH, meaning: "no round has tiered rows yet" };
  return {
    text: DASH,
    meaning:
      `the last round (${fmtTime(t.last_checked_time)}) left nothing behind; ` +
      "rows that arrived since are tiered by the next round and not counted here",
  };
}

/** How old the newest tiered row is now: known for time cursors only. */
export function dataAge(t: TieredTable): Explained {
  if (t.newest_data_age_seconds !== null) {
    return {
      text: fmtSeconds(t.newest_data_age_seconds),
      meaning: "age of the newest tiered row (its time cursor), now",
    };
  }
  return { text: DASH, meaning: "not a time cursor: its values say nothing about time (see Last tiered)" };
}

/** The table's lake identifier, <namespace>.<table>: unique where DAG names are not. */
export const lakeName = (t: TieredTable): string => `${t.namespace}.${t.lake_table}`;
