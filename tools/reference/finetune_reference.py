#!/usr/bin/python3
"""PyTorch reference for BERT finetuning's first iteration (for the finetuning golden test).

Takes the tiny post-LN BERT of tests/data/bert_tiny (written by bert_reference.py: its HF
directory) as the pretrained body and puts Megatron's finetuning heads on its pooled [CLS]
state (the legacy Classification and MultipleChoice models, dropout off):
  race: MultipleChoice — 2 questions x 4 options, each row [CLS] question+option [SEP]
        passage [SEP] + padding; score = pooled . w + b per row; logits = scores viewed [2, 4]
  mnli: Classification, 3 classes — 3 rows [CLS] a [SEP] b [SEP] + padding; logits [3, 3]
  loss = torch.nn.CrossEntropyLoss()(logits, labels) (the mean over the batch's samples)
runs forward and backward in float64 and writes OUT/finetune_golden.safetensors with, for each
case C in (race, mnli):
  C.input_ids, C.token_type_ids, C.attention_mask (1 = real token) i32 [rows, s]
  C.labels i32 [samples]; C.head.weight f32 [outputs, h], C.head.bias f32 [outputs]
  C.logits f32 [samples, classes]; C.loss f64 []
  C.grad.<name> f32: d loss / d weight for the head and a few body weights (HF names)
The body's gradients are checked against finite differences before anything is written.

Usage: /usr/bin/python3 tools/reference/finetune_reference.py tests/data/bert_tiny
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from bert_reference import CLS_ID, PAD_ID, SEP_ID, encode  # noqa: E402
from reference_common import normal_sampler  # noqa: E402

SEQ = 16
CHECKED = ["bert.embeddings.word_embeddings.weight",
           "bert.embeddings.token_type_embeddings.weight",
           "bert.encoder.layer.0.attention.self.query.weight",
           "bert.encoder.layer.1.output.LayerNorm.weight",
           "bert.pooler.dense.weight", "bert.pooler.dense.bias", "head.weight", "head.bias"]


def pair_row(gen, len_a, len_b, vocab):
    """[CLS] a [SEP] b [SEP] then padding: ids, types, attention mask (lists of SEQ)."""
    a = torch.randint(4, vocab, (len_a,), generator=gen).tolist()
    b = torch.randint(4, vocab, (len_b,), generator=gen).tolist()
    ids = [CLS_ID] + a + [SEP_ID] + b + [SEP_ID]
    types = [0] * (len_a + 2) + [1] * (len_b + 1)
    mask = [1] * len(ids)
    pad = SEQ - len(ids)
    return ids + [PAD_ID] * pad, types + [PAD_ID] * pad, mask + [0] * pad


def make_case(gen, randn, hidden, vocab, samples, choices, classes, lengths):
    rows = [pair_row(gen, la, lb, vocab) for la, lb in lengths]
    assert len(rows) == samples * choices
    ids, types, mask = (torch.tensor([r[i] for r in rows]) for i in range(3))
    labels = torch.randint(0, classes, (samples,), generator=gen)
    outputs = 1 if choices > 1 else classes
    head = {"head.weight": randn(outputs, hidden), "head.bias": randn(outputs, std=0.1)}
    head = {k: t.float().double() for k, t in head.items()}  # the f32 file's values
    return ids, types, mask, labels, head


def run_case(name, weights, gen, randn, hidden, vocab, samples, choices, classes, lengths):
    ids, types, mask, labels, head = make_case(gen, randn, hidden, vocab, samples, choices,
                                               classes, lengths)
    params = {k: t.clone().requires_grad_(True) for k, t in {**weights, **head}.items()}

    def compute():
        _, pooled = encode(params, ids, types, mask)
        scores = pooled @ params["head.weight"].t() + params["head.bias"]
        logits = scores.view(samples, classes)
        return logits, torch.nn.functional.cross_entropy(logits, labels)

    logits, loss = compute()
    loss.backward()
    safetensors_io.check_gradients(lambda: compute()[1], params, CHECKED,
                                   torch.Generator().manual_seed(11))
    out = {
        name + ".input_ids": ids.to(torch.int32).numpy(),
        name + ".token_type_ids": types.to(torch.int32).numpy(),
        name + ".attention_mask": mask.to(torch.int32).numpy(),
        name + ".labels": labels.to(torch.int32).numpy(),
        name + ".head.weight": head["head.weight"].float().numpy(),
        name + ".head.bias": head["head.bias"].float().numpy(),
        name + ".logits": logits.detach().float().numpy(),
        name + ".loss": np.array(loss.item(), dtype=np.float64),
    }
    for k in CHECKED:
        out[name + ".grad." + k] = params[k].grad.float().numpy()
    print(f"{name} loss {loss.item():.10f}")
    return out


def main(out_dir):
    tensors, _ = safetensors_io.load(os.path.join(out_dir, "hf", "model.safetensors"))
    weights = {k: torch.from_numpy(v.copy()).double() for k, v in tensors.items()
               if v.dtype == np.float32}
    hidden = weights["bert.pooler.dense.weight"].shape[0]
    vocab = weights["bert.embeddings.word_embeddings.weight"].shape[0]
    gen = torch.Generator().manual_seed(20250815)
    randn = normal_sampler(gen)
    golden = {}
    # RACE: 2 questions x 4 options; each option's row is cut differently (padding varies).
    golden.update(run_case("race", weights, gen, randn, hidden, vocab, samples=2, choices=4,
                           classes=4, lengths=[(3, 9), (2, 9), (4, 9), (3, 9),
                                               (1, 10), (5, 6), (2, 10), (3, 8)]))
    # MNLI: 3 sentence pairs, 3 classes.
    golden.update(run_case("mnli", weights, gen, randn, hidden, vocab, samples=3, choices=1,
                           classes=3, lengths=[(5, 8), (3, 4), (6, 7)]))
    safetensors_io.save(os.path.join(out_dir, "finetune_golden.safetensors"), golden,
                        {"generator": "tools/reference/finetune_reference.py",
                         "torch": torch.__version__})
    print(f"wrote {out_dir}/finetune_golden.safetensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/bert_tiny")
