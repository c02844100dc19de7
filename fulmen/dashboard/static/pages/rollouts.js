// The rollouts table: filters, newest first, older/newer pages, live while on the first page.
import { get, query } from "../api.js";
import { debugCapabilities, rescoreReport, runJob } from "../debug.js";
import { clear, el, fmt, seconds, when } from "../dom.js";

const STATUSES = ["queuing", "running", "succeeded", "failed", "cancelled"];
const MODES = ["", "train", "val", "test", "production"];
const FIELDS = ["mode", "min_reward", "max_reward", "agent", "resources_version", "run", "q", "limit"];

function filtersFrom(params) {
  const f = { status: params.getAll("status") };
  for (const key of FIELDS) f[key] = params.get(key) || "";
  return f;
}

function filterForm(filters, runs, onApply) {
  const input = (name, attrs = {}) => el("input", { name, value: filters[name], ...attrs });
  const form = el("form", { class: "filters", id: "rollout-filters" },
    el("fieldset", {}, el("legend", {}, "status"),
      STATUSES.map((s) => el("label", {}, el("input", { type: "checkbox", name: "status", value: s, checked: filters.status.includes(s) }), s))),
    el("label", {}, "mode ", el("select", { name: "mode" }, MODES.map((m) => el("option", { value: m, selected: filters.mode === m }, m || "any")))),
    el("label", {}, "reward ", input("min_reward", { type: "number", step: "any", placeholder: "min", size: 5 }), " – ", input("max_reward", { type: "number", step: "any", placeholder: "max", size: 5 })),
    el("label", {}, "agent ", input("agent", { placeholder: "name", size: 10 })),
    el("label", {}, "resources v", input("resources_version", { type: "number", min: 1, size: 4 })),
    el("label", {}, "run ", el("select", { name: "run" }, el("option", { value: "" }, "any"), runs.map((r) => el("option", { value: r.run_id, selected: filters.run === r.run_id }, r.name)))),
    el("label", {}, "task ", input("q", { type: "search", placeholder: "text in the task", size: 18 })),
    el("input", { type: "hidden", name: "limit", value: filters.limit }),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = { status: data.getAll("status") };
    for (const key of FIELDS) next[key] = String(data.get(key) || "").trim();
    onApply(next);
  });
  return form;
}

function row(item) {
  const link = el("a", { href: `#/rollout/${encodeURIComponent(item.rollout_id)}` }, item.rollout_id);
  return el("tr", { "data-rollout-id": item.rollout_id },
    el("td", {}, link),
    el("td", {}, el("span", { class: `status ${item.status}` }, item.status)),
    el("td", {}, item.mode),
    el("td", { class: "num reward" }, fmt(item.reward, 4)),
    el("td", { class: "num" }, item.resources_version === null ? "–" : `v${item.resources_version}`),
    el("td", { class: "num" }, item.attempt_count),
    el("td", { class: "task", title: item.task }, item.task_id ? `${item.task_id}: ${item.task}` : item.task),
    el("td", {}, when(item.enqueued_at)),
    el("td", { class: "num" }, seconds(item.duration_s)));
}

/** Re-score the succeeded rollouts the filters select with the --reward function (read-only). */
async function rescoreSection(filters) {
  const can = (await debugCapabilities()).rescore;
  const box = el("div", { id: "rescore-box" });
  const limit = el("input", { type: "number", name: "rescore_limit", min: 1, max: (await debugCapabilities()).max_rescored, value: 200, size: 5 });
  const selection = { mode: filters.mode || null, resources_version: filters.resources_version ? Number(filters.resources_version) : null };
  const applied = [filters.mode ? `mode ${filters.mode}` : null, filters.resources_version ? `resources v${filters.resources_version}` : null].filter(Boolean);
  const button = el("button", {
    type: "button", id: "rescore-button", disabled: !can.enabled, title: can.enabled ? `re-score with ${can.reward}` : can.why_not,
    onclick: async () => {
      button.disabled = true;
      try {
        await runJob("/api/debug/rescore", { ...selection, limit: Number(limit.value) || 200 }, box, rescoreReport);
      } finally {
        button.disabled = false;
      }
    },
  }, "Re-score");
  return el("section", { class: "rescore" }, el("h2", {}, "Re-score with a new reward"),
    can.enabled
      ? el("p", {}, button, " the first ", limit, ` succeeded rollouts${applied.length ? ` of ${applied.join(", ")}` : ""} with `, el("code", {}, can.reward),
        el("span", { class: "muted" }, " (the mode and resources-version filters apply; nothing is written to the store)"))
      : el("p", {}, button, " ", el("span", { class: "muted", id: "rescore-why" }, `disabled: ${can.why_not}`)),
    box);
}

export async function rolloutsPage(main, { params, poller }) {
  const filters = filtersFrom(params);
  const befores = []; // the `before` of each page above the one shown (for "newer")
  let before = params.get("before") ? Number(params.get("before")) : null;
  const runs = await get("/api/runs").then((r) => r.items).catch(() => []);
  const count = el("p", { id: "rollout-count", class: "count" });
  const body = el("tbody", { id: "rollout-rows" });
  const nav = el("div", { class: "pager" });
  main.append(
    el("h1", {}, "Rollouts"),
    filterForm(filters, runs, (next) => {
      location.hash = `#/rollouts${query(next)}`;
    }),
    count,
    el("table", { class: "rollouts" },
      el("thead", {}, el("tr", {}, ["rollout", "status", "mode", "reward", "res", "attempts", "task", "enqueued (UTC)", "took"].map((h) => el("th", {}, h)))),
      body),
    nav,
    await rescoreSection(filters));

  async function load() {
    const limit = Number(filters.limit) || 25;
    let page = await get(`/api/rollouts${query({ ...filters, before })}`);
    let items = page.items;
    // A filter the store cannot apply answers within its time budget, maybe with fewer rows
    // than a page: scan on (a few more requests) before showing the page.
    for (let more = 0; !page.exhausted && items.length < limit && more < 10; more++) {
      page = await get(`/api/rollouts${query({ ...filters, before: page.before, limit: limit - items.length })}`);
      items = items.concat(page.items);
    }
    clear(body).append(...items.map(row));
    const more = page.exhausted ? "" : " (older rollouts not scanned yet: see older)";
    count.textContent = `${items.length} rollout${items.length === 1 ? "" : "s"} match${items.length === 1 ? "es" : ""}${more}`;
    count.dataset.count = String(items.length);
    count.dataset.exhausted = String(page.exhausted);
    clear(nav);
    if (befores.length) {
      nav.append(el("button", { type: "button", onclick: () => { before = befores.pop(); load(); } }, "← newer"));
    }
    if (page.before !== null) {
      nav.append(el("button", { type: "button", id: "older", onclick: () => { befores.push(before); before = page.before; load(); } }, "older →"));
    }
  }
  await load();
  // Live: the first page follows new rollouts; older pages stay put.
  const stop = poller(async () => {
    if (before === null) await load();
  });
  return { stop };
}
