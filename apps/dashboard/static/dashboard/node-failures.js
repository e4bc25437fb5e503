// The node page's failures: rows as includes/node_failure_row.html writes them, kept live from the
// node stream, and the operators' buttons on them (acknowledge, resolve, the move a failure asks for).

import { api, escapeHtml, toast } from "./api.js";
import { moveForFailure, movesHtml, refusal } from "./lifecycle.js";
import { canOperate, page } from "./node-page.js";
import { currentLifecycle } from "./node-state.js";
import { localiseTimes } from "./when.js";

/** The moves an open failure's row offers, for the node's state now. */
function showMoves(row) {
  row.querySelector(".failure-moves")?.remove();
  if (row.dataset.state === "resolved") return;
  row.querySelector("td.advice").insertAdjacentHTML("beforeend", movesHtml(page, row.dataset.move, currentLifecycle()));
}

/** After the node's lifecycle changed: the moves every open failure offers now. */
export function showAllMoves() {
  for (const row of document.querySelectorAll("#active-failures tr[data-failure]")) showMoves(row);
}

function when(iso) {
  return iso ? `<time datetime="${escapeHtml(iso)}">${escapeHtml(iso)}</time>` : "";
}

function failureRow(f) {
  const where = [f.gpu_index === null ? "" : `GPU ${f.gpu_index}`, f.port_name].filter(Boolean).join(" ");
  const state = { open: "Open", acknowledged: "Acknowledged", resolved: "Resolved" }[f.state] ?? f.state;
  const by = f.state === "acknowledged" ? ` <span class="sub">by ${escapeHtml(f.acknowledged_by)}</span>`
    : f.state === "resolved" ? ` <span class="sub">by ${escapeHtml(f.resolved_by)}, ${when(f.resolved_at)}</span>${f.resolution_note ? `<div class="sub">${escapeHtml(f.resolution_note)}</div>` : ""}` : "";
  const actions = canOperate
    ? `<td class="row-actions">${f.state === "open" ? '<button type="button" data-ack>Acknowledge</button>' : ""}${f.state !== "resolved" ? '<button type="button" data-resolve>Resolve…</button>' : ""}</td>`
    : "";
  const tr = document.createElement("tr");
  tr.dataset.failure = f.id;
  tr.dataset.state = f.state;
  tr.dataset.move = f.recommended_move ?? "";
  tr.classList.toggle("side-effect", f.is_side_effect);
  tr.innerHTML = `<td><span class="pill sev-${escapeHtml(f.severity)}">${escapeHtml(f.severity)}</span></td>
    <td><strong>${escapeHtml(f.title)}</strong>${f.is_side_effect ? ` <span class="sub">side effect of #${escapeHtml(f.cause)}</span>` : ""}${f.detail ? `<div class="sub">${escapeHtml(f.detail)}</div>` : ""}</td>
    <td>${escapeHtml(where)}</td>
    <td class="advice">${escapeHtml(f.recommended_action)}${f.recovery_action_text ? `<div class="sub">NVML asks: ${escapeHtml(f.recovery_action_text)}</div>` : ""}</td>
    <td class="num">${escapeHtml(f.count)}</td><td class="when">${when(f.first_seen)}</td><td class="when">${when(f.last_seen)}</td>
    <td><span class="pill fs-${escapeHtml(f.state)}">${state}</span>${by}</td>${actions}`;
  localiseTimes(tr);
  showMoves(tr);
  return tr;
}

export function showFailure(f) {
  const activeBody = document.querySelector("#active-failures tbody");
  const existing = document.querySelector(`tr[data-failure="${f.id}"]`);
  if (!existing && f.state === "resolved") return; // resolved before this page saw it: on reload
  const row = failureRow(f);
  if (existing) {
    // A row that left the active table stays where the user sees it, marked resolved, until reload.
    existing.replaceWith(row);
  } else {
    activeBody.prepend(row);
  }
  activeBody.querySelector("tr.none").hidden = Boolean(activeBody.querySelector("tr[data-failure]"));
}

/** The failures' buttons, for an operator: ``nodeMoved`` gets the node a failure's move left. */
export function wireFailureActions(dialog, nodeMoved) {
  document.getElementById("failures").addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-ack], button[data-resolve], button[data-node-action]");
    if (!button) return;
    const id = button.closest("tr").dataset.failure;
    if (button.dataset.nodeAction) {
      button.disabled = true;
      try {
        const node = await moveForFailure(id, button.dataset.nodeAction);
        nodeMoved(node);
        toast(`${page.hostname}: now ${page.labels.lifecycle[node.lifecycle].toLowerCase()}, for this failure.`, { ok: true });
      } catch (error) {
        button.disabled = false;
        toast(error.message);
      }
      return;
    }
    if ("ack" in button.dataset) {
      button.disabled = true;
      try {
        showFailure(await api("POST", `failures/${id}/acknowledge`));
      } catch (error) {
        button.disabled = false;
        toast(error.message);
      }
      return;
    }
    const title = button.closest("tr").querySelector("strong").textContent;
    await dialog.open({
      title: `Resolve: ${title}`,
      summaryHtml: "<p>The failure leaves the open list with its side effects; the next sighting opens a new one.</p>",
      reasonCaption: "What was done (reset, reseated, RMA ticket…)",
      confirmLabel: "Resolve",
      perform: async (note) => {
        try {
          showFailure(await api("POST", `failures/${id}/resolve`, { note }));
          return [{ label: title, ok: true, message: "resolved" }];
        } catch (error) {
          return [{ label: title, ok: false, message: refusal(error) }];
        }
      },
    });
  });
}
