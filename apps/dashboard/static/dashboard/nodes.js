// The nodes list: sort by any column (in the browser: every matching row is rendered), lifecycle,
// liveness, alarms, utilization, power and temperature kept live from the fleet stream, and the
// operators' bulk lifecycle actions with each node's result.

import { escapeHtml, toast } from "./api.js";
import { ActionDialog, refusal, runAll, transition } from "./lifecycle.js";
import { LiveSocket } from "./live.js";
import { localiseTimes, showTime } from "./when.js";

const page = JSON.parse(document.getElementById("nodes-page").textContent);
const table = document.getElementById("nodes-table");
const tbody = table?.tBodies[0];
const SEVERITY_RANK = { info: 0, warning: 1, error: 2, critical: 3 };
const NAMES_LISTED = 12; // in the confirmation; the rest are counted

// Rows: node id → {tr, cells (the live ones, by data-k), hostname} ------------------------------
const rows = new Map();
for (const tr of tbody?.rows ?? []) {
  const cells = {};
  for (const td of tr.querySelectorAll("td[data-k]")) cells[td.dataset.k] = td;
  rows.set(tr.dataset.node, { tr, cells, hostname: tr.querySelector(".host a").textContent });
}
localiseTimes(table ?? document);

// Live values -------------------------------------------------------------------------------------
function setSortValue(td, value) {
  const text = value === null || value === undefined ? "" : String(value);
  if (td.dataset.v === text) return false;
  td.dataset.v = text;
  return true;
}

function setPill(td, rank, className, label) {
  if (!setSortValue(td, rank)) return;
  const pill = td.firstElementChild;
  pill.className = `pill ${className}`;
  pill.textContent = label;
}

function setAlarms(td, id, entry) {
  const count = entry.alarms ?? 0;
  const rank = count ? (SEVERITY_RANK[entry.severity] + 1) * 10000 + count : 0;
  if (!setSortValue(td, rank)) return;
  td.innerHTML = count
    ? `<a class="pill sev-${escapeHtml(entry.severity)}" href="/nodes/${id}/#failures">${count} ${escapeHtml(entry.severity)}</a>`
    : "";
}

function setNumber(td, value, text) {
  if (!setSortValue(td, value === null ? null : value.toFixed(2))) return;
  const target = td.querySelector(".num") ?? td;
  target.textContent = value === null ? "–" : text(value);
  const bar = td.querySelector(".bar > span");
  if (bar) bar.style.width = `${value ?? 0}%`;
}

function setSeen(td, ts) {
  if (!ts || Number(td.dataset.v || 0) >= Math.floor(ts)) return;
  td.dataset.v = String(Math.floor(ts));
  let time = td.querySelector("time");
  if (!time) { td.textContent = ""; time = td.appendChild(document.createElement("time")); }
  showTime(time, new Date(ts * 1000));
}

function matchesFilters(entry) {
  const { lifecycle, liveness } = page.filters;
  return (!lifecycle.length || lifecycle.includes(entry.lifecycle)) && (!liveness.length || liveness.includes(entry.liveness));
}

function show(id, entry) {
  const row = rows.get(id);
  if (!row) return; // not in this list (filtered out, or enrolled since it was rendered)
  const { cells } = row;
  setPill(cells.lifecycle, page.lifecycle_order[entry.lifecycle], `lc-${entry.lifecycle}`, page.labels.lifecycle[entry.lifecycle] ?? entry.lifecycle);
  setPill(cells.liveness, page.liveness_order[entry.liveness], `state-${entry.liveness}`, page.labels.liveness[entry.liveness] ?? entry.liveness);
  setAlarms(cells.alarms, id, entry);
  // An unreachable node's last values are not its values now: they are shown as unknown.
  const online = entry.liveness === "online";
  setNumber(cells.util, online ? entry.util_gpu_mean ?? null : null, (v) => `${Math.round(v)} %`);
  setNumber(cells.power, online && entry.power_w_total != null ? entry.power_w_total / 1000 : null, (v) => `${v.toFixed(1)} kW`);
  setNumber(cells.temp, online ? entry.temp_c_max ?? null : null, (v) => `${Math.round(v)} °C`);
  setSeen(cells.seen, entry.ts);
  const unmatched = !matchesFilters(entry);
  if (row.tr.classList.contains("unmatched") !== unmatched) {
    row.tr.classList.toggle("unmatched", unmatched);
    row.tr.title = unmatched ? "No longer matches the filters" : "";
    document.getElementById("list-changed").hidden = !document.querySelector("tr.unmatched");
  }
}

const live = new LiveSocket([{ subscribe: "fleet" }], (kind, message) => {
  if (!live.fleet) return;
  const changed = kind === "snapshot" ? Object.keys(live.fleet) : Object.keys(message.fleet ?? {});
  for (const id of changed) show(id, live.fleet[id]);
});

// Sorting: in the browser, by the cells' data-v (or their text), blanks last either way ---------
const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
const originalOrder = new Map(Array.from(tbody?.rows ?? [], (tr, i) => [tr, i])); // by hostname: the tie-break
const headers = table ? Array.from(table.tHead.rows[0].cells).filter((th) => th.dataset.sort) : [];
const slug = (th) => th.textContent.trim().toLowerCase().replace(/\W+/g, "-");

function sortKey(td, numeric) {
  const raw = td.dataset.v ?? td.textContent.trim();
  if (raw === "") return null;
  return numeric ? Number(raw) : raw;
}

function sortBy(th, direction) {
  const column = th.cellIndex;
  const numeric = th.dataset.sort === "num";
  const sign = direction === "ascending" ? 1 : -1;
  const keyed = Array.from(tbody.rows, (tr) => [sortKey(tr.cells[column], numeric), tr]);
  keyed.sort(([a, rowA], [b, rowB]) => {
    if (a === null || b === null) {
      if (a !== b) return a === null ? 1 : -1;
    } else {
      const order = numeric ? a - b : collator.compare(a, b);
      if (order) return sign * order;
    }
    return originalOrder.get(rowA) - originalOrder.get(rowB);
  });
  tbody.append(...keyed.map(([, tr]) => tr));
  for (const other of headers) other.removeAttribute("aria-sort");
  th.setAttribute("aria-sort", direction);
}

function rememberSort(th, direction) {
  const url = new URL(location.href);
  url.searchParams.set("sort", slug(th));
  url.searchParams.set("dir", direction === "ascending" ? "asc" : "desc");
  history.replaceState(null, "", url);
  const form = document.getElementById("node-filters");
  for (const [name, value] of [["sort", slug(th)], ["dir", url.searchParams.get("dir")]]) {
    const input = form.querySelector(`input[name="${name}"]`) ?? form.appendChild(Object.assign(document.createElement("input"), { type: "hidden", name }));
    input.value = value;
  }
}

for (const th of headers) {
  th.querySelector("button.sort").addEventListener("click", () => {
    // Numbers start with the largest (the busiest, hottest, worst), names with A.
    const first = th.dataset.sort === "num" ? "descending" : "ascending";
    const current = th.getAttribute("aria-sort");
    const direction = current ? (current === "ascending" ? "descending" : "ascending") : first;
    sortBy(th, direction);
    rememberSort(th, direction);
  });
}
{
  const wanted = new URLSearchParams(location.search);
  const th = headers.find((header) => slug(header) === wanted.get("sort"));
  if (th) {
    const direction = wanted.get("dir") === "desc" ? "descending" : "ascending";
    sortBy(th, direction);
    rememberSort(th, direction);
  }
}

// Filters: a changed select applies at once (Enter applies the search box) ----------------------
for (const select of document.querySelectorAll("#node-filters select")) {
  select.addEventListener("change", () => select.form.requestSubmit());
}

// Selection and bulk actions (operators only: the server renders no checkboxes for viewers) ------
const selectAll = document.getElementById("select-all");
const bulkBar = document.getElementById("bulk-bar");
const selected = new Set();
let lastClicked = null;

function boxes() {
  return Array.from(tbody.querySelectorAll("input[type=checkbox]"));
}

function refreshSelection() {
  const total = rows.size;
  selectAll.checked = selected.size > 0 && selected.size === total;
  selectAll.indeterminate = selected.size > 0 && selected.size < total;
  document.getElementById("selected-count").textContent = selected.size
    ? `${selected.size} node${selected.size === 1 ? "" : "s"} selected`
    : "No nodes selected";
  for (const button of bulkBar.querySelectorAll("button[data-action]")) button.disabled = selected.size === 0;
}

function select(box, on) {
  box.checked = on;
  box.closest("tr").classList.toggle("selected", on);
  if (on) selected.add(box.value);
  else selected.delete(box.value);
}

if (selectAll && tbody) {
  tbody.addEventListener("click", (event) => {
    const box = event.target.closest("input[type=checkbox]");
    if (!box) return;
    const all = boxes(); // in the order shown
    if (event.shiftKey && lastClicked && lastClicked !== box) {
      const [from, to] = [all.indexOf(lastClicked), all.indexOf(box)].sort((a, b) => a - b);
      for (const other of all.slice(from, to + 1)) select(other, box.checked);
    } else {
      select(box, box.checked);
    }
    lastClicked = box;
    refreshSelection();
  });
  selectAll.addEventListener("change", () => {
    for (const box of boxes()) select(box, selectAll.checked);
    refreshSelection();
  });
  const dialog = new ActionDialog();
  const actions = Object.fromEntries(page.actions.map((action) => [action.name, action]));
  for (const button of bulkBar.querySelectorAll("button[data-action]")) {
    button.addEventListener("click", () => runBulk(dialog, actions[button.dataset.action]));
  }
  refreshSelection();
}

async function runBulk(dialog, action) {
  const ids = Array.from(tbody.rows, (tr) => tr.dataset.node).filter((id) => selected.has(id)); // in the order shown
  const names = ids.map((id) => rows.get(id).hostname);
  const more = names.length - NAMES_LISTED;
  const count = `${ids.length} node${ids.length === 1 ? "" : "s"}`;
  const results = await dialog.open({
    title: `${action.label}: ${count}`,
    summaryHtml: `<p class="names">${names.slice(0, NAMES_LISTED).map(escapeHtml).join(", ")}${more > 0 ? ` and ${more} more` : ""}</p>`,
    reasonRequired: action.reason_required,
    hint: `Each node becomes ${action.target_label.toLowerCase()} if its current state allows it; the reason goes into its lifecycle history and the audit log.`,
    confirmLabel: `${action.label} ${count}`,
    danger: action.name === "quarantine",
    perform: async (reason, onDone) => (await runAll(ids, (id) => transition(id, action, reason), onDone)).map((result) => ({
      id: result.item,
      label: rows.get(result.item).hostname,
      ok: result.ok,
      data: result.data,
      message: result.ok ? `now ${page.labels.lifecycle[result.data.lifecycle].toLowerCase()}` : refusal(result),
    })),
  });
  if (!results) return;
  // Show each answer now (the fleet stream brings the same within a second); keep the refused
  // nodes selected, so that the operator can deal with them next.
  for (const result of results) {
    if (!result.ok) continue;
    const { lifecycle } = result.data;
    const row = rows.get(result.id);
    setPill(row.cells.lifecycle, page.lifecycle_order[lifecycle], `lc-${lifecycle}`, page.labels.lifecycle[lifecycle]);
    select(row.tr.querySelector("input[type=checkbox]"), false);
  }
  refreshSelection();
  const refused = results.filter((result) => !result.ok).length;
  toast(refused ? `${results.length - refused} done, ${refused} refused: see the list.` : `${action.label}: ${count} done.`, { ok: !refused });
}
