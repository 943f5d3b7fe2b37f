// Every table the user may read: filters, sortable columns, and each table's last error, short or in full.
import { Box, Button, HStack, Input, Link, NativeSelect, Table, Text } from "@chakra-ui/react";
import { useMemo, useState } from "react";
import { Link as RouterLink } from "react-router-dom";

import { STATUSES, type TieredTable } from "./api";
import {
  DASH,
  ageSeconds,
  backlog,
  dataAge,
  errorIsPast,
  fmtInt,
  fmtSeconds,
  fmtTime,
  lakeName,
} from "./format";
import { ErrorText } from "./ErrorText";
import { StatusBadge } from "./StatusBadge";

type SortKey = keyof TieredTable;

/** Rows shown at once: 50, as Airflow's own lists page theirs. Measured in headless Chromium, 500 rows took about
 * 0.75 s to render in Chakra's table, a page of 100 about 0.2 s (benchmarks/bench_status_page.py). */
const PAGE_SIZE = 50;

interface Column {
  key: SortKey;
  label: string;
  numeric?: boolean;
  title?: string;
}

const COLUMNS: Column[] = [
  { key: "namespace", label: "Namespace" },
  { key: "table", label: "Table" },
  { key: "status", label: "Status" },
  { key: "epoch", label: "Epoch", numeric: true },
  { key: "last_tiered_time", label: "Last tiered" },
  {
    key: "backlog_rows",
    label: "Backlog (rows)",
    numeric: true,
    title:
      "Rows waiting beyond the committed offsets, as far as known: what the last round left for later (its " +
      "max_rows_per_round cap), or held back by open transactions. Rows that arrived since the last round are not counted.",
  },
  {
    key: "newest_data_age_seconds",
    label: "Newest data age",
    numeric: true,
    title: "How old the newest tiered row is now; time cursors only (an integer cursor says nothing about time)",
  },
  { key: "last_round_rows", label: "Rows (last round)", numeric: true },
  { key: "consecutive_failures", label: "Failures", numeric: true },
  { key: "quarantined", label: "Quarantined" },
  { key: "last_error_time", label: "Last error" },
];

type Sortable = string | number | null;

function sortValue(row: TieredTable, key: SortKey): Sortable {
  const v = row[key];
  if (String(key).endsWith("_time")) return typeof v === "string" ? new Date(v).getTime() : null;
  if (typeof v === "boolean") return v ? 1 : 0;
  return typeof v === "string" || typeof v === "number" ? v : null;
}

function compareBy(key: SortKey, direction: number) {
  return (a: TieredTable, b: TieredTable): number => {
    const va = sortValue(a, key);
    const vb = sortValue(b, key);
    if (va === vb) return a.table < b.table ? -1 : a.table > b.table ? 1 : 0;
    if (va === null) return 1; // empty values last in both directions
    if (vb === null) return -1;
    return (va < vb ? -1 : 1) * direction;
  };
}

function ErrorCell({ t }: { t: TieredTable }) {
  const [open, setOpen] = useState(false);
  if (!t.last_error) {
    return (
      <Table.Cell className="error-none" color="fg.muted">
        {DASH}
      </Table.Cell>
    );
  }
  const past = errorIsPast(t);
  const firstLine = t.last_error.split("\n", 1)[0] ?? "";
  const short = firstLine.length > 120 ? `${firstLine.slice(0, 120)}\u2026` : firstLine;
  return (
    <Table.Cell
      className={past ? "error past-error" : "error"}
      color={past ? "fg.muted" : "fg.error"}
      title={past ? "a later round tiered: this error is past" : undefined}
    >
      <Box minW="64" maxW="md" wordBreak="break-word">
        <Text as="span" className="error-short">
          {past ? `past: ${short}` : short}
        </Text>{" "}
        <Button
          className="error-toggle"
          aria-expanded={open}
          onClick={() => setOpen(!open)}
          size="2xs"
          variant="plain"
          color="fg.info"
          px={0}
        >
          {open ? "less" : "more"}
        </Button>
        <Text color="fg.muted" fontSize="xs">
          {fmtTime(t.last_error_time)}
        </Text>
        {open ? <ErrorText text={t.last_error} /> : null}
      </Box>
    </Table.Cell>
  );
}

function TableRow({ t }: { t: TieredTable }) {
  const waiting = backlog(t);
  const age = dataAge(t);
  return (
    <Table.Row data-table={t.table} data-status={t.status}>
      <Table.Cell>{t.namespace}</Table.Cell>
      <Table.Cell>
        {/* Linked by its lake identifier: two DAGs may tier tables of the same name, in different namespaces. */}
        <Link asChild className="table-link" color="fg.info" fontWeight="medium">
          <RouterLink to={`?table=${encodeURIComponent(lakeName(t))}`}>{t.table}</RouterLink>
        </Link>
      </Table.Cell>
      <Table.Cell>
        <StatusBadge status={t.status} />
      </Table.Cell>
      <Table.Cell textAlign="end">{fmtInt(t.epoch)}</Table.Cell>
      <Table.Cell whiteSpace="nowrap">
        {fmtTime(t.last_tiered_time)}
        {t.last_tiered_time ? (
          <Text color="fg.muted" fontSize="xs">
            {fmtSeconds(ageSeconds(t.last_tiered_time))} ago
          </Text>
        ) : null}
      </Table.Cell>
      <Table.Cell className="backlog" textAlign="end" title={waiting.meaning}>
        {waiting.text}
      </Table.Cell>
      <Table.Cell className="data-age" textAlign="end" title={age.meaning}>
        {age.text}
      </Table.Cell>
      <Table.Cell textAlign="end">{fmtInt(t.last_round_rows)}</Table.Cell>
      <Table.Cell textAlign="end">{fmtInt(t.consecutive_failures)}</Table.Cell>
      <Table.Cell
        className={t.quarantined ? "quarantined" : undefined}
        color={t.quarantined ? "fg.error" : "fg.muted"}
        fontWeight={t.quarantined ? "semibold" : undefined}
        title={t.quarantined_since ? `since ${fmtTime(t.quarantined_since)}` : undefined}
      >
        {t.quarantined ? "yes" : "no"}
      </Table.Cell>
      <ErrorCell t={t} />
    </Table.Row>
  );
}

function Choice(props: { id: string; label: string; value: string; options: string[]; onChange: (v: string) => void }) {
  return (
    <Box as="label" display="flex" alignItems="center" gap={2} fontSize="sm">
      {props.label}
      <NativeSelect.Root size="sm" width="auto" minW="36">
        <NativeSelect.Field id={props.id} value={props.value} onChange={(e) => props.onChange(e.target.value)}>
          <option value="">all</option>
          {props.options.map((o) => (
            <option key={o} value={o}>
              {o}
            </option>
          ))}
        </NativeSelect.Field>
        <NativeSelect.Indicator />
      </NativeSelect.Root>
    </Box>
  );
}

export function TablesList({ tables }: { tables: TieredTable[] }) {
  const [status, setStatus] = useState("");
  const [namespace, setNamespace] = useState("");
  const [text, setText] = useState("");
  const [sort, setSort] = useState<{ key: SortKey; direction: number }>({ key: "table", direction: 1 });
  const [page, setPage] = useState(0);

  const namespaces = useMemo(() => [...new Set(tables.map((t) => t.namespace))].sort(), [tables]);
  const shownNamespace = namespaces.includes(namespace) ? namespace : "";
  const needle = text.trim().toLowerCase();
  const rows = tables
    .filter((t) => (!status || t.status === status) && (!shownNamespace || t.namespace === shownNamespace))
    .filter((t) => !needle || t.table.toLowerCase().includes(needle) || t.lake_table.toLowerCase().includes(needle))
    .sort(compareBy(sort.key, sort.direction));
  const failed = tables.filter((t) => t.status === "FAILED").length;
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  const shownPage = Math.min(page, pages - 1);
  const pageRows = rows.slice(shownPage * PAGE_SIZE, (shownPage + 1) * PAGE_SIZE);

  const sortBy = (key: SortKey) =>
    setSort((now) => (now.key === key ? { key, direction: -now.direction } : { key, direction: 1 }));
  // A new filter shows its first page.
  const filtered = (set: (value: string) => void) => (value: string) => {
    set(value);
    setPage(0);
  };

  return (
    <Box id="list-view">
      <HStack id="filters" role="search" gap={4} mb={3} flexWrap="wrap">
        <Choice id="filter-status" label="Status" value={status} options={[...STATUSES]} onChange={filtered(setStatus)} />
        <Choice
          id="filter-namespace"
          label="Namespace"
          value={shownNamespace}
          options={namespaces}
          onChange={filtered(setNamespace)}
        />
        <Box as="label" display="flex" alignItems="center" gap={2} fontSize="sm">
          Table
          <Input
            id="filter-text"
            type="search"
            size="sm"
            width="48"
            placeholder="name contains"
            value={text}
            onChange={(e) => filtered(setText)(e.target.value)}
          />
        </Box>
      </HStack>
      <Text id="summary" fontSize="sm" color="fg.muted" mb={2}>
        {`${rows.length} of ${tables.length} table(s) shown`}
        {failed ? `; ${failed} failed` : ""}
      </Text>
      <Table.ScrollArea borderWidth="1px" borderRadius="md">
        <Table.Root id="tables" size="sm" interactive stickyHeader>
          <Table.Header>
            <Table.Row>
              {COLUMNS.map((c) => (
                <Table.ColumnHeader
                  key={c.key}
                  data-sort={c.key}
                  aria-sort={sort.key === c.key ? (sort.direction > 0 ? "ascending" : "descending") : "none"}
                  textAlign={c.numeric ? "end" : undefined}
                  title={c.title}
                  cursor="pointer"
                  userSelect="none"
                  whiteSpace="nowrap"
                  onClick={() => sortBy(c.key)}
                >
                  {c.label}
                  {sort.key === c.key ? (sort.direction > 0 ? " \u25B4" : " \u25BE") : ""}
                </Table.ColumnHeader>
              ))}
            </Table.Row>
          </Table.Header>
          <Table.Body>
            {pageRows.map((t) => (
              <TableRow key={t.asset} t={t} />
            ))}
          </Table.Body>
        </Table.Root>
      </Table.ScrollArea>
      {pages > 1 ? (
        <HStack id="pager" justify="flex-end" gap={2} mt={2} fontSize="sm">
          <Text color="fg.muted">
            {`${shownPage * PAGE_SIZE + 1}–${shownPage * PAGE_SIZE + pageRows.length} of ${rows.length}`}
          </Text>
          <Button id="page-previous" size="xs" variant="outline" disabled={shownPage === 0} onClick={() => setPage(shownPage - 1)}>
            Previous
          </Button>
          <Button id="page-next" size="xs" variant="outline" disabled={shownPage >= pages - 1} onClick={() => setPage(shownPage + 1)}>
            Next
          </Button>
        </HStack>
      ) : null}
    </Box>
  );
}
