// Values that may be old. A value is stale once it is older than the server's threshold (a node
// silent that long is called unreachable: AGENT_UNREACHABLE_AFTER_S); pages show stale values greyed
// (the "stale" class) with their age, never as the values of now. Ages are measured against the
// server's clock, which the page carries (body data-server-time), so a browser whose own clock is off
// does not make fresh values stale or old ones fresh.
//
// On a page the threshold and the clock come from <body>; the fleet page's worker, which has no
// document, is given them (configure). Nothing here needs a page: the worker imports it too.

let staleAfterS = 15;
let skewS = 0; // the server's clock minus this one's, in seconds

/** The threshold and the server's time (Unix seconds) when the page was made. */
export function configure({ staleAfter, serverTime }) {
  if (Number.isFinite(staleAfter)) staleAfterS = staleAfter;
  if (Number.isFinite(serverTime)) skewS = serverTime - Date.now() / 1000;
}

if (typeof document !== "undefined" && document.body) {
  configure({ staleAfter: Number(document.body.dataset.staleAfterS), serverTime: Number(document.body.dataset.serverTime) });
}

/** What a worker needs to judge ages as the page does. */
export function settings() {
  return { staleAfter: staleAfterS, serverTime: Date.now() / 1000 + skewS };
}

/** Seconds since `ts` (Unix seconds) by the server's clock; null for no time at all. */
export function ageS(ts) {
  return ts === null || ts === undefined ? null : Math.max(0, Date.now() / 1000 + skewS - ts);
}

/** Whether a value taken at `ts` is too old to pass for the value of now (no time: it is). */
export function isStale(ts) {
  const age = ageS(ts);
  return age === null || age > staleAfterS;
}

/** An age in words: "40 s", "3 min", "5 h", "2 d". */
export function ageText(seconds) {
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min`;
  if (seconds < 36 * 3600) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}
