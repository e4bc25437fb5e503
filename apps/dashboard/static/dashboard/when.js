// Times in the reader's own time zone: the server writes <time datetime="…"> in UTC, and a wall
// screen in another time zone should not make the on-call engineer do arithmetic.

import { escapeHtml } from "./api.js";

const TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const DATE_TIME = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
const FULL = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });

/** Today: the time to the second; another day: the date and the minute. */
export function formatWhen(date) {
  const now = new Date();
  const today = date.getFullYear() === now.getFullYear() && date.getMonth() === now.getMonth() && date.getDate() === now.getDate();
  return today ? TIME.format(date) : DATE_TIME.format(date);
}

/** Write `element` (a <time>) as `date`, with the full date and time on hover. */
export function showTime(element, date) {
  element.dateTime = date.toISOString();
  element.textContent = formatWhen(date);
  element.title = FULL.format(date);
}

/** The same as markup, for rows drawn from data. */
export function timeHtml(date) {
  return `<time datetime="${date.toISOString()}" title="${escapeHtml(FULL.format(date))}">${escapeHtml(formatWhen(date))}</time>`;
}

/** Rewrite every server-written <time datetime> under `root` in local time. */
export function localiseTimes(root = document) {
  for (const element of root.querySelectorAll("time[datetime]")) {
    const date = new Date(element.dateTime);
    if (!Number.isNaN(date.getTime())) showTime(element, date);
  }
}
