// The fleet page's worker: it holds the page's ws/live socket, merges the fleet stream into its
// copy of the fleet, draws the heatmap on the canvas the page handed over (an OffscreenCanvas) and
// sends the page only what it shows as text: counts, costs and the chart's totals. At 1,000 nodes a
// delta is ~200 KB of JSON touching ~8,000 cells; parsing, merging and drawing it here leaves the
// page's main thread free for the user (a wall screen must still scroll and hover while it updates).
//
// The page starts this worker from the top of its HTML (fleet-boot.js), and the socket opens as
// soon as the worker runs: the snapshot is on its way while the page is still being parsed, and is
// drawn as soon as the page has handed over the canvas and placed the heatmap.
//
// Messages from the page: init {canvas, tops, theme, nodes, pricing}, place {placement}, metric
// {metric}, theme {theme}, inspect {request, node}, pixel {request, x, y}. To the page (only after
// init, when it listens): drawn (the first render is on the canvas), update {kind, counts, costs,
// totals, alarmsChanged, bytes, workerMs}, status {state, text}, signed-out, reply {request, value}.

import { HeatPainter } from "./heatmap.js";
import { LiveSocket } from "./live.js";
import { alarmsChanged, fleetTotals, hourlyCosts, stateCounts } from "./fleet-summary.js";

let painter = null; // from init
let nodesById = {};
let pricing = null;
let drawn = false;
const outbox = []; // what the socket said before the page listened (a worker's early messages are lost)

function tell(message) {
  if (painter) postMessage(message);
  else outbox.push(message);
}

function render(kind, message) {
  if (!painter || !live.fleet) return;
  painter.setData(live.fleet);
  painter.draw();
  if (!drawn && painter.placed) {
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
    bytes: live.bytesReceived,
    // This message's parse and merge, the drawing and the sums above, in the worker (null: a render
    // of data already in, once the page placed the heatmap).
    workerMs: message ? performance.now() - live.messageStartedAt : null,
  });
}

const live = new LiveSocket([{ subscribe: "fleet" }], render, {
  onStatus: (state, text) => tell({ type: "status", state, text }),
  onSignedOut: () => tell({ type: "signed-out" }),
});

const handlers = {
  init({ canvas, tops, theme, nodes, pricing: prices }) {
    painter = new HeatPainter(canvas, tops, theme);
    nodesById = nodes;
    pricing = prices;
    for (const message of outbox.splice(0)) postMessage(message);
  },
  place({ placement }) {
    painter.place(placement);
    if (!drawn) render("snapshot", null);
  },
  metric({ metric }) { painter.setMetric(metric); },
  theme({ theme }) { painter.setTheme(theme); },
  inspect({ request, node }) { postMessage({ type: "reply", request, value: live.fleet?.[node] ?? null }); },
  pixel({ request, x, y }) { postMessage({ type: "reply", request, value: painter.pixel(x, y) }); },
};

self.addEventListener("message", ({ data }) => handlers[data.type](data));
