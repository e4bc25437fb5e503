// The node page's per-GPU charts from the chart API (15 min, 24 h, 30 days), the 15-minute window kept
// live from the node stream's samples (addLiveSample), one legend for all of them.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { api, escapeHtml, toast } from "./api.js";
import { applyDataStyles } from "./data-styles.js";
import { page } from "./node-page.js";
import { cssVar } from "./scale.js";
import { isDark } from "./theme.js";
import { chartTimeOptions, formatTick, formatWhen } from "./when.js";

const LIVE_WINDOW = "15m";
const LIVE_SPAN_S = 15 * 60;
const REFRESH_LONG_WINDOWS_MS = 5 * 60 * 1000; // their points are 5 min and 2 h apart

// Okabe and Ito's palette: told apart with the common colour-vision deficiencies. Its black and its
// yellow swap for readable ones on each theme's background; a ninth GPU onwards is dashed.
const PALETTE = {
  light: ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#1B1F24", "#B39C00"],
  dark: ["#56B4E9", "#E69F00", "#2BC29A", "#E08DBF", "#3D8FD6", "#FF7F3F", "#E6E9EE", "#F0E442"],
};
// How each chart shows its metric: the API's unit, or a friendlier one.
// Scales start at zero (a 50 W dip is then as large as it is), up to the GPU's own limit where
// there is one; temperature, whose zero means nothing here, spans at least MIN_TEMP_SPAN_C.
const DISPLAY = {
  util_gpu: { unit: "%", digits: 0, top: () => 100 },
  util_mem: { unit: "%", digits: 0, top: () => 100 },
  power_w: { unit: "W", digits: 0, top: () => page.limits.power_w },
  temp_c: { unit: "°C", digits: 0 },
  mem_used_mib: { unit: "GiB", digits: 1, factor: 1 / 1024, top: () => page.limits.memory_gib },
  sm_clock_mhz: { unit: "MHz", digits: 0, top: () => 0 },
};
const MIN_TEMP_SPAN_C = 20;
const SPAN_S = { [LIVE_WINDOW]: LIVE_SPAN_S, "24h": 24 * 3600, "30d": 30 * 24 * 3600 };

let currentWindow = page.window;
const charts = new Map(); // metric → {figure, data, plot}
const liveBuffer = []; // [t, {gpu index: {metric: value}}] of the last 15 minutes, newest last
const hidden = new Set(); // series (1-based) the reader switched off in the legend

function rootPx() {
  return parseFloat(getComputedStyle(document.documentElement).fontSize);
}

/** Wide charts get taller, within what keeps two rows of them on a screen. */
function chartSize(figure) {
  const width = figure.querySelector(".plot").clientWidth;
  const px = rootPx();
  return { width, height: Math.round(Math.min(Math.max(width * 0.38, px * 10), px * 16)) };
}

function format(metric, value) {
  const display = DISPLAY[metric];
  return value === null || value === undefined ? "–" : `${value.toFixed(display.digits)} ${display.unit}`;
}

function palette() {
  return PALETTE[isDark() ? "dark" : "light"];
}

/** The x axis always spans the whole window, so that missing data shows as a gap, not a zoom. */
function windowRange(u) {
  const newest = u.data[0].at(-1) ?? 0;
  const end = Math.max(Date.now() / 1000, newest);
  return [end - SPAN_S[currentWindow], end];
}

function valueRange(display, low, high) {
  if (display.top) return [0, Math.max(display.top() ?? 0, high ?? 0) * 1.02 || 1];
  if (low === null || high === null) return [0, MIN_TEMP_SPAN_C * 5];
  const middle = (low + high) / 2;
  const half = Math.max(MIN_TEMP_SPAN_C, high - low) / 2 + 2;
  return [Math.floor(middle - half), Math.ceil(middle + half)];
}

const measure = document.createElement("canvas").getContext("2d");
function axisWidth(font, values) {
  measure.font = font;
  return Math.ceil(Math.max(0, ...(values ?? []).map((v) => measure.measureText(v ?? "").width))) + 14;
}

/** On the chart under the pointer: the moment and every shown GPU's value (the other charts show
 *  the same moment through the synced cursor). */
function tooltip(metric) {
  let tip = null;
  let over = false;
  return {
    hooks: {
      init: (u) => {
        tip = u.over.appendChild(Object.assign(document.createElement("div"), { className: "chart-tip", hidden: true }));
        u.over.addEventListener("mouseenter", () => { over = true; });
        u.over.addEventListener("mouseleave", () => { over = false; tip.hidden = true; });
      },
      setCursor: (u) => {
        const i = u.cursor.idx;
        if (!over || i === null || i === undefined) { tip.hidden = true; return; }
        const colours = palette();
        tip.innerHTML = `<div class="when">${escapeHtml(formatWhen(new Date(u.data[0][i] * 1000)))}</div>` + page.gpus
          .map((index, s) => (u.series[s + 1].show
            ? `<div><span class="swatch" data-colour="${colours[s % colours.length]}"></span>GPU ${escapeHtml(index)} <b>${format(metric, u.data[s + 1][i])}</b></div>`
            : ""))
          .join("");
        applyDataStyles(tip);
        tip.hidden = false;
        const room = u.over.clientWidth - u.cursor.left;
        tip.style.left = `${room > tip.offsetWidth + 16 ? u.cursor.left + 12 : u.cursor.left - tip.offsetWidth - 12}px`;
        tip.style.top = `${Math.min(u.cursor.top, Math.max(0, u.over.clientHeight - tip.offsetHeight))}px`;
      },
    },
  };
}

function makePlot(metric, figure, data) {
  const colours = palette();
  const px = rootPx();
  const font = `${Math.round(px * 0.8)}px ${cssVar("--font") || "system-ui"}`;
  const axis = { font, stroke: cssVar("--muted"), grid: { stroke: cssVar("--border"), width: 1 }, ticks: { stroke: cssVar("--border"), width: 1 } };
  const display = DISPLAY[metric];
  const options = {
    ...chartTimeOptions(uPlot),
    ...chartSize(figure),
    legend: { show: false }, // one legend for all charts, above them
    cursor: { sync: { key: `node-${page.node}` }, points: { size: Math.round(px * 0.5) } },
    scales: { x: { time: true, range: windowRange }, y: { range: (_, low, high) => valueRange(display, low, high) } },
    axes: [
      { ...axis, size: Math.round(px * 2.2), space: px * 5,
        values: (_, ticks) => ticks.map((t) => formatTick(new Date(t * 1000), SPAN_S[currentWindow] > 86400)) },
      { ...axis, size: (u, values) => axisWidth(font, values) },
    ],
    series: [
      {},
      ...page.gpus.map((index, i) => ({
        label: `GPU ${index}`,
        show: !hidden.has(i + 1),
        stroke: colours[i % colours.length],
        dash: i >= colours.length ? [6, 4] : undefined,
        width: Math.max(1.5, px / 10),
        points: { show: false },
      })),
    ],
    plugins: [tooltip(metric)],
  };
  return new uPlot(options, data, figure.querySelector(".plot"));
}

/** The colour key of every chart; a click shows or hides that GPU everywhere. */
function renderLegend() {
  const colours = palette();
  const legend = document.getElementById("chart-legend");
  legend.innerHTML = page.gpus.map((index, i) => `<button type="button" data-series="${i + 1}" aria-pressed="${!hidden.has(i + 1)}">
    <span class="swatch" data-colour="${colours[i % colours.length]}"></span>GPU ${escapeHtml(index)}</button>`).join("");
  applyDataStyles(legend);
}

function toggleSeries(event) {
  const button = event.target.closest("button[data-series]");
  if (!button) return;
  const series = Number(button.dataset.series);
  const show = hidden.has(series);
  if (show) hidden.delete(series);
  else hidden.add(series);
  button.setAttribute("aria-pressed", String(show));
  for (const entry of charts.values()) entry.plot.setSeries(series, { show });
}

function emptyData() {
  return [[], ...page.gpus.map(() => [])];
}

/** The chart API's answer as uPlot's columns: the times every GPU has a point at, and each GPU's
 *  mean there (null where that GPU has none, which draws a gap: no data is not zero). */
function columns(metric, answer) {
  const factor = DISPLAY[metric].factor ?? 1;
  const times = [...new Set(answer.gpus.flatMap((gpu) => gpu.points.map((point) => point[0])))].sort((a, b) => a - b);
  const position = new Map(times.map((t, i) => [t, i]));
  const series = new Map(answer.gpus.map((gpu) => [gpu.index, gpu.points]));
  return [times, ...page.gpus.map((index) => {
    const column = new Array(times.length).fill(null);
    for (const [t, , mean] of series.get(index) ?? []) column[position.get(t)] = mean * factor;
    return column;
  })];
}

function appendPoint(metric, data, t, gpus) {
  if (data[0].length && t <= data[0].at(-1)) return false;
  const factor = DISPLAY[metric].factor ?? 1;
  data[0].push(t);
  page.gpus.forEach((index, i) => {
    const value = gpus[index]?.[metric];
    data[i + 1].push(value === null || value === undefined ? null : value * factor);
  });
  while (data[0].length && data[0][0] < t - LIVE_SPAN_S) for (const column of data) column.shift();
  return true;
}

async function loadWindow(name) {
  currentWindow = name;
  for (const button of document.querySelectorAll("[data-window]")) button.setAttribute("aria-pressed", String(button.dataset.window === name));
  const url = new URL(location.href);
  url.searchParams.set("window", name);
  history.replaceState(null, "", url);
  const status = document.getElementById("chart-status");
  status.textContent = "loading…";
  try {
    const answers = await Promise.all(page.charts.map((chart) => api("GET", `nodes/${page.node}/telemetry?window=${name}&metric=${chart.metric}`)));
    if (name !== currentWindow) return; // the user picked another window meanwhile
    let points = 0;
    page.charts.forEach((chart, i) => {
      const entry = charts.get(chart.metric);
      entry.data = columns(chart.metric, answers[i]);
      points += entry.data[0].length;
      if (name === LIVE_WINDOW) for (const [t, gpus] of liveBuffer) appendPoint(chart.metric, entry.data, t, gpus);
      entry.plot.setData(entry.data);
    });
    const source = { raw: "raw samples", minute: "1-minute rollups", hour: "hourly rollups" }[answers[0].source] ?? answers[0].source;
    status.textContent = points || (name === LIVE_WINDOW && liveBuffer.length)
      ? `${name === LIVE_WINDOW ? "live, " : ""}from ${source}, ${answers[0].step_s} s per point`
      : "no telemetry stored for this window";
  } catch (error) {
    status.textContent = "could not load";
    toast(`Charts: ${error.message}`);
  }
}

/** One sample of the node stream's (its GPUs' values, copied): kept for the live window, drawn on
 *  every chart while that window is shown. */
export function addLiveSample(t, gpus) {
  liveBuffer.push([t, gpus]);
  while (liveBuffer.length && liveBuffer[0][0] < t - LIVE_SPAN_S) liveBuffer.shift();
  if (currentWindow === LIVE_WINDOW) {
    for (const [metric, entry] of charts) if (appendPoint(metric, entry.data, t, gpus)) entry.plot.setData(entry.data);
  }
}

function buildCharts() {
  renderLegend();
  for (const chart of page.charts) {
    const figure = document.querySelector(`figure[data-metric="${chart.metric}"]`);
    figure.querySelector("figcaption").textContent = `${chart.title} (${DISPLAY[chart.metric].unit})`;
    const entry = { figure, data: emptyData() };
    entry.plot = makePlot(chart.metric, figure, entry.data);
    charts.set(chart.metric, entry);
    new ResizeObserver(() => entry.plot.setSize(chartSize(figure))).observe(figure);
  }
}

function remakeCharts() {
  renderLegend();
  for (const [metric, entry] of charts) {
    entry.plot.destroy();
    entry.plot = makePlot(metric, entry.figure, entry.data);
  }
}

export function startCharts() {
  document.getElementById("chart-legend").addEventListener("click", toggleSeries);
  window.addEventListener("themechange", remakeCharts);
  window.addEventListener("timezonechange", remakeCharts); // ticks fall on other hours
  for (const button of document.querySelectorAll("[data-window]")) button.addEventListener("click", () => loadWindow(button.dataset.window));
  setInterval(() => { if (currentWindow !== LIVE_WINDOW && !document.hidden) loadWindow(currentWindow); }, REFRESH_LONG_WINDOWS_MS);
  buildCharts();
  loadWindow(currentWindow);
}
