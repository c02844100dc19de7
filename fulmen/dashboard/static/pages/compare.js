// Runs side by side (#/compare?run=A&run=B...): what `fulmen runs compare` computes, from the
// same code (GET /api/runs/compare): the config keys that differ, each run's final validation
// with its standard error, each run against the first on the validation tasks both scored, the
// validation reward of every run by training minute on one axis, and each run's step time.
// Read once when the page opens (a comparison scans the store's validation rollouts);
// "recompute" reads it again.
import { get, query } from "../api.js";
import { lineChart, stackedBar } from "../charts.js";
import { clear, el, fmt } from "../dom.js";
import { byMinute, RunRecords } from "../run_curves.js";

const SPLIT = [["rollouts", "rollouts"], ["update", "update"], ["weight sync", "sync"]];

function signOf(value) {
  if (value > 0) return "+";
  if (value < 0) return "-";
  return "0";
}

function finalCell(run) {
  if (run.final === null) return el("td", { class: "num final", "data-final": "" }, el("span", { class: "muted" }, "no validation"));
  const se = run.final_se === null ? "" : ` ± ${fmt(run.final_se, 3)}`;
  return el("td", { class: "num final", "data-final": run.final }, `${fmt(run.final, 4)}${se}`);
}

function summaryTable(result) {
  return el("table", { class: "compare-runs", id: "compare-summary" },
    el("thead", {}, el("tr", {}, ["run", "status", "final validation ± SE", "tasks", "steps", "training min"].map((h) => el("th", {}, h)))),
    el("tbody", {}, result.runs.map((run) => el("tr", { "data-run-id": run.run_id },
      el("td", {}, el("a", { href: `#/run/${encodeURIComponent(run.run_id)}` }, run.name), el("div", { class: "muted" }, run.run_id)),
      el("td", {}, el("span", { class: `status ${run.status}` }, run.status)),
      finalCell(run),
      el("td", { class: "num" }, run.tasks),
      el("td", { class: "num" }, run.steps),
      el("td", { class: "num" }, fmt(run.train_minutes, 3))))));
}

// Config values are whatever the runs recorded (agent text included): shown as JSON text.
function diffTable(result) {
  const keys = Object.keys(result.differences);
  if (!keys.length) return el("p", { id: "config-diff", class: "muted" }, "the configs are the same (run_dir aside)");
  return el("table", { class: "config-diff", id: "config-diff" },
    el("thead", {}, el("tr", {}, el("th", {}, "config key"), result.runs.map((r) => el("th", {}, r.name)))),
    el("tbody", {}, keys.map((key) => el("tr", { "data-key": key },
      el("td", { class: "key" }, key),
      result.differences[key].map((value) => el("td", { class: "value" }, value === null ? "(not set)" : JSON.stringify(value)))))));
}

function pairedList(result) {
  const names = new Map(result.runs.map((r) => [r.run_id, r.name]));
  const first = names.get(result.first);
  return el("ul", { class: "paired", id: "paired" }, Object.entries(result.paired).map(([runId, c]) => {
    if (c === null) {
      return el("li", { "data-run-id": runId, "data-sign": "" }, `${names.get(runId)} vs ${first}: fewer than two validation tasks scored by both`);
    }
    const p = (v) => (v === null ? "–" : fmt(v, 3));
    return el("li", { "data-run-id": runId, "data-sign": signOf(c.mean_difference), "data-n": c.n },
      el("b", {}, `${names.get(runId)} − ${first}`), ` on ${c.n} shared validation tasks: `,
      el("span", { class: "difference" }, `${c.mean_difference >= 0 ? "+" : ""}${fmt(c.mean_difference, 4)}`),
      `, 95% CI [${fmt(c.ci_low, 3)}, ${fmt(c.ci_high, 3)}]; ${c.wins} better, ${c.losses} worse, ${c.ties} same; `,
      `paired t p = ${p(c.t_p)}, permutation p = ${p(c.permutation_p)}`);
  }));
}

function splitBars(result) {
  return result.runs.map((run) => {
    const seconds = run.train_minutes * 60;
    // The comparison gives shares of step time; the bar takes seconds (its hover says them).
    const parts = SPLIT.map(([name, key]) => ({ name, value: (run.split[key] || 0) * seconds }));
    const bar = stackedBar(`step time: ${run.name}`, parts);
    bar.dataset.runId = run.run_id;
    return bar;
  });
}

export async function comparePage(main, { params, onError }) {
  const ids = params.getAll("run");
  const body = el("div", { id: "compare" });
  main.append(el("h1", {}, "Compare runs"),
    el("p", {}, el("a", { href: "#/runs" }, "← runs"), " ",
      el("button", { type: "button", id: "recompute", onclick: () => load().catch(onError) }, "recompute")),
    body);

  async function load() {
    const records = new RunRecords();
    const result = await get(`/api/runs/compare${query({ run: ids })}`);
    await Promise.all(result.runs.map((r) => records.update(r.run_id)));
    clear(body).append(
      summaryTable(result),
      el("h2", {}, "config keys that differ"), diffTable(result),
      el("h2", {}, `each run against ${result.runs[0].name} (paired, on the validation tasks both scored)`),
      pairedList(result),
      el("div", { class: "charts" },
        lineChart("validation reward by training minute", byMinute(result.runs, records), { xLabel: "training minutes" }),
        ...splitBars(result)));
    body.dataset.loaded = "true";
  }
  await load();
  return { stop: () => {} };
}
