// The fleet overview: state counts, the GPU heatmap, cost per hour, the last hour of fleet
// utilization and power, and the open failures, all kept live from the fleet stream.

import { api, escapeHtml } from "./api.js";
import { Heatmap, METRICS } from "./heatmap.js";
import { LiveSocket } from "./live.js";
import { cssVar, drawLegend } from "./scale.js";

const page = JSON.parse(document.getElementById("fleet-page").textContent);
const IDLE_BELOW_UTIL = 10; // % : a GPU under this is idle, and its hour is money spent on nothing
const HOUR_S = 3600;
const FEED_LENGTH = 15;
const CHART_REDRAW_S = 5;

const heatmap = new Heatmap(document.getElementById("heatmap"), document.getElementById("heatmap-tip"), page.layout, page.tops);
const metricSelect = document.getElementById("heat-metric");
const nodesById = Object.fromEntries(page.layout.flatMap((group) => group.nodes).map((node) => [node.id, node]));

// Legend ----------------------------------------------------------------------------------------
function renderLegend() {
  const metric = METRICS[metricSelect.value];
  const legend = document.getElementById("heat-legend");
  const high = metric.high(page.tops);
  legend.innerHTML = metricSelect.value === "errors"
    ? "<span>none</span><canvas></canvas><span>alarm on the GPU</span>"
    : `<span>${metric.low} ${metric.unit}</span><canvas></canvas><span>${high} ${metric.unit}</span>`;
  drawLegend(legend.querySelector("canvas"));
  legend.insertAdjacentHTML("beforeend",
    '<span><span class="swatch" style="border-color:var(--critical)"></span> node with alarms (thicker: worse)</span>' +
    '<span><span class="swatch"></span> straggler GPU</span><span><span class="swatch" style="background:var(--cell-empty);border:0"></span> no data / unreachable</span>');
}
metricSelect.addEventListener("change", () => { heatmap.setMetric(metricSelect.value); renderLegend(); });
renderLegend();

// Counts ----------------------------------------------------------------------------------------
function renderCounts(fleet) {
  const lifecycle = {};
  const liveness = {};
  for (const entry of Object.values(fleet)) {
    lifecycle[entry.lifecycle] = (lifecycle[entry.lifecycle] ?? 0) + 1;
    liveness[entry.liveness] = (liveness[entry.liveness] ?? 0) + 1;
  }
  for (const stat of document.querySelectorAll("[data-lifecycle]")) setText(stat.querySelector(".value"), lifecycle[stat.dataset.lifecycle] ?? 0);
  for (const stat of document.querySelectorAll("[data-liveness]")) setText(stat.querySelector(".value"), liveness[stat.dataset.liveness] ?? 0);
}

function setText(element, text) {
  const value = String(text);
  if (element.textContent !== value) element.textContent = value;
}

// Cost per hour -----------------------------------------------------------------------------------
const money = page.pricing.currency
  ? new Intl.NumberFormat(undefined, { style: "currency", currency: page.pricing.currency, maximumFractionDigits: 0 })
  : null;

function renderCosts(fleet) {
  if (!money) {
    for (const id of ["cost-capacity", "cost-energy", "cost-idle"]) {
      const element = document.getElementById(id);
      element.classList.add("unpriced");
      setText(element, "not priced");
    }
    return;
  }
  let capacity = 0;
  let energy = 0;
  let idle = 0;
  for (const [id, entry] of Object.entries(fleet)) {
    const node = nodesById[id];
    if (!node) continue;
    const gpuHour = page.pricing.gpu_hour[node.type] ?? 0;
    // Every node until it is retired costs its GPU-hours (apps/costs/rates.py explains why).
    if (entry.lifecycle !== "retired") capacity += gpuHour * node.gpus;
    if (entry.power_w_total && entry.liveness === "online") energy += (entry.power_w_total / 1000) * (page.pricing.kw_hour[node.cluster] ?? 0);
    if (entry.liveness === "online" && entry.heat) {
      for (const cell of entry.heat) if (cell && cell[0] !== null && cell[0] < IDLE_BELOW_UTIL) idle += gpuHour;
    }
  }
  setText(document.getElementById("cost-capacity"), money.format(capacity));
  setText(document.getElementById("cost-energy"), money.format(energy));
  setText(document.getElementById("cost-idle"), money.format(idle));
}

// Last hour of fleet utilization and power ----------------------------------------------------------
const series = [[], [], []]; // ts, mean utilization %, total power kW
let chart = null;

function fleetTotals(fleet) {
  let utilSum = 0;
  let gpus = 0;
  let power = 0;
  for (const entry of Object.values(fleet)) {
    if (entry.liveness !== "online" || entry.util_gpu_mean === undefined) continue;
    if (entry.util_gpu_mean !== null) { utilSum += entry.util_gpu_mean * entry.gpus; gpus += entry.gpus; }
    power += entry.power_w_total ?? 0;
  }
  return { util: gpus ? utilSum / gpus : null, power: power / 1000 };
}

async function makeChart(container) {
  // Loaded after the heatmap is drawn: the chart library is not needed for the first useful render.
  const { default: uPlot } = await import("../vendor/uplot/uPlot.esm.js");
  const options = {
    width: container.clientWidth,
    height: 220,
    series: [
      {},
      { label: "Utilization", stroke: cssVar("--accent"), width: 1.5, scale: "%", value: (_, v) => (v === null ? "–" : `${v.toFixed(1)} %`) },
      { label: "Power", stroke: cssVar("--error"), width: 1.5, scale: "kW", value: (_, v) => (v === null ? "–" : `${v.toFixed(1)} kW`) },
    ],
    scales: { "%": { range: [0, 100] }, kW: { range: (_, min, max) => [0, Math.max(1, max * 1.15)] } },
    axes: [
      { stroke: cssVar("--muted"), grid: { stroke: cssVar("--border") } },
      { scale: "%", stroke: cssVar("--muted"), grid: { stroke: cssVar("--border") }, values: (_, ticks) => ticks.map((t) => `${t} %`) },
      { scale: "kW", side: 1, stroke: cssVar("--muted"), grid: { show: false }, values: (_, ticks) => ticks.map((t) => `${t} kW`) },
    ],
  };
  const made = new uPlot(options, series, container);
  new ResizeObserver(() => made.setSize({ width: container.clientWidth, height: 220 })).observe(container);
  return made;
}

async function loadHistory() {
  const history = await api("GET", "telemetry/fleet");
  const cutoff = series[0][0] ?? Infinity; // live points already gathered win over the history's
  for (const point of history.points) {
    if (point.ts >= cutoff) break;
    series[0].push(point.ts); series[1].push(point.util_gpu_mean); series[2].push(point.power_w_total / 1000);
  }
  const order = series[0].map((_, i) => i).sort((a, b) => series[0][a] - series[0][b]);
  for (let s = 0; s < 3; s += 1) series[s] = order.map((i) => series[s][i]);
  chart?.setData(series);
}

let chartDrawnAt = 0;

function addLivePoint(fleet) {
  const now = Math.floor(Date.now() / 1000);
  const { util, power } = fleetTotals(fleet);
  if (series[0].at(-1) === now) return;
  series[0].push(now); series[1].push(util); series[2].push(power);
  while (series[0].length && series[0][0] < now - HOUR_S) for (const s of series) s.shift();
  // An hour on a few hundred pixels: redrawing every CHART_REDRAW_S is as good to the eye, and
  // leaves the main thread to the heatmap.
  if (now - chartDrawnAt >= CHART_REDRAW_S) {
    chartDrawnAt = now;
    chart?.setData(series);
  }
}

// Open failures -----------------------------------------------------------------------------------
let feedTimer = null;
function refreshFeedSoon() {
  clearTimeout(feedTimer);
  feedTimer = setTimeout(async () => {
    const answer = await api("GET", `failures?open=true&ordering=-last_seen&limit=${FEED_LENGTH}`);
    const feed = document.getElementById("failure-feed");
    feed.innerHTML = answer.results.length
      ? answer.results.map((f) => `<li data-failure="${f.id}"><span class="pill sev-${escapeHtml(f.severity)}">${escapeHtml(f.severity)}</span>
          <a href="/nodes/${f.node}/">${escapeHtml(f.hostname)}</a>${f.gpu_index === null ? "" : ` GPU ${f.gpu_index}`}
          <span>${escapeHtml(f.title)}</span>${f.count > 1 ? ` <span class="pill">×${f.count}</span>` : ""}
          <time class="when" datetime="${f.last_seen}">${new Date(f.last_seen).toLocaleTimeString()}</time></li>`).join("")
      : '<li class="muted" id="no-failures">No open failures.</li>';
  }, 300);
}

// Live --------------------------------------------------------------------------------------------
function alarmsChanged(delta) {
  return Object.values(delta.fleet ?? {}).some((patch) => "alarms" in patch || "severity" in patch);
}

function render(fleet) {
  heatmap.setData(fleet);
  heatmap.draw();
  renderCounts(fleet);
  renderCosts(fleet);
  addLivePoint(fleet);
}

// First render from the snapshot the page came with; the socket's snapshot and deltas follow.
heatmap.resize();
render(page.snapshot);
window.cpFleetRendered = performance.now();
performance.mark("fleet-first-render");

const live = new LiveSocket([{ subscribe: "fleet" }], (kind, message) => {
  if (!live.fleet) return;
  render(live.fleet);
  if (kind === "snapshot" || alarmsChanged(message)) refreshFeedSoon();
});

makeChart(document.getElementById("fleet-chart"))
  .then((made) => { chart = made; return loadHistory(); })
  .catch((error) => console.warn("Fleet history:", error.message));

// For the browser tests and benchmarks/dashboard.py, which read the page's state.
window.cpFleet = { heatmap, live };
