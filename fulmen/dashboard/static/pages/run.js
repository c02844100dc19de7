// One run (#/run/ID): its facts and the version it serves (and why), the health of its updates
// (loss, KL, entropy, gradient norm, clip fraction by step, the steps that made no update marked
// on every chart and listed with why: GET /api/runs/ID/health), its reward curves and time
// split, its diagnosis (GET /api/runs/ID/diagnosis, the code of `fulmen runs diagnose`) and its
// config, folded. New metrics records are fetched every poll; the health and the diagnosis are
// read again, and the charts redrawn, when new records came or the status changed.
import { get } from "../api.js";
import { lineChart, stackedBar } from "../charts.js";
import { clear, el, fmt, when } from "../dom.js";
import { byMinute, RunRecords, series, splitParts, UPDATE_CHARTS, updateSeries } from "../run_curves.js";

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

function versionName(v) {
  return `v${v.version} (${v.kind}${v.resources_version ? `, resources v${v.resources_version}` : ""})`;
}

// What the run serves and why: the end of the run's decision, or its newest version.
function servedView(served) {
  if (!served) return el("p", { id: "run-served", class: "muted" }, "serves: nothing yet (no model version recorded)");
  const what = served.step === 0 && !served.versions.length
    ? "the model before training"
    : `step ${served.step}${served.versions.length ? ` · ${served.versions.map(versionName).join(", ")}` : ""}`;
  return el("p", { id: "run-served", "data-step": served.step, "data-versions": served.versions.map((v) => v.version).join(",") },
    el("b", {}, "serves: "), el("span", { class: "served-what" }, what),
    served.reward_mean === null ? "" : ` · validation ${fmt(served.reward_mean, 4)}`,
    el("div", { class: "muted served-why" }, served.why));
}

function healthLine(h) {
  if (!h.steps) return "no training step recorded yet";
  const idle = h.no_update.map((n) => n.step);
  const line = `${h.updated} of ${h.steps} steps made an update`;
  return idle.length ? `${line}; no update at step${idle.length > 1 ? "s" : ""} ${idle.join(", ")} (dashed lines on the charts)` : line;
}

function noUpdateList(h) {
  return el("ul", { id: "no-update", class: "findings" }, h.no_update.map((n) => el("li", { "data-step": n.step },
    el("b", {}, `step ${n.step}: `), el("span", { class: "reason" }, n.reason))));
}

// The config as the run recorded it, one row per key (nested keys dotted, values as JSON
// text: agent text in a config is untrusted and goes in as text).
function flatten(value, prefix, out) {
  if (value !== null && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
    for (const [key, inner] of Object.entries(value)) flatten(inner, prefix ? `${prefix}.${key}` : key, out);
  } else {
    out.push([prefix, value]);
  }
  return out;
}

function configTable(config) {
  const rows = flatten(config || {}, "", []);
  if (!rows.length) return el("p", { class: "muted" }, "the run recorded no config");
  return el("table", { class: "config-diff" },
    el("tbody", {}, rows.map(([key, value]) => el("tr", { "data-key": key },
      el("td", { class: "key" }, key), el("td", { class: "value" }, JSON.stringify(value))))));
}

export async function runPage(main, { arg, poller }) {
  const runId = arg;
  const records = new RunRecords();
  const facts = el("p", { id: "run-facts" });
  // Containers whose content each redraw replaces (the nodes the page holds stay attached).
  const served = el("div", { class: "served" });
  const diagnosis = el("section", { class: "diagnosis" }, el("h2", {}, "diagnosis"), el("div", { id: "diagnosis" }));
  const updates = el("p", { id: "update-count", class: "muted" });
  const idle = el("div", { class: "no-update" });
  const charts = el("div", { class: "charts", id: "run-charts" });
  // Kept across polls: redrawing it would fold it again under the reader.
  const config = el("details", { id: "run-config" }, el("summary", {}, "config"), el("div"));
  const title = el("h1", {}, runId);
  main.append(title, facts, served,
    el("p", {}, el("a", { href: "#/runs" }, "← runs"), " · ",
      el("a", { href: `#/rollouts?run=${encodeURIComponent(runId)}` }, "its rollouts")),
    diagnosis,
    el("section", { class: "health" }, el("h2", {}, "updates"), updates, idle, charts),
    config);
  let status = null;
  let configText = null;
  let drawn = false;

  function draw(run, health) {
    const marks = health.no_update.map((n) => ({ x: n.step, title: `step ${n.step}: no update: ${n.reason}` }));
    const shown = [run];
    const recorded = UPDATE_CHARTS.filter(([, key]) => updateSeries(records, run.run_id, key).length);
    const missing = UPDATE_CHARTS.filter(([, key]) => !recorded.some(([, k]) => k === key)).map(([name]) => name);
    updates.textContent = healthLine(health) + (missing.length && health.steps ? `; not recorded by this run: ${missing.join(", ")}` : "");
    updates.dataset.steps = health.steps;
    clear(charts).append(
      lineChart("train reward (mean)", series(shown, records, "reward/mean"), { marks, metric: "reward/mean" }),
      lineChart("validation reward", series(shown, records, "val/reward_mean"), { marks, metric: "val/reward_mean" }),
      ...recorded.map(([name, key]) => lineChart(name, updateSeries(records, run.run_id, key), { marks, metric: key })),
      lineChart("validation reward by training minute", byMinute(shown, records), { xLabel: "training minutes" }),
      stackedBar(`time split: ${run.name}`, splitParts(records, run.run_id)));
    clear(idle).append(noUpdateList(health));
  }

  async function refresh() {
    const added = await records.update(runId);
    const run = records.run(runId);
    if (added || run.status !== status || !drawn) {
      const [d, health] = await Promise.all([
        get(`/api/runs/${encodeURIComponent(runId)}/diagnosis`),
        get(`/api/runs/${encodeURIComponent(runId)}/health`),
      ]);
      diagnosis.replaceChild(diagnosisView(d), diagnosis.lastChild);
      clear(served).append(servedView(health.served));
      draw(run, health);
      drawn = true;
    }
    status = run.status;
    title.textContent = run.name;
    clear(facts).append(el("span", { class: `status ${run.status}` }, run.status),
      ` ${run.run_id} · host ${run.host || "–"} · started ${when(run.started_at)} · ended ${when(run.ended_at)}`);
    const text = JSON.stringify(run.config);
    if (text !== configText) {
      configText = text;
      config.replaceChild(configTable(run.config), config.lastChild);
    }
  }
  await refresh();
  return { stop: poller(refresh) };
}
