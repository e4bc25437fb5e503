// Starts the fleet page's worker (fleet-worker.js) as early as the page allows: the page loads this
// module with `async` from its <head>, so the worker and its socket start while the rest of the page
// is parsed. fleet.js calls it again and gets the same worker: this module may be loaded twice (the
// page names the hashed file, fleet.js imports the plain one), so the worker is kept on `window`.

export function startFleetWorker() {
  window.cpFleetWorker ??= new Worker(new URL("./fleet-worker.js", import.meta.url), { type: "module" });
  return window.cpFleetWorker;
}

startFleetWorker();
