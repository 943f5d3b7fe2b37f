// A table's data age over time, from the lake's history table: how long the lake had not caught up with the hot
// store at each round's start and end, joined in time order (it grows between rounds and drops when a round catches
// up), failed rounds marked. Drawn in SVG with the theme's colour tokens, as the rounds chart is.
import type { DataAgeRound } from "./api";
import { ChartFrame, color, frame } from "./ChartFrame";
import { fmtSeconds, fmtTime } from "./format";

const FRAME = frame(200, 16);

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
  const { left, top, plotW, plotH } = FRAME;
  const x = (at: number): number => left + ((at - first) / span) * plotW;
  const y = (age: number): number => top + plotH - (age / maxAge) * plotH;
  const failed = rounds.filter((r) => r.outcome === "failed");
  return (
    <ChartFrame
      frame={FRAME}
      className="chart data-age"
      label={`data age over the last ${rounds.length} round(s)`}
      yTop={fmtSeconds(maxAge)}
      yBottom="0 s"
      xFirst={points.length ? fmtTime(new Date(first).toISOString()) : ""}
      xLast={points.length ? fmtTime(new Date(last).toISOString()) : ""}
    >
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
          cy={top + plotH}
          r={4}
          style={{ fill: color("red-solid") }}
        >
          <title>{`epoch ${r.epoch}: failed at ${fmtTime(r.ended_at)}`}</title>
        </circle>
      ))}
    </ChartFrame>
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
