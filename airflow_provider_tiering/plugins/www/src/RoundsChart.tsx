// A table's recent rounds: rows as bars (left axis), duration as a line (right axis), oldest on the left. Drawn in
// SVG with the theme's colour tokens (CSS variables), so it follows light and dark mode; bars and one line are less
// code than a charting library.
import type { TieringRound } from "./api";
import { AXIS, ChartFrame, color, frame, TEXT } from "./ChartFrame";
import { fmtInt, fmtSeconds, fmtTime } from "./format";

const FRAME = frame(220, 56);

export function RoundsChart({ rounds }: { rounds: TieringRound[] }) {
  const { left, top, plotW, plotH } = FRAME;
  const ordered = [...rounds].reverse();
  const maxRows = Math.max(1, ...ordered.map((r) => r.rows));
  const maxDuration = Math.max(0.001, ...ordered.map((r) => r.duration_seconds ?? 0));
  const slot = plotW / Math.max(1, ordered.length);
  const barW = Math.max(2, Math.min(40, slot * 0.7));
  const bars = ordered.map((r, i) => {
    const x = left + slot * i + (slot - barW) / 2;
    const h = (r.rows / maxRows) * plotH;
    const y = r.duration_seconds === null ? null : top + plotH - (r.duration_seconds / maxDuration) * plotH;
    return { r, x, h, point: y === null ? null : ([x + barW / 2, y] as const) };
  });
  const points = bars.flatMap((b) => (b.point ? [b.point] : []));
  const first = ordered[0];
  const last = ordered[ordered.length - 1];
  return (
    <ChartFrame
      frame={FRAME}
      className="chart"
      label={`rows and duration of the last ${ordered.length} round(s)`}
      yTop={fmtInt(maxRows)}
      yBottom="0"
      xFirst={first ? fmtTime(first.timestamp) : ""}
      xLast={last ? fmtTime(last.timestamp) : ""}
    >
      <line x1={left + plotW} y1={top} x2={left + plotW} y2={top + plotH} style={AXIS} />
      <text x={left + plotW + 6} y={top + 10} style={TEXT}>
        {fmtSeconds(maxDuration)}
      </text>
      <text x={left + plotW + 6} y={top + plotH} style={TEXT}>
        0 s
      </text>
      {bars.map(({ r, x, h }, i) => (
        <rect
          key={i}
          className="bar"
          x={x}
          y={top + plotH - h}
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
    </ChartFrame>
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
