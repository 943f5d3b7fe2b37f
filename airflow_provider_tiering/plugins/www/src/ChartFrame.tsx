// What the page's SVG charts share: their size and margins, the theme's colour tokens (CSS variables, so a chart
// follows light and dark mode), and a frame of axes labelled at their ends, inside which each chart draws.
import type { ReactNode } from "react";

export const color = (token: string): string => `var(--chakra-colors-${token})`;
export const TEXT = { fill: color("fg-muted"), fontSize: 11 };
export const AXIS = { stroke: color("border-emphasized") };

export interface Frame {
  width: number;
  height: number;
  left: number;
  top: number;
  plotW: number;
  plotH: number;
}

/** A chart's frame: 720 wide, ``height`` high, room on the right for ``right`` pixels of labels. */
export function frame(height: number, right: number): Frame {
  const width = 720;
  const left = 64;
  const top = 12;
  const bottom = 28;
  return { width, height, left, top, plotW: width - left - right, plotH: height - top - bottom };
}

/** The SVG, its left and bottom axes, the left axis labelled at its top and bottom, the bottom one at its ends. */
export function ChartFrame({
  frame: f,
  className,
  label,
  yTop,
  yBottom,
  xFirst,
  xLast,
  children,
}: {
  frame: Frame;
  className: string;
  label: string;
  yTop: string;
  yBottom: string;
  xFirst: string;
  xLast: string;
  children: ReactNode;
}) {
  const bottomY = f.top + f.plotH;
  return (
    <svg
      className={className}
      viewBox={`0 0 ${f.width} ${f.height}`}
      width={f.width}
      height={f.height}
      role="img"
      aria-label={label}
      style={{ maxWidth: "100%", height: "auto" }}
    >
      <line x1={f.left} y1={bottomY} x2={f.left + f.plotW} y2={bottomY} style={AXIS} />
      <line x1={f.left} y1={f.top} x2={f.left} y2={bottomY} style={AXIS} />
      <text x={f.left - 6} y={f.top + 10} textAnchor="end" style={TEXT}>
        {yTop}
      </text>
      <text x={f.left - 6} y={bottomY} textAnchor="end" style={TEXT}>
        {yBottom}
      </text>
      <text x={f.left} y={f.height - 8} style={TEXT}>
        {xFirst}
      </text>
      <text x={f.left + f.plotW} y={f.height - 8} textAnchor="end" style={TEXT}>
        {xLast}
      </text>
      {children}
    </svg>
  );
}
