// Actions an operator takes from a page (lifecycle changes, resolving a failure), through the
// dialog in includes/action_dialog.html: it says what will happen, asks for the reason (required
// where the server requires one), runs the REST calls one after the other and lists each result
// in the server's own words (a 409 says why the state machine refused that node).

import { api, escapeHtml } from "./api.js";

/** Run `perform(item)` for every item, one after the other (each is a transaction of its own on
 *  the server, audited in order; the demo's SQLite takes one writer at a time anyway), calling
 *  `onDone(done, total)` after each. Resolves to [{item, ok, data | status and message}]. */
export async function runAll(items, perform, onDone = () => {}) {
  const results = [];
  for (const item of items) {
    try {
      results.push({ item, ok: true, data: await perform(item) });
    } catch (error) {
      results.push({ item, ok: false, status: error.status, message: error.message });
    }
    onDone(results.length, items.length);
  }
  return results;
}

/** The moves a failure row offers, as includes/failure_moves.html writes them: from the page's
 *  `failure_moves` table ({advice: {node state: {actions, note}}}, apps/dashboard/actions.py) and its
 *  `actions` (those this user may take). "" when there is nothing to offer or say. */
export function movesHtml(page, advice, lifecycle) {
  const moves = page.failure_moves[advice ?? ""]?.[lifecycle];
  if (!moves || (!moves.actions.length && !moves.note)) return "";
  const byName = Object.fromEntries(page.actions.map((action) => [action.name, action]));
  const buttons = moves.actions.map((name) => `<button type="button" data-node-action="${escapeHtml(name)}"${name === "quarantine" ? ' class="danger"' : ""}
    title="${escapeHtml(`${byName[name].label} ${page.hostname}, with this failure as the reason`)}">${escapeHtml(byName[name].label)} for this failure</button>`);
  const note = moves.note ? `<span class="sub move-note">${escapeHtml(moves.note)}</span>` : "";
  return `<div class="failure-moves">${note}${buttons.join("")}</div>`;
}

/** One click: the failure's node makes `action` (a name of LIFECYCLE_ACTIONS) with the failure as the
 *  reason. Resolves to the node as the REST API shows it. */
export function moveForFailure(failureId, action) {
  return api("POST", `failures/${failureId}/node-action`, { action });
}

/** POST a lifecycle action (an entry of the page's `actions`) for one node id; `override`: return to
 *  service without a passed burn-in (admins only: the API refuses anyone else). */
export function transition(nodeId, action, reason, override = false) {
  return api("POST", `nodes/${nodeId}/${action.path}`, { ...(reason ? { reason } : {}), ...(override ? { override_burn_in: true } : {}) });
}

/** Whether the dialog for `action` offers the burn-in override: returning to service, to an admin. */
export function offersOverride(action) {
  return action.name === "return_to_service" && document.body.dataset.canAdminister === "true";
}

export class ActionDialog {
  constructor() {
    this.dialog = document.getElementById("action-dialog");
    this.reason = document.getElementById("action-reason");
    this.confirm = document.getElementById("action-confirm");
    this.cancel = document.getElementById("action-cancel");
    this.progress = document.getElementById("action-progress");
    this.results = document.getElementById("action-results");
    this.overrideLabel = document.getElementById("action-override-label");
    this.override = document.getElementById("action-override");
    this.busy = false;
    // Escape must not close the dialog while calls are running: their results would be lost.
    this.dialog.addEventListener("cancel", (event) => { if (this.busy) event.preventDefault(); });
  }

  /** Ask, then run. `perform(reason, onDone, override)` does the calls and resolves to the results
   *  to list, [{label, ok, message}]; `override`: the user ticked the burn-in override, which the
   *  dialog offers when `offerOverride` (and which makes the reason required). Resolves to those
   *  results, or null when the user cancelled. */
  open({ title, summaryHtml, reasonCaption = "Reason", reasonRequired = false, hint = "", confirmLabel, danger = false, offerOverride = false, perform }) {
    document.getElementById("action-title").textContent = title;
    document.getElementById("action-summary").innerHTML = summaryHtml;
    document.getElementById("action-reason-caption").textContent = reasonRequired ? `${reasonCaption} (required)` : `${reasonCaption} (optional)`;
    document.getElementById("action-reason-label").hidden = false;
    Object.assign(document.getElementById("action-hint"), { textContent: hint, hidden: !hint });
    this.reason.value = "";
    this.overrideLabel.hidden = !offerOverride;
    this.override.checked = false;
    this.override.disabled = false;
    this.reason.setAttribute("aria-required", String(reasonRequired)); // checked below, trimmed
    this.confirm.textContent = confirmLabel;
    this.confirm.hidden = false;
    this.confirm.disabled = false;
    this.confirm.classList.toggle("danger", danger);
    this.confirm.classList.toggle("primary", !danger);
    this.cancel.textContent = "Cancel";
    this.cancel.disabled = false;
    this.progress.hidden = true;
    this.results.hidden = true;
    this.results.innerHTML = "";
    this.dialog.showModal();
    this.reason.focus();

    return new Promise((resolve) => {
      const submitted = async (event) => {
        if (event.submitter !== this.confirm) return; // Cancel or Close: the dialog closes itself
        event.preventDefault();
        const reason = this.reason.value.trim();
        const override = offerOverride && this.override.checked;
        if ((reasonRequired || override) && !reason) {
          this.reason.setCustomValidity("Say why: the next shift reads it.");
          this.reason.reportValidity();
          this.reason.setCustomValidity("");
          return;
        }
        this.busy = true;
        this.confirm.disabled = this.cancel.disabled = this.reason.disabled = this.override.disabled = true;
        this.progress.hidden = false;
        this.progress.textContent = "Working…";
        const results = await perform(reason, (done, total) => { this.progress.textContent = `${done} of ${total} done`; }, override);
        this.busy = false;
        this.reason.disabled = this.cancel.disabled = false;
        this.showResults(results);
        form.removeEventListener("submit", submitted);
        resolve(results);
      };
      const form = this.dialog.querySelector("form");
      form.addEventListener("submit", submitted);
      this.dialog.addEventListener("close", () => {
        form.removeEventListener("submit", submitted);
        if (!this.results.hidden) return;
        resolve(null);
      }, { once: true });
    });
  }

  showResults(results) {
    const failed = results.filter((r) => !r.ok).length;
    this.progress.textContent = failed
      ? `${results.length - failed} done, ${failed} refused or failed:`
      : `All ${results.length} done.`;
    this.results.innerHTML = results.map((r) => `<li class="${r.ok ? "ok" : "refused"}">
      <span class="mark" aria-hidden="true">${r.ok ? "✓" : "✗"}</span>
      <strong>${escapeHtml(r.label)}</strong> <span>${escapeHtml(r.message)}</span></li>`).join("");
    this.results.hidden = false;
    document.getElementById("action-reason-label").hidden = true;
    document.getElementById("action-hint").hidden = true;
    this.overrideLabel.hidden = true;
    this.confirm.hidden = true;
    this.cancel.textContent = "Close";
    this.cancel.focus();
  }
}

/** A refusal in a line: the status the server gave, in words, and its explanation. */
export function refusal(result) {
  const why = { 403: "not allowed", 404: "no longer exists", 409: "refused" }[result.status] ?? "failed";
  return `${why}: ${result.message}`;
}
