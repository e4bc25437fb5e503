// Light or dark: the OS setting unless the user picked one with the toggle (kept per browser).
const KEY = "cp-theme";
const root = document.documentElement;
const saved = localStorage.getItem(KEY);
if (saved) root.dataset.theme = saved;

export function isDark() {
  return root.dataset.theme ? root.dataset.theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
}

// Wired once: this module can be loaded twice on a page (the page names the hashed file, a module
// imports the plain one), and two listeners would switch twice, back to where it was.
const toggle = document.getElementById("theme-toggle");
if (toggle && !toggle.dataset.wired) {
  toggle.dataset.wired = "true";
  toggle.addEventListener("click", () => {
    root.dataset.theme = isDark() ? "light" : "dark";
    localStorage.setItem(KEY, root.dataset.theme);
    window.dispatchEvent(new CustomEvent("themechange"));
  });
}
