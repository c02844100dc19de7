// One rollout: attempts timeline, span tree, calls with messages and tool calls, token view,
// reward breakdown and the transitions built from it.
import { get, query } from "../api.js";
import { debugCapabilities, replayReport, runJob } from "../debug.js";
import { append, clear, el, fmt, jsonBlock, seconds, svg, when } from "../dom.js";

const FINAL = new Set(["succeeded", "failed", "cancelled"]);

function timeline(attempts) {
  const times = attempts.flatMap((a) => [Date.parse(a.started_at), a.ended_at ? Date.parse(a.ended_at) : Date.now()]);
  const t0 = Math.min(...times);
  const span = Math.max(Math.max(...times) - t0, 1);
  const width = 640;
  const root = svg("svg", { viewBox: `0 0 ${width} ${attempts.length * 26 + 8}`, width, height: attempts.length * 26 + 8, class: "timeline" });
  attempts.forEach((a, i) => {
    const start = Date.parse(a.started_at);
    const end = a.ended_at ? Date.parse(a.ended_at) : Date.now();
    const x = 90 + ((start - t0) / span) * (width - 100);
    const w = Math.max(((end - start) / span) * (width - 100), 3);
    root.append(
      svg("text", { x: 0, y: i * 26 + 20, class: "tick" }, `#${a.number} ${a.status}`),
      svg("rect", { x, y: i * 26 + 6, width: w, height: 18, class: `attempt ${a.status}` },
        svg("title", {}, `attempt ${a.number} on ${a.worker_id}: ${a.status}, ${seconds((end - start) / 1000)}${a.error ? ` — ${a.error}` : ""}`)));
  });
  return root;
}

function spanTree(spans) {
  const children = new Map();
  const ids = new Set(spans.map((s) => s.span_id));
  for (const s of spans) {
    const parent = s.parent_id && ids.has(s.parent_id) ? s.parent_id : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(s);
  }
  const node = (s) => el("li", { "data-span": s.name },
    el("details", { open: true },
      el("summary", {}, el("span", { class: "span-name" }, s.name), " ",
        el("span", { class: "muted" }, s.end_time ? seconds(s.end_time - s.start_time) : "open"), s.status === "error" ? el("span", { class: "status failed" }, " error") : null),
      Object.keys(s.attributes).length ? el("details", { class: "attrs" }, el("summary", {}, `${Object.keys(s.attributes).length} attributes`), jsonBlock(s.attributes, "attrs")) : null,
      children.has(s.span_id) ? el("ul", {}, children.get(s.span_id).map(node)) : null));
  return el("ul", { class: "span-tree" }, (children.get(null) || []).map(node));
}

// A command agent's runs (the program, then its verifier): how each ended, and its output.
function commandsView(commands) {
  return el("div", { class: "commands" }, commands.map((c) => el("div", { class: "command", "data-role": c.role },
    el("p", { class: "facts" },
      el("b", {}, c.role), " · ",
      el("span", { class: `status ${c.status === "exited" && c.exit_code === 0 ? "succeeded" : "failed"}` },
        c.status === "exited" ? `exit ${c.exit_code}` : c.status),
      ` · ${seconds(c.duration_s || 0)} · ${fmt(c.output_bytes || 0)} bytes printed`,
      el("span", { class: "muted" }, ` · ${c.sandbox || ""}`)),
    c.stdout ? el("details", { class: "stdout" }, el("summary", {}, "stdout"), el("pre", { class: "text" }, c.stdout)) : null,
    c.stderr ? el("details", { class: "stderr", open: c.status !== "exited" || c.exit_code !== 0 }, el("summary", {}, "stderr"), el("pre", { class: "text" }, c.stderr)) : null)));
}

function content(value) {
  if (value === null || value === undefined) return el("span", { class: "muted" }, "(empty)");
  if (typeof value === "string") return el("pre", { class: "text" }, value);
  if (Array.isArray(value)) return el("div", {}, value.map((part) => (part && typeof part === "object" && typeof part.text === "string" ? el("pre", { class: "text" }, part.text) : jsonBlock(part))));
  return jsonBlock(value);
}

function message(m) {
  if (!m || typeof m !== "object") return el("div", { class: "message" }, content(m));
  return el("div", { class: `message role-${m.role || "unknown"}` },
    el("div", { class: "role" }, m.role || "?", m.name ? ` (${m.name})` : ""),
    content(m.content),
    m.tool_calls ? el("div", { class: "tool-calls" }, m.tool_calls.map((t) => el("div", { class: "tool-call" },
      el("b", {}, t.function ? t.function.name : t.type || "tool"), " ", el("code", {}, t.function ? t.function.arguments : JSON.stringify(t))))) : null,
    m.tool_call_id ? el("div", { class: "muted" }, `result of ${m.tool_call_id}`) : null);
}

/** Tokens shaded by probability; trained tokens outlined, masked ones hatched. */
function tokenStrip(ids, logprobs, mask, texts) {
  return el("div", { class: "tokens" }, ids.map((id, i) => {
    const lp = logprobs[i];
    const trained = mask[i] === 1;
    const p = lp === undefined ? 0 : Math.exp(lp);
    const text = texts[id] !== undefined ? texts[id] : `#${id}`;
    return el("span", {
      class: `tok ${trained ? "trained" : "masked"}`,
      style: trained ? `background: rgba(37, 99, 235, ${(0.12 + 0.75 * (1 - p)).toFixed(2)})` : null,
      title: `token ${id}${trained ? `, logprob ${fmt(lp, 4)} (p=${fmt(p, 3)})` : ", masked (not trained)"}`,
      "data-logprob": trained ? lp : null,
    }, text);
  }));
}

function callView(call, index, texts) {
  const tokens = call.tokens;
  return el("section", { class: "call", "data-call": call.call_id },
    el("h3", {}, `call ${index + 1}`, call.agent ? ` · agent ${call.agent}` : "", ` · ${call.model || call.endpoint}`,
      el("span", { class: "muted" }, ` ${seconds(call.latency_s)}${call.policy_version ? ` · policy ${call.policy_version}` : ""}${call.reward !== null ? ` · reward ${fmt(call.reward, 4)}` : ""}`)),
    el("details", { class: "messages" }, el("summary", {}, `${Array.isArray(call.messages) ? call.messages.length : 0} messages in`),
      Array.isArray(call.messages) ? call.messages.map(message) : content(call.messages),
      call.tools ? el("details", {}, el("summary", {}, "tools"), jsonBlock(call.tools)) : null),
    el("div", { class: "reply" }, el("div", { class: "muted" }, "reply"), message(call.reply ?? call.text)),
    call.error ? el("div", { class: "error" }, jsonBlock(call.error)) : null,
    tokens ? el("div", { class: "token-view" },
      el("div", { class: "muted" }, `${tokens.ids.length} completion tokens · ${tokens.trained ? "trained" : "not trained (no transition uses this call)"}${tokens.cut ? ` · ${tokens.cut} more not shown` : ""}`),
      tokenStrip(tokens.ids, tokens.logprobs, tokens.ids.map(() => (tokens.trained ? 1 : 0)), texts))
      : el("p", { class: "muted" }, "no token ids recorded (not token-level)"));
}

function rewardsView(rewards) {
  return el("div", {},
    el("p", {}, "final reward ", el("b", { id: "final-reward" }, fmt(rewards.final, 4))),
    rewards.events.length ? el("table", { class: "rewards" },
      el("thead", {}, el("tr", {}, ["seq", "from", "values", "primary", "agent"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rewards.events.map((e) => el("tr", {},
        el("td", { class: "num" }, e.sequence), el("td", {}, e.source || e.kind),
        el("td", {}, Object.entries(e.values).map(([k, v]) => `${k}=${fmt(v, 4)}`).join("  ")),
        el("td", {}, e.primary || "–"), el("td", {}, e.agent || "–")))))
      : el("p", { class: "muted" }, "no reward emitted or posted"),
    // Automatic intermediate rewards: signals read from the records (fulmen.transitions.air).
    (rewards.air || []).length ? el("table", { class: "rewards air" },
      el("thead", {}, el("tr", {}, ["call", "automatic signals"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rewards.air.map((a) => el("tr", { "data-call": a.call_index },
        el("td", { class: "num" }, `#${a.call_index + 1}`),
        el("td", {}, Object.entries(a.signals).map(([k, v]) => `${k}=${fmt(v, 4)}`).join("  "))))))
      : null);
}

function transitionsView(transitions, texts) {
  if (!transitions.length) return el("p", { class: "muted" }, "no transitions (no token-level call, or no reward)");
  return el("div", {}, transitions.map((t, i) => el("div", { class: "transition" },
    el("div", {}, `transition ${i + 1}: calls ${t.call_ids.join(", ")} · reward ${fmt(t.reward, 4)} (rollout ${fmt(t.rollout_reward, 4)}) · ${t.prompt_tokens} prompt tokens, ${t.trained_tokens} trained, ${t.masked_tokens} masked${t.is_truncated ? " · truncated" : ""}`),
    tokenStrip(t.completion_ids, t.logprobs, t.loss_mask, texts))));
}

/** The "Replay" action: run the agent again with this attempt's recorded replies. */
async function replaySection(rolloutId, attempt) {
  const can = (await debugCapabilities()).replay;
  const box = el("div", { id: "replay-box" });
  const button = el("button", {
    type: "button", id: "replay-button", disabled: !can.enabled,
    title: can.enabled ? "run the agent again on this task, every model reply served from the recorded calls" : can.why_not,
    onclick: async () => {
      button.disabled = true;
      try {
        await runJob("/api/debug/replay", attempt ? { rollout_id: rolloutId, attempt_id: attempt } : { rollout_id: rolloutId }, box, replayReport);
      } finally {
        button.disabled = false;
      }
    },
  }, "Replay");
  return el("section", { class: "replay" }, el("h2", {}, "Replay"),
    el("p", {}, button, " ", el("span", { class: "muted", id: "replay-why" }, can.enabled
      ? "re-runs the agent with the recorded model replies (no model needed) and reports where its requests diverge and the reward it computes now"
      : `disabled: ${can.why_not}`)),
    box);
}

export async function rolloutPage(main, { arg, params, poller }) {
  const attempt = params.get("attempt");
  const body = el("div");
  main.append(body);
  let lastKey = "";
  async function load() {
    const d = await get(`/api/rollouts/${encodeURIComponent(arg)}${query({ attempt })}`);
    const key = JSON.stringify([d.rollout.status, d.attempts.length, d.spans.length, d.calls.length, d.rewards.events.length]);
    if (key === lastKey) return d;
    lastKey = key;
    const ids = [...new Set(d.calls.flatMap((c) => (c.tokens ? c.tokens.ids : [])).concat(d.transitions.flatMap((t) => t.completion_ids)))];
    const named = ids.length ? await get(`/api/tokens?ids=${ids.slice(0, 4096).join(",")}`) : { texts: {} };
    const texts = named.texts;
    const r = d.rollout;
    append(clear(body), [
      el("h1", {}, "Rollout ", el("code", {}, r.rollout_id)),
      el("p", { class: "facts" },
        el("span", { class: `status ${r.status}` }, r.status), ` · ${r.mode} · task ${r.task_id || "–"} · resources ${r.resources_version ? `v${r.resources_version}` : "–"} · enqueued ${when(r.enqueued_at)}`,
        r.error ? el("span", { class: "error" }, ` · ${r.error}`) : null),
      el("h2", {}, "Task"), content(r.input),
      el("h2", {}, "Attempts"),
      d.attempts.length ? timeline(d.attempts) : el("p", { class: "muted" }, "not claimed yet"),
      d.attempts.length > 1 ? el("p", {}, "show attempt: ", d.attempts.map((a) => el("a", { href: `#/rollout/${encodeURIComponent(r.rollout_id)}?attempt=${encodeURIComponent(a.attempt_id)}`, class: a.attempt_id === d.attempt_id ? "active" : "" }, ` #${a.number} `))) : null,
      d.commands.length ? [el("h2", {}, "Command"), commandsView(d.commands)] : null,
      el("h2", {}, "Reward"), rewardsView(d.rewards),
      el("h2", {}, `LLM calls (${d.calls.length})`),
      el("p", { class: "legend-tokens muted" }, "tokens: darker = less likely under the sampling policy; outlined = trained; hatched = masked",
        named.source ? ` · text from ${named.source}` : "", named.why ? el("span", { class: "tokens-why" }, ` · shown as ids: ${named.why}`) : null),
      d.calls.map((c, i) => callView(c, i, texts)),
      el("h2", {}, `Transitions (${d.transitions.length})`), transitionsView(d.transitions, texts),
      el("h2", {}, `Spans (${d.spans.length})`), spanTree(d.spans)]);
    return d;
  }
  const first = await load();
  main.append(await replaySection(arg, attempt));
  let done = FINAL.has(first.rollout.status);
  const stop = poller(async () => {
    if (done) return;
    done = FINAL.has((await load()).rollout.status);
  });
  return { stop };
}
