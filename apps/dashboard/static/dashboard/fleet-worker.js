// The fleet page's worker: it holds the page's ws/live socket, merges the fleet stream into its
// copy of the fleet, draws the heatmap on the canvas the page handed over (an OffscreenCanvas) and
// sends the page only what it shows as text: counts, costs and the chart's totals. At 1,000 nodes a
// delta is ~200 KB of JSON touching ~8,000 cells; parsing, merging and drawing it here leaves the
// page's main thread free for the user (a wall screen must still scroll and hover while it updates).
//
// Messages from the page: init {canvas, snapshot (the page's JSON text), tops, theme, nodes, pricing},
// place {placement}, metric {metric}, theme {theme}, inspect {request, node}, pixel {request, x, y}.
// To the page: drawn (the first render is on the canvas), update {kind, counts, costs, totals,
// alarmsChanged, bytes, workerMs}, status {state, text}, signed-out, reply {request, value}.

import { HeatPainter } from "./heatmap.js";
import { LiveSocket } from "./live.js";
import { alarmsChanged, fleetTotals, hourlyCosts, stateCounts } from "./fleet-summary.js";

let painter = null;
let fleet = {};
let nodesById = {};
let pricing = null;
let live = null;
let drawn = false;

function render(kind, message = {}) {
  painter.setData(fleet);
  painter.draw();
  if (!drawn && painter.placed) {
    drawn = true;
    postMessage({ type: "drawn" });
  }
  postMessage({
    type: "update",
    kind,
    counts: stateCounts(fleet),
    costs: pricing.currency ? hourlyCosts(fleet, nodesById, pricing) : null,
    totals: fleetTotals(fleet),
    alarmsChanged: kind === "snapshot" || alarmsChanged(message),
    bytes: live?.bytesReceived ?? 0,
    // This message's parse and merge, the drawing and the sums above, in the worker.
    workerMs: kind === "first" ? null : performance.now() - live.messageStartedAt,
  });
}

const handlers = {
  init({ canvas, snapshot, tops, theme, nodes, pricing: prices }) {
    painter = new HeatPainter(canvas, tops, theme);
    nodesById = nodes;
    pricing = prices;
    fleet = JSON.parse(snapshot);
    live = new LiveSocket(
      [{ subscribe: "fleet" }],
      (kind, message) => {
        if (!live.fleet) return;
        fleet = live.fleet;
        render(kind, message);
      },
      {
        onStatus: (state, text) => postMessage({ type: "status", state, text }),
        onSignedOut: () => postMessage({ type: "signed-out" }),
      },
    );
  },
  place({ placement }) {
    painter.place(placement);
    if (!drawn) render("first");
  },
  metric({ metric }) { painter.setMetric(metric); },
  theme({ theme }) { painter.setTheme(theme); },
  inspect({ request, node }) { postMessage({ type: "reply", request, value: fleet[node] ?? null }); },
  pixel({ request, x, y }) { postMessage({ type: "reply", request, value: painter.pixel(x, y) }); },
};

self.addEventListener("message", ({ data }) => handlers[data.type](data));
