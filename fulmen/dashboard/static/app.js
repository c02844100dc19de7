// The dashboard's shell: a hash router, the token form, and the live-update poller.
import { AuthError, setToken, token } from "./api.js";
import { clear, el } from "./dom.js";
import { comparePage } from "./pages/compare.js";
import { releasePage, releasesPage } from "./pages/releases.js";
import { resourcesPage } from "./pages/resources.js";
import { rolloutPage } from "./pages/rollout.js";
import { rolloutsPage } from "./pages/rollouts.js";
import { runPage } from "./pages/run.js";
import { runsPage } from "./pages/runs.js";

// How often pages poll the store, in ms (?poll=500 in the page URL changes it).
const POLL_MS = Number(new URLSearchParams(location.search).get("poll")) || 2000;

const PAGES = {
  runs: runsPage, run: runPage, compare: comparePage, rollouts: rolloutsPage, rollout: rolloutPage,
  resources: resourcesPage, releases: releasesPage, release: releasePage,
};
// Pages under another's tab in the navigation.
const TAB_OF = { rollout: "rollouts", run: "runs", compare: "runs", release: "releases" };

let current = null; // {stop()} of the page on screen

function route() {
  const [path, search] = location.hash.replace(/^#\/?/, "").split("?");
  const [name, ...rest] = path.split("/");
  return { name: PAGES[name] ? name : "runs", arg: rest.map(decodeURIComponent).join("/"), params: new URLSearchParams(search || "") };
}

function showError(error) {
  if (error instanceof AuthError) {
    askForToken(error.message);
    return;
  }
  const main = document.getElementById("page");
  main.append(el("p", { class: "error", role: "alert" }, String(error.message || error)));
}

function askForToken(message) {
  const form = document.getElementById("token-form");
  form.hidden = false;
  document.getElementById("token-error").textContent = token() ? message : "";
  clear(document.getElementById("page"));
}

/** Run `load` every POLL_MS (or every `atLeastMs`, when longer) while the page is on screen. */
function poller(load, atLeastMs = 0) {
  const every = Math.max(POLL_MS, atLeastMs);
  let timer = null;
  let stopped = false;
  const live = document.getElementById("live");
  const tick = async () => {
    try {
      await load();
      live.classList.remove("stale");
    } catch (error) {
      live.classList.add("stale");
      if (error instanceof AuthError) {
        stopped = true;
        showError(error);
        return;
      }
    }
    if (!stopped) timer = setTimeout(tick, every);
  };
  timer = setTimeout(tick, every);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

async function render() {
  if (current) current.stop();
  current = null;
  const { name, arg, params } = route();
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.dataset.page === (TAB_OF[name] || name));
  }
  const main = clear(document.getElementById("page"));
  main.dataset.page = name;
  try {
    current = await PAGES[name](main, { arg, params, poller, onError: showError });
    document.getElementById("token-form").hidden = true;
  } catch (error) {
    showError(error);
  }
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setToken(document.getElementById("token-input").value.trim());
  document.getElementById("token-input").value = "";
  render();
});
window.addEventListener("hashchange", render);
render();
