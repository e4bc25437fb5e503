// The burn-in form's node picker (includes/burn_in_dialog.html, on the runs page): up to 5,000 nodes
// in a list box, narrowed in the browser by hostname (a part of it, any case), cluster and state. The
// filter only hides: a node selected stays selected, and is started, while the filter hides it (the
// count under the list says so).

const count = (n) => n.toLocaleString("en-US");

export class NodePicker {
  constructor(select, onPick) {
    const $ = (id) => document.getElementById(id);
    this.select = select;
    this.host = $("burn-in-filter-host");
    this.cluster = $("burn-in-filter-cluster");
    this.lifecycle = $("burn-in-filter-lifecycle");
    this.status = $("burn-in-picked");
    this.host.addEventListener("input", () => this.filter());
    // Enter in the search box would submit the burn-in form: it filters, nothing more.
    this.host.addEventListener("keydown", (event) => { if (event.key === "Enter") event.preventDefault(); });
    this.cluster.addEventListener("change", () => this.filter());
    this.lifecycle.addEventListener("change", () => this.filter());
    select.addEventListener("change", () => { onPick(); this.say(); });
    $("burn-in-pick-shown").addEventListener("click", () => {
      for (const option of this.select.options) if (!option.hidden) option.selected = true;
      onPick();
      this.say();
    });
    this.filter();
  }

  filter() {
    const part = this.host.value.trim().toLowerCase();
    for (const option of this.select.options) {
      option.hidden = Boolean((part && !option.dataset.hostname.toLowerCase().includes(part))
        || (this.cluster.value && option.dataset.cluster !== this.cluster.value)
        || (this.lifecycle.value && option.dataset.lifecycle !== this.lifecycle.value));
    }
    this.say();
  }

  /** The ids to start, shown or not. */
  selectedIds() {
    return [...this.select.selectedOptions].map((option) => Number(option.value));
  }

  say() {
    const options = [...this.select.options];
    const shown = options.filter((option) => !option.hidden).length;
    const selected = this.select.selectedOptions.length;
    const unseen = [...this.select.selectedOptions].filter((option) => option.hidden).length;
    const listed = shown === options.length ? `${count(shown)} nodes listed` : shown ? `${count(shown)} of ${count(options.length)} nodes shown` : "No node matches the filter";
    this.status.textContent = `${listed}; ${count(selected)} selected${unseen ? ` (${count(unseen)} hidden by the filter)` : ""}.`;
  }
}
