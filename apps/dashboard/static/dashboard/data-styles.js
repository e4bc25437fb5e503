// Sizes, grid places and colours that a template computes travel as data attributes and are applied
// here, through the CSSOM: the Content-Security-Policy refuses style attributes in markup, whether the
// server wrote them or a script's innerHTML did (docs/security.md). A page's own scripts call
// applyDataStyles on what they insert; loaded by the shell, it styles the page as the server sent it.

const RULES = {
  widthPercent: (style, value) => { style.width = `${value}%`; },
  heightPx: (style, value) => { style.height = `${value}px`; },
  gridRow: (style, value) => { style.gridRow = value; },
  gridRows: (style, value) => { style.gridTemplateRows = `repeat(${value}, var(--unit-height))`; },
  colour: (style, value) => { style.background = value; },
};
const SELECTOR = "[data-width-percent], [data-height-px], [data-grid-row], [data-grid-rows], [data-colour]";

/** Apply the data-* styles of ``root`` and of every element inside it. */
export function applyDataStyles(root = document) {
  const inside = [...root.querySelectorAll(SELECTOR)];
  for (const element of root.matches?.(SELECTOR) ? [root, ...inside] : inside) {
    for (const [key, apply] of Object.entries(RULES)) {
      if (key in element.dataset) apply(element.style, element.dataset[key]);
    }
  }
}

applyDataStyles();
