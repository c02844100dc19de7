// Runs: the list, reward and validation curves of the chosen runs overlaid, the time split of
// a step, and training throughput; new metrics are appended as the runs log them. Each run
// links to its own page (#/run/ID, with its diagnosis); two or more chosen runs open the
// comparison (#/compare?run=A&run=B).
import { get, query } from "../api.js";
import { lineChart, stackedBar } from "../charts.js";
import { clear, el, fmt, when } from "../dom.js";
import { byMinute, RunRecords, series, splitParts } from "../run_curves.js";

export function compareHash(runIds) {
  return `#/compare${query({ run: runIds })}`;
}

export async function runsPage(main, { poller }) {
  const list = el("tbody", { id: "run-rows" });
  const charts = el("div", { class: "charts", id: "run-charts" });
  const compare = el("button", { type: "button", id: "compare-runs", disabled: true, onclick: () => {
    // The first started is the baseline the others are paired against, as the earlier run
    // usually is the one a change is tried against.
    const picked = runs.filter((r) => chosen.has(r.run_id)).sort((a, b) => a.started_at - b.started_at);
    location.hash = compareHash(picked.map((r) => r.run_id));
  } }, "compare chosen runs");
  // Held, not looked up by id: a refresh that ends after the user left draws into this page's
  // own (detached) nodes, where a lookup in the document would find nothing and raise.
  const hint = el("span", { class: "muted", id: "compare-hint" });
  const chosen = new Set();
  const records = new RunRecords();
  let runs = [];
  main.append(el("h1", {}, "Runs"),
    el("table", { class: "runs" },
      el("thead", {}, el("tr", {}, ["", "run", "status", "host", "started", "ended", "steps", "last reward", "last val"].map((h) => el("th", {}, h)))),
      list),
    el("p", { class: "actions" }, compare, " ", hint),
    charts);

  function draw() {
    clear(list).append(...runs.map((run) => el("tr", { "data-run-id": run.run_id },
      el("td", {}, el("input", { type: "checkbox", checked: chosen.has(run.run_id), onchange: (e) => { e.target.checked ? chosen.add(run.run_id) : chosen.delete(run.run_id); refresh(); } })),
      el("td", {}, el("a", { href: `#/run/${encodeURIComponent(run.run_id)}`, class: "run-link" }, run.name), el("div", { class: "muted" }, run.run_id)),
      el("td", {}, el("span", { class: `status ${run.status}` }, run.status)),
      el("td", {}, run.host || "–"),
      el("td", {}, when(run.started_at)), el("td", {}, when(run.ended_at)),
      // The last step: step 0 holds the validation before training, not a step.
      el("td", { class: "num" }, Math.max(0, ...records.of(run.run_id).map((m) => m.step))),
      el("td", { class: "num reward" }, fmt(records.last(run.run_id, "reward/mean"), 4)),
      el("td", { class: "num" }, fmt(records.last(run.run_id, "val/reward_mean"), 4)))));
    const shown = runs.filter((r) => chosen.has(r.run_id));
    compare.disabled = shown.length < 2;
    hint.textContent = shown.length < 2 ? "tick two or more runs to compare them" : "";
    clear(charts);
    if (!shown.length) {
      charts.append(el("p", { class: "muted" }, runs.length ? "choose runs to plot" : "no runs in this store yet"));
      return;
    }
    charts.append(
      lineChart("train reward (mean)", series(shown, records, "reward/mean")),
      lineChart("validation reward", series(shown, records, "val/reward_mean")),
      lineChart("validation reward by training minute", byMinute(shown, records), { xLabel: "training minutes" }),
      lineChart("training tokens/s", series(shown, records, "tokens_per_s")),
      ...shown.map((run) => stackedBar(`time split: ${run.name}`, splitParts(records, run.run_id))));
  }

  async function refresh() {
    runs = (await get("/api/runs")).items;
    if (!chosen.size) runs.slice(0, 3).forEach((r) => chosen.add(r.run_id));
    await Promise.all(runs.filter((r) => chosen.has(r.run_id)).map((r) => records.update(r.run_id)));
    draw();
  }
  await refresh();
  return { stop: poller(refresh) };
}
