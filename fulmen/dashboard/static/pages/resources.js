// Resources: prompt versions with lineage and a side-by-side diff; model versions with their
// scores and a "serve" action that asks the linked engine to load one.
import { AuthError, get, post, query } from "../api.js";
import { abReport, debugCapabilities, runJob } from "../debug.js";
import { append, clear, el, fmt, when } from "../dom.js";

function lineage(prompts) {
  const byVersion = new Map(prompts.map((p) => [`${p.name}@${p.version}`, p]));
  const children = new Map();
  for (const p of prompts) {
    const parent = p.lineage && p.lineage.parent ? `${p.name}@${p.lineage.parent}` : null;
    const key = parent && byVersion.has(parent) ? parent : null;
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(p);
  }
  const node = (p) => el("li", { "data-ref": p.ref },
    el("b", {}, p.ref), ` ${p.lineage ? p.lineage.optimizer : "manual"}`,
    p.lineage && p.lineage.step !== null ? ` step ${p.lineage.step}` : "",
    p.score !== null ? ` · score ${fmt(p.score, 4)}` : "",
    p.lineage && p.lineage.critique ? el("details", {}, el("summary", {}, "critique"), el("pre", { class: "text" }, p.lineage.critique)) : null,
    children.has(p.ref) ? el("ul", {}, children.get(p.ref).map(node)) : null);
  return el("ul", { class: "lineage" }, (children.get(null) || []).map(node));
}

function diffTable(diff) {
  return el("table", { class: "diff", id: "prompt-diff" },
    el("thead", {}, el("tr", {}, el("th", {}, diff.a), el("th", {}, diff.b))),
    el("tbody", {}, diff.rows.map((r) => el("tr", { class: `diff-row ${r.kind}` },
      el("td", { class: "left" }, r.left ?? ""), el("td", { class: "right" }, r.right ?? "")))));
}

/** A/B two prompt versions on the config's tasks: both means, the paired difference, tests. */
async function abSection(refs, a, b) {
  const caps = await debugCapabilities();
  const box = el("div", { id: "ab-box" });
  const pickA = el("select", { name: "ab_a" }, refs.map((r) => el("option", { value: r, selected: r === a }, r)));
  const pickB = el("select", { name: "ab_b" }, refs.map((r) => el("option", { value: r, selected: r === b }, r)));
  const n = el("input", { type: "number", name: "ab_n", min: 2, max: caps.max_ab_tasks, value: 8, size: 4 });
  const button = el("button", { type: "submit", id: "ab-button", disabled: !caps.ab.enabled, title: caps.ab.enabled ? "" : caps.ab.why_not }, "Run A/B");
  const form = el("form", { class: "ab-form", id: "ab-form" }, "A ", pickA, " B ", pickB, " on ", n, ` tasks (2–${caps.max_ab_tasks}) `, button);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    try {
      await runJob("/api/debug/ab", { a: pickA.value, b: pickB.value, n: Number(n.value) }, box, abReport);
    } finally {
      button.disabled = false;
    }
  });
  return el("section", { class: "ab" }, el("h2", {}, "A/B test two prompt versions"),
    el("p", { class: "muted", id: "ab-why" }, caps.ab.enabled
      ? "runs the config's agent on its first N validation tasks once with each prompt (validation sampling, a private store) and compares the rewards task by task"
      : `disabled: ${caps.ab.why_not}`),
    form, box);
}

export async function resourcesPage(main, { params, poller }) {
  const info = await get("/api/info");
  const prompts = await get("/api/prompts");
  const diffBox = el("div", { id: "diff-box" });
  const refs = prompts.map((p) => p.ref);
  const pick = (name, selected) => el("select", { name }, refs.map((r) => el("option", { value: r, selected: r === selected }, r)));
  const a = pick("a", params.get("a") || refs[Math.max(refs.length - 2, 0)]);
  const b = pick("b", params.get("b") || refs[refs.length - 1]);
  async function showDiff() {
    clear(diffBox);
    if (!a.value || !b.value) return;
    diffBox.append(diffTable(await get(`/api/prompts/diff${query({ a: a.value, b: b.value })}`)));
  }
  const models = el("tbody", { id: "model-rows" });
  const served = el("p", { id: "serve-result", role: "status" });
  append(main, [
    el("h1", {}, "Resources"),
    el("h2", {}, `Prompt versions (${prompts.length})`),
    prompts.length ? el("table", { class: "prompts" },
      el("thead", {}, el("tr", {}, ["version", "made by", "parent", "score", "created"].map((h) => el("th", {}, h)))),
      el("tbody", {}, prompts.map((p) => el("tr", { "data-ref": p.ref },
        el("td", {}, p.ref), el("td", {}, p.lineage ? p.lineage.optimizer : "manual"),
        el("td", {}, p.lineage && p.lineage.parent ? `v${p.lineage.parent}` : "–"),
        el("td", { class: "num" }, fmt(p.score, 4)), el("td", {}, when(p.created_at))))))
      : el("p", { class: "muted" }, "no prompt versions in this store"),
    prompts.length ? el("div", {}, el("h3", {}, "Lineage"), lineage(prompts)) : null,
    prompts.length > 1 ? el("form", { class: "diff-form", onsubmit: (e) => { e.preventDefault(); showDiff(); } },
      "diff ", a, " → ", b, " ", el("button", { type: "submit" }, "Compare")) : null,
    diffBox,
    prompts.length > 1 ? await abSection(refs, a.value, b.value) : null,
    el("h2", {}, "Model versions"),
    el("p", { class: "muted" }, info.engine ? `serving through the engine at ${info.engine}` : "no engine linked: start the dashboard with --engine URL (fulmen train links its own) to serve a version"),
    el("table", { class: "models" },
      el("thead", {}, el("tr", {}, ["run", "version", "step", "kind", "scores", "resources", "path", ""].map((h) => el("th", {}, h)))),
      models),
    served]);
  if (prompts.length > 1) await showDiff();

  async function loadModels() {
    const versions = await get("/api/model_versions");
    clear(models).append(...versions.map((v) => el("tr", { "data-version": `${v.run_id}:${v.version}` },
      el("td", {}, v.run_id), el("td", { class: "num" }, v.version), el("td", { class: "num" }, v.step), el("td", {}, v.kind),
      el("td", {}, Object.entries(v.scores).map(([k, s]) => `${k}=${fmt(s, 4)}`).join("  ") || "–"),
      el("td", {}, v.resources_version ? `v${v.resources_version}` : "–"),
      el("td", { class: "path" }, v.path),
      el("td", {}, el("button", {
        type: "button", disabled: !info.engine, title: info.engine ? "load this version into the engine" : "no engine linked",
        onclick: async () => {
          served.textContent = "loading…";
          try {
            const r = await post("/api/model_versions/serve", { run_id: v.run_id, version: v.version });
            served.textContent = `engine now serves ${v.run_id} v${v.version} as model ${r.model}${r.policy_version !== null ? ` (policy version ${r.policy_version})` : ""}`;
          } catch (error) {
            served.textContent = `could not serve it: ${error.message}`;
          }
        },
      }, "serve this version")))));
    if (!versions.length) models.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no model versions recorded")));
  }
  await loadModels().catch((e) => { if (e instanceof AuthError) throw e; served.textContent = e.message; });
  return { stop: poller(loadModels) };
}
