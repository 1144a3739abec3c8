#!/usr/bin/env node
// Compares the per-iteration training metrics of two `--metrics-file` JSONL files.
//
// usage: node compare_metrics.js REFERENCE CANDIDATE --from A --to B [--rtol R | --exact]
// For every iteration A..B both files must have a "train" line; lm_loss and grad_norm (and
// sop_loss, when either line has one: BERT; total_loss, logits_distillation_loss and
// intermediate_distillation_loss, when either has them: knowledge distillation; the MoE router
// losses load_balancing_loss, seq_load_balancing_loss and z_loss, and multi-token prediction's
// "mtp_1 loss", "mtp_2 loss", ..., when either has them) must
// agree to relative tolerance R
// (|a − b| <= R·|a|), or bit for bit with --exact — or both be null (--fp16: a skipped step
// has no loss or norm) — and the loss scale and the number of skipped iterations must be equal
// (--fp16: the same skip decisions). Prints each difference and exits 1 on any mismatch or
// missing iteration.
'use strict';
const fs = require('fs');

function parseArgs(argv) {
  const opts = { rtol: null, exact: false, from: null, to: null, files: [] };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a === '--rtol') opts.rtol = Number(argv[++i]);
    else if (a === '--exact') opts.exact = true;
    else if (a === '--from') opts.from = Number(argv[++i]);
    else if (a === '--to') opts.to = Number(argv[++i]);
    else opts.files.push(a);
  }
  if (opts.files.length !== 2 || opts.from === null || opts.to === null ||
      (opts.rtol === null) === !opts.exact) {
    console.error('usage: compare_metrics.js REF CAND --from A --to B (--rtol R | --exact)');
    process.exit(2);
  }
  return opts;
}

// iteration -> train record (the last one wins, e.g. after a resume appended to the file).
function trainRecords(path) {
  const records = new Map();
  for (const line of fs.readFileSync(path, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const r = JSON.parse(line);
    if (r.type === 'train') records.set(r.iteration, r);
  }
  return records;
}

const opts = parseArgs(process.argv.slice(2));
const ref = trainRecords(opts.files[0]);
const cand = trainRecords(opts.files[1]);
let failures = 0;
for (let it = opts.from; it <= opts.to; ++it) {
  const a = ref.get(it), b = cand.get(it);
  if (!a || !b) {
    console.error(`iteration ${it}: missing in ${!a ? opts.files[0] : opts.files[1]}`);
    ++failures;
    continue;
  }
  const keys = ['lm_loss', 'grad_norm'];
  if ('sop_loss' in a || 'sop_loss' in b) keys.push('sop_loss');
  if ('total_loss' in a || 'total_loss' in b)
    keys.push('total_loss', 'logits_distillation_loss', 'intermediate_distillation_loss');
  for (const key of ['load_balancing_loss', 'seq_load_balancing_loss', 'z_loss'])
    if (key in a || key in b) keys.push(key);
  for (const key of new Set([...Object.keys(a), ...Object.keys(b)]))
    if (/^mtp_\d+ loss$/.test(key)) keys.push(key);
  for (const key of keys) {
    const x = a[key], y = b[key];
    const ok = opts.exact || (x === null && y === null)
                   ? x === y
                   : (typeof x === 'number' && typeof y === 'number' &&
                      Math.abs(x - y) <= opts.rtol * Math.abs(x));
    if (!ok) {
      console.error(`iteration ${it} ${key}: ${x} vs ${y}` +
                    (typeof x === 'number' ? ` (relative ${Math.abs(x - y) / Math.abs(x)})` : ''));
      ++failures;
    }
  }
  for (const key of ['loss_scale', 'skipped_iterations']) {
    if (key in a && key in b && a[key] !== b[key]) {
      console.error(`iteration ${it} ${key}: ${a[key]} vs ${b[key]}`);
      ++failures;
    }
  }
}
if (failures) {
  console.error(`${failures} mismatches between ${opts.files[0]} and ${opts.files[1]}`);
  process.exit(1);
}
console.log(`iterations ${opts.from}-${opts.to} agree (${opts.exact ? 'bit for bit' : 'rtol ' + opts.rtol})`);
