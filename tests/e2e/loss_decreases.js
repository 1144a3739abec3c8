#!/usr/bin/env node
// The layout-invariance tests' guard that their comparisons can fail: a run whose loss does not
// move would match any other. Checks that each --metrics-file JSONL has exactly ITERS "train"
// lines and that the last lm_loss is below the first (the total_loss with knowledge
// distillation, whose lm_loss may be 0: skip_lm_loss).
//
// usage: node loss_decreases.js ITERS METRICS.jsonl [METRICS.jsonl ...]
'use strict';
const fs = require('fs');

const [iters, ...files] = process.argv.slice(2);
const n = Number(iters);
if (!(n >= 2) || files.length === 0) {
  console.error('usage: loss_decreases.js ITERS METRICS.jsonl [METRICS.jsonl ...]');
  process.exit(2);
}
for (const file of files) {
  const r = fs.readFileSync(file, 'utf8').trim().split('\n').map(JSON.parse)
      .filter(x => x.type === 'train');
  const key = r.length && 'total_loss' in r[0] ? 'total_loss' : 'lm_loss';
  if (r.length !== n || !(r[n - 1][key] < r[0][key])) {
    console.error(file, `: ${key} did not decrease over ${n} iterations:`, r.map(x => x[key]));
    process.exit(1);
  }
}
