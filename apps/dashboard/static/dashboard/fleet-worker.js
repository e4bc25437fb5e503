// The fleet page's worker: it parses and merges the fleet stream (the page's socket hands it each
// message's text), draws the heatmap on the canvas the page handed over (an OffscreenCanvas) and
// sends the page only what it shows as text: counts, costs and the chart's totals. At 1,000 nodes a
// delta is ~200 KB of JSON touching ~8,000 cells; parsing, merging and drawing it here leaves the
// page's main thread free for the user (a wall screen must still scroll and hover while it updates).
//
// The first drawing is of the snapshot that came in the page's HTML, unless the socket's own is
// already in; the socket's replaces it when it comes, and its deltas follow.
//
// Messages from the page: text {text} (one ws/live message, from fleet-boot.js; they can come before
// init, and are merged then and drawn once the page has placed the heatmap), init {canvas, snapshot
// (the page's JSON text), tops, theme, nodes, pricing, stale}, place {placement}, metric {metric}, theme
// {theme}, inspect {request, node}, pixel {request, x, y}. To the page, from init on (when it
// listens): drawn (the first render is on the canvas), update {kind, counts, costs, totals,
// alarmsChanged, workerMs}, reply {request, value}.

import { HeatPainter } from "./heatmap.js";
import { LiveState } from "./live.js";
import { configure } from "./stale.js";
import { alarmsChanged, fleetTotals, hourlyCosts, stateCounts } from "./fleet-summary.js";

const live = new LiveState();
let painter = null; // from init
let nodesById = {};
let pricing = null;
let drawn = false;

/** Draw the fleet and send the page its sums. `started`: when the message that changed the fleet
 *  came in (null: a first drawing of what was already in, once the page placed the heatmap). */
function render(kind, message, started) {
  if (!painter?.placed || !live.fleet) return;
  painter.setData(live.fleet);
  painter.draw();
  if (!drawn) {
    drawn = true;
    postMessage({ type: "drawn" });
  }
  postMessage({
    type: "update",
    kind,
    counts: stateCounts(live.fleet),
    costs: pricing.currency ? hourlyCosts(live.fleet, nodesById, pricing) : null,
    totals: fleetTotals(live.fleet),
    alarmsChanged: kind === "snapshot" || alarmsChanged(message),
    workerMs: started === null ? null : performance.now() - started, // parse, merge, drawing and sums
  });
}

const handlers = {
  text({ text }) {
    const started = performance.now();
    const message = JSON.parse(text);
    const kind = live.apply(message);
    if (kind !== null) render(kind, message, started);
  },
  init({ canvas, snapshot, tops, theme, nodes, pricing: prices, stale }) {
    configure(stale); // when values are too old to draw: as the page judges it
    painter = new HeatPainter(canvas, tops, theme);
    nodesById = nodes;
    pricing = prices;
    // The page's own snapshot, unless the socket's (newer) is already in.
    if (!live.fleet) live.apply({ type: "snapshot", stream: "fleet", nodes: JSON.parse(snapshot) });
  },
  place({ placement }) {
    painter.place(placement);
    if (!drawn) render("snapshot", null, null);
  },
  metric({ metric }) { painter.setMetric(metric); },
  theme({ theme }) { painter.setTheme(theme); },
  inspect({ request, node }) { postMessage({ type: "reply", request, value: live.fleet?.[node] ?? null }); },
  pixel({ request, x, y }) { postMessage({ type: "reply", request, value: painter.pixel(x, y) }); },
};

self.addEventListener("message", ({ data }) => handlers[data.type](data));
