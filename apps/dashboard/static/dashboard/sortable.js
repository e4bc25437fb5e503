// Sortable tables: a click on a column's header button sorts table.sortable by that column, again
// to reverse. A cell's data-sort, when present, is what sorts (a number behind a formatted one,
// "Infinity" for "no failures"); numbers sort as numbers, anything else as text.

function key(row, column) {
  const cell = row.cells[column];
  const raw = cell?.dataset.sort ?? cell?.textContent.trim() ?? "";
  const number = Number(raw);
  return raw !== "" && !Number.isNaN(number) ? number : raw.toLowerCase();
}

function compare(a, b) {
  if (typeof a === typeof b) return a < b ? -1 : a > b ? 1 : 0;
  return typeof a === "number" ? -1 : 1; // numbers before text
}

export function sortBy(table, column, direction) {
  const body = table.tBodies[0];
  const rows = [...body.rows].map((row) => [key(row, column), row]);
  const sign = direction === "ascending" ? 1 : -1;
  rows.sort(([a], [b]) => sign * compare(a, b));
  body.append(...rows.map(([, row]) => row));
  for (const [index, header] of [...table.tHead.rows[0].cells].entries()) {
    if (index === column) header.setAttribute("aria-sort", direction);
    else header.removeAttribute("aria-sort");
  }
}

for (const table of document.querySelectorAll("table.sortable")) {
  table.tHead.addEventListener("click", (event) => {
    const header = event.target.closest("th");
    if (!header || !event.target.closest("button.sort")) return;
    const numeric = header.classList.contains("num");
    const current = header.getAttribute("aria-sort");
    // A first click puts the largest number (or the first name) on top.
    const direction = current ? (current === "ascending" ? "descending" : "ascending") : numeric ? "descending" : "ascending";
    sortBy(table, header.cellIndex, direction);
  });
}
