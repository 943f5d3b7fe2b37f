// A table's recent rounds: rows as bars (left axis), duration as a line (right axis), oldest on the left. Drawn in
// SVG with the theme's colour tokens (CSS variables), so it follows light and dark mode; bars and one line are less
// code than a charting library.
import type { TieringRound } from "./api";
import { fmtInt, fmtSeconds, fmtTime } from "./format";

const W = 720;
const H = 220;
const LEFT = 64;
const RIGHT = 56;
const TOP = 12;
const BOTTOM = 28;
const PLOT_W = W - LEFT - RIGHT;
const PLOT_H = H - TOP - BOTTOM;

const color = (token: string): string => `var(--chakra-colors-${token})`;
const TEXT = { fill: color("fg-muted"), fontSize: 11 };
const AXIS = { stroke: color("border-emphasized") };

export function RoundsChart({ rounds }: { rounds: TieringRound[] }) {
  const ordered = [...rounds].reverse();
  const maxRows = Math.max(1, ...ordered.map((r) => r.rows));
  const maxDuration = Math.max(0.001, ...ordered.map((r) => r.duration_seconds ?? 0));
  const slot = PLOT_W / Math.max(1, ordered.length);
  const barW = Math.max(2, Math.min(40, slot * 0.7));
  const bars = ordered.map((r, i) => {
    const x = LEFT + slot * i + (slot - barW) / 2;
    const h = (r.rows / maxRows) * PLOT_H;
    const y = r.duration_seconds === null ? null : TOP + PLOT_H - (r.duration_seconds / maxDuration) * PLOT_H;
    return { r, x, h, point: y === null ? null : ([x + barW / 2, y] as const) };
  });
  const points = bars.flatMap((b) => (b.point ? [b.point] : []));
  const first = ordered[0];
  const last = ordered[ordered.length - 1];
  return (
    <svg
      className="chart"
      viewBox={`0 0 ${W} ${H}`}
      width={W}
      height={H}
      role="img"
      aria-label={`rows and duration of the last ${ordered.length} round(s)`}
      style={{ maxWidth: "100%", height: "auto" }}
    >
      <line x1={LEFT} y1={TOP + PLOT_H} x2={LEFT + PLOT_W} y2={TOP + PLOT_H} style={AXIS} />
      <line x1={LEFT} y1={TOP} x2={LEFT} y2={TOP + PLOT_H} style={AXIS} />
      <line x1={LEFT + PLOT_W} y1={TOP} x2={LEFT + PLOT_W} y2={TOP + PLOT_H} style={AXIS} />
      <text x={LEFT - 6} y={TOP + 10} textAnchor="end" style={TEXT}>
        {fmtInt(maxRows)}
      </text>
      <text x={LEFT - 6} y={TOP + PLOT_H} textAnchor="end" style={TEXT}>
        0
      </text>
      <text x={LEFT + PLOT_W + 6} y={TOP + 10} style={TEXT}>
        {fmtSeconds(maxDuration)}
      </text>
      <text x={LEFT + PLOT_W + 6} y={TOP + PLOT_H} style={TEXT}>
        0 s
      </text>
      <text x={LEFT} y={H - 8} style={TEXT}>
        {first ? fmtTime(first.timestamp) : ""}
      </text>
      <text x={LEFT + PLOT_W} y={H - 8} textAnchor="end" style={TEXT}>
        {last ? fmtTime(last.timestamp) : ""}
      </text>
      {bars.map(({ r, x, h }, i) => (
        <rect
          key={i}
          className="bar"
          x={x}
          y={TOP + PLOT_H - h}
          width={barW}
          height={Math.max(h, 0.5)}
          data-rows={r.rows}
          style={{ fill: color("blue-solid") }}
        >
          <title>{`epoch ${r.epoch ?? "?"}: ${fmtInt(r.rows)} rows in ${fmtSeconds(r.duration_seconds)}`}</title>
        </rect>
      ))}
      {points.length > 1 ? (
        <polyline
          className="duration"
          points={points.map((p) => p.join(",")).join(" ")}
          style={{ fill: "none", stroke: color("orange-solid"), strokeWidth: 2 }}
        />
      ) : null}
      {points.map(([x, y], i) => (
        <circle key={i} className="duration-point" cx={x} cy={y} r={3} style={{ fill: color("orange-solid") }} />
      ))}
    </svg>
  );
}

export function ChartLegend() {
  return (
    <>
      <span style={{ color: color("blue-solid") }}>{"\u25A0"} rows</span> per round (left axis),{" "}
      <span style={{ color: color("orange-solid") }}>{"\u25CF"} duration</span> (right axis)
    </>
  );
}
