// Collects the validation losses of several `--metrics-file`s into DIR/curves.csv and draws
// their lm-loss curves into DIR/curves.svg (a plain SVG line chart, no dependencies).
// Usage: node examples/plot_validation_curves.js DIR RUN... (reads DIR/RUN.jsonl)
'use strict';
const fs = require('fs');
const path = require('path');

const [dir, ...runs] = process.argv.slice(2);
if (!dir || runs.length === 0) {
  console.error('usage: plot_validation_curves.js DIR RUN...');
  process.exit(2);
}
const curves = runs.map((run) => {
  const lines = fs.readFileSync(path.join(dir, run + '.jsonl'), 'utf8').split('\n');
  const points = lines.filter((l) => l.trim()).map((l) => JSON.parse(l))
      .filter((j) => j.type === 'validation');
  // The final evaluation repeats the last interval's: keep one point per iteration.
  const byIteration = new Map(points.map((p) => [p.iteration, p]));
  return {run, points: [...byIteration.values()].sort((a, b) => a.iteration - b.iteration)};
});

let csv = 'run,iteration,lm_loss,sop_loss\n';
for (const c of curves)
  for (const p of c.points) csv += `${c.run},${p.iteration},${p.lm_loss},${p.sop_loss ?? ''}\n`;
fs.writeFileSync(path.join(dir, 'curves.csv'), csv);

const W = 720, H = 440, L = 70, R = 170, T = 30, B = 50;
const all = curves.flatMap((c) => c.points);
const xMax = Math.max(...all.map((p) => p.iteration));
const yMin = Math.floor(Math.min(...all.map((p) => p.lm_loss)) * 2) / 2;
const yMax = Math.ceil(Math.max(...all.map((p) => p.lm_loss)) * 2) / 2;
const x = (v) => L + (v / xMax) * (W - L - R);
const y = (v) => T + (1 - (v - yMin) / (yMax - yMin)) * (H - T - B);
const colors = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e'];
const dashes = ['', '6,4', '', '6,4'];
let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" ` +
    `font-family="sans-serif" font-size="12">\n<rect width="${W}" height="${H}" fill="white"/>\n`;
svg += `<text x="${W / 2 - 80}" y="18" font-size="14">BERT validation lm loss</text>\n`;
for (let v = yMin; v <= yMax + 1e-9; v += 0.5) {
  svg += `<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>` +
      `<text x="${L - 8}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(1)}</text>\n`;
}
for (let i = 0; i <= 4; ++i) {
  const v = Math.round((xMax * i) / 4);
  svg += `<text x="${x(v)}" y="${H - B + 18}" text-anchor="middle">${v}</text>\n`;
}
svg += `<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">iteration</text>\n`;
svg += `<line x1="${L}" x2="${L}" y1="${T}" y2="${H - B}" stroke="black"/>` +
    `<line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" stroke="black"/>\n`;
curves.forEach((c, i) => {
  const pts = c.points.map((p) => `${x(p.iteration).toFixed(1)},${y(p.lm_loss).toFixed(1)}`);
  svg += `<polyline fill="none" stroke="${colors[i % 4]}" stroke-width="2" ` +
      `stroke-dasharray="${dashes[i % 4]}" points="${pts.join(' ')}"/>\n`;
  const ly = T + 20 + i * 20;
  svg += `<line x1="${W - R + 15}" x2="${W - R + 45}" y1="${ly}" y2="${ly}" ` +
      `stroke="${colors[i % 4]}" stroke-width="2" stroke-dasharray="${dashes[i % 4]}"/>` +
      `<text x="${W - R + 52}" y="${ly + 4}">${c.run}</text>\n`;
});
svg += '</svg>\n';
fs.writeFileSync(path.join(dir, 'curves.svg'), svg);
