// Runs: the list, reward and validation curves of the chosen runs overlaid, the time split of
// a step, and training throughput; new metrics are appended as the runs log them.
import { get, query } from "../api.js";
import { COLORS, lineChart, stackedBar } from "../charts.js";
import { clear, el, fmt, when } from "../dom.js";

const SPLIT = [["rollouts", "time/rollout_s"], ["training", "time/train_s"], ["weight sync", "time/sync_s"], ["validation", "time/val_s"]];

function series(runs, records, key, color) {
  return runs.map((run, i) => ({
    name: run.name,
    color: color || COLORS[i % COLORS.length],
    points: (records.get(run.run_id) || []).filter((m) => m.values[key] !== undefined).map((m) => [m.step, m.values[key]]),
  }));
}

// Validation reward against the training minutes spent before it (summed step time), so runs
// whose steps take different time compare on one axis: which one gains faster.
function byMinute(runs, records) {
  return runs.map((run, i) => {
    let minutes = 0;
    const points = [];
    for (const m of records.get(run.run_id) || []) {
      minutes += (m.values["time/step_s"] || 0) / 60;
      if (m.values["val/reward_mean"] !== undefined) points.push([Math.round(minutes * 100) / 100, m.values["val/reward_mean"]]);
    }
    return { name: run.name, color: COLORS[i % COLORS.length], points };
  });
}

export async function runsPage(main, { poller }) {
  const list = el("tbody", { id: "run-rows" });
  const charts = el("div", { class: "charts", id: "run-charts" });
  const chosen = new Set();
  const records = new Map(); // run_id -> metrics records
  let runs = [];
  main.append(el("h1", {}, "Runs"),
    el("table", { class: "runs" },
      el("thead", {}, el("tr", {}, ["", "run", "status", "host", "started", "ended", "steps", "last reward", "last val"].map((h) => el("th", {}, h)))),
      list),
    charts);

  async function fetchMetrics(run) {
    const known = records.get(run.run_id) || [];
    // Re-read the last step: a validation record may join a step already shown.
    const after = known.length ? Math.max(...known.map((m) => m.step)) - 1 : null;
    const page = await get(`/api/runs/${encodeURIComponent(run.run_id)}/metrics${query({ after_step: after !== null && after >= 0 ? after : null })}`);
    const seen = new Set(known.map((m) => `${m.step}:${m.time}`));
    records.set(run.run_id, known.concat(page.metrics.filter((m) => !seen.has(`${m.step}:${m.time}`))));
  }

  function last(run, key) {
    const found = (records.get(run.run_id) || []).filter((m) => m.values[key] !== undefined);
    return found.length ? found[found.length - 1].values[key] : null;
  }

  function draw() {
    clear(list).append(...runs.map((run) => el("tr", { "data-run-id": run.run_id },
      el("td", {}, el("input", { type: "checkbox", checked: chosen.has(run.run_id), onchange: (e) => { e.target.checked ? chosen.add(run.run_id) : chosen.delete(run.run_id); refresh(); } })),
      el("td", {}, run.name, el("div", { class: "muted" }, run.run_id)),
      el("td", {}, el("span", { class: `status ${run.status}` }, run.status)),
      el("td", {}, run.host || "–"),
      el("td", {}, when(run.started_at)), el("td", {}, when(run.ended_at)),
      // The last step: step 0 holds the validation before training, not a step.
      el("td", { class: "num" }, Math.max(0, ...(records.get(run.run_id) || []).map((m) => m.step))),
      el("td", { class: "num reward" }, fmt(last(run, "reward/mean"), 4)),
      el("td", { class: "num" }, fmt(last(run, "val/reward_mean"), 4)))));
    const shown = runs.filter((r) => chosen.has(r.run_id));
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
      ...shown.map((run) => stackedBar(`time split: ${run.name}`, SPLIT.map(([name, key]) => ({
        name,
        value: (records.get(run.run_id) || []).reduce((a, m) => a + (m.values[key] || 0), 0),
      })))));
  }

  async function refresh() {
    runs = (await get("/api/runs")).items;
    if (!chosen.size) runs.slice(0, 3).forEach((r) => chosen.add(r.run_id));
    await Promise.all(runs.filter((r) => chosen.has(r.run_id)).map(fetchMetrics));
    draw();
  }
  await refresh();
  return { stop: poller(refresh) };
}
