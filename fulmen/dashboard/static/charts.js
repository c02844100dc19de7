// Line charts in SVG: several series over a shared x axis, with ticks and a legend.
import { el, fmt, svg } from "./dom.js";

export const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

function ticks(lo, hi, count = 4) {
  if (lo === hi) return [lo];
  const step = (hi - lo) / count;
  return Array.from({ length: count + 1 }, (_, i) => lo + i * step);
}

// Steps are whole numbers: ticks at 1.75 or 2.5 steps would name steps that do not exist.
function integerTicks(lo, hi, count = 4) {
  const step = Math.max(1, Math.ceil((hi - lo) / count));
  const out = [];
  for (let x = Math.ceil(lo); x <= hi; x += step) out.push(x);
  return out;
}

/**
 * series: [{name, color, points: [[x, y], ...], dashed}]; returns a <figure>.
 */
export function lineChart(title, series, { width = 460, height = 220, xLabel = "step" } = {}) {
  const pad = { left: 48, right: 12, top: 12, bottom: 30 };
  const all = series.flatMap((s) => s.points);
  const figure = el("figure", { class: "chart", "data-chart": title });
  figure.append(el("figcaption", {}, title));
  if (all.length === 0) {
    figure.append(el("p", { class: "muted" }, "no data yet"));
    return figure;
  }
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (y0 === y1) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const w = width - pad.left - pad.right;
  const h = height - pad.top - pad.bottom;
  const sx = (x) => pad.left + ((x - x0) / (x1 - x0)) * w;
  const sy = (y) => pad.top + h - ((y - y0) / (y1 - y0)) * h;
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
  for (const y of ticks(y0, y1)) {
    root.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: sy(y), y2: sy(y), class: "grid" }));
    root.append(svg("text", { x: pad.left - 6, y: sy(y) + 4, "text-anchor": "end", class: "tick" }, fmt(y, 3)));
  }
  const xTicks = xs.every(Number.isInteger) ? integerTicks(x0, x1) : ticks(x0, x1);
  for (const x of xTicks) {
    root.append(svg("text", { x: sx(x), y: height - 12, "text-anchor": "middle", class: "tick" }, fmt(Math.round(x * 100) / 100, 4)));
  }
  root.append(svg("text", { x: width - pad.right, y: height - 1, "text-anchor": "end", class: "tick" }, xLabel));
  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    const points = [...s.points].sort((a, b) => a[0] - b[0]);
    const d = points.map((p, k) => `${k ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    root.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2, "stroke-dasharray": s.dashed ? "5 3" : null }));
    for (const p of points) {
      root.append(svg("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: color }, svg("title", {}, `${s.name}: step ${p[0]} → ${fmt(p[1], 4)}`)));
    }
  });
  figure.append(root);
  const legend = el("div", { class: "legend" });
  series.forEach((s, i) => {
    legend.append(el("span", { class: "swatch", style: `background:${s.color || COLORS[i % COLORS.length]}` }), el("span", {}, s.name));
  });
  figure.append(legend);
  return figure;
}

/** A horizontal stacked bar: parts [{name, value}] (seconds), with a legend. */
export function stackedBar(title, parts) {
  const total = parts.reduce((a, p) => a + p.value, 0);
  const figure = el("figure", { class: "chart split", "data-chart": title });
  figure.append(el("figcaption", {}, title));
  if (!total) {
    figure.append(el("p", { class: "muted" }, "no timings yet"));
    return figure;
  }
  const bar = el("div", { class: "bar" });
  const legend = el("div", { class: "legend" });
  parts.forEach((p, i) => {
    const pct = (100 * p.value) / total;
    bar.append(el("span", { class: "seg", style: `width:${pct}%;background:${COLORS[i % COLORS.length]}`, title: `${p.name}: ${p.value.toFixed(2)} s` }));
    legend.append(el("span", { class: "swatch", style: `background:${COLORS[i % COLORS.length]}` }), el("span", {}, `${p.name} ${pct.toFixed(0)}%`));
  });
  figure.append(bar, legend);
  return figure;
}
