#!/usr/bin/env bash
# Pipeline parallelism with the Llama options and the logging flags: one seed, global batch 8,
# dropout on, fp32, 4 layers with RoPE, RMSNorm, SwiGLU, GQA (2 groups of 2 heads), no linear
# biases and an untied output layer (on the last stage), --log-params-norm and
# --log-layer-grad-norms. TP×PP×DP 2×2×1, 1×4×1 and 1×2×2 with the distributed optimizer log the
# lm loss, grad norm, params norm, every layer's gradient norm (4 layers, wherever they live) and
# the validation losses of 1×1×1 (relative <= 1e-5). A checkpoint saved at PP 2 resumes at
# 1×1×1 with the uninterrupted run's next losses and exports to an HF Llama directory.
set -euo pipefail
: "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/tiny_gpt_run.bash"
TINY_GPT_FLAGS=("${TINY_LLAMA[@]}" --train-iters 6 --log-params-norm --log-layer-grad-norms
  --eval-interval 3 --eval-iters 1)

run t1p1d1 1 1 1
run t2p2d1 4 2 2
run t1p4d1 4 1 4
run t1p2d2_distopt 4 1 2 --use-distributed-optimizer --save "$WORK/ckpt_p2" --save-interval 3 \
  --exit-interval 3
grep -q "exiting program at iteration 3" "$WORK/t1p2d2_distopt.log" ||
  { echo "FAIL: t1p2d2_distopt no exit"; exit 1; }
run resumed_t1p1d1 1 1 1 --load "$WORK/ckpt_p2"
"$MEGATRON_BINARY" convert --model-type gpt --from megatron --to hf --load "$WORK/ckpt_p2" \
  --save "$WORK/hf" > "$WORK/export.log" 2>&1 || { cat "$WORK/export.log"; echo "FAIL: export"; exit 1; }
grep -q '"LlamaForCausalLM"' "$WORK/hf/config.json" || { echo "FAIL: not an HF Llama export"; exit 1; }

for name in t2p2d1 t1p4d1; do
  echo "== t1p1d1 vs $name"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== t1p1d1 vs t1p2d2_distopt (iterations 1-3, then it saves and exits)"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/t1p2d2_distopt.jsonl" --from 1 --to 3 --rtol 1e-5
echo "== resumed at 1x1x1 from 1x2x2's checkpoint of iteration 3"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/resumed_t1p1d1.jsonl" --from 4 --to 6 --rtol 1e-5
# Params norms, per-layer gradient norms and validation losses, matched by iteration.
node -e '
  const fs = require("fs");
  // nth: the order of a record among those of its type and iteration (at the last iteration the
  // validation of the interval is followed by the final one, on the next validation batches).
  const records = f => {
    const seen = {};
    return fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse).map(x => {
      const key = x.type + " " + x.iteration;
      return Object.assign(x, {nth: (seen[key] = (seen[key] || 0) + 1)});
    });
  };
  const close = (a, b) => typeof a === "number" && typeof b === "number" &&
                          Math.abs(a - b) <= 1e-5 * Math.abs(a);
  const fail = (...m) => { console.error(...m); process.exit(1); };
  const ref = records(process.argv[1]);
  const of = (rs, g) => rs.find(x => x.type === g.type && x.iteration === g.iteration &&
                                     x.nth === g.nth);
  if (ref.filter(x => x.type === "layer_grad_norms").length === 0) fail("no layer_grad_norms");
  if (ref.filter(x => x.type === "validation").length < 2) fail("no validation");
  for (const f of process.argv.slice(2)) {
    const got = records(f);
    let n = 0;
    for (const g of got) {
      const r = of(ref, g);
      if (g.type === "train") {
        if (!r || !close(r.params_norm, g.params_norm))
          fail(f, "params norm at iteration", g.iteration, g.params_norm, r && r.params_norm);
      } else if (g.type === "layer_grad_norms") {
        if (g.norms.length !== 4) fail(f, "layer_grad_norms of", g.norms.length, "layers");
        g.norms.forEach((x, i) => {
          if (!(x > 0) || !r || !close(r.norms[i], x))
            fail(f, "layer", i, "gradient norm at iteration", g.iteration, x, r && r.norms[i]);
        });
      } else if (g.type === "validation") {
        if (!r || !close(r.lm_loss, g.lm_loss))
          fail(f, "validation at iteration", g.iteration, g.lm_loss, r && r.lm_loss);
      } else {
        continue;
      }
      ++n;
    }
    if (n < 6) fail(f, "has too few records to compare:", n);
  }' "$WORK/t1p1d1.jsonl" "$WORK/t2p2d1.jsonl" "$WORK/t1p4d1.jsonl" \
  "$WORK/t1p2d2_distopt.jsonl" "$WORK/resumed_t1p1d1.jsonl"
echo "pipeline with Llama options: OK"
