// One run (#/run/ID): its facts, its curves and time split, and its diagnosis: where its step
// time went and what held it back, with the setting to change (GET /api/runs/ID/diagnosis,
// the code of `fulmen runs diagnose`). New metrics records are fetched every poll; the
// diagnosis is read again when they change it: new records, or a new status.
import { get } from "../api.js";
import { lineChart, stackedBar } from "../charts.js";
import { clear, el, when } from "../dom.js";
import { byMinute, RunRecords, series, splitParts } from "../run_curves.js";

function diagnosisView(d) {
  const items = d.findings.map((f) => el("li", { class: f.remedy ? "finding remedy" : "finding" },
    el("span", { class: "what" }, f.what),
    f.remedy ? el("div", { class: "muted" }, "change: ", el("span", { class: "how" }, f.remedy)) : null));
  return el("div", { id: "diagnosis", "data-steps": d.steps, "data-records": d.records },
    d.findings.length ? el("ul", { class: "findings" }, items) : el("p", { class: "muted" }, "no steps recorded yet"),
    el("p", { class: "muted" }, `from ${d.steps} steps (${d.records} metrics records)`,
      d.is_async ? ", asynchronous" : "",
      d.engine ? `; prefix cache from the engine at ${d.engine}` : ""));
}

export async function runPage(main, { arg, poller }) {
  const runId = arg;
  const records = new RunRecords();
  const facts = el("p", { id: "run-facts" });
  const diagnosis = el("section", { class: "diagnosis" }, el("h2", {}, "diagnosis"), el("div", { id: "diagnosis" }));
  const charts = el("div", { class: "charts", id: "run-charts" });
  const title = el("h1", {}, runId);
  main.append(title, facts,
    el("p", {}, el("a", { href: "#/runs" }, "← runs"), " · ",
      el("a", { href: `#/rollouts?run=${encodeURIComponent(runId)}` }, "its rollouts")),
    diagnosis, charts);
  let status = null;

  async function refresh() {
    const added = await records.update(runId);
    const run = records.run(runId);
    if (added || run.status !== status) {
      const d = await get(`/api/runs/${encodeURIComponent(runId)}/diagnosis`);
      diagnosis.replaceChild(diagnosisView(d), diagnosis.lastChild);
    }
    status = run.status;
    title.textContent = run.name;
    clear(facts).append(el("span", { class: `status ${run.status}` }, run.status),
      ` ${run.run_id} · host ${run.host || "–"} · started ${when(run.started_at)} · ended ${when(run.ended_at)}`);
    const shown = [run];
    clear(charts).append(
      lineChart("train reward (mean)", series(shown, records, "reward/mean")),
      lineChart("validation reward", series(shown, records, "val/reward_mean")),
      lineChart("validation reward by training minute", byMinute(shown, records), { xLabel: "training minutes" }),
      stackedBar(`time split: ${run.name}`, splitParts(records, run.run_id)));
  }
  await refresh();
  return { stop: poller(refresh) };
}
