#!/usr/bin/python3
"""PyTorch reference for a tiny post-LN BERT (for the BERT golden test).

Builds a tiny BertForPreTraining from deterministic random weights in HuggingFace's layout
(nn.Linear weights [out, in], separate query/key/value, names as HF saves them, MLM decoder
tied to the word embeddings so cls.predictions.decoder.* is not stored, plus the
bert.embeddings.position_ids buffer older files carry), runs forward and backward in float64
with plain torch (no `transformers`) and writes
  OUT/hf/config.json, OUT/hf/model.safetensors   the HF-layout model directory (f32 weights)
  OUT/golden.safetensors                         inputs and reference outputs:
    input_ids, token_type_ids, attention_mask (1 = real token, 0 = padding) i32 [b, s]
    mlm_labels i32 [b, s] (-100 where no MLM loss), sop_labels i32 [b]
    mlm_logits f32 [b, s, vocab], sop_logits f32 [b, 2]
    mlm_loss, sop_loss, loss (= mlm_loss + sop_loss) f64 []
    grad.<HF name> f32: d loss / d weight for every stored weight
Model: post-LN (x -> attention -> +x -> LN -> MLP -> +. -> LN), LayerNorm eps 1e-12, GeLU
"gelu" (HF's default: the exact erf form, torch.nn.functional.gelu, Megatron's default), padded keys
excluded from attention, pooler tanh(dense(h[:, 0])), MLM head dense -> gelu -> LN -> tied
decoder + bias, SOP head on the pooled output. MLM loss: mean cross-entropy over positions
whose label is not -100; SOP loss: mean cross-entropy over the batch. No dropout.

Usage: /usr/bin/python3 tools/reference/bert_reference.py tests/data/bert_tiny
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from reference_common import normal_sampler, write_outputs  # noqa: E402

CONFIG = {
    "architectures": ["BertForPreTraining"], "model_type": "bert", "vocab_size": 100,
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 128, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 32, "type_vocab_size": 2,
    "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
    "position_embedding_type": "absolute", "tie_word_embeddings": True,
}
BATCH, SEQ = 2, 16
PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3


def make_weights(gen):
    h, v = CONFIG["hidden_size"], CONFIG["vocab_size"]
    f, L = CONFIG["intermediate_size"], CONFIG["num_hidden_layers"]

    randn = normal_sampler(gen)

    def ln(prefix):
        return {prefix + ".weight": randn(h, std=0.1, mean=1.0), prefix + ".bias": randn(h, std=0.1)}

    def linear(prefix, out_features, in_features):
        return {prefix + ".weight": randn(out_features, in_features),
                prefix + ".bias": randn(out_features, std=0.1)}

    w = {
        "bert.embeddings.word_embeddings.weight": randn(v, h),
        "bert.embeddings.position_embeddings.weight": randn(CONFIG["max_position_embeddings"], h, std=0.1),
        "bert.embeddings.token_type_embeddings.weight": randn(CONFIG["type_vocab_size"], h, std=0.1),
    }
    w.update(ln("bert.embeddings.LayerNorm"))
    for i in range(L):
        pre = f"bert.encoder.layer.{i}."
        for name in ("query", "key", "value"):
            w.update(linear(pre + "attention.self." + name, h, h))
        w.update(linear(pre + "attention.output.dense", h, h))
        w.update(ln(pre + "attention.output.LayerNorm"))
        w.update(linear(pre + "intermediate.dense", f, h))
        w.update(linear(pre + "output.dense", h, f))
        w.update(ln(pre + "output.LayerNorm"))
    w.update(linear("bert.pooler.dense", h, h))
    w.update(linear("cls.predictions.transform.dense", h, h))
    w.update(ln("cls.predictions.transform.LayerNorm"))
    w["cls.predictions.bias"] = randn(v, std=0.1)
    w.update(linear("cls.seq_relationship", 2, h))
    return {k: t.float().double() for k, t in w.items()}  # the f32 file's values


def layer_norm(x, w, prefix):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w[prefix + ".weight"],
                                          w[prefix + ".bias"], CONFIG["layer_norm_eps"])


def linear(x, w, prefix):
    return x @ w[prefix + ".weight"].t() + w[prefix + ".bias"]


def encode(w, ids, token_types, attention_mask):
    """The BERT body: hidden states [b, s, h] and the pooled [CLS] state [b, h]."""
    b, s = ids.shape
    h, nh = CONFIG["hidden_size"], CONFIG["num_attention_heads"]
    hd = h // nh
    x = (w["bert.embeddings.word_embeddings.weight"][ids]
         + w["bert.embeddings.position_embeddings.weight"][torch.arange(s)]
         + w["bert.embeddings.token_type_embeddings.weight"][token_types])
    x = layer_norm(x, w, "bert.embeddings.LayerNorm")
    key_is_pad = (attention_mask == 0).reshape(b, 1, 1, s)
    for i in range(CONFIG["num_hidden_layers"]):
        pre = f"bert.encoder.layer.{i}."
        q, k, v = (linear(x, w, pre + "attention.self." + n).reshape(b, s, nh, hd).transpose(1, 2)
                   for n in ("query", "key", "value"))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(key_is_pad, float("-inf"))
        ctx = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = layer_norm(linear(ctx, w, pre + "attention.output.dense") + x, w,
                       pre + "attention.output.LayerNorm")
        m = torch.nn.functional.gelu(linear(x, w, pre + "intermediate.dense"))
        x = layer_norm(linear(m, w, pre + "output.dense") + x, w, pre + "output.LayerNorm")
    pooled = torch.tanh(linear(x[:, 0], w, "bert.pooler.dense"))
    return x, pooled


def forward(w, ids, token_types, attention_mask):
    x, pooled = encode(w, ids, token_types, attention_mask)
    t = torch.nn.functional.gelu(linear(x, w, "cls.predictions.transform.dense"))
    t = layer_norm(t, w, "cls.predictions.transform.LayerNorm")
    mlm_logits = t @ w["bert.embeddings.word_embeddings.weight"].t() + w["cls.predictions.bias"]
    sop_logits = linear(pooled, w, "cls.seq_relationship")
    return mlm_logits, sop_logits


def make_inputs(gen):
    v = CONFIG["vocab_size"]
    lengths = [SEQ, SEQ - 5]  # the second sample ends in 5 padding tokens
    ids = torch.full((BATCH, SEQ), PAD_ID, dtype=torch.long)
    token_types = torch.zeros(BATCH, SEQ, dtype=torch.long)
    attention_mask = torch.zeros(BATCH, SEQ, dtype=torch.long)
    mlm_labels = torch.full((BATCH, SEQ), -100, dtype=torch.long)
    for r, n in enumerate(lengths):
        first = (n - 3) // 2  # [CLS] A [SEP] B [SEP]
        body = torch.randint(4, v, (n,), generator=gen)
        row = [CLS_ID] + body[:first].tolist() + [SEP_ID] + body[first:n - 3].tolist() + [SEP_ID]
        ids[r, :n] = torch.tensor(row)
        token_types[r, first + 2:n] = 1
        attention_mask[r, :n] = 1
        # MLM targets on a few real, non-special tokens; the input shows [MASK] at some.
        for pos in (2, 4, first + 3, n - 2):
            mlm_labels[r, pos] = ids[r, pos]
            if pos % 2 == 0:
                ids[r, pos] = MASK_ID
    sop_labels = torch.tensor([0, 1])
    return ids, token_types, attention_mask, mlm_labels, sop_labels


def main(out_dir):
    gen = torch.Generator().manual_seed(20240602)
    weights = make_weights(gen)
    ids, token_types, attention_mask, mlm_labels, sop_labels = make_inputs(gen)

    params = {k: t.clone().requires_grad_(True) for k, t in weights.items()}

    def compute():
        mlm_logits, sop_logits = forward(params, ids, token_types, attention_mask)
        mlm_loss = torch.nn.functional.cross_entropy(
            mlm_logits.reshape(-1, CONFIG["vocab_size"]), mlm_labels.reshape(-1),
            ignore_index=-100)
        sop_loss = torch.nn.functional.cross_entropy(sop_logits, sop_labels)
        return mlm_logits, sop_logits, mlm_loss, sop_loss, mlm_loss + sop_loss

    mlm_logits, sop_logits, mlm_loss, sop_loss, loss = compute()
    loss.backward()
    # Autograd against finite differences, so the golden gradients are trusted independently.
    safetensors_io.check_gradients(
        lambda: compute()[4], params,
        ["bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.self.key.weight",
         "bert.encoder.layer.1.output.LayerNorm.weight", "bert.pooler.dense.weight",
         "cls.predictions.bias", "cls.seq_relationship.bias"], torch.Generator().manual_seed(7))

    hf = {k: t.float().numpy() for k, t in weights.items()}
    hf["bert.embeddings.position_ids"] = np.arange(CONFIG["max_position_embeddings"],
                                                   dtype=np.int64).reshape(1, -1)
    golden = {
        "input_ids": ids.to(torch.int32).numpy(),
        "token_type_ids": token_types.to(torch.int32).numpy(),
        "attention_mask": attention_mask.to(torch.int32).numpy(),
        "mlm_labels": mlm_labels.to(torch.int32).numpy(),
        "sop_labels": sop_labels.to(torch.int32).numpy(),
        "mlm_logits": mlm_logits.detach().float().numpy(),
        "sop_logits": sop_logits.detach().float().numpy(),
        "mlm_loss": np.array(mlm_loss.item(), dtype=np.float64),
        "sop_loss": np.array(sop_loss.item(), dtype=np.float64),
        "loss": np.array(loss.item(), dtype=np.float64),
    }
    write_outputs(out_dir, CONFIG, hf, golden, params, "tools/reference/bert_reference.py")
    print(f"mlm loss {mlm_loss.item():.10f} sop loss {sop_loss.item():.10f}; wrote {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/bert_tiny")
