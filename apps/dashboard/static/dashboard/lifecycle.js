// Actions an operator takes from a page (lifecycle changes, resolving a failure), through the
// dialog in includes/action_dialog.html: it says what will happen, asks for the reason (required
// where the server requires one), runs the REST calls a few at a time and lists each one's result
// in the server's own words (a 409 says why the state machine refused that node).

import { api, escapeHtml } from "./api.js";

const CONCURRENCY = 4; // enough to finish 100 nodes in seconds without flooding the server

/** Run `perform(item)` for every item, CONCURRENCY at a time; `onDone(done, total)` after each.
 *  Resolves to [{item, ok, data | message, status}] in the items' order. */
export async function runAll(items, perform, onDone = () => {}) {
  const results = new Array(items.length);
  let next = 0;
  let done = 0;
  async function worker() {
    while (next < items.length) {
      const at = next++;
      try {
        results[at] = { item: items[at], ok: true, data: await perform(items[at]) };
      } catch (error) {
        results[at] = { item: items[at], ok: false, status: error.status, message: error.message };
      }
      onDone(++done, items.length);
    }
  }
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, items.length) }, worker));
  return results;
}

/** POST a lifecycle action (an entry of the page's `actions`) for one node id. */
export function transition(nodeId, action, reason) {
  return api("POST", `nodes/${nodeId}/${action.path}`, reason ? { reason } : {});
}

export class ActionDialog {
  constructor() {
    this.dialog = document.getElementById("action-dialog");
    this.reason = document.getElementById("action-reason");
    this.confirm = document.getElementById("action-confirm");
    this.cancel = document.getElementById("action-cancel");
    this.progress = document.getElementById("action-progress");
    this.results = document.getElementById("action-results");
    this.busy = false;
    // Escape must not close the dialog while calls are running: their results would be lost.
    this.dialog.addEventListener("cancel", (event) => { if (this.busy) event.preventDefault(); });
  }

  /** Ask, then run. `perform(reason, onDone)` does the calls and resolves to the results to list,
   *  [{label, ok, message}]. Resolves to those results, or null when the user cancelled. */
  open({ title, summaryHtml, reasonCaption = "Reason", reasonRequired = false, hint = "", confirmLabel, danger = false, perform }) {
    document.getElementById("action-title").textContent = title;
    document.getElementById("action-summary").innerHTML = summaryHtml;
    document.getElementById("action-reason-caption").textContent = reasonRequired ? `${reasonCaption} (required)` : `${reasonCaption} (optional)`;
    document.getElementById("action-reason-label").hidden = false;
    document.getElementById("action-hint").textContent = hint;
    this.reason.value = "";
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
        if (reasonRequired && !reason) {
          this.reason.setCustomValidity("Say why: the next shift reads it.");
          this.reason.reportValidity();
          this.reason.setCustomValidity("");
          return;
        }
        this.busy = true;
        this.confirm.disabled = this.cancel.disabled = this.reason.disabled = true;
        this.progress.hidden = false;
        this.progress.textContent = "Working…";
        const results = await perform(reason, (done, total) => { this.progress.textContent = `${done} of ${total} done`; });
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
