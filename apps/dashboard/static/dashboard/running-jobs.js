// The fleet page's "Running jobs" panel: the runs list's own markup (_run_list.html) for running runs,
// read again from /runs/?state=running&partial=1 when ws/live's runs feed says a run changed. Its
// socket leaves the top bar's badge to the page's telemetry socket.

import { applyDataStyles } from "./data-styles.js";
import { LiveSocket } from "./live.js";
import { localiseTimes } from "./when.js";

const panel = document.getElementById("jobs");
const REFRESH_DELAY_MS = 1000; // progress of many nodes costs one read a second at most
let timer = null;
let first = true; // the first snapshot finds the panel as the server just rendered it

async function refresh() {
  const response = await fetch("/runs/?state=running&partial=1&limit=5", { credentials: "same-origin", headers: { Accept: "text/html" } });
  if (!response.ok) throw new Error(`The server answered ${response.status}.`);
  const fresh = document.createElement("div");
  fresh.innerHTML = await response.text(); // the server's template, escaped there
  localiseTimes(fresh);
  applyDataStyles(fresh);
  panel.replaceChildren(...fresh.childNodes);
  panel.dataset.reads = Number(panel.dataset.reads ?? 0) + 1; // tests wait on it
}

new LiveSocket([{ subscribe: "runs" }], (kind) => {
  if (kind === "snapshot" && first) { first = false; return; }
  clearTimeout(timer);
  timer = setTimeout(() => refresh().catch((error) => console.warn("Running jobs:", error.message)), REFRESH_DELAY_MS);
}, { quiet: true, onStatus: () => {} });
