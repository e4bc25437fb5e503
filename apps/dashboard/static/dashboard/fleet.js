// The fleet overview: state counts, the GPU heatmap, cost per hour, the last hour of fleet
// utilization and power, and the open failures, all kept live from the fleet stream.

import { api, escapeHtml } from "./api.js";
import { startFleet } from "./fleet-boot.js";
import { Heatmap, METRICS, heatmapTheme } from "./heatmap.js";
import { TIMINGS_KEPT } from "./live.js";
import { cssVar, drawLegend } from "./scale.js";
import { settings as staleSettings } from "./stale.js";
import { MINUTE_TICKS, chartTimeOptions, formatTick, formatWhen, staleWords, timeHtml } from "./when.js";

// The layout and scale tops (the server holds them as text: apps/dashboard/fleet_layout.py) and the prices.
const page = {
  ...JSON.parse(document.getElementById("fleet-layout").textContent),
  ...JSON.parse(document.getElementById("fleet-page").textContent),
};
const HOUR_S = 3600;
const FEED_LENGTH = 15;
const CHART_REDRAW_S = 5;

// fleet-boot.js opened the socket and started the worker from the top of the page, before this
// module and its imports had loaded. The worker (fleet-worker.js) owns the fleet's data and the
// heatmap's canvas; this thread places the heatmap, answers the mouse and writes what the worker
// sums up.
const { worker, socket } = startFleet();
const pending = new Map(); // request id -> resolve, for the worker's replies
let lastRequest = 0;
function ask(message) {
  lastRequest += 1;
  worker.postMessage({ ...message, request: lastRequest });
  return new Promise((resolve) => pending.set(lastRequest, resolve));
}

const canvas = document.getElementById("heatmap");
const offscreen = canvas.transferControlToOffscreen();
worker.postMessage(
  {
    type: "init",
    canvas: offscreen,
    snapshot: document.getElementById("fleet-snapshot").textContent,
    tops: page.tops,
    theme: heatmapTheme(),
    nodes: Object.fromEntries(page.layout.flatMap((group) => group.nodes).map((node) => [node.id, node])),
    pricing: page.pricing,
    stale: staleSettings(),
  },
  [offscreen],
);
const heatmap = new Heatmap(canvas, document.getElementById("heatmap-tip"), page.layout, {
  place: (placement) => worker.postMessage({ type: "place", placement }),
  setMetric: (metric) => worker.postMessage({ type: "metric", metric }),
  inspect: (node) => ask({ type: "inspect", node }),
  staleWords,
});
heatmap.resize();
window.addEventListener("themechange", () => worker.postMessage({ type: "theme", theme: heatmapTheme() }));
const metricSelect = document.getElementById("heat-metric");

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
    '<span><span class="swatch alarmed"></span> node with alarms (thicker: worse)</span>' +
    '<span><span class="swatch"></span> straggler GPU</span><span><span class="swatch no-data"></span> no data / unreachable</span>');
}
metricSelect.addEventListener("change", () => { heatmap.setMetric(metricSelect.value); renderLegend(); });
renderLegend();

// Counts ----------------------------------------------------------------------------------------
function renderCounts(counts) {
  for (const stat of document.querySelectorAll("[data-lifecycle]")) setText(stat.querySelector(".value"), counts.lifecycle[stat.dataset.lifecycle] ?? 0);
  for (const stat of document.querySelectorAll("[data-liveness]")) setText(stat.querySelector(".value"), counts.liveness[stat.dataset.liveness] ?? 0);
}

function setText(element, text) {
  const value = String(text);
  if (element.textContent !== value) element.textContent = value;
}

// Cost per hour -----------------------------------------------------------------------------------
const money = page.pricing.currency
  ? new Intl.NumberFormat(undefined, { style: "currency", currency: page.pricing.currency, maximumFractionDigits: 0 })
  : null;

function renderCosts(costs) {
  if (!costs) {
    for (const id of ["cost-capacity", "cost-energy", "cost-idle"]) {
      const element = document.getElementById(id);
      element.classList.add("unpriced");
      setText(element, "not priced");
    }
    return;
  }
  setText(document.getElementById("cost-capacity"), money.format(costs.capacity));
  setText(document.getElementById("cost-energy"), money.format(costs.energy));
  setText(document.getElementById("cost-idle"), money.format(costs.idle));
}

// Last hour of fleet utilization and power ----------------------------------------------------------
const series = [[], [], []]; // ts, mean utilization %, total power kW
let chart = null;

async function makeChart(container) {
  // Loaded after the heatmap is drawn: the chart library is not needed for the first useful render.
  const { default: uPlot } = await import("../vendor/uplot/uPlot.esm.js");
  const options = {
    ...chartTimeOptions(uPlot),
    width: container.clientWidth,
    height: 220,
    series: [
      { value: (_, ts) => (ts === null ? "–" : formatWhen(new Date(ts * 1000))) },
      { label: "Utilization", stroke: cssVar("--accent"), width: 1.5, scale: "%", value: (_, v) => (v === null ? "–" : `${v.toFixed(1)} %`) },
      { label: "Power", stroke: cssVar("--error"), width: 1.5, scale: "kW", value: (_, v) => (v === null ? "–" : `${v.toFixed(1)} kW`) },
    ],
    scales: { "%": { range: [0, 100] }, kW: { range: (_, min, max) => [0, Math.max(1, max * 1.15)] } },
    // uPlot's default 50 px y axes clipped "100 %" and "0.8 kW" at the chart's edges.
    axes: [
      { stroke: cssVar("--muted"), grid: { stroke: cssVar("--border") }, incrs: MINUTE_TICKS, values: (_, ticks) => ticks.map((t) => formatTick(new Date(t * 1000))) },
      { scale: "%", size: 60, stroke: cssVar("--muted"), grid: { stroke: cssVar("--border") }, values: (_, ticks) => ticks.map((t) => `${t} %`) },
      { scale: "kW", side: 1, size: 60, stroke: cssVar("--muted"), grid: { show: false }, values: (_, ticks) => ticks.map((t) => `${t} kW`) },
    ],
  };
  return new uPlot(options, series, container);
}

window.addEventListener("timezonechange", async () => { // its ticks fall on other hours
  if (!chart) return;
  chart.destroy();
  chart = await makeChart(chartBox);
  chart.setData(series);
});

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

function addLivePoint({ util, power }) {
  const now = Math.floor(Date.now() / 1000);
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
          <span class="when">${timeHtml(new Date(f.last_seen))}</span></li>`).join("")
      : '<li class="muted" id="no-failures">No open failures.</li>';
  }, 300);
}

// Live --------------------------------------------------------------------------------------------
// What the benchmarks read (benchmarks/dashboard.py): the stream's bytes, and each update's time on
// this thread (handing the message to the worker, then applying the worker's sums) and in the worker.
const live = {
  get bytesReceived() { return socket.bytesReceived; },
  updateMs: [],
  workerMs: [],
};

function keep(list, value) {
  list.push(value);
  if (list.length > TIMINGS_KEPT) list.shift();
}

function applyUpdate(update) {
  const started = performance.now();
  renderCounts(update.counts);
  renderCosts(update.costs);
  addLivePoint(update.totals);
  if (update.alarmsChanged) refreshFeedSoon();
  if (update.workerMs === null) return; // a first drawing of data already in, not a message
  keep(live.workerMs, update.workerMs);
  keep(live.updateMs, socket.updateMs.at(-1) + performance.now() - started);
}

worker.addEventListener("message", ({ data }) => {
  if (data.type === "update") applyUpdate(data);
  else if (data.type === "drawn") {
    window.cpFleetRendered = performance.now();
    performance.mark("fleet-first-render");
  } else if (data.type === "reply") {
    pending.get(data.request)(data.value);
    pending.delete(data.request);
  }
});
worker.addEventListener("error", (event) => console.error("Fleet worker:", event.message));

const chartBox = document.getElementById("fleet-chart");
new ResizeObserver(() => chart?.setSize({ width: chartBox.clientWidth, height: 220 })).observe(chartBox);
makeChart(chartBox)
  .then((made) => { chart = made; return loadHistory(); })
  .catch((error) => console.warn("Fleet history:", error.message));

// For the browser tests and benchmarks/dashboard.py. The fleet's data lives in the worker: entry()
// and pixel() ask it (a node's fleet entry; a device pixel of the heatmap as RGBA), as promises.
window.cpFleet = {
  heatmap,
  live,
  entry: (node) => ask({ type: "inspect", node: String(node) }),
  pixel: (x, y) => ask({ type: "pixel", x, y }),
};
