// Calls to the REST API from pages, with the session cookie and Django's CSRF token, and a toast
// that says what went wrong in the server's own words (the API always explains a refusal).

function csrfToken() {
  return document.cookie.split("; ").find((c) => c.startsWith("csrftoken="))?.split("=")[1] ?? "";
}

export async function api(method, path, body) {
  const response = await fetch(`/api/v1/${path}`, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) {
    const error = new Error(explain(response.status, data));
    error.status = response.status;
    error.data = data;
    throw error;
  }
  return data;
}

function explain(status, data) {
  if (data?.detail) return data.detail;
  if (data && typeof data === "object") {
    return Object.entries(data).map(([field, problems]) => `${field}: ${[].concat(problems).join(" ")}`).join("; ");
  }
  return `The server answered ${status}.`;
}

export function toast(text, { ok = false } = {}) {
  const element = document.getElementById("toast");
  element.textContent = text;
  element.classList.toggle("ok", ok);
  element.hidden = false;
  clearTimeout(element.hideTimer);
  element.hideTimer = setTimeout(() => { element.hidden = true; }, ok ? 3000 : 8000);
}

export function escapeHtml(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
