// The Tiering page: renders the table list (embedded in the page, then refreshed from the REST API), and one
// table's recent rounds with a chart under #table=<namespace>.<table>. Every text goes through textContent (never
// innerHTML): table names and error texts are user data.
"use strict";

(() => {
  const body = document.body;
  const API = body.dataset.api;
  const AIRFLOW = body.dataset.airflow; // the Airflow UI's root path ("" at the domain root)
  const REFRESH_MS = Number(body.dataset.refreshSeconds || 10) * 1000;
  const STATUSES = ["NEW", "INITIALIZED", "SCHEDULED", "PENDING", "TIERING", "TIERED", "FAILED"];
  const SVG_NS = "http://www.w3.org/2000/svg";

  const view = {
    tables: [],
    sortKey: "table",
    sortDir: 1,
    expanded: new Set(), // assets of the tables whose full error is shown
    timer: null,
  };

  // ---------------------------------------------------------------- small helpers

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "className") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }

  const DASH = "\u2013";
  const pad = (n) => String(n).padStart(2, "0");

  function fmtTime(iso) {
    if (!iso) return DASH;
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function fmtSeconds(seconds) {
    if (seconds === null || seconds === undefined) return DASH;
    const s = Math.abs(seconds);
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    if (s < 3600) return `${(s / 60).toFixed(1)} min`;
    if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} d`;
  }

  const fmtInt = (n) => (n === null || n === undefined ? DASH : Number(n).toLocaleString("en-US"));

  function fmtBytes(n) {
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

  function ageSeconds(iso) {
    return iso ? (Date.now() - new Date(iso).getTime()) / 1000 : null;
  }

  const enc = encodeURIComponent;

  // A link into the Airflow UI. target=_top leaves the iframe; inside Airflow's sandboxed iframe (no
  // allow-top-navigation) the click handler below moves the UI's own router instead.
  function airflowLink(path, text) {
    return el("a", { href: AIRFLOW + path, target: "_top", "data-airflow-route": "" }, text);
  }

  const taskPath = (dagId, taskId) => `/dags/${enc(dagId)}/tasks/${enc(taskId)}`;
  const taskInstancePath = (dagId, runId, taskId) => `/dags/${enc(dagId)}/runs/${enc(runId)}/tasks/${enc(taskId)}`;

  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a[data-airflow-route]");
    if (!link || window.top === window || event.button !== 0 || event.ctrlKey || event.metaKey) return;
    try {
      const top = window.top;
      const url = new URL(link.href, window.location.href);
      if (url.origin !== top.location.origin) return;
      const idx = ((top.history.state && top.history.state.idx) || 0) + 1;
      top.history.pushState({ usr: null, key: Math.random().toString(36).slice(2, 10), idx }, "", url.href);
      top.dispatchEvent(new PopStateEvent("popstate", { state: top.history.state }));
      event.preventDefault();
    } catch (err) {
      // Another origin or no access to the parent: let the browser try target=_top.
    }
  });

  // Snapshot ids are 64-bit: keep their exact digits as text (JSON.parse's source access; older browsers round).
  const parseJSON = (text) =>
    JSON.parse(text, (key, value, context) =>
      key === "snapshot_id" && typeof value === "number" && context && context.source ? context.source : value,
    );

  async function getJSON(path) {
    const response = await fetch(API + path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) {
      const hint = response.status === 401 || response.status === 403 ? " (signed out? reload the page)" : "";
      throw new Error(`${response.status} ${response.statusText}${hint}`);
    }
    return parseJSON(await response.text());
  }

  // A reset or a trigger: the REST API decides who may (403 with its reason otherwise), as for any other client.
  async function postJSON(path, body) {
    const response = await fetch(API + path, {
      method: "POST",
      credentials: "same-origin",
      headers: { Accept: "application/json", "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (!response.ok) {
      let detail = response.statusText;
      try {
        detail = JSON.parse(text).detail || detail;
      } catch (err) {
        // not JSON: keep the status text
      }
      throw new Error(`${response.status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    }
    return parseJSON(text);
  }

  function showNotice(text) {
    const notice = document.getElementById("notice");
    notice.textContent = text || "";
    notice.hidden = !text;
  }

  function showError(err, prefix = "Could not refresh: ") {
    const banner = document.getElementById("banner");
    if (err) {
      banner.textContent = `${prefix}${err.message || err}`;
      banner.hidden = false;
    } else {
      banner.hidden = true;
    }
  }

  function markUpdated() {
    document.getElementById("updated").textContent = `updated ${fmtTime(new Date().toISOString())}`;
  }

  // ---------------------------------------------------------------- the list

  const filterStatus = document.getElementById("filter-status");
  const filterNamespace = document.getElementById("filter-namespace");
  const filterText = document.getElementById("filter-text");

  for (const s of STATUSES) filterStatus.append(el("option", { value: s }, s));

  function syncNamespaceOptions() {
    const namespaces = [...new Set(view.tables.map((t) => t.namespace))].sort();
    const have = [...filterNamespace.options].slice(1).map((o) => o.value);
    if (have.join("\n") === namespaces.join("\n")) return;
    const selected = filterNamespace.value;
    filterNamespace.replaceChildren(el("option", { value: "" }, "all"));
    for (const ns of namespaces) filterNamespace.append(el("option", { value: ns }, ns));
    filterNamespace.value = namespaces.includes(selected) ? selected : "";
  }

  function sortValue(row, key) {
    const v = row[key];
    if (key.endsWith("_time")) return v ? new Date(v).getTime() : null;
    if (typeof v === "boolean") return v ? 1 : 0;
    return v;
  }

  function compareRows(a, b) {
    const va = sortValue(a, view.sortKey);
    const vb = sortValue(b, view.sortKey);
    if (va === vb) return a.table < b.table ? -1 : a.table > b.table ? 1 : 0;
    if (va === null || va === undefined) return 1; // empty values last in both directions
    if (vb === null || vb === undefined) return -1;
    return (va < vb ? -1 : 1) * view.sortDir;
  }

  function visibleTables() {
    const status = filterStatus.value;
    const namespace = filterNamespace.value;
    const text = filterText.value.trim().toLowerCase();
    return view.tables
      .filter((t) => (!status || t.status === status) && (!namespace || t.namespace === namespace))
      .filter((t) => !text || t.table.toLowerCase().includes(text) || t.lake_table.toLowerCase().includes(text))
      .sort(compareRows);
  }

  // The error is from before the last tiered round, and nothing failed since: history, not a problem now.
  function errorIsPast(t) {
    return (
      Boolean(t.last_error) &&
      t.status !== "FAILED" &&
      !t.consecutive_failures &&
      Boolean(t.last_error_time && t.last_tiered_time) &&
      new Date(t.last_tiered_time) > new Date(t.last_error_time)
    );
  }

  function errorCell(t) {
    if (!t.last_error) return el("td", { className: "muted" }, DASH);
    const past = errorIsPast(t);
    const firstLine = t.last_error.split("\n", 1)[0];
    const short = firstLine.length > 120 ? `${firstLine.slice(0, 120)}\u2026` : firstLine;
    const open = view.expanded.has(t.asset);
    const toggle = el(
      "button",
      {
        type: "button",
        className: "link error-toggle",
        "aria-expanded": open ? "true" : "false",
        onclick: () => {
          if (view.expanded.has(t.asset)) view.expanded.delete(t.asset);
          else view.expanded.add(t.asset);
          renderList();
        },
      },
      open ? "less" : "more",
    );
    return el(
      "td",
      { className: past ? "error past-error" : "error", title: past ? "a later round tiered: this error is past" : null },
      el("span", { className: "error-short" }, past ? `past: ${short}` : short),
      toggle,
      el("div", { className: "muted" }, fmtTime(t.last_error_time)),
      open ? el("pre", { className: "error-full" }, t.last_error) : null,
    );
  }

  // Rows waiting beyond the committed offsets, as far as they are known: what the last round left for later (its
  // max_rows_per_round cap), or "held back" while open transactions hold the watermark. Rows that arrived since the
  // last round are not counted anywhere (a round only probes for them), so no number is shown for them.
  function backlogCell(t) {
    if (t.watermark_blockers && t.watermark_blockers.length) {
      return ["held back", `open transactions hold rows back (${t.watermark_blockers.length}); see the table's detail`];
    }
    if (t.backlog_rows) {
      return [fmtInt(t.backlog_rows), `the last round (${fmtTime(t.last_checked_time)}) left these rows for later rounds (max_rows_per_round)`];
    }
    if (t.last_round_rows === null || t.last_round_rows === undefined) return [DASH, "no round has tiered rows yet"];
    return [DASH, `the last round (${fmtTime(t.last_checked_time)}) left nothing behind; rows that arrived since are tiered by the next round and not counted here`];
  }

  // How old the newest tiered row is now: known for time cursors only.
  function dataAgeCell(t) {
    if (t.newest_data_age_seconds !== null && t.newest_data_age_seconds !== undefined) {
      return [fmtSeconds(t.newest_data_age_seconds), "age of the newest tiered row (its time cursor), now"];
    }
    return [DASH, "not a time cursor: its values say nothing about time (see Last tiered)"];
  }

  function tableRow(t) {
    const [backlog, backlogTitle] = backlogCell(t);
    const [dataAge, dataAgeTitle] = dataAgeCell(t);
    return el(
      "tr",
      { "data-table": t.table, "data-status": t.status },
      el("td", {}, t.namespace),
      // Linked by its lake identifier: two DAGs may tier tables of the same name, in different namespaces.
      el("td", {}, el("a", { href: `#table=${enc(`${t.namespace}.${t.lake_table}`)}`, className: "table-link" }, t.table)),
      el("td", {}, el("span", { className: `badge status-${t.status}` }, t.status)),
      el("td", { className: "num" }, fmtInt(t.epoch)),
      el(
        "td",
        {},
        fmtTime(t.last_tiered_time),
        t.last_tiered_time ? el("div", { className: "muted" }, `${fmtSeconds(ageSeconds(t.last_tiered_time))} ago`) : null,
      ),
      el("td", { className: "num backlog", title: backlogTitle }, backlog),
      el("td", { className: "num data-age", title: dataAgeTitle }, dataAge),
      el("td", { className: "num" }, fmtInt(t.last_round_rows)),
      el("td", { className: "num" }, fmtInt(t.consecutive_failures)),
      el(
        "td",
        { className: t.quarantined ? "quarantined" : "muted", title: t.quarantined_since ? `since ${fmtTime(t.quarantined_since)}` : null },
        t.quarantined ? "yes" : "no",
      ),
      errorCell(t),
    );
  }

  function renderList() {
    syncNamespaceOptions();
    const rows = visibleTables();
    const failed = view.tables.filter((t) => t.status === "FAILED").length;
    document.getElementById("summary").textContent =
      `${rows.length} of ${view.tables.length} table(s) shown` + (failed ? `; ${failed} failed` : "");
    document.querySelector("#tables tbody").replaceChildren(...rows.map(tableRow));
    for (const th of document.querySelectorAll("#tables th[data-sort]")) {
      th.setAttribute("aria-sort", th.dataset.sort === view.sortKey ? (view.sortDir > 0 ? "ascending" : "descending") : "none");
    }
  }

  for (const th of document.querySelectorAll("#tables th[data-sort]")) {
    th.addEventListener("click", () => {
      if (view.sortKey === th.dataset.sort) view.sortDir = -view.sortDir;
      else {
        view.sortKey = th.dataset.sort;
        view.sortDir = 1;
      }
      renderList();
    });
  }
  for (const input of [filterStatus, filterNamespace]) input.addEventListener("change", renderList);
  filterText.addEventListener("input", renderList);

  async function refreshList() {
    const data = await getJSON("/tables");
    view.tables = data.tables;
    renderList();
  }

  // ---------------------------------------------------------------- one table

  // The chart is drawn by hand in SVG: the page may fetch nothing from the internet and has no build step, and
  // bars plus one line are less code than vendoring a charting library.
  function roundsChart(rounds) {
    const W = 720;
    const H = 220;
    const left = 64;
    const right = 56;
    const top = 12;
    const bottom = 28;
    const plotW = W - left - right;
    const plotH = H - top - bottom;
    const ordered = [...rounds].reverse(); // oldest on the left
    const maxRows = Math.max(1, ...ordered.map((r) => r.rows));
    const maxDuration = Math.max(0.001, ...ordered.map((r) => r.duration_seconds || 0));
    const slot = plotW / Math.max(1, ordered.length);
    const barW = Math.max(2, Math.min(40, slot * 0.7));
    const chart = svg("svg", {
      class: "chart",
      viewBox: `0 0 ${W} ${H}`,
      width: W,
      height: H,
      role: "img",
      "aria-label": `rows and duration of the last ${ordered.length} round(s)`,
    });
    chart.append(
      svg("line", { class: "axis", x1: left, y1: top + plotH, x2: left + plotW, y2: top + plotH }),
      svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: top + plotH }),
      svg("line", { class: "axis", x1: left + plotW, y1: top, x2: left + plotW, y2: top + plotH }),
      svg("text", { x: left - 6, y: top + 10, "text-anchor": "end" }, fmtInt(maxRows)),
      svg("text", { x: left - 6, y: top + plotH, "text-anchor": "end" }, "0"),
      svg("text", { x: left + plotW + 6, y: top + 10 }, fmtSeconds(maxDuration)),
      svg("text", { x: left + plotW + 6, y: top + plotH }, "0 s"),
      svg("text", { x: left, y: H - 8 }, ordered.length ? fmtTime(ordered[0].timestamp) : ""),
      svg("text", { x: left + plotW, y: H - 8, "text-anchor": "end" }, ordered.length ? fmtTime(ordered[ordered.length - 1].timestamp) : ""),
    );
    const points = [];
    ordered.forEach((r, i) => {
      const x = left + slot * i + (slot - barW) / 2;
      const h = (r.rows / maxRows) * plotH;
      const bar = svg("rect", { class: "bar", x, y: top + plotH - h, width: barW, height: Math.max(h, 0.5), "data-rows": r.rows });
      bar.append(svg("title", {}, `epoch ${r.epoch}: ${fmtInt(r.rows)} rows in ${fmtSeconds(r.duration_seconds)}`));
      chart.append(bar);
      if (r.duration_seconds !== null && r.duration_seconds !== undefined) {
        points.push([x + barW / 2, top + plotH - (r.duration_seconds / maxDuration) * plotH]);
      }
    });
    if (points.length > 1) chart.append(svg("polyline", { class: "duration", points: points.map((p) => p.join(",")).join(" ") }));
    for (const [x, y] of points) chart.append(svg("circle", { class: "duration-point", cx: x, cy: y, r: 3 }));
    return chart;
  }

  function fact(label, value) {
    return [el("dt", {}, label), el("dd", {}, value)];
  }

  const offsetsText = (offsets) => (offsets ? JSON.stringify(offsets) : DASH);

  function roundsTable(rounds) {
    const head = ["Time", "Epoch", "Rows", "Bytes", "Files", "Duration", "Lag", "Offsets", "Task instance / logs"];
    return el(
      "table",
      { id: "rounds" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
      el(
        "tbody",
        {},
        rounds.map((r) =>
          el(
            "tr",
            { "data-epoch": r.epoch },
            el("td", {}, fmtTime(r.timestamp)),
            el("td", { className: "num" }, fmtInt(r.epoch)),
            el("td", { className: "num" }, fmtInt(r.rows)),
            el("td", { className: "num" }, fmtInt(r.bytes)),
            el("td", { className: "num" }, fmtInt(r.files)),
            el("td", { className: "num" }, fmtSeconds(r.duration_seconds)),
            el("td", { className: "num" }, fmtSeconds(r.lag_seconds)),
            el("td", {}, `${offsetsText(r.start_offsets)} \u2192 ${offsetsText(r.end_offsets)}`),
            el("td", {}, r.dag_id && r.run_id && r.task_id ? airflowLink(taskInstancePath(r.dag_id, r.run_id, r.task_id), r.run_id) : DASH),
          ),
        ),
      ),
    );
  }

  function maintenanceFacts(m) {
    if (!m) return el("p", { id: "maintenance", className: "muted" }, "Not maintained yet.");
    const compaction = m.last_compaction_at
      ? `${fmtTime(m.last_compaction_at)}: ${fmtInt(m.files_before_compaction)} \u2192 ${fmtInt(m.files_after_compaction)} data files`
      : "never";
    return el(
      "dl",
      { className: "facts", id: "maintenance" },
      fact("Last run", m.last_run_at ? `${fmtTime(m.last_run_at)} (${m.last_outcome})` : DASH),
      fact("Lake now", `${fmtInt(m.data_files)} data files, ${fmtInt(m.snapshots)} snapshots`),
      fact("Last compaction", compaction),
      fact("Snapshots expired", `${fmtInt(m.snapshots_expired)} last run, ${fmtInt(m.snapshots_expired_total)} in all`),
      fact("Orphan files removed", `${fmtInt(m.orphans_removed)} last run, ${fmtInt(m.orphans_removed_total)} in all`),
      fact("Last error", m.last_error ? el("div", {}, el("div", { className: "muted" }, fmtTime(m.last_error_time)), el("pre", { className: "error-full" }, m.last_error)) : DASH),
    );
  }

  // A merge or change-stream table: its mode and key, what its last round did to the lake's rows, its slot.
  function changeFacts(t) {
    const shape = shapeFacts(t);
    if (!t.mode || t.mode === "append") return [fact("Mode", "append"), ...shape, ...inPlaceFacts(t)];
    const found = [fact("Mode", `${t.mode.replace("_", " ")}, key ${(t.merge_key || []).join(", ")}`), ...shape];
    if (t.last_round_inserted_rows !== null && t.last_round_inserted_rows !== undefined) {
      found.push(
        fact(
          "Rows changed (last round)",
          `${fmtInt(t.last_round_inserted_rows)} inserted, ${fmtInt(t.last_round_updated_rows)} updated, ${fmtInt(t.last_round_deleted_rows)} deleted`,
        ),
      );
    }
    const s = t.change_stream;
    if (s) {
      found.push(fact("Replication slot", `${s.slot}${s.exists === false ? " (missing)" : ""} at ${s.confirmed_flush_lsn || DASH}`));
      if (s.retained_wal_bytes !== null && s.retained_wal_bytes !== undefined) {
        const over = s.max_retained_wal_bytes && s.retained_wal_bytes > s.max_retained_wal_bytes;
        found.push(
          fact(
            "Retained WAL",
            el(
              "span",
              { id: "retained-wal", className: over ? "error" : null },
              `${fmtBytes(s.retained_wal_bytes)} (bound ${fmtBytes(s.max_retained_wal_bytes)})${over ? " — over the bound" : ""}`,
            ),
          ),
        );
      }
    }
    return found;
  }

  function shapeFacts(t) {
    const c = t.shape_change;
    if (!c) return [];
    const text = `${c.changes || "no column changed"} (${fmtTime(c.at)})${c.reload ? `; the whole table read again: ${c.reload}` : ""}`;
    return [fact("Last change of shape", el("span", { id: "shape-change" }, text))];
  }

  function inPlaceFacts(t) {
    const c = t.in_place_changes;
    if (!c) return [];
    const recent = (c.updated_since_last_round || 0) + (c.deleted_since_last_round || 0);
    return [
      fact(
        "Changed in place",
        el(
          "span",
          { id: "in-place-changes", className: recent ? "error" : null },
          `${fmtInt(c.updated_since_last_round)} updated, ${fmtInt(c.deleted_since_last_round)} deleted since the round before ` +
            `(${fmtInt(c.updated_total)} / ${fmtInt(c.deleted_total)} since ${fmtTime(c.watched_since)})` +
            (recent ? " — the lake keeps first versions: tier it by key (merge) or change stream" : ""),
        ),
      ),
    ];
  }

  function renderDetail(t, rounds) {
    const section = document.getElementById("detail-view");
    const task = t.dag_id && t.task_id ? airflowLink(taskPath(t.dag_id, t.task_id), `${t.dag_id} / ${t.task_id}`) : DASH;
    const parts = [
      el("p", {}, el("a", { href: "#" }, "\u2190 all tables")),
      el("h2", {}, `${t.namespace}.${t.lake_table} `, el("span", { className: `badge status-${t.status}` }, t.status)),
      actions(t),
      el(
        "dl",
        { className: "facts" },
        fact("Table", t.table),
        fact("Asset", t.asset),
        fact("DAG / task", task),
        fact("Epoch", fmtInt(t.epoch)),
        fact("Last tiered", t.last_tiered_time ? `${fmtTime(t.last_tiered_time)} (${fmtSeconds(t.staleness_seconds)} ago)` : DASH),
        fact("Committed offsets", offsetsText(t.committed_offsets)),
        fact("Snapshot", t.snapshot_id === null ? DASH : String(t.snapshot_id)),
        fact("Backlog", el("span", { title: backlogCell(t)[1] }, `${backlogCell(t)[0]} (${backlogCell(t)[1]})`)),
        fact("Newest data age", `${dataAgeCell(t)[0]} (${dataAgeCell(t)[1]})`),
        fact("Consecutive failures", fmtInt(t.consecutive_failures)),
        fact("Next retry", fmtTime(t.next_retry_at)),
        fact("Quarantined", t.quarantined ? `since ${fmtTime(t.quarantined_since)}` : "no"),
        fact(
          "Last error",
          t.last_error
            ? el(
                "div",
                { className: errorIsPast(t) ? "past-error" : null },
                el("div", { className: "muted" }, `${fmtTime(t.last_error_time)}${errorIsPast(t) ? " (past: a later round tiered)" : ""}`),
                el("pre", { className: "error-full" }, t.last_error),
              )
            : DASH,
        ),
        fact("Watermark blockers", t.watermark_blockers.length ? el("pre", {}, JSON.stringify(t.watermark_blockers, null, 2)) : DASH),
        fact("Note", t.note || DASH),
        fact("Evicted from the hot store", `${fmtInt(t.evicted_rows_total)} rows${t.eviction_note ? ` (${t.eviction_note})` : ""}`),
        ...changeFacts(t),
      ),
      el("h2", {}, "Lake maintenance"),
      maintenanceFacts(t.maintenance),
      el("h2", {}, `Recent rounds (${rounds.length})`),
      el(
        "p",
        { className: "muted" },
        el("span", { className: "legend-rows" }, "\u25A0 rows"),
        " per round (left axis), ",
        el("span", { className: "legend-duration" }, "\u25CF duration"),
        " (right axis)",
      ),
      rounds.length ? roundsChart(rounds) : el("p", { className: "muted" }, "No round has tiered rows yet."),
      rounds.length ? roundsTable(rounds) : null,
    ];
    section.replaceChildren(...parts.filter((part) => part !== null)); // replaceChildren writes null as "null"
  }

  // "Tier now" starts a run of the table's DAG for this table alone; "Reset" lifts a quarantine. Both are the REST
  // API's operations, with its permissions: a user who may not gets its 403 reason in the banner.
  function actions(t) {
    const name = `${t.namespace}.${t.lake_table}`;
    const run = async (button, action) => {
      button.disabled = true;
      try {
        showNotice(await action());
        showError(null);
        await refresh();
      } catch (err) {
        showNotice(null);
        showError(err, "");
      } finally {
        button.disabled = false;
      }
    };
    const trigger = el("button", { type: "button", id: "trigger-table" }, "Tier now");
    trigger.addEventListener("click", () =>
      run(trigger, async () => {
        const { runs } = await postJSON("/trigger", { tables: [t.table] });
        return runs
          .map((r) => `Started run ${r.run_id} of ${r.dag_id}` + (r.paused ? " (the DAG is paused: the run waits until it is unpaused)" : ""))
          .join("; ");
      }),
    );
    const reset = el("button", { type: "button", id: "reset-table" }, "Reset");
    reset.addEventListener("click", () =>
      run(reset, async () => {
        await postJSON(`/tables/${enc(name)}/reset`);
        return `${t.table}: quarantine lifted; its next round runs`;
      }),
    );
    return el("p", { className: "actions" }, trigger, t.quarantined ? reset : null);
  }

  async function refreshDetail(name) {
    const [t, history] = await Promise.all([getJSON(`/tables/${enc(name)}`), getJSON(`/tables/${enc(name)}/history?limit=50`)]);
    if (currentTable() === name) renderDetail(t, history.rounds);
  }

  // ---------------------------------------------------------------- routing and refresh

  function currentTable() {
    const match = /^#table=(.+)$/.exec(window.location.hash);
    return match ? decodeURIComponent(match[1]) : null;
  }

  async function refresh() {
    const name = currentTable();
    try {
      if (name === null) await refreshList();
      else await refreshDetail(name);
      showError(null);
      markUpdated();
    } catch (err) {
      showError(err);
    }
  }

  function route() {
    const name = currentTable();
    showNotice(null);
    document.getElementById("list-view").hidden = name !== null;
    document.getElementById("filters").hidden = name !== null;
    document.getElementById("detail-view").hidden = name === null;
    if (name !== null) {
      document.getElementById("detail-view").replaceChildren(el("p", { className: "muted" }, `Loading ${name}\u2026`));
    }
    return refresh();
  }

  window.addEventListener("hashchange", route);
  document.getElementById("home-link").addEventListener("click", (event) => {
    event.preventDefault();
    window.location.hash = "";
  });

  function schedule() {
    clearTimeout(view.timer);
    view.timer = setTimeout(async () => {
      if (!document.hidden) await refresh();
      schedule();
    }, REFRESH_MS);
  }

  // First render from the JSON embedded in the page: no request before the table shows.
  view.tables = parseJSON(document.getElementById("initial-data").textContent).tables;
  renderList();
  markUpdated();
  performance.mark("tiering-list-rendered");
  body.dataset.firstRenderMs = String(performance.now());
  if (currentTable() !== null) route();
  schedule();
})();
