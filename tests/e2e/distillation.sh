#!/usr/bin/env bash
# Knowledge distillation (--export-kd-teacher-load, --export-kd-cfg; docs/distillation.md) on a
# tiny GPT: a 6-layer teacher is trained for 6 iterations at TP 1 and saved; 4-layer students
# distilled from it (fp32, dropout on, 6 iterations) log the same lm loss, total loss, logits
# and intermediate distillation losses and grad norm (relative <= 1e-5) at TP×DP 1×1, 2×1 and
# 2×2 with --sequence-parallel (the teacher resharded to TP 2 on load), for the LM + KD config
# (kd_loss_scale 2, temperature 2, the final norms' cosine pair) and for the CI configs'
# skip_lm_loss one (lm loss logged as 0, total = the KD loss); the KD losses decrease. A
# Megatron-LM torch-format teacher distills as its `megatron convert` conversion does. A student
# saved at iteration 3 and resumed continues with the same losses. The
# teacher starts from --init-method-std 0.3, so that its predictions are far from the
# students' near-uniform ones: a KL of ~1e-3 would sit at f32's rounding floor (the
# difference of two log-normalisers of ~5) and not compare to 1e-5.
# Bad input is refused by name: a teacher path without a checkpoint, a bad YAML key, a module
# not supported, --export-kd-cfg without a teacher, pipeline parallelism.
set -euo pipefail
: "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/tiny_gpt_run.bash"
TINY_GPT_FLAGS=(--train-iters 6 --eval-interval 1000 --eval-iters 0)

run teacher 1 1 1 --num-layers 6 --init-method-std 0.3 --save "$WORK/teacher" --save-interval 6
cat >"$WORK/mixed.yaml" <<'YAML'
logit_layers: ["output_layer", "output_layer"]
intermediate_layer_pairs:
  - ["decoder.final_layernorm", "decoder.final_layernorm"]
skip_lm_loss: false
kd_loss_scale: 2.0
logit_kl_temperature: 2.0
YAML
# The CI configs' DISTILL_CONFIG as their BEFORE_SCRIPT writes it (yq -P).
cat >"$WORK/skip.yaml" <<'YAML'
intermediate_layer_pairs:
  - - decoder.final_layernorm
    - decoder.final_layernorm
logit_layers:
  - output_layer
  - output_layer
skip_lm_loss: true
kd_loss_scale: 1.0
YAML
for cfg in mixed skip; do
  KD=(--export-kd-teacher-load "$WORK/teacher" --export-kd-cfg "$WORK/$cfg.yaml"
    --export-te-mcore-model --auto-detect-ckpt-format)
  run "${cfg}_t1d1" 1 1 1 "${KD[@]}"
  run "${cfg}_t2d1" 2 2 1 "${KD[@]}"
  run "${cfg}_t2d2_sp" 4 2 1 "${KD[@]}" --sequence-parallel
  for name in "${cfg}_t2d1" "${cfg}_t2d2_sp"; do
    echo "== ${cfg}_t1d1 vs $name"
    $CHECK "$WORK/${cfg}_t1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
  done
done
# The comparisons must be able to fail: the distillation losses move. (With the LM loss in
# the objective the KD term, brought to the LM loss's size and doubled, dominates, so the
# total need not fall within 6 iterations there; the logits loss must.)
# The CI configs are checkpoint-resume tests: a resumed run (the teacher loaded again, the
# student from its checkpoint) continues with the uninterrupted run's losses.
KD=(--export-kd-teacher-load "$WORK/teacher" --export-kd-cfg "$WORK/skip.yaml")
run skip_saved 2 2 1 "${KD[@]}" --save "$WORK/student" --save-interval 3 --exit-interval 3
run skip_resumed 2 2 1 "${KD[@]}" --load "$WORK/student"
echo "== skip_t1d1 vs a TP 2 run resumed at iteration 3"
$CHECK "$WORK/skip_t1d1.jsonl" "$WORK/skip_resumed.jsonl" --from 4 --to 6 --rtol 1e-5
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/skip_t1d1.jsonl"
node -e '
const r = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
  .filter(x => x.type === "train");
if (!(r[5].logits_distillation_loss < r[0].logits_distillation_loss)) {
  console.error("FAIL: the mixed run'"'"'s logits distillation loss did not decrease");
  process.exit(1);
}' "$WORK/mixed_t1d1.jsonl"
grep -q "loading the distillation teacher from $WORK/teacher" "$WORK/skip_t1d1.log" ||
  { echo "FAIL: no teacher load line"; exit 1; }
line=$(grep -m1 " iteration        2/" "$WORK/skip_t1d1.log")
for field in "lm loss: 0.000000E+00 |" "total loss: " "logits distillation loss: " \
  "intermediate distillation loss: "; do
  [[ $line == *"$field"* ]] || { echo "FAIL: no '$field' in: $line"; exit 1; }
done
grep -q '"intermediate_distillation_loss"' "$WORK/mixed_t1d1.jsonl" ||
  { echo "FAIL: no distillation losses in the metrics file"; exit 1; }

# A Megatron-LM torch-format teacher (PyTorch's files, tests/data/megatron_lm_gpt_tiny) is
# converted once beside itself, as --load converts one, and distills exactly as its offline
# conversion does.
MLM_FLAGS=(--openai-gelu --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
  --max-position-embeddings 32 --mock-data --vocab-size 96 --make-vocab-size-divisible-by 64
  --micro-batch-size 2 --global-batch-size 2 --train-iters 3 --lr 1e-3 --log-interval 1
  --eval-iters 0 --tensor-model-parallel-size 2 --export-kd-cfg "$WORK/mixed.yaml")
cp -r "$MEGATRON_SOURCE_DIR/tests/data/megatron_lm_gpt_tiny/legacy_tp2_pp2" "$WORK/mlm_teacher"
"$MEGATRON_BINARY" convert --model-type gpt --from megatron-lm --load "$WORK/mlm_teacher" \
  --save "$WORK/mlm_converted" >"$WORK/convert.log" 2>&1 || { cat "$WORK/convert.log"; exit 1; }
for teacher in mlm_teacher mlm_converted; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$MEGATRON_BINARY" \
    pretrain-gpt "${MLM_FLAGS[@]}" --export-kd-teacher-load "$WORK/$teacher" \
    --metrics-file "$WORK/from_$teacher.jsonl" >"$WORK/from_$teacher.log" 2>&1 ||
    { cat "$WORK/from_$teacher.log"; echo "FAIL: distilling from $teacher"; exit 1; }
done
[[ -f $WORK/mlm_teacher.megatron-cpp/latest_checkpointed_iteration.txt ]] ||
  { echo "FAIL: the Megatron-LM teacher was not converted beside itself"; exit 1; }
echo "== a Megatron-LM torch teacher vs its conversion"
$CHECK "$WORK/from_mlm_converted.jsonl" "$WORK/from_mlm_teacher.jsonl" --from 1 --to 3 --exact

# Bad input: one clear sentence, non-zero exit.
expect_error() { # NAME MESSAGE FLAGS...
  local name=$1 message=$2
  shift 2
  if timeout 120 "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 \
    --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --mock-data \
    --vocab-size 128 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --lr 1e-3 "$@" \
    >"$WORK/$name.log" 2>&1; then
    echo "FAIL: $name ran"; exit 1
  fi
  grep -qF -- "$message" "$WORK/$name.log" ||
    { cat "$WORK/$name.log"; echo "FAIL: $name: no '$message'"; exit 1; }
}
expect_error no_teacher "--export-kd-teacher-load $WORK/nowhere holds no checkpoint" \
  --export-kd-teacher-load "$WORK/nowhere"
printf 'kd_loss_scale: 1.0\nskip_lm_los: true\n' >"$WORK/bad_key.yaml"
expect_error bad_key "--export-kd-cfg $WORK/bad_key.yaml: unknown key 'skip_lm_los'" \
  --export-kd-teacher-load "$WORK/teacher" --export-kd-cfg "$WORK/bad_key.yaml"
printf 'intermediate_layer_pairs: [[decoder.layers.1, decoder.layers.3]]\n' >"$WORK/module.yaml"
expect_error bad_module "names module 'decoder.layers.1' of the student" \
  --export-kd-teacher-load "$WORK/teacher" --export-kd-cfg "$WORK/module.yaml"
printf 'skip_lm_loss: [true\n' >"$WORK/not_yaml.yaml"
expect_error not_yaml "--export-kd-cfg $WORK/not_yaml.yaml is not valid YAML" \
  --export-kd-teacher-load "$WORK/teacher" --export-kd-cfg "$WORK/not_yaml.yaml"
expect_error cfg_alone "--export-kd-cfg needs --export-kd-teacher-load" \
  --export-kd-cfg "$WORK/skip.yaml"
if timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 "$MEGATRON_BINARY" pretrain-gpt \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
  --max-position-embeddings 32 --mock-data --vocab-size 128 --micro-batch-size 2 \
  --global-batch-size 2 --train-iters 1 --lr 1e-3 --pipeline-model-parallel-size 2 \
  --export-kd-teacher-load "$WORK/teacher" >"$WORK/pp.log" 2>&1; then
  echo "FAIL: distillation ran with pipeline parallelism"; exit 1
fi
grep -qF "knowledge distillation runs with --pipeline-model-parallel-size 1 here" "$WORK/pp.log" ||
  { cat "$WORK/pp.log"; echo "FAIL: no pipeline refusal"; exit 1; }
echo "distillation: OK"
