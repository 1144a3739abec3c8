#!/usr/bin/python3
"""Checks with PyTorch's own torch.load that Megatron-LM checkpoints megatron-cpp wrote
(`megatron convert --to megatron-lm[-core]`) hold what the PyTorch-written fixture holds:
every "model" entry (nested dict types, names, dtypes, shapes, values — the word embedding's
real rows; Megatron's padding rows are random, ours zero), and the args the load checks.

  /usr/bin/python3 tools/reference/megatron_lm_export_check.py OURS_DIR FIXTURE_DIR VOCAB
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_lm_checkpoint  # noqa: E402,F401  (registers the Megatron enum the fixture pickles)


def flatten(v, path, out):
    if isinstance(v, dict):
        out[path + "#type"] = type(v).__name__
        for k, item in v.items():
            flatten(item, f"{path}/{k}" if path else k, out)
    else:
        out[path] = v


def rank_files(d):
    """mp_rank_* name -> its file, in the checkpoint's (only) iteration directory."""
    found = {}
    for root, _, files in os.walk(d):
        if "model_optim_rng.pt" in files:
            found[os.path.basename(root)] = os.path.join(root, "model_optim_rng.pt")
    return found


def main():
    ours_dir, fixture_dir, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
    files, fixture = rank_files(ours_dir), rank_files(fixture_dir)
    assert files.keys() == fixture.keys(), (files.keys(), fixture.keys())
    checked = 0
    for f in sorted(files):
        ours = torch.load(files[f])
        theirs = torch.load(fixture[f])
        a, b = {}, {}
        flatten(ours["model"], "", a)
        flatten(theirs["model"], "", b)
        assert a.keys() == b.keys(), (f, set(a) ^ set(b))
        tp_rank = 1 if "mp_rank_01" in f else 0
        for k, x in a.items():
            y = b[k]
            if k.endswith("._extra_state"):  # ours None; Transformer Engine's vary
                continue
            if not isinstance(x, torch.Tensor):
                assert x == y, (f, k, x, y)
                continue
            assert x.dtype == y.dtype and x.shape == y.shape, (f, k, x.dtype, x.shape, y.shape)
            if "word_embeddings" in k or (k == "output_layer.weight" and x.shape[0] * 2 > vocab):
                rows = x.shape[0]
                real = max(0, min(rows, vocab - tp_rank * rows))
                x, y = x[:real], y[:real]
            assert torch.equal(x, y), (f, k)
            checked += 1
        assert ours["checkpoint_version"] == 3.0 and isinstance(ours["iteration"], int)
        for key in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                    "max_position_embeddings", "padded_vocab_size", "tensor_model_parallel_size",
                    "pipeline_model_parallel_size", "make_vocab_size_divisible_by"):
            assert getattr(ours["args"], key) == getattr(theirs["args"], key), key
        assert ours["args"].params_dtype == torch.float32
    print(f"{ours_dir}: {len(files)} rank files load in PyTorch {torch.__version__}; "
          f"{checked} tensors equal to {fixture_dir}'s")


if __name__ == "__main__":
    main()
