// node check_checkpoint_finite.js SAVE_DIR
// Reads every committed checkpoint in SAVE_DIR (iter_* directories, not iter_*.tmp-*) with an
// independent safetensors reader and fails when any F32/F16/BF16 value is inf or NaN.
// Prints the iterations it checked.
"use strict";
const fs = require("fs");
const path = require("path");

function nonFinite(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
  const base = 8 + n;
  let bad = 0;
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [begin, end] = t.data_offsets;
    const view = new DataView(buf.buffer, buf.byteOffset + base + begin, end - begin);
    if (t.dtype === "F32") {
      for (let i = 0; i < view.byteLength; i += 4) bad += !Number.isFinite(view.getFloat32(i, true));
    } else if (t.dtype === "F16") {
      for (let i = 0; i < view.byteLength; i += 2) bad += ((view.getUint16(i, true) >> 10) & 0x1f) === 0x1f;
    } else if (t.dtype === "BF16") {
      for (let i = 0; i < view.byteLength; i += 2) bad += ((view.getUint16(i, true) >> 7) & 0xff) === 0xff;
    }
  }
  return bad;
}

const dir = process.argv[2];
const iterations = fs.readdirSync(dir).filter((d) => /^iter_\d+$/.test(d)).sort();
let total = 0;
for (const it of iterations) {
  for (const rank of fs.readdirSync(path.join(dir, it)).filter((d) => d.startsWith("mp_rank_"))) {
    // model, optimizer and distributed-optimizer shard files alike
    for (const f of fs.readdirSync(path.join(dir, it, rank)).filter((f) => f.endsWith(".safetensors"))) {
      const p = path.join(dir, it, rank, f);
      const bad = nonFinite(p);
      if (bad > 0) console.error(`${p}: ${bad} values are inf or nan`);
      total += bad;
    }
  }
}
console.log(`checked ${iterations.join(" ") || "no checkpoint"}`);
process.exit(total === 0 ? 0 : 1);
