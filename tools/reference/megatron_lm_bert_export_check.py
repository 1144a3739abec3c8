#!/usr/bin/python3
"""Checks with PyTorch's own torch.load that a BERT checkpoint megatron-cpp wrote in Megatron-LM's
torch format (`megatron convert --model-type bert --to megatron-lm`) holds what the
PyTorch-written fixture (tools/reference/megatron_lm_bert_checkpoint.py) holds, at the same
layout and naming:

* every "model" entry: nested dict types, names, order, dtypes, shapes, values (the vocabulary
  tensors' real rows: Megatron's padding rows are random, ours zero);
* the optimizer's param groups (their parameter ids, wd_mult) and every parameter's Adam state
  (step, exp_avg, exp_avg_sq), the ids mapped to parameters by Megatron's parameter order,
  worked out here from the model dict (language model, the last stage's embedding copy, whose
  state Megatron keeps apart and is not compared, lm_head, binary_head);
* that torch.optim.Adam's load_state_dict takes the optimizer state over the parameters grouped
  as Megatron groups them;
* opt_param_scheduler, iteration, checkpoint_version and the args Megatron-LM checks.

  /usr/bin/python3 tools/reference/megatron_lm_bert_export_check.py OURS_DIR FIXTURE_DIR VOCAB
Prints one line per checked directory; any difference raises.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_lm_checkpoint  # noqa: E402,F401  (registers the Megatron enum the fixture pickles)


def flatten(v, path, out):
    if isinstance(v, dict):
        out[path + "#type"] = type(v).__name__
        out[path + "#keys"] = list(v.keys())
        for k, item in v.items():
            flatten(item, f"{path}/{k}" if path else k, out)
    else:
        out[path] = v


def rank_files(d):
    found = {}
    for root, _, files in os.walk(d):
        if "model_optim_rng.pt" in files:
            found[os.path.basename(root)] = os.path.join(root, "model_optim_rng.pt")
    return found


def is_vocab(path):
    return "word_embeddings" in path or path.endswith("lm_head/bias") or path == "output_layer.bias"


def megatron_order(model):
    """(path, tensor) of every parameter in Megatron's parameter order (the optimizer's ids)."""
    out = []

    def walk(v, path):
        if isinstance(v, torch.Tensor):
            out.append((path, v))
        elif isinstance(v, dict):
            for k, item in v.items():
                walk(item, f"{path}/{k}" if path else k)
    if "language_model" in model:  # legacy names: the module order, not the saved one
        for key in ("language_model", "word_embeddings_for_head", "lm_head", "binary_head"):
            if key in model:
                walk(model[key], key)
    else:
        for k, v in model.items():
            if not k.endswith("._extra_state"):
                walk(v, k)
    return out


def no_weight_decay(path, t):
    return t.dim() == 1 or path.endswith("bias")


def equal_rows(x, y, path, real):
    assert x.dtype == y.dtype and x.shape == y.shape, (path, x.dtype, y.dtype, x.shape, y.shape)
    if is_vocab(path):
        x, y = x[:real], y[:real]
    assert torch.equal(x, y), path


def main():
    ours_dir, fixture_dir, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
    files, fixture = rank_files(ours_dir), rank_files(fixture_dir)
    assert files.keys() == fixture.keys(), (files.keys(), fixture.keys())
    tensors = states = 0
    for f in sorted(files):
        ours, theirs = torch.load(files[f]), torch.load(fixture[f])
        tp = ours["args"].tensor_model_parallel_size
        tp_rank = int(f.split("_")[2])
        a, b = {}, {}
        flatten(ours["model"], "", a)
        flatten(theirs["model"], "", b)
        assert a.keys() == b.keys(), (f, set(a) ^ set(b))
        for k, x in a.items():
            if k.endswith("._extra_state"):
                continue
            if not isinstance(x, torch.Tensor):
                assert x == b[k], (f, k, x, b[k])
                continue
            rows = x.shape[0]
            equal_rows(x, b[k], k, max(0, min(rows, vocab - tp_rank * rows)))
            tensors += 1
        if "optimizer" in theirs:
            order = megatron_order(ours["model"])
            assert [p for p, _ in order] == [p for p, _ in megatron_order(theirs["model"])], f
            go, gt = ours["optimizer"]["param_groups"], theirs["optimizer"]["param_groups"]
            assert [g["params"] for g in go] == [g["params"] for g in gt], f
            assert [g["wd_mult"] for g in go] == [g["wd_mult"] for g in gt], f
            ids = [i for g in go for i in g["params"]]
            by_group = [i for nwd in (True, False) for i, (p, t) in enumerate(order)
                        if no_weight_decay(p, t) == nwd]
            assert ids == list(range(len(order))), f
            so, st = ours["optimizer"]["state"], theirs["optimizer"]["state"]
            assert so.keys() == st.keys(), f
            for new, old in enumerate(by_group):
                path, param = order[old]
                if path.startswith("word_embeddings_for_head"):
                    continue  # Megatron's separate copy: its own state, not megatron-cpp's
                assert float(so[new]["step"]) == float(st[new]["step"]), (f, path)
                rows = param.shape[0]
                for buf in ("exp_avg", "exp_avg_sq"):
                    equal_rows(so[new][buf], st[new][buf], path,
                               max(0, min(rows, vocab - tp_rank * rows)))
                states += 1
            # torch's own Adam takes the state dict over the parameters grouped as Megatron
            # groups them (load_state_dict checks the groups' sizes).
            params = [torch.nn.Parameter(order[i][1].clone()) for i in by_group]
            n_no_wd = len(go[0]["params"])
            adam = torch.optim.Adam([{"params": params[:n_no_wd]}, {"params": params[n_no_wd:]}])
            adam.load_state_dict(ours["optimizer"])
            assert ours["opt_param_scheduler"] == theirs["opt_param_scheduler"], (
                f, ours["opt_param_scheduler"], theirs["opt_param_scheduler"])
            for key in ("consumed_train_samples", "consumed_valid_samples"):
                assert getattr(ours["args"], key) == getattr(theirs["args"], key), key
        assert ours["checkpoint_version"] == 3.0 and ours["iteration"] == theirs["iteration"]
        for key in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                    "max_position_embeddings", "padded_vocab_size", "tensor_model_parallel_size",
                    "pipeline_model_parallel_size", "make_vocab_size_divisible_by",
                    "bert_binary_head"):
            assert getattr(ours["args"], key) == getattr(theirs["args"], key), key
        assert ours["args"].params_dtype == torch.float32 and tp >= 1
    print(f"{ours_dir}: {len(files)} rank files load in PyTorch {torch.__version__}; "
          f"{tensors} model tensors and {states} parameters' Adam state equal to {fixture_dir}'s")


if __name__ == "__main__":
    main()
