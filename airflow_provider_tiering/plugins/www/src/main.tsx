// The Tiering page, rendered by Airflow's UI at /plugin/tiering: every table the user may read, and one table's
// detail under ?table=<namespace>.<table>. Both reload every few seconds while the page is visible.
import { Alert, Box, Flex, Heading, Link, Spinner, Text } from "@chakra-ui/react";
import { useCallback, useEffect, useState } from "react";
import { Link as RouterLink, useLocation, useNavigate, useSearchParams } from "react-router-dom";

import {
  type DataAges,
  type TieredTable,
  type TieringRound,
  getDataAges,
  getHistory,
  getTable,
  listTables,
} from "./api";
import { fmtTime } from "./format";
import { TableDetail } from "./TableDetail";
import { TablesList } from "./TablesList";
import { useRefreshing } from "./useRefreshing";

const LIST_RENDERED = "tiering-list-rendered";

function Banner({ error }: { error: Error | undefined }) {
  if (!error) return null;
  return (
    <Alert.Root id="banner" status="error" mb={3}>
      <Alert.Indicator />
      <Alert.Title>{error.message}</Alert.Title>
    </Alert.Root>
  );
}

function Notice({ text }: { text: string | null }) {
  if (!text) return null;
  return (
    <Alert.Root id="notice" status="success" mb={3}>
      <Alert.Indicator />
      <Alert.Title>{text}</Alert.Title>
    </Alert.Root>
  );
}

const Loading = ({ what }: { what: string }) => (
  <Flex align="center" gap={2} color="fg.muted">
    <Spinner size="sm" /> {`Loading ${what}\u2026`}
  </Flex>
);

function ListView() {
  const tables = useRefreshing(listTables, "list");
  const shown = tables.data !== undefined;
  useEffect(() => {
    // When the list first shows, for anyone measuring the page (benchmarks/bench_status_page.py).
    if (shown && performance.getEntriesByName(LIST_RENDERED).length === 0) performance.mark(LIST_RENDERED);
  }, [shown]);
  return (
    <>
      <Updated at={tables.updatedAt} />
      <Banner error={tables.error && new Error(`${shown ? "Could not refresh" : "Could not load the tables"}: ${tables.error.message}`)} />
      {tables.data ? <TablesList tables={tables.data} /> : tables.error ? null : <Loading what="tables" />}
    </>
  );
}

function DetailView({ name }: { name: string }) {
  const load = useCallback(
    async (): Promise<[TieredTable, TieringRound[], DataAges]> =>
      Promise.all([getTable(name), getHistory(name), getDataAges(name)]),
    [name],
  );
  const detail = useRefreshing(load, name);
  const [notice, setNotice] = useState<string | null>(null);
  const [actionError, setActionError] = useState<Error | null>(null);
  return (
    <>
      <Updated at={detail.updatedAt} />
      <Text mb={3}>
        <Link asChild color="fg.info">
          <RouterLink to="?">{"\u2190 all tables"}</RouterLink>
        </Link>
      </Text>
      <Banner
        error={
          actionError ??
          (detail.error && new Error(`Could not ${detail.data ? "refresh" : `load ${name}`}: ${detail.error.message}`))
        }
      />
      <Notice text={notice} />
      {detail.data ? (
        <TableDetail
          t={detail.data[0]}
          rounds={detail.data[1]}
          ages={detail.data[2]}
          feedback={{ notice: setNotice, error: setActionError, reload: detail.reload }}
        />
      ) : detail.error ? null : (
        <Loading what={name} />
      )}
    </>
  );
}

function Updated({ at }: { at: Date | undefined }) {
  return (
    <Text id="updated" aria-live="polite" fontSize="xs" color="fg.muted" position="absolute" top={0} right={0}>
      {at ? `updated ${fmtTime(at.toISOString())}` : ""}
    </Text>
  );
}

/** Links to the page from before it joined Airflow's UI (``/tiering/#table=<name>``) open that table's detail. */
function useOldTableLinks(): void {
  const { hash } = useLocation();
  const navigate = useNavigate();
  useEffect(() => {
    const old = /^#table=(.+)$/.exec(hash);
    if (old?.[1]) navigate(`?table=${old[1]}`, { replace: true });
  }, [hash, navigate]);
}

export default function TieringPage() {
  const [params] = useSearchParams();
  const table = params.get("table");
  useOldTableLinks();
  return (
    <Box id="tiering" position="relative" p={2}>
      <Heading size="xl" mb={4}>
        <Link asChild id="home-link" _hover={{ textDecoration: "none" }}>
          <RouterLink to="?">Tiering</RouterLink>
        </Link>
      </Heading>
      {table === null ? <ListView /> : <DetailView key={table} name={table} />}
    </Box>
  );
}
