// Light or dark: the OS setting unless the user picked one with the toggle (kept per browser).
const KEY = "cp-theme";
const root = document.documentElement;
const saved = localStorage.getItem(KEY);
if (saved) root.dataset.theme = saved;

export function isDark() {
  return root.dataset.theme ? root.dataset.theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
}

document.getElementById("theme-toggle")?.addEventListener("click", () => {
  root.dataset.theme = isDark() ? "light" : "dark";
  localStorage.setItem(KEY, root.dataset.theme);
  window.dispatchEvent(new CustomEvent("themechange"));
});
