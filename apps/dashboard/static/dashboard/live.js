// The page's one WebSocket to ws/live (docs/live-stream.md): subscribes to the streams the page
// shows, merges snapshots and deltas into `live.fleet` and `live.nodes`, reconnects by itself with
// backoff and jitter, and keeps the status badge in the top bar honest: "live", "stale" when nothing
// has arrived for STALE_AFTER_MS, "reconnecting", or "stopped" when the server refused the user.
//
// Two parts: `LiveState` holds and merges the streams' data; `LiveSocket` is the connection and
// the badge, and hands each message to a LiveState of its own, or, given `onText`, passes the text
// on unparsed (the fleet page parses and merges in its worker: fleet-boot.js).

const STALE_AFTER_MS = 5000;
export const TIMINGS_KEPT = 600; // main-thread ms of the last updates, for the benchmarks (bounded: wall screens run for weeks)
const BACKOFF_MS = [500, 1000, 2000, 5000, 10000, 20000];
const SIGNED_OUT = 4401;
const FORBIDDEN = 4403;

export function merge(into, patch) {
  for (const [key, value] of Object.entries(patch)) {
    if (value !== null && typeof value === "object" && !Array.isArray(value) &&
        into[key] !== null && typeof into[key] === "object" && !Array.isArray(into[key])) {
      merge(into[key], value);
    } else {
      into[key] = value;
    }
  }
}

/** The top bar's badge: "live", "stale", "reconnecting", "stopped"... (LiveSocket's default onStatus). */
export function showLiveStatus(state, text) {
  const badge = document.getElementById("live-status");
  if (!badge) return;
  badge.hidden = false;
  if (badge.dataset.state !== state || badge.textContent !== text) {
    badge.dataset.state = state;
    badge.textContent = text;
    document.body.dataset.live = state;
  }
}

/** To the sign-in page, and back here after it (LiveSocket's default onSignedOut). */
export function signInAgain() {
  location.assign(`/login/?next=${encodeURIComponent(location.pathname + location.search)}`);
}

/** The streams' data: `fleet` (entries by node id, once its snapshot is in) and `nodes` (state by id). */
export class LiveState {
  constructor() {
    this.fleet = null;
    this.nodes = {};
  }

  /** Merge one message of the server; its type ("snapshot" or "delta") if it carried data, else null. */
  apply(message) {
    if (message.type === "snapshot") {
      if (message.stream === "fleet") this.fleet = message.nodes;
      else if (message.stream === "node") this.nodes[message.node] = message.state;
    } else if (message.type === "delta") {
      if (message.fleet && this.fleet) merge(this.fleet, message.fleet);
      for (const [id, patch] of Object.entries(message.nodes ?? {})) {
        if (this.nodes[id]) merge(this.nodes[id], patch);
      }
    } else {
      if (message.type === "error") console.warn("ws/live refused a message:", message.reason, message.message);
      return null;
    }
    return message.type;
  }
}

export class LiveSocket {
  /** streams: e.g. [{subscribe: "fleet"}, {subscribe: "node", node: 7}, {subscribe: "failures"}].
   *  onUpdate(kind, payload) is called after each snapshot ("snapshot") or delta ("delta") is merged.
   *  quiet: the streams are silent while nothing happens (the failures feed alone), so silence is not
   *  "stale"; the badge then follows the socket only.
   *  onStatus(state, text) shows the socket's state; onSignedOut() is called when the session is gone.
   *  onText(text): each message as it came, instead of parsing and merging it here (onUpdate unused). */
  constructor(streams, onUpdate, { quiet = false, onStatus = showLiveStatus, onSignedOut = signInAgain, onText = null } = {}) {
    this.streams = streams;
    this.onUpdate = onUpdate;
    this.quiet = quiet;
    this.onStatus = onStatus;
    this.onSignedOut = onSignedOut;
    this.onText = onText;
    this.data = new LiveState();
    this.state = null;
    this.lastMessageAt = 0;
    this.attempt = 0;
    this.bytesReceived = 0;
    this.updateMs = []; // main-thread time of each message: parse, merge, and the page's own drawing
    this.stopped = false;
    this.connect();
    setInterval(() => this.checkStale(), 1000);
  }

  get fleet() { return this.data.fleet; }
  get nodes() { return this.data.nodes; }

  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    this.socket = new WebSocket(`${scheme}://${location.host}/ws/live`);
    this.setStatus("connecting", "connecting…");
    this.socket.addEventListener("open", () => {
      this.attempt = 0;
      for (const stream of this.streams) this.socket.send(JSON.stringify(stream));
    });
    this.socket.addEventListener("message", (event) => {
      const started = performance.now();
      this.bytesReceived += event.data.length; // characters: the bytes, but for a rare non-ASCII one in a failure text
      this.receive(event.data);
      this.updateMs.push(performance.now() - started);
      if (this.updateMs.length > TIMINGS_KEPT) this.updateMs.shift();
    });
    this.socket.addEventListener("close", (event) => this.closed(event.code));
  }

  receive(text) {
    this.lastMessageAt = performance.now();
    if (this.onText) {
      this.onText(text);
      this.setStatus("live", "live");
      return;
    }
    const message = JSON.parse(text);
    const kind = this.data.apply(message);
    if (kind === null) return;
    this.setStatus("live", "live");
    this.onUpdate(kind, message);
  }

  closed(code) {
    if (code === SIGNED_OUT) {
      this.onSignedOut();
      return;
    }
    if (code === FORBIDDEN) {
      this.stopped = true;
      this.setStatus("stopped", "not allowed: this account has no role or was deactivated");
      return;
    }
    const base = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
    const delay = base / 2 + Math.random() * base;  // jitter: a restarted server is not hit by every page at once
    this.attempt += 1;
    this.setStatus("reconnecting", `reconnecting in ${Math.ceil(delay / 1000)} s`);
    setTimeout(() => this.connect(), delay);
  }

  checkStale() {
    if (this.quiet || this.stopped || this.socket.readyState !== WebSocket.OPEN || !this.lastMessageAt) return;
    const silentFor = performance.now() - this.lastMessageAt;
    if (silentFor > STALE_AFTER_MS) this.setStatus("stale", `stale: no update for ${Math.round(silentFor / 1000)} s`);
  }

  setStatus(state, text) {
    if (this.state === state && this.text === text) return; // "live" is set on every message
    this.state = state;
    this.text = text;
    this.onStatus(state, text);
  }
}
