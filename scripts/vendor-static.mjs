// Copies the front-end libraries the dashboard uses from node_modules into static/vendor, where
// Django's staticfiles serves them. The copies are committed, so starting the product needs no npm;
// run `npm ci && npm run vendor` after changing a version in package.json.
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";

const VENDORED = {
  uplot: ["dist/uPlot.esm.js", "dist/uPlot.min.css", "LICENSE"],
};

for (const [name, files] of Object.entries(VENDORED)) {
  const { version } = JSON.parse(readFileSync(join("node_modules", name, "package.json"), "utf8"));
  for (const file of files) {
    const target = join("static", "vendor", name, file.replace(/^dist\//, ""));
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(join("node_modules", name, file), target);
  }
  console.log(`${name} ${version} -> static/vendor/${name}`);
}
