// The racks page: every node coloured by its live power draw or hottest GPU (viridis: brighter is
// more, so hot spots stand out and read the same to colour-blind eyes), the value as text and on
// hover, and each rack's total power against its budget. Values come from the fleet stream; a node
// that is unreachable or stopped reporting keeps its last value, greyed and with its age, uncoloured
// and out of its rack's sums.

import { LiveSocket } from "./live.js";
import { colourOf, drawLegend } from "./scale.js";
import { ageS, ageText, isStale } from "./stale.js";
import { staleWords } from "./when.js";

const page = JSON.parse(document.getElementById("racks-page").textContent);
const METRICS = {
  power: { field: "power_w_total", unit: "kW", label: (kw) => kw.toFixed(1), scale: page.scales.power.map((w) => w / 1000) },
  temp: { field: "temp_c_max", unit: "°C", label: (c) => Math.round(c), scale: page.scales.temp },
};
const LIGHT_FROM = 0.45; // from here up black text contrasts more with viridis than white does (WCAG ratio)

const nodes = [...document.querySelectorAll(".rack-node[data-node]")];
const racks = [...document.querySelectorAll(".rack-panel[data-rack]")];
const choice = document.getElementById("rack-metric");
let metric = new URLSearchParams(location.search).get("metric") === "temp" ? "temp" : "power";
choice.querySelector(`input[value="${metric}"]`).checked = true;

function renderLegend() {
  const { unit, scale } = METRICS[metric];
  const legend = document.getElementById("rack-legend");
  document.getElementById("legend-low").textContent = `${scale[0]} ${unit}`;
  document.getElementById("legend-high").textContent = `${Number(scale[1].toFixed(1))} ${unit}`;
  drawLegend(legend.querySelector("canvas"));
}

/** The node's value on the chosen metric, in the metric's unit; null: nothing to show. */
function valueOf(entry) {
  const raw = entry?.[METRICS[metric].field];
  if (raw === null || raw === undefined) return null;
  return metric === "power" ? raw / 1000 : raw;
}

/** Whether the entry's values are those of now: its node online and reporting. */
function isCurrent(entry) {
  return entry?.liveness !== "unreachable" && !isStale(entry?.ts);
}

function paintNode(element, entry) {
  element.dataset.base ??= element.title;
  const liveness = entry?.liveness ?? element.dataset.liveness;
  element.dataset.liveness = liveness;
  const { unit, label, scale } = METRICS[metric];
  const value = valueOf(entry);
  const current = isCurrent(entry);
  const state = liveness === "unreachable" ? "unreachable" : value === null ? "no-data" : current ? "" : "stale";
  element.classList.toggle("unreachable", state === "unreachable");
  element.classList.toggle("no-data", state === "no-data");
  element.classList.toggle("stale", state === "stale");
  let text;
  if (state) {
    element.style.background = "";
    element.style.color = "";
    text = value === null ? (state === "unreachable" ? "unreachable" : "no data") : `${label(value)} ${unit} · ${ageText(ageS(entry.ts))} old`;
  } else {
    const share = (value - scale[0]) / (scale[1] - scale[0] || 1);
    element.style.background = colourOf(value, scale[0], scale[1]);
    element.style.color = share >= LIGHT_FROM ? "#000" : "#fff";
    text = `${label(value)} ${unit}`;
  }
  const valueElement = element.querySelector(".value");
  if (valueElement.textContent !== text) valueElement.textContent = text;
  const power = entry?.power_w_total;
  const temp = entry?.temp_c_max;
  element.title = [
    element.dataset.base,
    power === null || power === undefined ? "power: no data" : `power ${Math.round(power)} W of ${element.dataset.limitW} W (GPU limits)`,
    temp === null || temp === undefined ? "temperature: no data" : `hottest GPU ${Math.round(temp)} °C`,
    current ? liveness : `${liveness}; not current: ${staleWords(entry?.ts)}`,
  ].join("\n");
}

function paintRack(rack, fleet) {
  let watts = 0;
  let hottest = null;
  for (const element of rack.querySelectorAll(".rack-node[data-node]")) {
    const entry = fleet[element.dataset.node];
    if (!isCurrent(entry)) continue;
    watts += entry.power_w_total ?? 0;
    if (entry.temp_c_max !== null && entry.temp_c_max !== undefined) hottest = Math.max(hottest ?? -Infinity, entry.temp_c_max);
  }
  const power = rack.querySelector(".rack-power");
  power.textContent = `${(watts / 1000).toFixed(1)} kW`;
  const budget = Number(rack.dataset.budgetKw);
  power.classList.toggle("over-budget", Boolean(budget) && watts / 1000 > budget);
  rack.querySelector(".rack-temp").textContent = hottest === null ? "– °C" : `max ${Math.round(hottest)} °C`;
}

function paint(fleet) {
  if (!fleet) return;
  for (const element of nodes) paintNode(element, fleet[element.dataset.node]);
  for (const rack of racks) paintRack(rack, fleet);
}

const live = new LiveSocket([{ subscribe: "fleet" }], () => paint(live.fleet));
setInterval(() => paint(live.fleet), 5000); // values age without a message

choice.addEventListener("change", (event) => {
  metric = event.target.value;
  const query = new URLSearchParams(location.search);
  query.set("metric", metric);
  history.replaceState(null, "", `${location.pathname}?${query}`);
  renderLegend();
  paint(live.fleet);
});
renderLegend();
