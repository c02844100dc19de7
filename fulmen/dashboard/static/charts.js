// Line charts in SVG: several series over a shared x axis, with ticks and a legend.
// Hand-written rather than a charting library: the page loads only its own scripts (CSP
// `script-src 'self'`, nothing fetched from another host), SVG nodes can be read back by the
// browser tests (points, ticks, marks), and a canvas library would hide them from the DOM.
import { el, fmt, svg } from "./dom.js";

export const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

function ticks(lo, hi, count = 4) {
  if (lo === hi) return [lo];
  const step = (hi - lo) / count;
  return Array.from({ length: count + 1 }, (_, i) => lo + i * step);
}

// Steps are whole numbers: ticks at 1.75 or 2.5 steps would name steps that do not exist. The
// tick step is the first of 1, 2, 5, 10, 20, 50, ... that leaves at most `count` ticks, and
// ticks sit on its multiples (5, 10, 15 rather than 1, 6, 11).
function integerTicks(lo, hi, count = 6) {
  let step = 1;
  for (let k = 1; (hi - lo) / step > count; k++) step = [1, 2, 5][k % 3] * 10 ** Math.floor(k / 3);
  const out = [];
  for (let x = Math.ceil(lo / step) * step; x <= hi; x += step) out.push(x);
  return out;
}

/**
 * series: [{name, color, points: [[x, y], ...], dashed}]; returns a <figure>.
 *
 * Options: `xLabel` ("step": the x axis counts steps and ticks at whole steps only, whatever
 * the data); `marks`: [{x, title}] steps to mark with a dashed vertical line (the steps that
 * made no update), drawn even where a series has no point; `metric`: the figure's
 * `data-metric`. Points, ticks and marks carry `data-*` attributes with their values, so what
 * a chart shows can be read back from the DOM.
 */
export function lineChart(title, series, { width = 460, height = 220, xLabel = "step", marks = [], metric = null } = {}) {
  const pad = { left: 48, right: 12, top: 12, bottom: 30 };
  const all = series.flatMap((s) => s.points);
  const figure = el("figure", { class: "chart", "data-chart": title, "data-metric": metric });
  figure.append(el("figcaption", {}, title));
  if (all.length === 0) {
    figure.append(el("p", { class: "muted" }, "no data yet"));
    return figure;
  }
  const wholeSteps = xLabel === "step";
  const xs = all.map((p) => p[0]).concat(marks.map((m) => m.x));
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
    root.append(svg("text", { x: pad.left - 6, y: sy(y) + 4, "text-anchor": "end", class: "tick y-tick", "data-value": y }, fmt(y, 3)));
  }
  const xTicks = wholeSteps || xs.every(Number.isInteger) ? integerTicks(x0, x1) : ticks(x0, x1);
  for (const x of xTicks) {
    const shown = Math.round(x * 100) / 100;
    root.append(svg("text", { x: sx(x), y: height - 12, "text-anchor": "middle", class: "tick x-tick", "data-value": shown }, fmt(shown, 4)));
  }
  root.append(svg("text", { x: width - pad.right, y: height - 1, "text-anchor": "end", class: "tick" }, xLabel));
  // Marks under the curves: the points stay hoverable above them.
  for (const m of marks) {
    root.append(svg("line", { x1: sx(m.x), x2: sx(m.x), y1: pad.top, y2: pad.top + h, class: "mark", "data-step": m.x },
      svg("title", {}, m.title)));
  }
  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    const points = [...s.points].sort((a, b) => a[0] - b[0]);
    const d = points.map((p, k) => `${k ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    root.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2, "stroke-dasharray": s.dashed ? "5 3" : null, "data-series": s.name }));
    const marked = new Set(marks.map((m) => m.x));
    for (const p of points) {
      // A point of a step that made no update is drawn hollow: its value changed no weights.
      root.append(svg("circle", {
        cx: sx(p[0]), cy: sy(p[1]), r: marked.has(p[0]) ? 3.5 : 2.5,
        fill: marked.has(p[0]) ? "#fff" : color, stroke: color,
        class: marked.has(p[0]) ? "point no-update" : "point",
        "data-series": s.name, "data-x": p[0], "data-y": p[1],
      }, svg("title", {}, `${s.name}: ${xLabel} ${p[0]} → ${fmt(p[1], 4)}${marked.has(p[0]) ? " (no update)" : ""}`)));
    }
  });
  figure.append(root);
  const legend = el("div", { class: "legend" });
  series.forEach((s, i) => {
    legend.append(el("span", { class: "swatch", style: `background:${s.color || COLORS[i % COLORS.length]}` }), el("span", {}, s.name));
  });
  if (marks.length) legend.append(el("span", { class: "swatch mark-swatch" }), el("span", {}, "no update"));
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
