// Colour for data: viridis, a perceptually uniform scale that reads the same to the common kinds of
// colour blindness and in greyscale (lighter is always more). 256 entries interpolated from its
// published stops, so a cell's colour is one array lookup.

const VIRIDIS_STOPS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"];

function rgb(hex) {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
}

export const VIRIDIS = Array.from({ length: 256 }, (_, i) => {
  const at = (i / 255) * (VIRIDIS_STOPS.length - 1);
  const low = Math.floor(at);
  const high = Math.min(low + 1, VIRIDIS_STOPS.length - 1);
  const [a, b] = [rgb(VIRIDIS_STOPS[low]), rgb(VIRIDIS_STOPS[high])];
  const mix = a.map((channel, c) => Math.round(channel + (b[c] - channel) * (at - low)));
  return `rgb(${mix.join(",")})`;
});

/** The colour of `value` on a scale from `low` to `high` (clamped). */
export function colourOf(value, low, high) {
  const share = (value - low) / (high - low || 1);
  return VIRIDIS[Math.max(0, Math.min(255, Math.round(share * 255)))];
}

/** Draw the scale into a small canvas, for a legend. */
export function drawLegend(canvas) {
  canvas.width = 256;
  canvas.height = 1;
  const context = canvas.getContext("2d");
  VIRIDIS.forEach((colour, i) => { context.fillStyle = colour; context.fillRect(i, 0, 1, 1); });
}

/** A CSS variable of the current theme, e.g. cssVar("--critical"). */
export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}
