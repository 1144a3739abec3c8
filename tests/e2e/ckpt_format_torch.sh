#!/usr/bin/env bash
# --ckpt-format torch on --save (pretrain-gpt at TP 2, with the distributed optimizer at DP 2 and
# with --bf16; pretrain-bert at PP 2): the run writes
# Megatron-LM's torch format (iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt and the tracker, with
# the distributed optimizer distrib_optim.pt beside each, which the reference script's reader
# splits into every parameter's state; no megatron-cpp files, no staging directory left), with
# the optimizer state, scheduler, args and
# iteration, and a run resumed from it (--load of that directory) logs the uninterrupted run's
# losses; PyTorch's torch.load reads the files (when python3-torch is there); --async-save with
# torch, formats megatron-cpp does not write and models the format does not take are refused by
# name.
source "$(dirname "$0")/convert_megatron_lm_setup.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BERT="$MEGATRON_SOURCE_DIR/tests/data/megatron_lm_bert_tiny"
run() {  # run NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
  grep -o "iteration  *[0-9]*/.*lm loss: [0-9.E+-]*" "$WORK/$name.log" \
    | sed -E 's/^iteration +([0-9]+)\/.*(lm loss: .*)$/\1 \2/' > "$WORK/$name.loss"
}
# check_torch_save DIR ITERATION RANK_DIRS...: the Megatron-LM layout and nothing else.
check_torch_save() {
  local dir=$1 it=$2
  shift 2
  [[ $(cat "$dir/latest_checkpointed_iteration.txt") == "$it" ]] || fail "$dir: tracker"
  local iter_dir
  iter_dir="$dir/$(printf 'iter_%07d' "$it")"
  # The distributed optimizer's run: distrib_optim.pt beside each rank file.
  local per_rank=1
  [[ -e $iter_dir/$1/distrib_optim.pt ]] && per_rank=2
  for r in "$@"; do [[ -s $iter_dir/$r/model_optim_rng.pt ]] || fail "$iter_dir/$r"; done
  [[ $(find "$iter_dir" -type f | wc -l) == $(($# * per_rank)) ]] \
    || { find "$iter_dir"; fail "other files"; }
  [[ ! -e $dir.megatron-cpp-staging ]] || fail "staging directory left"
  if /usr/bin/python3 -c "import torch" 2> /dev/null; then
    /usr/bin/python3 - "$iter_dir" "$@" <<'PY' || fail "torch.load of $iter_dir"
import os, sys, torch
sys.path.insert(0, os.path.join(os.environ["MEGATRON_SOURCE_DIR"], "tools/reference"))
import megatron_lm_distrib_optim  # noqa: E402  (the independent reader of distrib_optim.pt)
d = sys.argv[1]
for r in sys.argv[2:]:
    sd = torch.load(os.path.join(d, r, "model_optim_rng.pt"))
    assert sd["checkpoint_version"] == 3.0 and isinstance(sd["iteration"], int)
    if getattr(sd["args"], "use_distributed_optimizer", False):
        # DistributedOptimizer.state_dict(): the param groups with the step, no state; every
        # parameter's fp32 main param (its weight), exp_avg and exp_avg_sq in distrib_optim.pt,
        # where the layout its args give puts them.
        _, state = megatron_lm_distrib_optim.read_per_parameter(os.path.join(d, r,
                                                                             "model_optim_rng.pt"))
        opt = sd["optimizer"]["optimizer"]
        assert "state" not in opt and [g["wd_mult"] for g in opt["param_groups"]] == [0.0, 1.0]
        assert all(g["step"] == sd["iteration"] for g in opt["param_groups"])
        assert all(s["exp_avg_sq"].min() >= 0 and s["exp_avg_sq"].max() > 0
                   for s in state.values()), r
        print(r, len(state), "parameters with the distributed optimizer's state")
        continue
    # Megatron-Core names: the saved order is the parameter order; the ids number the group
    # without weight decay (biases, 1-D), then the other.
    named = [(k, v) for k, v in sd["model"].items() if isinstance(v, torch.Tensor)]
    no_wd = [v for k, v in named if v.dim() == 1 or k.endswith("bias")]
    params = no_wd + [v for k, v in named if not (v.dim() == 1 or k.endswith("bias"))]
    opt = sd["optimizer"].get("optimizer", sd["optimizer"])  # --bf16: the mixed-precision one's
    if sd["args"].bf16:
        masters = [t for g in sd["optimizer"]["fp32_from_fp16_params"] for t in g]
        assert [t.shape for t in masters] == [p.shape for p in params], r
        assert all(t.dtype == torch.float32 for t in masters), r
    ids = [i for g in opt["param_groups"] for i in g["params"]]
    assert ids == list(range(len(params))), (r, ids)
    assert [g["wd_mult"] for g in opt["param_groups"]] == [0.0, 1.0]
    for i, p in enumerate(params):
        s = opt["state"][i]
        assert s["exp_avg"].shape == p.shape == s["exp_avg_sq"].shape, (r, i)
        assert s["exp_avg"].dtype == s["exp_avg_sq"].dtype == torch.float32, (r, i)
        assert float(s["step"]) == sd["iteration"]
    assert sd["opt_param_scheduler"]["num_steps"] == sd["args"].consumed_train_samples
    print(r, len(params), "parameters with Adam state, scheduler at",
          sd["opt_param_scheduler"]["num_steps"], "samples")
PY
  fi
}

echo "== pretrain-gpt, TP 2: interrupted at 3 and saved as torch, resumed to 6"
GPT=(pretrain-gpt --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
     --max-position-embeddings 32 --mock-data --vocab-size 96 --make-vocab-size-divisible-by 64
     --micro-batch-size 2 --global-batch-size 4 --train-iters 6 --lr 1e-3 --lr-warmup-iters 1
     --lr-decay-iters 6 --lr-decay-style cosine --log-interval 1 --eval-interval 1000
     --eval-iters 1 --tensor-model-parallel-size 2)
run gpt_whole 2 "${GPT[@]}"
[[ $(wc -l < "$WORK/gpt_whole.loss") == 6 ]] || { cat "$WORK/gpt_whole.log"; fail "6 losses"; }
run gpt_first 2 "${GPT[@]}" --save "$WORK/gpt" --ckpt-format torch --exit-interval 3
check_torch_save "$WORK/gpt" 3 mp_rank_00 mp_rank_01
run gpt_resumed 2 "${GPT[@]}" --load "$WORK/gpt" --save "$WORK/gpt" --ckpt-format torch
grep -q "loaded checkpoint from .* at iteration 3$" "$WORK/gpt_resumed.log" \
  || { cat "$WORK/gpt_resumed.log"; fail "not resumed at iteration 3"; }
cat "$WORK/gpt_first.loss" "$WORK/gpt_resumed.loss" | diff - "$WORK/gpt_whole.loss" \
  || fail "pretrain-gpt: the resumed losses differ from the uninterrupted run's"
check_torch_save "$WORK/gpt" 6 mp_rank_00 mp_rank_01

echo "== pretrain-gpt with the distributed optimizer (DP 2), and --bf16: the same"
for variant in "dopt 2 --use-distributed-optimizer" "bf16 1 --bf16"; do
  read -r name np flag <<< "$variant"
  ONE=("${GPT[@]}" --tensor-model-parallel-size 1 "$flag")
  run "${name}_whole" "$np" "${ONE[@]}"
  run "${name}_first" "$np" "${ONE[@]}" --save "$WORK/$name" --ckpt-format torch --exit-interval 3
  check_torch_save "$WORK/$name" 3 mp_rank_00
  run "${name}_resumed" "$np" "${ONE[@]}" --load "$WORK/$name" --save "$WORK/$name" \
    --ckpt-format torch
  cat "$WORK/${name}_first.loss" "$WORK/${name}_resumed.loss" | diff - "$WORK/${name}_whole.loss" \
    || fail "$name: the resumed losses differ from the uninterrupted run's"
done

echo "== pretrain-bert, PP 2: the same"
head -n 40 "${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/sotu.jsonl" > "$WORK/in.jsonl"
"$MEGATRON_BINARY" preprocess --input "$WORK/in.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$BERT/vocab.txt" --split-sentences --output-prefix "$WORK/sotu" 2> /dev/null
BERT_RUN=(pretrain-bert --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
          --max-position-embeddings 32 --data-path "$WORK/sotu_text_sentence"
          --vocab-file "$BERT/vocab.txt" --split 949,50,1 --micro-batch-size 2
          --global-batch-size 4 --train-iters 6 --lr 1e-3 --lr-warmup-iters 1 --lr-decay-iters 6
          --log-interval 1 --eval-interval 1000 --eval-iters 1 --pipeline-model-parallel-size 2)
run bert_whole 2 "${BERT_RUN[@]}"
[[ $(wc -l < "$WORK/bert_whole.loss") == 6 ]] || { cat "$WORK/bert_whole.log"; fail "6 losses"; }
run bert_first 2 "${BERT_RUN[@]}" --save "$WORK/bert" --ckpt-format torch --exit-interval 3
check_torch_save "$WORK/bert" 3 mp_rank_00_000 mp_rank_00_001
run bert_resumed 2 "${BERT_RUN[@]}" --load "$WORK/bert" --save "$WORK/bert" --ckpt-format torch
grep -q "loaded checkpoint from .* at iteration 3$" "$WORK/bert_resumed.log" \
  || { cat "$WORK/bert_resumed.log"; fail "not resumed at iteration 3"; }
cat "$WORK/bert_first.loss" "$WORK/bert_resumed.loss" | diff - "$WORK/bert_whole.loss" \
  || fail "pretrain-bert: the resumed losses differ from the uninterrupted run's"

echo "== errors"
expect_error "--async-save with --ckpt-format torch is not supported" "${GPT[@]}" \
  --tensor-model-parallel-size 1 --save "$WORK/x" --ckpt-format torch --async-save
expect_error "--ckpt-format zarr is not a format megatron-cpp writes" "${GPT[@]}" \
  --tensor-model-parallel-size 1 --save "$WORK/x" --ckpt-format zarr
expect_error "--ckpt-format torch: the model is a mixture-of-experts model" "${GPT[@]}" \
  --tensor-model-parallel-size 1 --save "$WORK/x" --ckpt-format torch --num-experts 2
echo "PASS"
