// The nodes list. The server filters and puts every matching node's row in the page's data; the
// browser sorts it by any column and draws the rows in view and a margin around them (a thousand
// table rows in the DOM cost most of a second to lay out again on every sort and live update).
// Lifecycle, liveness, alarms, utilization, power and temperature follow the fleet stream; operators
// select rows and run bulk lifecycle actions, with each node's result.

import { escapeHtml, toast } from "./api.js";
import { BurnInForm } from "./burnin-form.js";
import { applyDataStyles } from "./data-styles.js";
import { ActionDialog, offersOverride, refusal, runAll, transition } from "./lifecycle.js";
import { LiveSocket } from "./live.js";
import { ageS, ageText, isStale } from "./stale.js";
import { staleWords, timeHtml } from "./when.js";

const page = JSON.parse(document.getElementById("nodes-page").textContent);
const table = document.getElementById("nodes-table");
const tbody = table?.tBodies[0];
const scroller = document.getElementById("nodes-scroll");
const selectAll = document.getElementById("select-all"); // operators only: the server renders none for viewers
const SEVERITY_RANK = { info: 0, warning: 1, error: 2, critical: 3 };
const LIVE_FIELDS = ["lifecycle", "liveness", "alarms", "severity", "util_gpu_mean", "power_w_total", "temp_c_max"];
const OVERSCAN = 15; // rows drawn beyond the view each way, so that a quick scroll shows no blank
const NAMES_LISTED = 12; // in a bulk action's confirmation; the rest are counted

const byId = new Map(page.rows.map((row) => [String(row.id), row]));
let order = page.rows.slice(); // as shown
const selected = new Set();

// Cells: one function draws each, for the first drawing and for live changes ------------------------
// A node's values are its values now only while it is online and reporting. Otherwise they are its
// last ones: drawn greyed, with their age on hover and in the last-seen column (stale.js), and sorted
// after every current one.
const isCurrent = (row) => row.liveness === "online" && !isStale(row.seen);
const now = (field) => (row) => (isCurrent(row) ? row[field] ?? null : null);
const utilNow = now("util_gpu_mean");
const powerNow = now("power_w_total");
const tempNow = now("temp_c_max");

/** A value as its cell shows it: as it is, or greyed with its age when it is not current. */
function valueHtml(row, field, text) {
  const value = row[field] ?? null;
  if (value === null) return "–";
  return isCurrent(row) ? text(value) : `<span class="stale" title="${escapeHtml(`Not current: ${staleWords(row.seen)}`)}">${text(value)}</span>`;
}

const CELLS = {
  lifecycle: (row) => `<span class="pill lc-${escapeHtml(row.lifecycle)}">${escapeHtml(page.labels.lifecycle[row.lifecycle] ?? row.lifecycle)}</span>`,
  liveness: (row) => `<span class="pill state-${escapeHtml(row.liveness)}">${escapeHtml(page.labels.liveness[row.liveness] ?? row.liveness)}</span>`,
  alarms: (row) => (row.alarms
    ? `<a class="pill sev-${escapeHtml(row.severity)}" href="/nodes/${escapeHtml(row.id)}/#failures">${escapeHtml(row.alarms)} ${escapeHtml(row.severity)}</a>`
    : ""),
  util: (row) => {
    const util = row.util_gpu_mean ?? null;
    return `<span class="util${isCurrent(row) ? "" : " stale"}"><span class="bar"><span data-width-percent="${util ?? 0}"></span></span><span class="num">${valueHtml(row, "util_gpu_mean", (v) => `${Math.round(v)} %`)}</span></span>`;
  },
  power: (row) => valueHtml(row, "power_w_total", (v) => `${(v / 1000).toFixed(1)} kW`),
  temp: (row) => valueHtml(row, "temp_c_max", (v) => `${Math.round(v)} °C`),
  seen: (row) => {
    if (!row.seen) return "never";
    const age = isStale(row.seen) ? ` <span class="age">${ageText(ageS(row.seen))} ago</span>` : "";
    return timeHtml(new Date(row.seen * 1000)) + age;
  },
};

function rowHtml(row, position) {
  const id = escapeHtml(row.id);
  const rack = row.rack ? `${escapeHtml(row.rack)}${row.rack_position === null ? "" : ` <span class="sub">U${escapeHtml(row.rack_position)}</span>`}` : "";
  const classes = [selected.has(String(row.id)) && "selected", row.unmatched && "unmatched"].filter(Boolean).join(" ");
  return `<tr data-node="${id}" aria-rowindex="${position + 2}"${classes ? ` class="${classes}"` : ""}${row.unmatched ? ' title="No longer matches the filters"' : ""}>
    ${selectAll ? `<td class="select"><input type="checkbox" value="${id}" aria-label="Select ${escapeHtml(row.hostname)}"${selected.has(String(row.id)) ? " checked" : ""}></td>` : ""}
    <td class="host"><a href="/nodes/${id}/">${escapeHtml(row.hostname)}</a>${row.serial ? ` <span class="sub">${escapeHtml(row.serial)}</span>` : ""}</td>
    <td>${escapeHtml(row.cluster)}</td><td>${escapeHtml(row.type)}</td><td>${rack}</td><td>${escapeHtml(row.leaf)}</td>
    <td data-k="lifecycle">${CELLS.lifecycle(row)}</td><td data-k="liveness">${CELLS.liveness(row)}</td>
    <td data-k="alarms">${CELLS.alarms(row)}</td><td class="num">${escapeHtml(row.gpus)}</td><td data-k="util">${CELLS.util(row)}</td>
    <td data-k="power" class="num">${CELLS.power(row)}</td><td data-k="temp" class="num">${CELLS.temp(row)}</td>
    <td data-k="seen">${CELLS.seen(row)}</td></tr>`;
}

// Drawing the rows in view ------------------------------------------------------------------------
let rowHeight = 0; // measured from the first row drawn (it follows the font size: 4K wall screens)
let drawn = { first: -1, last: -1 };
let drawPending = false;
const columnCount = table ? table.tHead.rows[0].cells.length : 0;

function spacer(height) {
  return height > 0 ? `<tr class="spacer" aria-hidden="true"><td colspan="${columnCount}" data-height-px="${height}"></td></tr>` : "";
}

function draw(force = false) {
  const height = rowHeight || 32;
  const first = Math.max(0, Math.floor(scroller.scrollTop / height) - OVERSCAN);
  const last = Math.min(order.length, Math.ceil((scroller.scrollTop + scroller.clientHeight) / height) + OVERSCAN);
  if (!force && first === drawn.first && last === drawn.last) return;
  drawn = { first, last };
  tbody.innerHTML = spacer(first * height)
    + order.slice(first, last).map((row, i) => rowHtml(row, first + i)).join("")
    + spacer((order.length - last) * height);
  applyDataStyles(tbody);
  if (!rowHeight && last > first) {
    rowHeight = tbody.querySelector("tr[data-node]").getBoundingClientRect().height;
    draw(true);
  }
}

function drawSoon() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; draw(); });
}

/** Live changes: only the cells of rows in view that changed, so that focus and hover stay put. */
function patch(changedIds) {
  for (const tr of tbody.rows) {
    if (!changedIds.has(tr.dataset.node)) continue;
    const row = byId.get(tr.dataset.node);
    for (const td of tr.querySelectorAll("td[data-k]")) {
      const html = CELLS[td.dataset.k](row);
      if (td.cpHtml !== html) {
        td.innerHTML = html;
        applyDataStyles(td);
        td.cpHtml = html;
      }
    }
    tr.classList.toggle("unmatched", Boolean(row.unmatched));
  }
}

// Live --------------------------------------------------------------------------------------------
function matchesFilters(row) {
  const { lifecycle, liveness } = page.filters;
  return (!lifecycle.length || lifecycle.includes(row.lifecycle)) && (!liveness.length || liveness.includes(row.liveness));
}

/** Take a fleet entry's values into its row; true when the row changed. */
function take(row, entry) {
  let changed = false;
  for (const field of LIVE_FIELDS) {
    if (field in entry && row[field] !== entry[field]) {
      row[field] = entry[field];
      changed = true;
    }
  }
  if (entry.ts && entry.ts > (row.seen ?? 0)) {
    row.seen = entry.ts;
    changed = true;
  }
  if (changed) row.unmatched = !matchesFilters(row);
  return changed;
}

const live = new LiveSocket([{ subscribe: "fleet" }], (kind, message) => {
  if (!live.fleet || !tbody) return;
  const ids = kind === "snapshot" ? Object.keys(live.fleet) : Object.keys(message.fleet ?? {});
  const changed = new Set(ids.filter((id) => byId.has(id) && take(byId.get(id), live.fleet[id])));
  if (!changed.size) return;
  patch(changed);
  document.getElementById("list-changed").hidden = !page.rows.some((row) => row.unmatched);
});
window.cpNodes = { live }; // for benchmarks/nodes_page.py
// Values age without a message: the rows in view are drawn again (only cells that changed).
setInterval(() => { if (tbody) patch(new Set([...tbody.rows].map((tr) => tr.dataset.node))); }, 5000);

// Sorting: numbers start with the largest (the busiest, hottest, worst), names with A; blanks last --
const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
const SORT_KEYS = {
  hostname: (row) => row.hostname,
  cluster: (row) => row.cluster,
  type: (row) => row.type,
  rack: (row) => (row.rack ? `${row.rack} ${String(row.rack_position ?? "").padStart(3, "0")}` : null),
  leaf: (row) => row.leaf || null,
  lifecycle: (row) => page.lifecycle_order[row.lifecycle],
  liveness: (row) => page.liveness_order[row.liveness],
  alarms: (row) => (row.alarms ? (SEVERITY_RANK[row.severity] + 1) * 10000 + row.alarms : null),
  gpus: (row) => row.gpus,
  util: utilNow,
  power: powerNow,
  temp: tempNow,
  seen: (row) => row.seen,
};
const headers = table ? Array.from(table.tHead.rows[0].cells).filter((th) => th.dataset.col) : [];

function sortBy(column, direction) {
  const key = SORT_KEYS[column];
  const sign = direction === "ascending" ? 1 : -1;
  const keyed = page.rows.map((row, i) => [key(row) ?? null, i, row]); // i: by hostname, the tie-break
  keyed.sort(([a, i], [b, j]) => {
    if (a === null || b === null) return a === b ? i - j : a === null ? 1 : -1;
    const compared = typeof a === "number" ? a - b : collator.compare(a, b);
    return compared ? sign * compared : i - j;
  });
  order = keyed.map(([, , row]) => row);
  for (const th of headers) {
    if (th.dataset.col === column) th.setAttribute("aria-sort", direction);
    else th.removeAttribute("aria-sort");
  }
  draw(true);
  const url = new URL(location.href);
  url.searchParams.set("sort", column);
  url.searchParams.set("dir", direction === "ascending" ? "asc" : "desc");
  history.replaceState(null, "", url);
  const form = document.getElementById("node-filters"); // filtering again keeps the order
  for (const name of ["sort", "dir"]) {
    const input = form.querySelector(`input[name="${name}"]`) ?? form.appendChild(Object.assign(document.createElement("input"), { type: "hidden", name }));
    input.value = url.searchParams.get(name);
  }
}

for (const th of headers) {
  th.querySelector("button.sort").addEventListener("click", () => {
    const current = th.getAttribute("aria-sort");
    const numeric = !["hostname", "cluster", "type", "rack", "leaf"].includes(th.dataset.col);
    const direction = current ? (current === "ascending" ? "descending" : "ascending") : numeric ? "descending" : "ascending";
    sortBy(th.dataset.col, direction);
  });
}

if (tbody) {
  const wanted = new URLSearchParams(location.search);
  if (SORT_KEYS[wanted.get("sort")]) sortBy(wanted.get("sort"), wanted.get("dir") === "desc" ? "descending" : "ascending");
  else draw(true);
  scroller.addEventListener("scroll", drawSoon, { passive: true });
  new ResizeObserver(drawSoon).observe(scroller);
}

// Filters: a changed drop-down applies at once (Enter applies the search box) ------------------------
for (const select of document.querySelectorAll("#node-filters select")) {
  select.addEventListener("change", () => select.form.requestSubmit());
}

// Selection and bulk actions ------------------------------------------------------------------------
const bulkBar = document.getElementById("bulk-bar");
const burnInSelected = document.getElementById("burn-in-selected"); // for those who may start burn-ins
let lastClicked = null;

function refreshSelection() {
  selectAll.checked = selected.size > 0 && selected.size === page.rows.length;
  selectAll.indeterminate = selected.size > 0 && selected.size < page.rows.length;
  document.getElementById("selected-count").textContent = selected.size
    ? `${selected.size} node${selected.size === 1 ? "" : "s"} selected`
    : "No nodes selected";
  for (const button of bulkBar.querySelectorAll("button[data-action]")) button.disabled = selected.size === 0;
  if (burnInSelected) burnInSelected.disabled = selected.size === 0;
}

function select(ids, on) {
  for (const id of ids) {
    if (on) selected.add(id);
    else selected.delete(id);
  }
}

if (selectAll && tbody) {
  tbody.addEventListener("click", (event) => {
    const box = event.target.closest("input[type=checkbox]");
    if (!box) return;
    const positions = order.map((row) => String(row.id));
    if (event.shiftKey && lastClicked !== null && lastClicked !== box.value) {
      const [from, to] = [positions.indexOf(lastClicked), positions.indexOf(box.value)].sort((a, b) => a - b);
      select(positions.slice(from, to + 1), box.checked);
      draw(true);
    } else {
      select([box.value], box.checked);
      box.closest("tr").classList.toggle("selected", box.checked);
    }
    lastClicked = box.value;
    refreshSelection();
  });
  selectAll.addEventListener("change", () => {
    select(page.rows.map((row) => String(row.id)), selectAll.checked);
    draw(true);
    refreshSelection();
  });
  const dialog = new ActionDialog();
  const actions = Object.fromEntries(page.actions.map((action) => [action.name, action]));
  for (const button of bulkBar.querySelectorAll("button[data-action]")) {
    button.addEventListener("click", () => runBulk(dialog, actions[button.dataset.action]));
  }
  if (burnInSelected) {
    const form = new BurnInForm();
    const rows = () => order.filter((row) => selected.has(String(row.id))); // in the order shown
    burnInSelected.addEventListener("click", () => form.open({ nodes: rows() }));
    document.getElementById("burn-in-a-cluster").addEventListener("click", () => form.open({ nodes: rows(), cluster: true }));
  }
  refreshSelection();
}

async function runBulk(dialog, action) {
  const rows = order.filter((row) => selected.has(String(row.id))); // in the order shown
  const names = rows.map((row) => row.hostname);
  const more = names.length - NAMES_LISTED;
  const count = `${rows.length} node${rows.length === 1 ? "" : "s"}`;
  const results = await dialog.open({
    title: `${action.label}: ${count}`,
    summaryHtml: `<p class="names">${names.slice(0, NAMES_LISTED).map(escapeHtml).join(", ")}${more > 0 ? ` and ${more} more` : ""}</p>`,
    reasonRequired: action.reason_required,
    hint: `Each node becomes ${action.target_label.toLowerCase()} if its current state allows it; the reason goes into its lifecycle history and the audit log.`,
    confirmLabel: `${action.label} ${count}`,
    danger: ["quarantine", "drain", "retire"].includes(action.name),
    offerOverride: offersOverride(action),
    perform: async (reason, onDone, override) => (await runAll(rows, (row) => transition(row.id, action, reason, override), onDone)).map((result) => ({
      row: result.item,
      label: result.item.hostname,
      ok: result.ok,
      data: result.data,
      message: result.ok ? `now ${page.labels.lifecycle[result.data.lifecycle].toLowerCase()}` : refusal(result),
    })),
  });
  if (!results) return;
  // Show each answer now (the fleet stream brings the same within a second); the refused nodes
  // stay selected, for the operator to deal with next.
  const done = results.filter((result) => result.ok);
  for (const result of done) take(result.row, { lifecycle: result.data.lifecycle });
  select(done.map((result) => String(result.row.id)), false);
  draw(true);
  refreshSelection();
  const refused = results.length - done.length;
  toast(refused ? `${done.length} done, ${refused} refused: see the list.` : `${action.label}: ${count} done.`, { ok: !refused });
}
