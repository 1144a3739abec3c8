#!/usr/bin/env node
// Compares the validation records of metrics JSONL files with a reference run's:
//   node compare_validation.js REFERENCE.jsonl RUN.jsonl [RUN.jsonl ...]
// Records are matched by iteration and by their order at that iteration (a run that ends
// validates at its last interval and again in the final evaluation, which scores the next
// batches), and their lm_loss (and sop_loss, where the reference has one) must agree to a
// relative 1e-5. Each run must have validation records; the reference at least two.
const fs = require("fs");

function validation(file) {
  const seen = {};
  return fs.readFileSync(file, "utf8").trim().split("\n").map(JSON.parse)
      .filter(x => x.type === "validation")
      .map(x => Object.assign(x, {nth: (seen[x.iteration] = (seen[x.iteration] || 0) + 1)}));
}

const close = (a, b) => Math.abs(a - b) <= 1e-5 * Math.abs(b);
const [reference, ...runs] = process.argv.slice(2);
const ref = validation(reference);
if (ref.length < 2) {
  console.error("no validation in the reference run", reference);
  process.exit(1);
}
for (const file of runs) {
  const got = validation(file);
  if (got.length === 0) {
    console.error("no validation in", file);
    process.exit(1);
  }
  for (const g of got) {
    const r = ref.find(x => x.iteration === g.iteration && x.nth === g.nth);
    const same = r && close(g.lm_loss, r.lm_loss) &&
                 (r.sop_loss === undefined || close(g.sop_loss, r.sop_loss));
    if (!same) {
      console.error("validation at iteration", g.iteration, "differs:", file, g.lm_loss,
                    g.sop_loss, r && r.lm_loss, r && r.sop_loss);
      process.exit(1);
    }
  }
}
