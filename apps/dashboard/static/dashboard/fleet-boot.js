// The fleet page's start, loaded with `async` from the top of its HTML so that it runs while the
// rest of the page is still being parsed: it starts the page's worker (fleet-worker.js), which
// parses, merges and draws the fleet, and opens the page's socket, whose messages it hands to the
// worker as text. fleet.js, the rest of the page, gets both from startFleet() once it has loaded;
// the page keeps them on `window`, since this module may be loaded twice (the page names the hashed
// file, fleet.js imports the plain one).

import { LiveSocket } from "./live.js";

export function startFleet() {
  if (!window.cpFleetStart) {
    const worker = new Worker(new URL("./fleet-worker.js", import.meta.url), { type: "module" });
    const socket = new LiveSocket([{ subscribe: "fleet" }], null, {
      onText: (text) => worker.postMessage({ type: "text", text }),
    });
    window.cpFleetStart = { worker, socket };
  }
  return window.cpFleetStart;
}

startFleet();
