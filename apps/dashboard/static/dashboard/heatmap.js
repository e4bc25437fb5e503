// The fleet heatmap: one cell per GPU on a canvas (8,000 DOM elements would cost far more to
// update), nodes as blocks of their GPUs, grouped under their leaf switch. A node with open alarms
// is outlined in its worst severity's colour, thicker the worse it is (so the outline does not rely
// on colour alone); a straggler GPU gets a cell outline. Hover shows the values; click opens the node.
// A node that is unreachable or stopped reporting is drawn without colour (its last values are not
// its values now), and its hover says how old they are.
//
// Two halves, so that the page's main thread never draws: `Heatmap` (the page) places the blocks,
// since only the page knows its width and fonts, and answers the mouse; `HeatPainter` (the page's
// worker, fleet-worker.js, on the canvas's OffscreenCanvas) holds the fleet's data and draws it.

import { escapeHtml } from "./api.js";
import { colourOf, cssVar } from "./scale.js";
import { isStale } from "./stale.js";

export const METRICS = {
  // `at`: the value's place in a cell of the fleet stream's `heat` (apps/telemetry/live.py HEAT_FIELDS)
  util: { label: "Utilization", unit: "%", at: 0, low: 0, high: () => 100 },
  power: { label: "Power", unit: "W", at: 1, low: 0, high: (tops) => tops.power },
  temp: { label: "Temperature", unit: "°C", at: 2, low: 25, high: () => 95 },
  mem: { label: "Memory used", unit: "GiB", at: 3, low: 0, high: (tops) => tops.mem },
  errors: { label: "Open alarms on the GPU", unit: "", low: 0, high: () => 1 },
};

const OUTLINE_WIDTH = { critical: 3, error: 2, warning: 1.5, info: 1 };
const MAX_CELL_PX = 44; // a few nodes on a wall screen still make a readable grid
const MAX_HEIGHT_SHARE = 0.62; // of the window: the charts and failures stay in view on a wall screen
const EDGE_PX = 4; // room for the thickest outline of a node at the canvas's left or right edge

function rootFontPx() {
  return parseFloat(getComputedStyle(document.documentElement).fontSize);
}

/** Whether a fleet entry's values are those of now: its node reachable and reporting. */
export function isCurrent(entry) {
  return Boolean(entry) && entry.liveness !== "unreachable" && !isStale(entry.ts);
}

/** The page's colours and font as the painter needs them (a worker cannot read CSS). */
export function heatmapTheme() {
  return {
    empty: cssVar("--cell-empty"),
    outline: cssVar("--outline"),
    label: cssVar("--muted"),
    font: `${Math.round(0.8 * rootFontPx())}px ${cssVar("--font")}`,
    severity: Object.fromEntries(Object.keys(OUTLINE_WIDTH).map((level) => [level, cssVar(`--${level}`)])),
  };
}

/** The page's half. `painter`: {place(placement), setMetric(metric), inspect(nodeId) → Promise of the
 *  node's fleet entry, staleWords(ts) → how old values from `ts` are, in words}; fleet.js passes one
 *  that posts to the worker. */
export class Heatmap {
  constructor(canvas, tip, layout, painter) {
    this.canvas = canvas;
    this.tip = tip;
    this.layout = layout;
    this.painter = painter;
    this.blocks = []; // [{node, x, y, cell, gpus}] in drawing order, for hit testing
    this.scale = window.devicePixelRatio || 1;
    this.hovered = null;
    canvas.addEventListener("mousemove", (event) => this.hover(event));
    canvas.addEventListener("mouseleave", () => { this.hovered = null; this.tip.hidden = true; });
    canvas.addEventListener("click", (event) => {
      const hit = this.hit(event);
      if (hit) location.assign(`/nodes/${hit.block.node.id}/`);
    });
    new ResizeObserver(() => this.resize()).observe(canvas.parentElement);
  }

  /** Pick the largest cell size whose grid fits the width and a share of the window's height. */
  resize() {
    const width = this.canvas.parentElement.clientWidth;
    if (!width) return;
    let placed = null;
    for (let cell = MAX_CELL_PX; cell >= 3; cell -= 1) {
      placed = this.place(width, cell);
      if (placed.height <= window.innerHeight * MAX_HEIGHT_SHARE) break;
    }
    this.blocks = placed.blocks;
    this.scale = window.devicePixelRatio || 1;
    this.canvas.style.height = `${placed.height}px`;
    this.painter.place({
      blocks: placed.blocks.map(({ node, x, y, cell, gpus }) => ({ id: node.id, x, y, cell, gpus })),
      labels: placed.labels,
      width,
      height: placed.height,
      ratio: this.scale,
    });
  }

  place(width, cell) {
    const gap = Math.max(2, Math.round(cell / 2));
    const labelPx = Math.round(1.3 * rootFontPx());
    const blocks = [];
    const labels = [];
    let y = 0;
    for (const group of this.layout) {
      labels.push({ text: `${group.leaf} · ${group.nodes.length} nodes`, y: y + labelPx - 5 });
      y += labelPx;
      let x = EDGE_PX;
      for (const node of group.nodes) {
        const blockWidth = node.gpus * cell;
        if (x > EDGE_PX && x + blockWidth > width - EDGE_PX) { x = EDGE_PX; y += cell + gap; }
        blocks.push({ node, x, y, cell, gpus: node.gpus });
        x += blockWidth + gap;
      }
      y += cell + gap * 2;
    }
    return { blocks, labels, height: y };
  }

  setMetric(metric) { this.painter.setMetric(metric); }

  hit(event) {
    const bounds = this.canvas.getBoundingClientRect();
    const x = event.clientX - bounds.left;
    const y = event.clientY - bounds.top;
    for (const block of this.blocks) {
      if (y >= block.y && y < block.y + block.cell && x >= block.x && x < block.x + block.gpus * block.cell) {
        return { block, gpu: Math.floor((x - block.x) / block.cell), x, y };
      }
    }
    return null;
  }

  async hover(event) {
    const hit = this.hit(event);
    this.hovered = hit;
    if (!hit) { this.tip.hidden = true; return; }
    const entry = (await this.painter.inspect(hit.block.node.id)) ?? {};
    if (this.hovered !== hit) return; // the mouse moved on while the worker answered
    const cell = entry.heat?.[hit.gpu] ?? [];
    const [util, power, temp, mem] = [0, 1, 2, 3].map((at) => cell[at]);
    const show = (value, unit) => (value === null || value === undefined ? "–" : `${value} ${unit}`);
    const current = isCurrent(entry);
    const values = [`Utilization ${show(util, "%")} · Power ${show(power, "W")}`, `Temperature ${show(temp, "°C")} · Memory ${show(mem, "GiB")}`];
    const lines = [
      `<strong>${escapeHtml(hit.block.node.hostname)}</strong> GPU ${hit.gpu}`,
      escapeHtml(`${entry.lifecycle ?? ""} · ${entry.liveness ?? ""}`),
      ...(current ? values : [`<span class="stale">${values.join("<br>")}</span>`, `<span class="age">not current: ${escapeHtml(this.painter.staleWords(entry.ts ?? null))}</span>`]),
    ];
    if (current && !entry.heat?.[hit.gpu]) lines.push("This GPU is not reporting.");
    if (entry.alarms) lines.push(`${entry.alarms} open alarm${entry.alarms > 1 ? "s" : ""} (worst: ${entry.severity})`);
    if (entry.straggler_gpus?.includes(hit.gpu)) lines.push("Flagged as a straggler");
    this.tip.innerHTML = lines.join("<br>");
    this.tip.hidden = false;
    const wrap = this.canvas.parentElement.clientWidth;
    this.tip.style.left = `${Math.min(hit.x + 14, wrap - this.tip.offsetWidth - 4)}px`;
    this.tip.style.top = `${hit.y + 14}px`;
  }
}

/** The worker's half: draws the fleet (entries by node id, as the fleet stream holds them) on a
 *  canvas (an OffscreenCanvas in the worker) in the places the page chose. */
export class HeatPainter {
  constructor(canvas, tops, theme) {
    this.canvas = canvas;
    this.context = canvas.getContext("2d");
    this.tops = tops;
    this.theme = theme;
    this.metric = "util";
    this.fleet = {};
    this.blocks = [];
    this.labels = [];
    this.scale = 1;
  }

  get placed() { return this.blocks.length > 0; }

  place({ blocks, labels, width, height, ratio }) {
    this.blocks = blocks;
    this.labels = labels;
    this.scale = ratio;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    this.draw();
  }

  setTheme(theme) { this.theme = theme; this.draw(); }
  setMetric(metric) { this.metric = metric; this.draw(); }
  setData(fleet) { this.fleet = fleet; }

  valueOf(entry, gpu) {
    if (!entry) return null;
    if (this.metric === "errors") {
      if (entry.alarm_gpus?.includes(gpu)) return 1;
      return entry.alarms ? 0.5 : 0; // a node-wide alarm (InfiniBand, liveness) shades all its GPUs
    }
    return entry.heat?.[gpu]?.[METRICS[this.metric].at] ?? null;
  }

  draw() {
    if (!this.placed) return;
    const context = this.context;
    const { low, high } = METRICS[this.metric];
    const top = high(this.tops);
    const { empty, outline, severity: severityColour } = this.theme;
    context.setTransform(this.scale, 0, 0, this.scale, 0, 0);
    context.clearRect(0, 0, this.canvas.width, this.canvas.height);
    context.font = this.theme.font;
    context.fillStyle = this.theme.label;
    for (const label of this.labels) context.fillText(label.text, EDGE_PX, label.y);
    // Cells are gathered by colour and each colour filled once: 8,000 fillStyle changes cost several
    // times what a few hundred fills of one path each do.
    const byColour = new Map();
    for (const block of this.blocks) {
      const entry = this.fleet[block.id];
      const current = isCurrent(entry);
      for (let gpu = 0; gpu < block.gpus; gpu += 1) {
        const value = current ? this.valueOf(entry, gpu) : null;
        const colour = value === null ? empty : colourOf(value, low, top);
        let cells = byColour.get(colour);
        if (!cells) byColour.set(colour, (cells = new Path2D()));
        cells.rect(block.x + gpu * block.cell, block.y, block.cell - 1, block.cell - 1);
      }
    }
    for (const [colour, cells] of byColour) {
      context.fillStyle = colour;
      context.fill(cells);
    }
    for (const block of this.blocks) {
      const entry = this.fleet[block.id];
      const reachable = entry?.liveness !== "unreachable";
      if (entry?.straggler_gpus?.length) {
        context.strokeStyle = outline;
        context.lineWidth = 1.5;
        for (const gpu of entry.straggler_gpus) {
          context.strokeRect(block.x + gpu * block.cell + 0.75, block.y + 0.75, block.cell - 2.5, block.cell - 2.5);
        }
      }
      if (entry?.severity || !reachable) {
        const severity = reachable ? entry.severity : "critical";
        context.strokeStyle = severityColour[severity];
        context.lineWidth = OUTLINE_WIDTH[severity];
        context.setLineDash(reachable ? [] : [3, 2]);
        const pad = context.lineWidth / 2 + 0.5;
        context.strokeRect(block.x - pad, block.y - pad, block.gpus * block.cell - 1 + 2 * pad, block.cell - 1 + 2 * pad);
        context.setLineDash([]);
      }
    }
  }

  /** RGBA of one device pixel (for the browser tests, which cannot read a canvas the worker owns). */
  pixel(x, y) {
    return Array.from(this.context.getImageData(x, y, 1, 1).data);
  }
}
