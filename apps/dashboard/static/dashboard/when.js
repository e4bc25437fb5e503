// One way of showing time across the product: in the reader's own time zone by default, or in UTC
// (the top bar's toggle, kept per browser); the time of day when it is today, the date with it when
// it is not; the full timestamp, with its zone, on hover. The server writes <time datetime="…"> in
// UTC; every page rewrites them with localiseTimes() and draws its own with timeHtml() or showTime(),
// so a wall screen in another time zone does not make the on-call engineer do arithmetic.
//
// This module can be loaded twice on one page (a page names the hashed file, a module imports the
// plain one): what it holds is read from localStorage and kept in step through the "timezonechange"
// event, and the toggle is wired once (startZoneToggle).

import { escapeHtml } from "./api.js";
import { ageS, ageText } from "./stale.js";

const KEY = "cp-time-zone";
let zone = zoneOf(localStorage.getItem(KEY));
let formats = null;

/** Intl's timeZone for a name the toggle stores: undefined is the browser's own. */
function zoneOf(name) {
  return name === "utc" ? "UTC" : undefined;
}

function formatsFor(timeZone) {
  const make = (options) => new Intl.DateTimeFormat(undefined, { ...options, timeZone, hourCycle: "h23" });
  return {
    time: make({ hour: "2-digit", minute: "2-digit", second: "2-digit" }),
    date: make({ month: "short", day: "numeric" }),
    dateYear: make({ year: "numeric", month: "short", day: "numeric" }),
    dayKey: make({ year: "numeric", month: "2-digit", day: "2-digit" }),
    year: make({ year: "numeric" }),
    clock: make({ hour: "2-digit", minute: "2-digit" }),
    full: new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long", timeZone }),
  };
}

function current() {
  formats ??= formatsFor(zone);
  return formats;
}

/** "utc" or "local": how times are shown now. */
export function zoneName() {
  return zone === "UTC" ? "utc" : "local";
}

/** The words for the zone in force: "UTC", or the local zone's short name ("CET", "GMT+1"). */
export function zoneLabel() {
  if (zone === "UTC") return "UTC";
  const part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(new Date()).find((p) => p.type === "timeZoneName");
  return part?.value ?? "local time";
}

function follow(name) {
  zone = zoneOf(name);
  formats = null;
}

/** Today: the time to the second. Another day: the date (with the year when it is not this one) and
 *  the time. In the zone in force. */
export function formatWhen(date) {
  const { time, date: day, dateYear, dayKey, year } = current();
  const now = new Date();
  if (dayKey.format(date) === dayKey.format(now)) return time.format(date);
  const sameYear = year.format(date) === year.format(now);
  return `${(sameYear ? day : dateYear).format(date)}, ${time.format(date)}`;
}

/** The full timestamp with its zone: what a <time> shows on hover. */
export function formatFull(date) {
  return current().full.format(date);
}

/** The steps (seconds) a chart whose ticks read as the hour and minute may place them at: left to
 *  itself, uPlot ticks a few minutes of data every 30 s, and each label came twice ("04:41 04:41"). */
export const MINUTE_TICKS = [60, 120, 300, 600, 900, 1800, 3600];

/** A chart axis's tick: the hour and minute, or the day for spans of days. */
export function formatTick(date, days = false) {
  return (days ? current().date : current().clock).format(date);
}

/** uPlot's options for time in the zone in force: its tick positions (midnights, whole hours) are
 *  computed in `tzDate`'s zone, the browser's own unless told otherwise. */
export function chartTimeOptions(uPlot) {
  return zone === "UTC" ? { tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC") } : {};
}

/** Write `element` (a <time>) as `date`, with the full timestamp on hover. */
export function showTime(element, date) {
  element.dateTime = date.toISOString();
  element.textContent = formatWhen(date);
  element.title = formatFull(date);
}

/** The same as markup, for rows drawn from data. */
export function timeHtml(date) {
  return `<time datetime="${date.toISOString()}" title="${escapeHtml(formatFull(date))}">${escapeHtml(formatWhen(date))}</time>`;
}

/** "last reported 13:48:41, 3 min ago": the words that go with a stale value (stale.js). */
export function staleWords(ts) {
  if (ts === null || ts === undefined) return "never reported";
  return `last reported ${formatWhen(new Date(ts * 1000))}, ${ageText(ageS(ts))} ago`;
}

/** Rewrite every <time datetime> under `root` in the zone in force. */
export function localiseTimes(root = document) {
  for (const element of root.querySelectorAll("time[datetime]")) {
    const date = new Date(element.dateTime);
    if (!Number.isNaN(date.getTime())) showTime(element, date);
  }
}

/** Follow a switch made by the toggle (this page, or another instance of this module). */
window.addEventListener("timezonechange", (event) => follow(event.detail));

/** The top bar's toggle between the reader's zone and UTC: wired once per page, whichever copy of
 *  this module gets here first. Every <time> on the page is rewritten, and pages that draw times
 *  themselves (charts) listen to "timezonechange". */
export function startZoneToggle() {
  const button = document.getElementById("zone-toggle");
  if (!button || button.dataset.wired) return;
  button.dataset.wired = "true";
  const label = () => {
    button.textContent = zoneLabel();
    button.setAttribute("aria-pressed", String(zoneName() === "utc"));
    button.title = zoneName() === "utc" ? "Times in UTC: show them in your own time zone" : `Times in your time zone (${zoneLabel()}): show them in UTC`;
  };
  button.addEventListener("click", () => {
    const next = zoneName() === "utc" ? "local" : "utc";
    localStorage.setItem(KEY, next);
    window.dispatchEvent(new CustomEvent("timezonechange", { detail: next }));
    localiseTimes(document);
    label();
  });
  label();
}
