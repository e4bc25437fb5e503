// The topology page: nodes under each switch marked live from the fleet stream (unreachable, worst
// open alarm), link load read again from the server every REFRESH_MS, and a hostname finder.

import { applyDataStyles } from "./data-styles.js";
import { LiveSocket } from "./live.js";

const REFRESH_MS = 30000; // port samples arrive every second; a glance at load needs less (the page costs ~0.1 s of server CPU at 1,000 nodes)
const root = document.getElementById("topology");
const find = document.getElementById("topology-find");

function chips() {
  return root.querySelectorAll(".node-chip[data-node]");
}

/** Liveness and the worst open alarm of every node chip, from the fleet stream's entries. */
function markNodes(fleet) {
  if (!fleet) return;
  for (const chip of chips()) {
    const entry = fleet[chip.dataset.node];
    if (!entry) continue;
    if (chip.dataset.liveness !== entry.liveness) chip.dataset.liveness = entry.liveness;
    const severity = entry.severity ?? "";
    if ((chip.dataset.severity ?? "") !== severity) {
      if (severity) chip.dataset.severity = severity;
      else delete chip.dataset.severity;
    }
  }
}

function highlight() {
  const text = find?.value.trim().toLowerCase() ?? "";
  let first = null;
  for (const chip of chips()) {
    const match = text && chip.dataset.hostname.toLowerCase().includes(text);
    chip.classList.toggle("found", Boolean(match));
    chip.classList.toggle("dimmed", Boolean(text) && !match);
    if (match && !first) first = chip;
  }
  return first;
}

find?.addEventListener("input", () => highlight()?.scrollIntoView({ block: "nearest" }));

const live = new LiveSocket([{ subscribe: "fleet" }], () => markNodes(live.fleet));

async function refresh() {
  if (document.visibilityState !== "visible") return;
  const response = await fetch(`${location.pathname}?partial=1`, { credentials: "same-origin" });
  if (!response.ok || response.redirected) return; // signed out: the live socket sends the page to sign in
  const holder = document.createElement("div");
  holder.innerHTML = await response.text(); // the server's template, escaped there
  applyDataStyles(holder);
  root.replaceChildren(...holder.childNodes);
  markNodes(live.fleet);
  highlight();
}

setInterval(() => refresh().catch((error) => console.warn("Topology refresh:", error.message)), REFRESH_MS);
