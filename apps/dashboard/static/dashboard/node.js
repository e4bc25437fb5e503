// One node: its charts (node-charts.js), its state and GPU values (node-state.js) and failures
// (node-failures.js) kept live from the node stream, and the operators' actions on it.

import { escapeHtml, toast } from "./api.js";
import { BurnInForm } from "./burnin-form.js";
import { ActionDialog, offersOverride, refusal, transition } from "./lifecycle.js";
import { LiveSocket } from "./live.js";
import { addLiveSample, startCharts } from "./node-charts.js";
import { showAllMoves, showFailure, wireFailureActions } from "./node-failures.js";
import { canOperate, page } from "./node-page.js";
import { showGpuValues, showHeader, startStaleMarks } from "./node-state.js";

let lastPointAt = 0;

function liveTelemetry(state) {
  if (!state.ts || state.ts <= lastPointAt) return;
  lastPointAt = state.ts;
  const gpus = structuredClone(state.gpus ?? {});
  addLiveSample(state.ts, gpus);
  showGpuValues(state.ts, gpus);
}

function showState(state) {
  if (showHeader(state)) showAllMoves();
}

startStaleMarks();

const live = new LiveSocket([{ subscribe: "node", node: page.node }], (kind, message) => {
  const state = live.nodes[page.node];
  if (!state) return;
  const patch = kind === "snapshot" ? state : message.nodes?.[page.node];
  if (!patch) return;
  if ("lifecycle" in patch || "liveness" in patch || "alarms" in patch || "severity" in patch) showState(state);
  if ("ts" in patch || "gpus" in patch) liveTelemetry(state);
  for (const id of Object.keys(patch.failures ?? {})) showFailure(state.failures[id]);
});

// Operators' actions ------------------------------------------------------------------------------
if (canOperate && document.getElementById("action-dialog")) {
  const dialog = new ActionDialog();
  const burnIn = new BurnInForm(); // "Start burn-in": a suite to choose, then the run's page

  for (const action of page.actions) {
    const button = document.querySelector(`#node-actions [data-action="${action.name}"]`);
    if (action.name === "start_burn_in") {
      button?.addEventListener("click", () => burnIn.open({ nodes: [{ id: page.node, hostname: page.hostname }] }));
      continue;
    }
    button?.addEventListener("click", async () => {
      const results = await dialog.open({
        title: `${action.label}: ${page.hostname}`,
        summaryHtml: `<p>${escapeHtml(page.hostname)} becomes ${escapeHtml(action.target_label.toLowerCase())}.</p>`,
        reasonRequired: action.reason_required,
        hint: "The reason goes into the node's lifecycle history and the audit log.",
        confirmLabel: action.label,
        danger: action.name !== "return_to_service",
        offerOverride: offersOverride(action),
        perform: async (reason, _onDone, override) => {
          try {
            const node = await transition(page.node, action, reason, override);
            showState({ ...live.nodes[page.node], lifecycle: node.lifecycle, liveness: node.liveness });
            return [{ label: page.hostname, ok: true, message: `now ${page.labels.lifecycle[node.lifecycle].toLowerCase()}` }];
          } catch (error) {
            return [{ label: page.hostname, ok: false, message: refusal(error) }];
          }
        },
      });
      if (results?.[0].ok) toast(`${page.hostname}: ${results[0].message}.`, { ok: true });
    });
  }

  wireFailureActions(dialog, (node) => showState({ ...live.nodes[page.node], lifecycle: node.lifecycle, liveness: node.liveness }));
}

startCharts();
