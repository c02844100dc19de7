// Canary releases (#/releases) and one release (#/release/NAME): its state, both arms with what
// they serve and their figures, the comparison of the arms, and its events newest first. The
// figures are what `fulmen release status` prints, from the same code (GET /api/releases/NAME);
// they read every session's reward, so a release's page asks at most every 10 s, and
// "refresh" asks at once.
import { get } from "../api.js";
import { clear, el, fmt, when } from "../dom.js";

const FIGURES_EVERY_MS = 10000;

const SERVES = {
  canary: (r) => `both arms: ${pct(r.share)} of sessions to the candidate`,
  promoted: () => "every session goes to the candidate",
  rolled_back: () => "every session goes to the incumbent",
};

function pct(share) {
  return `${fmt(share * 100, 3)}%`;
}

function stateBadge(state) {
  return el("span", { class: `status release-state ${state}`, "data-state": state }, state);
}

function storeVersion(arm) {
  return arm.run_id === null ? "–" : `${arm.run_id} v${arm.version}`;
}

const releaseHash = (name) => `#/release/${encodeURIComponent(name)}`;

export async function releasesPage(main, { poller }) {
  const rows = el("tbody", { id: "release-rows" });
  const empty = el("p", { class: "muted", id: "no-releases", hidden: true },
    "no releases: a gateway with a release: section puts its release in the store");
  main.append(el("h1", {}, "Releases"),
    el("table", { class: "releases" },
      el("thead", {}, el("tr", {}, ["release", "state", "incumbent", "candidate", "candidate share", "revision", "created", "updated"].map((h) => el("th", {}, h)))),
      rows),
    empty);

  async function refresh() {
    const { items } = await get("/api/releases");
    empty.hidden = items.length > 0;
    clear(rows).append(...items.map((r) => el("tr", { "data-release": r.name },
      el("td", {}, el("a", { href: releaseHash(r.name), class: "release-link" }, r.name)),
      el("td", {}, stateBadge(r.state)),
      el("td", { class: "incumbent" }, r.incumbent.model, el("div", { class: "muted" }, storeVersion(r.incumbent))),
      el("td", { class: "candidate" }, r.candidate.model, el("div", { class: "muted" }, storeVersion(r.candidate))),
      el("td", { class: "num" }, pct(r.share)),
      el("td", { class: "num" }, r.revision),
      el("td", {}, when(r.created_at)), el("td", {}, when(r.updated_at)))));
    rows.dataset.loaded = "true";
  }
  await refresh();
  return { stop: poller(refresh) };
}

function armsTable(result) {
  const { release } = result;
  const arms = [["incumbent", 1 - release.share], ["candidate", release.share]];
  return el("table", { class: "release-arms", id: "release-arms" },
    el("thead", {}, el("tr", {}, ["arm", "model", "store version", "canary share", "sessions", "rewarded", "mean reward", "95% CI"].map((h) => el("th", {}, h)))),
    el("tbody", {}, arms.map(([arm, share]) => {
      const f = result[arm];
      const ci = f.mean === null ? "–" : `[${fmt(f.ci_low, 4)}, ${fmt(f.ci_high, 4)}]`;
      return el("tr", { "data-arm": arm },
        el("td", {}, arm),
        el("td", { class: "model" }, release[arm].model),
        el("td", { class: "version" }, storeVersion(release[arm])),
        el("td", { class: "num share" }, pct(share)),
        el("td", { class: "num sessions" }, f.sessions),
        el("td", { class: "num rewarded" }, f.rewarded),
        el("td", { class: "num mean", "data-mean": f.mean ?? "" }, fmt(f.mean, 4)),
        el("td", { class: "num ci" }, ci));
    })));
}

function signed(value, digits = 4) {
  return `${value > 0 ? "+" : ""}${fmt(value, digits)}`;
}

function comparisonLine(test) {
  if (test === null) {
    return el("p", { id: "release-comparison", class: "muted", "data-difference": "" },
      "comparison: needs two sessions with a reward on each arm");
  }
  const ratio = test.ratio === null ? "undefined (the incumbent's mean is not positive)" : test.ratio.toFixed(3);
  const welch = test.t_statistic === null ? "" : `t = ${fmt(test.t_statistic, 3)}, df = ${fmt(test.df, 3)}, `;
  return el("p", { id: "release-comparison", "data-difference": test.difference },
    el("b", {}, "candidate − incumbent "),
    el("span", { class: "difference" }, signed(test.difference)),
    `, 95% CI [${signed(test.ci_low)}, ${signed(test.ci_high)}]; `,
    el("span", { class: "ratio" }, `ratio ${ratio}`),
    `; Welch ${welch}`, el("span", { class: "p-value" }, `p = ${fmt(test.p_value, 3)}`));
}

// Window events carry the gate's verdict and their window's number in their figures.
function eventsTable(events) {
  const newestFirst = [...events].reverse();
  return el("table", { class: "release-events", id: "release-events" },
    el("thead", {}, el("tr", {}, ["when", "event", "by", "why"].map((h) => el("th", {}, h)))),
    el("tbody", {}, newestFirst.map((e) => {
      const verdict = e.kind === "window" ? e.figures.verdict : null;
      const number = e.kind === "window" && e.figures.window !== undefined ? ` ${e.figures.window}` : "";
      return el("tr", { "data-kind": e.kind, "data-event-id": e.event_id, "data-verdict": verdict ?? "" },
        el("td", {}, when(e.at)),
        el("td", { class: "kind" }, `${e.kind}${number}`,
          verdict ? [" ", el("span", { class: `verdict ${verdict}` }, String(verdict))] : null),
        el("td", { class: "by" }, e.by),
        el("td", { class: "reason" }, e.reason));
    })));
}

export async function releasePage(main, { arg, poller, onError }) {
  const name = arg;
  const body = el("div", { id: "release" });
  const refreshButton = el("button", { type: "button", id: "release-refresh", onclick: () => load().catch(onError) }, "refresh");
  main.append(el("h1", {}, "Release ", el("span", { id: "release-name" }, name)),
    el("p", {}, el("a", { href: "#/releases" }, "← releases"), " ", refreshButton,
      el("span", { class: "muted" }, " (read every 10 s: the figures read each session's reward)")),
    body);
  let loads = 0;

  async function load() {
    const result = await get(`/api/releases/${encodeURIComponent(name)}`);
    const r = result.release;
    loads += 1;
    clear(body).append(
      el("p", { id: "release-facts" }, stateBadge(r.state), " ", el("span", { class: "serves" }, (SERVES[r.state] || (() => ""))(r)),
        el("span", { class: "muted" }, ` · revision ${r.revision} · seed ${r.seed} · created ${when(r.created_at)} · updated ${when(r.updated_at)}`)),
      armsTable(result),
      comparisonLine(result.comparison),
      el("h2", {}, `events, newest first (${r.events.length})`),
      eventsTable(r.events));
    body.dataset.loaded = String(loads);
    body.dataset.revision = String(r.revision);
  }
  await load();
  return { stop: poller(load, FIGURES_EVERY_MS) };
}
