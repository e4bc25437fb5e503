// The node page's live state: its lifecycle, liveness and alarms in the header, the actions its
// lifecycle allows, its lifecycle history read again after each change, and its GPUs' values in the
// tables, greyed once stale.

import { escapeHtml, toast } from "./api.js";
import { page } from "./node-page.js";
import { ageS, ageText, isStale } from "./stale.js";
import { localiseTimes, showTime, staleWords } from "./when.js";

let shownLifecycle = page.lifecycle;

/** The lifecycle the page shows now (the failures' rows offer the moves it allows). */
export function currentLifecycle() {
  return shownLifecycle;
}

/** One sample of the node stream's: the GPUs' values in the tables, the node's last sighting. */
export function showGpuValues(ts, gpus) {
  for (const [index, values] of Object.entries(gpus)) {
    if (values.ts) for (const row of document.querySelectorAll(`tr[data-gpu="${index}"]`)) row.dataset.ts = values.ts;
    for (const cell of document.querySelectorAll(`#gpus tr[data-gpu="${index}"] [data-g]`)) {
      const value = values[cell.dataset.g];
      const text = value === null || value === undefined ? "–" : String(Math.round(value));
      const shown = cell.dataset.g === "util_gpu" ? `${text} %` : cell.dataset.g === "temp_c" ? `${text} °C` : cell.dataset.g === "sm_clock_mhz" ? `${text} MHz` : text;
      if (cell.textContent !== shown) cell.textContent = shown;
    }
  }
  const seen = document.getElementById("node-seen");
  if (!seen.dateTime || new Date(seen.dateTime).getTime() < ts * 1000) showTime(seen, new Date(ts * 1000));
  markStale();
}

// Stale values: a GPU that stopped reporting (fallen off the bus, say) keeps its last values in the
// tables, greyed and with their age; so do ports sampled long ago, and the node's last sighting.
function markStale() {
  for (const row of document.querySelectorAll("tr[data-ts]")) {
    const ts = Number(row.dataset.ts);
    const stale = isStale(ts);
    row.classList.toggle("stale", stale);
    let age = row.querySelector(".age");
    if (!stale) {
      age?.remove();
      row.removeAttribute("title");
      continue;
    }
    age ??= row.cells[0].appendChild(Object.assign(document.createElement("span"), { className: "age" }));
    age.textContent = `${ageText(ageS(ts))} old`;
    row.title = `Not current: ${staleWords(ts)}`;
  }
  const seen = document.getElementById("node-seen");
  const seenAt = seen.dateTime ? new Date(seen.dateTime).getTime() / 1000 : null;
  const stale = seenAt !== null && isStale(seenAt);
  seen.classList.toggle("stale", stale);
  const age = document.getElementById("node-seen-age");
  age.hidden = !stale;
  if (stale) age.textContent = `${ageText(ageS(seenAt))} ago`;
}

export function startStaleMarks() {
  markStale();
  setInterval(markStale, 1000);
}

/** The header from the node's state; true when its lifecycle changed (what the page offers with it). */
export function showHeader(state) {
  const labels = page.labels;
  const changed = Boolean(state.lifecycle) && state.lifecycle !== shownLifecycle;
  if (changed) {
    shownLifecycle = state.lifecycle;
    const lifecycle = document.getElementById("node-lifecycle");
    lifecycle.className = `pill lc-${state.lifecycle}`;
    lifecycle.textContent = labels.lifecycle[state.lifecycle] ?? state.lifecycle;
    showAllowedActions(state.lifecycle);
    refreshLifecycle();
  }
  const liveness = document.getElementById("node-liveness");
  liveness.className = `pill state-${state.liveness}`;
  liveness.textContent = labels.liveness[state.liveness] ?? state.liveness;
  const alarms = state.alarms ?? 0;
  document.getElementById("node-alarms").innerHTML = alarms
    ? `<a class="pill sev-${escapeHtml(state.severity)}" href="#failures">${alarms} open alarm${alarms === 1 ? "" : "s"}</a>`
    : "";
  return changed;
}

function showAllowedActions(lifecycle) {
  const allowed = new Set(page.transitions[lifecycle] ?? []);
  let any = false;
  for (const action of page.actions) {
    const button = document.querySelector(`#node-actions [data-action="${action.name}"]`);
    if (!button) continue;
    button.hidden = !allowed.has(action.target);
    any ||= !button.hidden;
  }
  const none = document.getElementById("no-actions");
  if (none) none.hidden = any;
}

// Since when, and the lifecycle history: the server's (includes/lifecycle_*.html), read again after
// each change of state, whoever made it.
let lifecycleReads = Promise.resolve();

function refreshLifecycle() {
  lifecycleReads = lifecycleReads.then(async () => {
    const response = await fetch(`${location.pathname}?partial=lifecycle`, { credentials: "same-origin", headers: { Accept: "text/html" } });
    if (!response.ok) throw new Error(`The server answered ${response.status}.`);
    const holder = document.createElement("div");
    holder.innerHTML = await response.text(); // the server's template, escaped there
    localiseTimes(holder);
    for (const id of ["lifecycle-since", "lifecycle-history"]) document.getElementById(id).replaceWith(holder.querySelector(`#${id}`));
    document.body.dataset.lifecycleReads = Number(document.body.dataset.lifecycleReads ?? 0) + 1; // tests wait on it
  }).catch((error) => toast(`Lifecycle history: ${error.message}`));
}
