// The debugging actions (replay, re-score, A/B): start a background job, poll it, render the
// report. Every value goes in through el(), as text nodes.
import { get, post } from "./api.js";
import { clear, el, fmt, jsonBlock } from "./dom.js";

const POLL_MS = 500;

let capabilities = null;

/** What this dashboard can run: {replay, ab, rescore: {enabled, why_not, ...}}. */
export async function debugCapabilities() {
  if (!capabilities) capabilities = await get("/api/debug");
  return capabilities;
}

/**
 * POST `body` to `path`, then poll the job until it ends, showing its state in `box` and the
 * finished result through `render(result)`. Returns the finished job.
 */
export async function runJob(path, body, box, render) {
  clear(box).append(el("p", { class: "muted job-state", "data-state": "starting" }, "starting…"));
  let job;
  try {
    job = await post(path, body);
  } catch (error) {
    clear(box).append(el("p", { class: "error job-state", "data-state": "refused" }, error.message));
    return null;
  }
  const started = Date.now();
  while (job.state === "running") {
    clear(box).append(el("p", { class: "muted job-state", "data-state": "running" },
      `job ${job.job_id} (${job.subject}) running for ${Math.round((Date.now() - started) / 1000)} s…`));
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    job = await get(`/api/jobs/${encodeURIComponent(job.job_id)}`);
  }
  clear(box);
  if (job.state === "failed") {
    box.append(el("p", { class: "error job-state", "data-state": "failed" }, `failed: ${job.error}`));
  } else {
    box.append(el("div", { class: "job-state", "data-state": "done" }, render(job.result)));
  }
  return job;
}

function reward(value) {
  return value === null || value === undefined ? "none" : fmt(value, 4);
}

export function replayReport(r) {
  return el("div", { class: "replay-report", id: "replay-report", "data-faithful": String(r.is_faithful) },
    el("p", { class: r.is_faithful ? "verdict ok" : "verdict bad", id: "replay-verdict" },
      r.is_faithful ? "faithful: the replay repeated the recorded run" : "DIFFERS from the recording"),
    el("table", { class: "facts" }, el("tbody", {},
      el("tr", {}, el("th", {}, "recorded reward"), el("td", { class: "num", id: "replay-recorded-reward" }, reward(r.recorded_reward))),
      el("tr", {}, el("th", {}, "replayed reward"), el("td", { class: "num", id: "replay-reward" }, reward(r.reward))),
      r.posted_reward !== null ? el("tr", {}, el("th", {}, "with rewards posted later"), el("td", { class: "num" }, reward(r.posted_reward))) : null,
      el("tr", {}, el("th", {}, "calls"), el("td", {}, `${r.requests} requests, ${r.served} of ${r.recorded_calls} recorded replies served, ${r.divergences.length} diverged`)),
      el("tr", {}, el("th", {}, "status"), el("td", {}, `${r.status} (recorded: ${r.recorded_status ?? "–"})`)),
      r.error ? el("tr", {}, el("th", {}, "error"), el("td", { class: "error" }, r.error)) : null)),
    r.divergences.length ? el("div", { class: "divergences" },
      el("h3", {}, "First diverging call"),
      el("p", { id: "first-divergence" }, r.divergences[0].summary),
      el("pre", { class: "diff-text" }, r.divergences[0].diff),
      r.divergences.length > 1 ? el("details", {}, el("summary", {}, `${r.divergences.length - 1} more`),
        r.divergences.slice(1).map((d) => el("div", {}, el("p", {}, d.summary), el("pre", { class: "diff-text" }, d.diff)))) : null)
      : null);
}

function statsRow(label, s) {
  return el("tr", {}, el("th", {}, label), el("td", { class: "num" }, s.count), el("td", { class: "num" }, fmt(s.mean, 4)),
    el("td", { class: "num" }, fmt(s.min, 4)), el("td", { class: "num" }, fmt(s.max, 4)));
}

export function rescoreReport(r) {
  return el("div", { class: "rescore-report", id: "rescore-report" },
    el("p", { id: "rescore-counts", "data-changed": r.changed, "data-scored": r.scored },
      `${r.reward}: rescored ${r.scored} of ${r.rollouts} rollouts (${r.failed} failed in the reward function); ${r.changed} changed`),
    el("table", { class: "rescore-stats" },
      el("thead", {}, el("tr", {}, ["reward", "n", "mean", "min", "max"].map((h) => el("th", {}, h)))),
      el("tbody", {}, statsRow("old", r.old), statsRow("new", r.new))),
    r.histogram.length ? el("table", { class: "histogram" },
      el("thead", {}, el("tr", {}, ["bin", "old", "new"].map((h) => el("th", {}, h)))),
      el("tbody", {}, r.histogram.map((b) => el("tr", {}, el("td", {}, `${fmt(b.low, 3)} – ${fmt(b.high, 3)}`),
        el("td", { class: "num" }, b.old), el("td", { class: "num" }, b.new))))) : null,
    r.most_changed.length ? el("div", {}, el("h3", {}, "Most changed"), el("table", { class: "most-changed" },
      el("thead", {}, el("tr", {}, ["rollout", "task", "old", "new", "change", "final text"].map((h) => el("th", {}, h)))),
      el("tbody", {}, r.most_changed.map((i) => el("tr", { "data-rollout-id": i.rollout_id },
        el("td", {}, el("a", { href: `#/rollout/${encodeURIComponent(i.rollout_id)}` }, i.rollout_id)),
        el("td", {}, i.task_id ?? "–"), el("td", { class: "num" }, reward(i.old)), el("td", { class: "num" }, reward(i.new)),
        el("td", { class: "num" }, fmt(i.change, 4)), el("td", { class: "task" }, i.final_text)))))) : null,
    r.errors.length ? el("div", {}, el("h3", {}, "Errors in the reward function"), jsonBlock(r.errors.map((e) => `${e.rollout_id}: ${e.error}`).join("\n"))) : null);
}

export function abReport(r) {
  const c = r.comparison;
  const p = (v) => (v === null || v === undefined ? "undefined (the differences do not vary)" : fmt(v, 4));
  return el("div", { class: "ab-report", id: "ab-report" },
    el("table", { class: "facts" }, el("tbody", {},
      el("tr", {}, el("th", {}, `A ${r.labels[0]}`), el("td", { class: "num", id: "ab-mean-a" }, fmt(c.mean_a, 4)), el("td", {}, `mean reward on ${c.n} tasks, ${r.failed_a} failed`)),
      el("tr", {}, el("th", {}, `B ${r.labels[1]}`), el("td", { class: "num", id: "ab-mean-b" }, fmt(c.mean_b, 4)), el("td", {}, `mean reward on ${c.n} tasks, ${r.failed_b} failed`)),
      el("tr", {}, el("th", {}, "B − A"), el("td", { class: "num", id: "ab-difference" }, fmt(c.mean_difference, 4)), el("td", {}, `95% CI [${fmt(c.ci_low, 4)}, ${fmt(c.ci_high, 4)}]`)),
      el("tr", {}, el("th", {}, "paired t-test"), el("td", { class: "num" }, p(c.t_p)), el("td", {}, c.t_statistic === null ? "" : `t = ${fmt(c.t_statistic, 4)}, ${c.n - 1} df`)),
      el("tr", {}, el("th", {}, "sign test"), el("td", { class: "num" }, fmt(c.sign_p, 4)), el("td", {}, `B higher on ${c.wins}, lower on ${c.losses}, tied on ${c.ties}`)),
      el("tr", {}, el("th", {}, "permutation test"), el("td", { class: "num", id: "ab-permutation-p" }, fmt(c.permutation_p, 4)), el("td", {}, c.permutation_exact ? "exact" : "Monte Carlo")))));
}
