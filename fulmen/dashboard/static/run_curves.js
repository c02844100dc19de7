// A run's metrics records as the pages draw them: fetched incrementally, turned into curves
// (per step, validation reward per training minute) and a step's time split. The runs page, a
// run's page and the comparison all draw from here, so each curve is computed in one place.
import { get, query } from "./api.js";
import { COLORS } from "./charts.js";

export const SPLIT = [["rollouts", "time/rollout_s"], ["training", "time/train_s"], ["weight sync", "time/sync_s"], ["validation", "time/val_s"]];

// Pages of one fetch at most (1000 records or more each): a poll never reads without end.
const MAX_PAGES = 50;

/** Each run's metrics records, kept in memory; `update` fetches only the new ones. */
export class RunRecords {
  constructor() {
    this.byRun = new Map(); // run_id -> records in step order
    this.runs = new Map(); // run_id -> the run as the last fetch found it (status, ended_at)
  }

  run(runId) {
    return this.runs.get(runId) || null;
  }

  of(runId) {
    return this.byRun.get(runId) || [];
  }

  /** Fetch the records of `runId` after the last step held; returns how many were new. */
  async update(runId) {
    let known = this.of(runId);
    const seen = new Set(known.map((m) => `${m.step}:${m.time}`));
    // Re-read the last step: a validation record may join a step already shown.
    let after = known.length ? Math.max(...known.map((m) => m.step)) - 1 : null;
    let added = 0;
    for (let i = 0; i < MAX_PAGES; i++) {
      const page = await get(`/api/runs/${encodeURIComponent(runId)}/metrics${query({ after_step: after !== null && after >= 0 ? after : null })}`);
      this.runs.set(runId, page.run);
      const fresh = page.metrics.filter((m) => !seen.has(`${m.step}:${m.time}`));
      fresh.forEach((m) => seen.add(`${m.step}:${m.time}`));
      known = known.concat(fresh);
      added += fresh.length;
      if (page.next_cursor === null || page.next_cursor === undefined) break;
      after = page.next_cursor;
    }
    this.byRun.set(runId, known);
    return added;
  }

  /** The last value of `key` the run logged (null: never). */
  last(runId, key) {
    const found = this.of(runId).filter((m) => m.values[key] !== undefined);
    return found.length ? found[found.length - 1].values[key] : null;
  }
}

// The update's health, as the updaters log it (GRPO, PPO, DPO and SFT log some of these): one
// chart each, drawn when the run recorded the metric. A run with roles logs `ROLE/loss` etc.
export const UPDATE_CHARTS = [
  ["loss", "loss"],
  ["KL", "kl"],
  ["entropy", "entropy"],
  ["gradient norm", "grad_norm"],
  ["clip fraction", "clip_fraction"],
];

// Prefixes of metrics that are not a role's update (`val/loss` is a validation figure).
const NOT_ROLES = new Set([
  "adapter", "end", "memory", "reward", "rollouts", "task", "time", "train", "transitions", "val",
]);

/** One series per role (or one for the run) of update metric `key` of one run, by step. */
export function updateSeries(records, runId, key) {
  const names = new Set();
  for (const m of records.of(runId)) {
    for (const name of Object.keys(m.values)) {
      if (name === key) names.add(name);
      const slash = name.lastIndexOf("/");
      if (slash > 0 && name.slice(slash + 1) === key && !NOT_ROLES.has(name.split("/")[0])) names.add(name);
    }
  }
  return [...names].sort().map((name, i) => ({
    name,
    color: COLORS[i % COLORS.length],
    points: records.of(runId).filter((m) => m.values[name] !== undefined).map((m) => [m.step, m.values[name]]),
  }));
}

/** One series per run of `key` by step. */
export function series(runs, records, key, color) {
  return runs.map((run, i) => ({
    name: run.name,
    color: color || COLORS[i % COLORS.length],
    points: records.of(run.run_id).filter((m) => m.values[key] !== undefined).map((m) => [m.step, m.values[key]]),
  }));
}

// Validation reward against the training minutes spent before it (summed step time), so runs
// whose steps take different time compare on one axis: which one gains faster.
export function byMinute(runs, records) {
  return runs.map((run, i) => {
    let minutes = 0;
    const points = [];
    for (const m of records.of(run.run_id)) {
      minutes += (m.values["time/step_s"] || 0) / 60;
      if (m.values["val/reward_mean"] !== undefined) points.push([Math.round(minutes * 100) / 100, m.values["val/reward_mean"]]);
    }
    return { name: run.name, color: COLORS[i % COLORS.length], points };
  });
}

/** Seconds a run spent in each part of SPLIT (for `stackedBar`). */
export function splitParts(records, runId) {
  return SPLIT.map(([name, key]) => ({
    name,
    value: records.of(runId).reduce((a, m) => a + (m.values[key] || 0), 0),
  }));
}
