// A table's data age over time, from the lake's history table: how long the lake had not caught up with the hot
// store at each round's start and end, joined in time order (it grows between rounds and drops when a round catches
// up), failed rounds marked. Drawn in SVG with the theme's colour tokens, as the rounds chart is.
import type { DataAgeRound } from "./api";
import { fmtSeconds, fmtTime } from "./format";

const W = 720;
const H = 200;
const LEFT = 64;
const RIGHT = 16;
const TOP = 12;
const BOTTOM = 28;
const PLOT_W = W - LEFT - RIGHT;
const PLOT_H = H - TOP - BOTTOM;

const color = (token: string): string => `var(--chakra-colors-${token})`;
const TEXT = { fill: color("fg-muted"), fontSize: 11 };
const AXIS = { stroke: color("border-emphasized") };

interface Point {
  at: number;
  age: number;
  round: DataAgeRound;
}

export function DataAgeChart({ rounds }: { rounds: DataAgeRound[] }) {
  const points: Point[] = rounds.flatMap((round) => {
    const found: Point[] = [];
    if (round.data_age_before_seconds !== null)
      found.push({ at: Date.parse(round.started_at), age: round.data_age_before_seconds, round });
    if (round.data_age_after_seconds !== null)
      found.push({ at: Date.parse(round.ended_at), age: round.data_age_after_seconds, round });
    return found;
  });
  points.sort((a, b) => a.at - b.at);
  const first = points[0]?.at ?? 0;
  const last = points[points.length - 1]?.at ?? 1;
  const span = Math.max(1, last - first);
  const maxAge = Math.max(1, ...points.map((p) => p.age));
  const x = (at: number): number => LEFT + ((at - first) / span) * PLOT_W;
  const y = (age: number): number => TOP + PLOT_H - (age / maxAge) * PLOT_H;
  const failed = rounds.filter((r) => r.outcome === "failed");
  return (
    <svg
      className="chart data-age"
      viewBox={`0 0 ${W} ${H}`}
      width={W}
      height={H}
      role="img"
      aria-label={`data age over the last ${rounds.length} round(s)`}
      style={{ maxWidth: "100%", height: "auto" }}
    >
      <line x1={LEFT} y1={TOP + PLOT_H} x2={LEFT + PLOT_W} y2={TOP + PLOT_H} style={AXIS} />
      <line x1={LEFT} y1={TOP} x2={LEFT} y2={TOP + PLOT_H} style={AXIS} />
      <text x={LEFT - 6} y={TOP + 10} textAnchor="end" style={TEXT}>
        {fmtSeconds(maxAge)}
      </text>
      <text x={LEFT - 6} y={TOP + PLOT_H} textAnchor="end" style={TEXT}>
        0 s
      </text>
      <text x={LEFT} y={H - 8} style={TEXT}>
        {points.length ? fmtTime(new Date(first).toISOString()) : ""}
      </text>
      <text x={LEFT + PLOT_W} y={H - 8} textAnchor="end" style={TEXT}>
        {points.length ? fmtTime(new Date(last).toISOString()) : ""}
      </text>
      {points.length > 1 ? (
        <polyline
          className="age-line"
          points={points.map((p) => `${x(p.at)},${y(p.age)}`).join(" ")}
          style={{ fill: "none", stroke: color("blue-solid"), strokeWidth: 2 }}
        />
      ) : null}
      {points.map((p, i) => (
        <circle
          key={i}
          className="age-point"
          cx={x(p.at)}
          cy={y(p.age)}
          r={2.5}
          data-age={p.age}
          style={{ fill: color("blue-solid") }}
        >
          <title>{`epoch ${p.round.epoch} (${p.round.outcome}): data age ${fmtSeconds(p.age)} at ${fmtTime(
            new Date(p.at).toISOString(),
          )}`}</title>
        </circle>
      ))}
      {failed.map((r, i) => (
        <circle
          key={`failed-${i}`}
          className="failed-round"
          cx={x(Date.parse(r.ended_at))}
          cy={TOP + PLOT_H}
          r={4}
          style={{ fill: color("red-solid") }}
        >
          <title>{`epoch ${r.epoch}: failed at ${fmtTime(r.ended_at)}`}</title>
        </circle>
      ))}
    </svg>
  );
}

export function DataAgeLegend() {
  return (
    <>
      <span style={{ color: color("blue-solid") }}>{"\u25CF"} data age</span> at each round's start and end (how
      long the lake had not caught up with the hot store), <span style={{ color: color("red-solid") }}>{"\u25CF"}
      failed rounds</span>; from <code>sys.lake_tiering_history</code>
    </>
  );
}
