// The runs list and a run's page: the markup is the server's (_run_list.html, _run_detail.html),
// fetched again with ?partial=1 when ws/live's runs feed says a run changed (its state, a node's
// progress, a new log line); operators cancel a run or one node's command through the REST API,
// which checks their role again.

import { api, toast } from "./api.js";
import { BurnInForm } from "./burnin-form.js";
import { applyDataStyles } from "./data-styles.js";
import { LiveSocket } from "./live.js";
import { localiseTimes } from "./when.js";

const REFRESH_DELAY_MS = 300; // a burst of progress lines costs one fetch

const holder = document.getElementById("run-detail") ?? document.getElementById("run-list");
const runId = holder.dataset.run; // only on a run's page
let timer = null;
let inFlight = null;
let again = false;

async function refresh() {
  const query = new URLSearchParams(location.search);
  query.set("partial", "1");
  const response = await fetch(`${location.pathname}?${query}`, { credentials: "same-origin", headers: { Accept: "text/html" } });
  if (response.redirected && new URL(response.url).pathname.startsWith("/login")) location.reload();
  if (!response.ok) throw new Error(`The server answered ${response.status}.`);
  const fresh = document.createElement("div");
  fresh.innerHTML = await response.text(); // the server's template, escaped there
  const open = new Set([...holder.querySelectorAll("td[data-command] details[open]")].map((d) => d.closest("td").dataset.command));
  for (const cell of fresh.querySelectorAll("td[data-command]")) {
    const details = cell.querySelector("details");
    if (details) details.open = open.has(cell.dataset.command);
  }
  localiseTimes(fresh);
  applyDataStyles(fresh);
  holder.replaceChildren(...fresh.childNodes);
  const log = document.getElementById("run-log");
  if (log) log.scrollTop = log.scrollHeight;
  holder.dataset.reads = Number(holder.dataset.reads ?? 0) + 1; // how many times it was read again (tests wait on it)
}

function refreshSoon() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    if (inFlight) { again = true; return; }
    inFlight = refresh().catch((error) => console.warn("Runs:", error.message));
    await inFlight;
    inFlight = null;
    if (again) { again = false; refreshSoon(); }
  }, REFRESH_DELAY_MS);
}

async function cancel(button, path, what) {
  if (!window.confirm(`Cancel ${what}? What its nodes run now is stopped there.`)) return;
  button.disabled = true;
  try {
    await api("POST", `${path}/cancel`, { reason: "" });
    toast(`Cancelled ${what}.`, { ok: true });
    refreshSoon();
  } catch (error) {
    toast(error.message);
    button.disabled = false;
  }
}

holder.addEventListener("click", (event) => {
  const run = event.target.closest("button[data-cancel-run]");
  if (run) cancel(run, `runs/${run.dataset.cancelRun}`, `run #${run.dataset.cancelRun}`);
  const command = event.target.closest("button[data-cancel-command]");
  if (command) cancel(command, `commands/${command.dataset.cancelCommand}`, command.dataset.what);
});

// Operators start a burn-in from the runs list, picking its nodes or a cluster in the form.
const startBurnIn = document.getElementById("start-burn-in");
if (startBurnIn) {
  const form = new BurnInForm();
  startBurnIn.addEventListener("click", () => form.open());
}

// Live: the runs feed has no state of its own; a snapshot (first or after a reconnect) may follow
// changes this page missed. A run's page reads itself again only for its own run.
new LiveSocket([{ subscribe: "runs" }], (kind, message) => {
  if (kind === "snapshot" || (message.runs && (!runId || runId in message.runs))) refreshSoon();
}, { quiet: true });
