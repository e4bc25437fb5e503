// The failures page: the list is the server's (_failure_list.html), fetched again with ?partial=1
// when ws/live's failures feed says a failure changed; operators acknowledge and resolve through
// the REST API, which checks their role again, and move a failure's node (quarantine, drain, ...)
// in one click with the failure as the reason.

import { api, toast } from "./api.js";
import { moveForFailure } from "./lifecycle.js";
import { LiveSocket } from "./live.js";
import { localiseTimes } from "./when.js";

const PAGE_SIZE = 50;
const MAX_LIMIT = 500; // the server's cap on one read
const REFRESH_DELAY_MS = 300; // a burst of changes (an XID storm on many nodes) costs one fetch

const feed = document.getElementById("failure-feed");
const filters = document.getElementById("failure-filters");
let timer = null;
// Every read of the list, a re-read or "load more", waits for the one before it: a re-read that
// replaced the list under a page on its way would have that page appended after the wrong rows (one
// left out, or one twice), and a page appended under a re-read would be thrown away with the list.
let reads = Promise.resolve();
let queuedReads = 0; // waiting or under way (aria-busy while any; tests wait on the count)
let refreshQueued = false; // a re-read waiting (not yet started) reads the list as it will be: one is enough
let loadingMore = false;

function rows(root = feed) {
  return [...root.querySelectorAll("#failure-list > li[data-failure]")];
}

function partialUrl(extra) {
  const query = new URLSearchParams(location.search);
  for (const [key, value] of Object.entries(extra)) query.set(key, value);
  query.set("partial", "1");
  return `${location.pathname}?${query}`;
}

async function fetchList(extra) {
  const response = await fetch(partialUrl(extra), { credentials: "same-origin", headers: { Accept: "text/html" } });
  if (response.redirected && new URL(response.url).pathname.startsWith("/login")) location.reload();
  if (!response.ok) throw new Error(`The server answered ${response.status}.`);
  const holder = document.createElement("div");
  holder.innerHTML = await response.text(); // the server's template, escaped there
  localiseTimes(holder);
  return holder;
}

/** Append a page read after the rows of ``root`` (the feed, or a list being read again) without a row
 *  already there, and put the page's "Load more" row (or none) in place of the old one; the count appended. */
function appendPage(root, page) {
  const list = root.querySelector("#failure-list");
  if (!list) return 0; // the list emptied meanwhile
  const shown = new Set(rows(root).map((row) => row.dataset.failure));
  const added = rows(page).filter((row) => !shown.has(row.dataset.failure));
  list.append(...added);
  const next = page.querySelector("#load-more");
  root.querySelector(".load-more-row")?.replaceWith(...(next ? [next.closest(".load-more-row")] : []));
  return added.length;
}

/** Read the list again, as long as it is now, keeping open side-effect lists open and marking the rows
 *  that are new since the last read. Past the server's cap on one read (MAX_LIMIT: rows loaded with
 *  "Load more"), the rest is read a page of up to MAX_LIMIT at a time, so none drops off the list. */
async function refresh() {
  const known = new Set(rows().map((row) => row.dataset.failure));
  const open = new Set([...feed.querySelectorAll("details[open]")].map((d) => d.dataset.sideEffects));
  const count = Math.max(rows().length, PAGE_SIZE);
  const fresh = await fetchList({ limit: Math.min(count, MAX_LIMIT), offset: 0 });
  for (let read = rows(fresh).length; read < count && fresh.querySelector("#load-more"); read = rows(fresh).length) {
    const page = await fetchList({ offset: read, limit: Math.min(count - read, MAX_LIMIT) });
    if (!appendPage(fresh, page)) break; // nothing new on it: the list ends here
  }
  for (const details of fresh.querySelectorAll("details[data-side-effects]")) details.open = open.has(details.dataset.sideEffects);
  for (const row of rows(fresh)) if (known.size && !known.has(row.dataset.failure)) row.classList.add("arrived");
  feed.replaceChildren(...fresh.childNodes);
  feed.dataset.reads = Number(feed.dataset.reads ?? 0) + 1; // how many times the list was read again (tests wait on it)
}

function queueRead(read) {
  const counted = (change) => {
    queuedReads += change;
    feed.dataset.queuedReads = queuedReads;
    feed.setAttribute("aria-busy", String(queuedReads > 0));
  };
  counted(1);
  const done = reads.then(read).finally(() => counted(-1));
  reads = done.catch(() => {}); // a failed read does not stop the next
  return done;
}

function refreshSoon() {
  clearTimeout(timer);
  timer = setTimeout(() => {
    if (refreshQueued) return;
    refreshQueued = true;
    queueRead(() => {
      refreshQueued = false; // a change from now on may be missed by this read: it queues another
      return refresh();
    }).catch((error) => console.warn("Failures list:", error.message));
  }, REFRESH_DELAY_MS);
}

/** The next page after the rows shown when its turn comes (a re-read before it may have changed them),
 *  without a row already shown: a failure that arrived since pushes the rows down a place (the re-read
 *  its live change queued puts the list right after). A click while a page loads is that page's. */
async function loadMore() {
  if (loadingMore) return;
  loadingMore = true;
  document.getElementById("load-more")?.setAttribute("aria-disabled", "true");
  try {
    await queueRead(async () => {
      if (!document.getElementById("failure-list")) return; // the list emptied meanwhile
      appendPage(feed, await fetchList({ offset: rows().length, limit: PAGE_SIZE }));
    });
  } finally {
    loadingMore = false;
    document.getElementById("load-more")?.removeAttribute("aria-disabled");
  }
}

// Operators' actions ------------------------------------------------------------------------------
const dialog = document.getElementById("resolve-dialog");
let resolving = null;

async function act(button, failureId, action, body) {
  button.disabled = true;
  try {
    const failure = await api("POST", `failures/${failureId}/${action}`, body);
    const side = action === "resolve" && failure.side_effect_count ? ` with its ${failure.side_effect_count} side effect(s)` : "";
    toast(`${failure.hostname}: ${failure.title} is ${failure.state}${side}.`, { ok: true });
    refreshSoon();
  } catch (error) {
    toast(error.message);
    button.disabled = false;
  }
}

async function moveNode(button, failureId) {
  button.disabled = true;
  try {
    const node = await moveForFailure(failureId, button.dataset.nodeAction);
    toast(`${node.hostname} is now ${node.lifecycle.replace("_", " ")}, for this failure.`, { ok: true });
    refreshSoon(); // the node's other failures offer other moves now
  } catch (error) {
    toast(error.message);
    button.disabled = false;
  }
}

feed.addEventListener("click", (event) => {
  if (event.target.closest("#load-more")) {
    event.preventDefault();
    loadMore().catch((error) => toast(`Could not load more failures: ${error.message}`));
    return;
  }
  const move = event.target.closest("button[data-node-action]");
  if (move) {
    moveNode(move, move.closest("li[data-failure]").dataset.failure);
    return;
  }
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const failureId = button.closest("li[data-failure]").dataset.failure;
  if (button.dataset.action === "acknowledge") {
    act(button, failureId, "acknowledge");
  } else if (dialog) {
    resolving = { button, failureId };
    document.getElementById("resolve-what").textContent = button.dataset.title;
    dialog.querySelector("textarea").value = "";
    dialog.returnValue = ""; // Escape closes without setting it: a previous "resolve" must not linger
    dialog.showModal();
  }
});

dialog?.addEventListener("close", () => {
  if (dialog.returnValue === "resolve" && resolving) {
    act(resolving.button, resolving.failureId, "resolve", { note: dialog.querySelector("textarea").value });
  }
  resolving = null;
});
document.getElementById("resolve-cancel")?.addEventListener("click", () => dialog.close("cancel"));

// Filters apply as soon as they change (the Apply button is there for the hostname and without JS).
filters.addEventListener("change", (event) => {
  if (event.target.name !== "hostname") filters.requestSubmit();
});

// Live: the failures feed has no state of its own; any snapshot (first or after a reconnect) may
// follow changes this page missed, and any change may add, move or drop a row under these filters.
new LiveSocket([{ subscribe: "failures" }], (kind, message) => {
  if (kind === "snapshot" || message.failures) refreshSoon();
}, { quiet: true });
