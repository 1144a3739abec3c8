#!/usr/bin/env bash
# --calculate-per-token-loss (Megatron's per-token loss): the loss of an iteration is the masked
# cross-entropy summed over the whole global batch divided by its token count, whatever the
# split into micro-batches, DP ranks and pipeline stages. With --eod-mask-loss on mock data (a
# random walk over 128 ids with the NullTokenizer's end-of-document id 127 among them) the
# micro-batches mask different numbers of tokens, so:
#   - per-token runs at 4 micro-batches of accumulation, DP 2, PP 2 and TP 2 x DP 2 log the lm
#     loss and grad norm of one micro-batch holding the whole global batch (the reference: its
#     own mean is the per-token mean), relative <= 1e-5, over 6 iterations;
#   - the default (a mean of per-micro-batch means) at 4 micro-batches differs from it.
set -euo pipefail
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0 --tokenizer-type NullTokenizer --eod-mask-loss)
source "$(dirname "$0")/tiny_gpt_run.bash"

run whole 1 1 1 --micro-batch-size 8
run acc4 1 1 1 --calculate-per-token-loss
run dp2 2 1 1 --calculate-per-token-loss
run pp2 2 1 2 --calculate-per-token-loss
run tp2_dp2 4 2 1 --calculate-per-token-loss --micro-batch-size 1
run acc4_mean 1 1 1

for name in acc4 dp2 pp2 tp2_dp2; do
  echo "== whole batch vs per-token $name"
  $CHECK "$WORK/whole.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== the per-micro-batch mean must differ (the masks differ between micro-batches)"
if $CHECK "$WORK/whole.jsonl" "$WORK/acc4_mean.jsonl" --from 1 --to 1 --rtol 1e-5 \
  > "$WORK/differ.log" 2>&1; then
  cat "$WORK/differ.log"
  echo "FAIL: the default loss equals the per-token loss: the micro-batches' masks are equal"
  exit 1
fi
echo "per-token loss: OK"
