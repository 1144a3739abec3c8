#!/usr/bin/env node
// The figure and tables of examples/ln_depth_study.sh: reads OUT/L{depth}_{pre,post}_s{seed}.jsonl
// and OUT/init/… (--metrics-file rows) and writes an SVG with three panels — final validation
// lm loss against depth (mean over seeds, bars from the lowest to the highest seed), and each
// layer's gradient norm at initialisation (mean over seeds, log scale) under Megatron's init
// and under the Xavier-scale init of OUT/init — and prints Markdown tables.
// Usage: node examples/ln_depth_figure.js OUT FIGURE.svg XAVIER_STD
'use strict';
const fs = require('fs');
const path = require('path');

const [dir, figure, xavierStd] = process.argv.slice(2);
if (!dir || !figure || !xavierStd) {
  console.error('usage: ln_depth_figure.js OUT_DIR FIGURE.svg XAVIER_STD');
  process.exit(2);
}

// runs[order][depth] = [{seed, loss (null: diverged or stopped), norms: [per layer]}]
function readRuns(from) {
  const runs = {pre: {}, post: {}};
  if (!fs.existsSync(from)) return runs;
  for (const file of fs.readdirSync(from).sort()) {
    const m = /^L(\d+)_(pre|post)_s(\d+)\.jsonl$/.exec(file);
    if (!m) continue;
    const rows = fs.readFileSync(path.join(from, file), 'utf8').split('\n').filter(Boolean)
                     .map((line) => JSON.parse(line));
    const valid = rows.filter((r) => r.type === 'validation');
    const last = valid.length ? valid[valid.length - 1].lm_loss : null;
    const init = rows.find((r) => r.type === 'layer_grad_norms' && r.iteration === 1);
    const depth = Number(m[1]);
    (runs[m[2]][depth] = runs[m[2]][depth] || []).push({
      seed: Number(m[3]),
      loss: typeof last === 'number' && isFinite(last) ? last : null,
      norms: init ? init.norms : null,
    });
  }
  return runs;
}
const runs = readRuns(dir);
const xavier = readRuns(path.join(dir, 'init'));
const depths = [...new Set([...Object.keys(runs.pre), ...Object.keys(runs.post)].map(Number))]
                   .sort((a, b) => a - b);
if (!depths.length) {
  console.error(`no L{depth}_{pre,post}_s{seed}.jsonl files in ${dir}`);
  process.exit(1);
}
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
function lossStats(order, depth) {
  const rs = runs[order][depth] || [];
  const ok = rs.filter((r) => r.loss !== null).map((r) => r.loss);
  return {n: rs.length, diverged: rs.length - ok.length, mean: ok.length ? mean(ok) : null,
          lo: Math.min(...ok), hi: Math.max(...ok)};
}
function normMeans(order, depth, from = runs) {
  const rs = (from[order][depth] || []).filter((r) => r.norms);
  if (!rs.length) return null;
  return rs[0].norms.map((_, i) => mean(rs.map((r) => r.norms[i])));
}

// Tables.
const fmt = (x, d = 3) => (x === null || x === undefined ? '—' : x.toFixed(d));
console.log('| depth | pre-LN val loss (mean, min–max) | post-LN val loss | diverged pre / post |');
console.log('|---:|---|---|---|');
for (const d of depths) {
  const p = lossStats('pre', d), q = lossStats('post', d);
  console.log(`| ${d} | ${fmt(p.mean)} (${fmt(p.lo)}–${fmt(p.hi)}) | ${fmt(q.mean)} ` +
              `(${fmt(q.lo)}–${fmt(q.hi)}) | ${p.diverged} / ${q.diverged} |`);
}
console.log('\nGradient norm at initialisation (mean over seeds): first layer, last layer');
console.log('| depth | std 0.02: pre-LN | post-LN | std ' + xavierStd + ': pre-LN | post-LN |');
console.log('|---:|---|---|---|---|');
const ends = (ns) => (ns ? `${fmt(ns[0], 3)}, ${fmt(ns[ns.length - 1], 3)}` : '—');
for (const d of depths) {
  console.log(`| ${d} | ${ends(normMeans('pre', d))} | ${ends(normMeans('post', d))} | ` +
              `${ends(normMeans('pre', d, xavier))} | ${ends(normMeans('post', d, xavier))} |`);
}

// Figure.
const W = 1400, H = 420, pad = {l: 70, r: 20, t: 40, b: 50}, gap = 80;
const pw = (W - pad.l - pad.r - 2 * gap) / 3, ph = H - pad.t - pad.b;
const colour = {pre: '#1f77b4', post: '#d62728'};
const svg = [];
const text = (x, y, s, extra = '') =>
    svg.push(`<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" ${extra}>${s}</text>`);
svg.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" ` +
         `font-family="sans-serif" font-size="12">`);
svg.push(`<rect width="${W}" height="${H}" fill="white"/>`);
function axes(x0, title, xlabel, ylabel, yticks, ymap, xticks, xmap) {
  svg.push(`<rect x="${x0}" y="${pad.t}" width="${pw}" height="${ph}" fill="none" stroke="#888"/>`);
  text(x0 + pw / 2, pad.t - 14, title, 'text-anchor="middle" font-weight="bold"');
  text(x0 + pw / 2, H - 12, xlabel, 'text-anchor="middle"');
  text(x0 - 52, pad.t + ph / 2, ylabel,
       `text-anchor="middle" transform="rotate(-90 ${x0 - 52} ${pad.t + ph / 2})"`);
  for (const [v, label] of yticks) {
    const y = ymap(v);
    svg.push(`<line x1="${x0}" x2="${x0 + pw}" y1="${y}" y2="${y}" stroke="#eee"/>`);
    text(x0 - 6, y + 4, label, 'text-anchor="end"');
  }
  for (const [v, label] of xticks) text(xmap(v), pad.t + ph + 16, label, 'text-anchor="middle"');
}
function polyline(points, stroke, extra = '') {
  svg.push(`<polyline fill="none" stroke="${stroke}" stroke-width="2" ${extra} points="` +
           points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ') + '"/>');
}

// Left panel: loss against depth (x: log2 depth).
{
  const x0 = pad.l;
  const all = [];
  for (const o of ['pre', 'post'])
    for (const d of depths) {
      const s = lossStats(o, d);
      if (s.mean !== null) all.push(s.lo, s.hi);
    }
  const lo = Math.min(...all), hi = Math.max(...all), span = Math.max(hi - lo, 1e-3);
  const ymin = lo - 0.1 * span, ymax = hi + 0.1 * span;
  const ymap = (v) => pad.t + ph * (1 - (v - ymin) / (ymax - ymin));
  const lx = depths.map((d) => Math.log2(d));
  const xmin = Math.min(...lx) - 0.3, xmax = Math.max(...lx) + 0.3;
  const xmap = (d) => x0 + pw * ((Math.log2(d) - xmin) / (xmax - xmin));
  const yticks = [];
  for (let i = 0; i <= 5; ++i) {
    const v = ymin + (ymax - ymin) * i / 5;
    yticks.push([v, v.toFixed(3)]);
  }
  axes(x0, 'final validation lm loss (nats) vs depth', 'layers', 'lm loss', yticks, ymap,
       depths.map((d) => [d, String(d)]), xmap);
  for (const o of ['pre', 'post']) {
    const shift = o === 'pre' ? -4 : 4;
    const pts = [];
    for (const d of depths) {
      const s = lossStats(o, d);
      if (s.mean === null) continue;
      const x = xmap(d) + shift;
      pts.push([x, ymap(s.mean)]);
      svg.push(`<line x1="${x}" x2="${x}" y1="${ymap(s.lo)}" y2="${ymap(s.hi)}" ` +
               `stroke="${colour[o]}"/>`);
      svg.push(`<circle cx="${x}" cy="${ymap(s.mean)}" r="3" fill="${colour[o]}"/>`);
    }
    polyline(pts, colour[o]);
  }
  text(x0 + 10, pad.t + 16, '● pre-LN', `fill="${colour.pre}"`);
  text(x0 + 80, pad.t + 16, '● post-LN', `fill="${colour.post}"`);
}

// Right panels: gradient norm per layer at initialisation, log scale; x = layer / depth.
function normPanel(x0, from, title) {
  const all = [];
  for (const o of ['pre', 'post'])
    for (const d of depths) (normMeans(o, d, from) || []).forEach((v) => v > 0 && all.push(v));
  if (!all.length) return;
  const lmin = Math.floor(Math.log10(Math.min(...all)));
  const lmax = Math.ceil(Math.log10(Math.max(...all)));
  const ymap = (v) => pad.t + ph * (1 - (Math.log10(v) - lmin) / Math.max(lmax - lmin, 1));
  const xmap = (f) => x0 + pw * f;
  const yticks = [];
  for (let e = lmin; e <= lmax; ++e) yticks.push([Math.pow(10, e), `1e${e}`]);
  axes(x0, title, 'layer (input → output), as a fraction of depth', 'L2 norm', yticks, ymap,
       [[0, 'first'], [1, 'last']], xmap);
  depths.forEach((d, k) => {
    const dash = ['', 'stroke-dasharray="6 3"', 'stroke-dasharray="2 2"',
                  'stroke-dasharray="8 2 2 2"'][k % 4];
    for (const o of ['pre', 'post']) {
      const ns = normMeans(o, d, from);
      if (!ns) continue;
      polyline(ns.map((v, i) => [xmap(ns.length > 1 ? i / (ns.length - 1) : 0.5), ymap(v)]),
               colour[o], dash);
    }
    text(x0 + pw - 70, pad.t + 16 + 14 * k, `${d} layers`, 'font-size="11"');
    svg.push(`<line x1="${x0 + pw - 110}" x2="${x0 + pw - 76}" y1="${pad.t + 12 + 14 * k}" ` +
             `y2="${pad.t + 12 + 14 * k}" stroke="#444" stroke-width="2" ${dash}/>`);
  });
}
normPanel(pad.l + pw + gap, runs, 'grad norm per layer at init: std 0.02 (Megatron)');
normPanel(pad.l + 2 * (pw + gap), xavier, `grad norm per layer at init: std ${xavierStd} (Xavier scale)`);
svg.push('</svg>');
fs.writeFileSync(figure, svg.join('\n') + '\n');
console.error(`wrote ${figure}`);
