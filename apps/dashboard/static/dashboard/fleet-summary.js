// What the fleet page shows beside the heatmap, computed from the fleet stream's entries (by node
// id): node counts by state, cost per hour and the fleet's totals for the hour chart. Pure
// functions, run in the page's worker (fleet-worker.js) on every update.

import { isStale } from "./stale.js";

const IDLE_BELOW_UTIL = 10; // % : a GPU under this is idle, and its hour is money spent on nothing

/** Nodes by lifecycle and by liveness: {lifecycle: {state: n}, liveness: {state: n}}. */
export function stateCounts(fleet) {
  const lifecycle = {};
  const liveness = {};
  for (const entry of Object.values(fleet)) {
    lifecycle[entry.lifecycle] = (lifecycle[entry.lifecycle] ?? 0) + 1;
    liveness[entry.liveness] = (liveness[entry.liveness] ?? 0) + 1;
  }
  return { lifecycle, liveness };
}

/** Whether an entry's values count as now: its node online, its newest sample not stale (stale.js). */
function reporting(entry) {
  return entry.liveness === "online" && !isStale(entry.ts);
}

/** Cost per hour, in the price book's currency: every GPU not retired (apps/costs/rates.py explains
 *  why), the energy the reporting nodes draw, and the GPU-hours of idle GPUs. `nodesById`: the layout's
 *  nodes ({type, cluster, gpus}); `pricing`: {gpu_hour by node type, kw_hour by cluster}. */
export function hourlyCosts(fleet, nodesById, pricing) {
  let capacity = 0;
  let energy = 0;
  let idle = 0;
  for (const [id, entry] of Object.entries(fleet)) {
    const node = nodesById[id];
    if (!node) continue;
    const gpuHour = pricing.gpu_hour[node.type] ?? 0;
    if (entry.lifecycle !== "retired") capacity += gpuHour * node.gpus;
    if (!reporting(entry)) continue;
    if (entry.power_w_total) energy += (entry.power_w_total / 1000) * (pricing.kw_hour[node.cluster] ?? 0);
    for (const cell of entry.heat ?? []) if (cell && cell[0] !== null && cell[0] < IDLE_BELOW_UTIL) idle += gpuHour;
  }
  return { capacity, energy, idle };
}

/** The reporting fleet's mean GPU utilization (%, null when no GPU reports it) and total power (kW). */
export function fleetTotals(fleet) {
  let utilSum = 0;
  let gpus = 0;
  let power = 0;
  for (const entry of Object.values(fleet)) {
    if (!reporting(entry) || entry.util_gpu_mean === undefined) continue;
    if (entry.util_gpu_mean !== null) { utilSum += entry.util_gpu_mean * entry.gpus; gpus += entry.gpus; }
    power += entry.power_w_total ?? 0;
  }
  return { util: gpus ? utilSum / gpus : null, power: power / 1000 };
}

/** Whether a fleet delta changed any node's alarms (the failures list is then fetched again). */
export function alarmsChanged(delta) {
  return Object.values(delta.fleet ?? {}).some((patch) => "alarms" in patch || "severity" in patch);
}
