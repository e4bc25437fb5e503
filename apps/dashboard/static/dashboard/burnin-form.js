// The burn-in form (includes/burn_in_dialog.html): on the page's selected nodes, on nodes picked in
// the form (node-picker.js), or on every node of a cluster that can start one; the suite (its steps
// listed), whether a node that passes goes into service, and a deadline. It posts to POST
// /api/v1/burn-ins, which checks the role again, with an idempotency key made when the form opens: a
// double click or a resend after a lost answer starts one burn-in. On success the browser goes to the
// run's page; a refusal is shown in the API's own words ("gpu-003 is in service: drain it first.").

import { api, escapeHtml } from "./api.js";
import { NodePicker } from "./node-picker.js";

const NAMES_LISTED = 12; // the rest are counted

function newKey() {
  // getRandomValues works outside a secure context too (crypto.randomUUID does not).
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `ui-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** The API's refusal without its field names: one sentence per problem. */
export function refusalText(error) {
  const data = error.data;
  if (data && typeof data === "object" && !data.detail) return Object.values(data).flat().join(" ");
  return error.message;
}

export class BurnInForm {
  constructor() {
    const $ = (id) => document.getElementById(id);
    this.dialog = $("burn-in-dialog");
    this.error = $("burn-in-error");
    this.start = $("burn-in-start");
    this.suite = $("burn-in-suite");
    this.cluster = $("burn-in-cluster");
    this.onNodes = $("burn-in-on-nodes");
    this.onCluster = $("burn-in-on-cluster");
    this.names = $("burn-in-names");
    this.intoService = $("burn-in-into-service");
    this.deadline = $("burn-in-deadline");
    this.suite.addEventListener("change", () => this.showSuite());
    this.cluster.addEventListener("change", () => { this.onCluster.checked = true; });
    const picker = $("burn-in-node-picker"); // where the page has no selection of its own
    this.picker = picker && new NodePicker(picker, () => { this.onNodes.checked = true; });
    $("burn-in-cancel").addEventListener("click", () => this.dialog.close());
    $("burn-in-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
  }

  /** Open the form for `nodes` ([{id, hostname}], the page's selection), or on a cluster. */
  open({ nodes = [], cluster = false } = {}) {
    this.nodes = nodes;
    this.key = newKey();
    this.busy = false;
    this.error.hidden = true;
    this.start.disabled = !this.suite.options.length;
    if (this.names) {
      const more = nodes.length - NAMES_LISTED;
      this.names.innerHTML = nodes.length
        ? `${nodes.slice(0, NAMES_LISTED).map((n) => escapeHtml(n.hostname)).join(", ")}${more > 0 ? ` and ${more} more` : ""}`
        : "No nodes selected: select them in the list, or choose a cluster.";
      this.onNodes.disabled = !nodes.length;
    }
    (cluster || this.onNodes.disabled ? this.onCluster : this.onNodes).checked = true;
    this.showSuite();
    this.dialog.showModal();
  }

  showSuite() {
    for (const about of this.dialog.querySelectorAll(".suite-about")) about.hidden = about.dataset.suite !== this.suite.value;
  }

  /** The request's body, or null (with the form saying why) when it lacks its nodes. */
  body() {
    const body = {
      suite: this.suite.value,
      into_service: this.intoService.checked,
      deadline_s: Number(this.deadline.value),
      idempotency_key: this.key,
    };
    if (this.onCluster.checked) return { ...body, cluster: this.cluster.value };
    const ids = this.picker ? this.picker.selectedIds() : this.nodes.map((n) => Number(n.id));
    if (!ids.length) {
      this.say("Pick at least one node, or choose a cluster.");
      return null;
    }
    return { ...body, nodes: ids };
  }

  say(text) {
    this.error.textContent = text;
    this.error.hidden = false;
  }

  async submit() {
    if (this.busy) return; // a second click while the first is under way
    const body = this.body();
    if (!body) return;
    this.busy = true;
    this.start.disabled = true;
    this.start.textContent = "Starting…";
    try {
      const burnIn = await api("POST", "burn-ins", body);
      location.assign(`/runs/${burnIn.run}/`);
    } catch (error) {
      this.say(refusalText(error));
      this.busy = false;
      this.start.disabled = false;
      this.start.textContent = "Start burn-in";
    }
  }
}
