#!/usr/bin/python3
"""PyTorch reference for knowledge distillation as Megatron-LM's ModelOpt integration runs it
(tests/unit/model_distillation_pytorch_golden_test.cpp, tests/dist/model_distillation_tp_test.cpp;
docs/distillation.md), written from the published definitions in plain torch float64:
  - student: the 2-layer model of gpt_variants_reference.py; teacher: the same architecture with
    3 layers and other weights (frozen, no gradients);
  - logits loss per token: KL(p_teacher || p_student), p = softmax(logits / T), i.e.
    sum_v kl_div(log_softmax(z_s / T), log_softmax(z_t / T), log_target=True);
  - intermediate loss per token between the final LayerNorms' outputs:
    cosine_embedding_loss(h_s, h_t, target 1) = 1 - cos (PyTorch's, eps 1e-12);
  - each masked and summed over the tokens, then ModelOpt's LogitsAndIntermediatesLossBalancer:
    intermediate rescaled by (logits / intermediate) (a constant), and
      skip_lm_loss:  total = logits + intermediate'
      otherwise:     kd = logits + intermediate';  total = lm + kd_loss_scale * kd * (lm / kd)
    with the ratios constants (Python floats: detached);
  - the student's gradients of total / sum(mask) (Megatron's per-micro-batch mean), checked
    against central finite differences here with the ratios held at their values.
Two cases: "mixed" (skip_lm_loss false, kd_loss_scale 2, temperature 2) and "skip"
(skip_lm_loss true, scale 1, temperature 1: the Megatron CI configs' settings).

OUT/golden.safetensors holds s.<name> and t.<name> (f32 student and teacher weights, in
megatron-cpp's names), input_ids, labels, loss_mask [b, s], and per case C:
C.lm, C.total, C.logits, C.intermediate (the masked sums / sum(mask), f64 scalars; C.lm is the
reported LM loss: 0 with skip_lm_loss in training) and C.grad.<name> (f32 student gradients).

Usage: /usr/bin/python3 tools/reference/distillation_reference.py tests/data/distillation
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_variants_reference as model  # noqa: E402
import safetensors_io  # noqa: E402

STUDENT_LAYERS, TEACHER_LAYERS = 2, 3
CASES = {
    "mixed": {"skip_lm_loss": False, "kd_loss_scale": 2.0, "temperature": 2.0},
    "skip": {"skip_lm_loss": True, "kd_loss_scale": 1.0, "temperature": 1.0},
}


def losses(params, teacher, ids, labels, mask, case, ratios=None):
    """(reported terms as masked sums, total) for the student weights `params`; `ratios`
    (rescale, match) holds the balancer's constants, computed here when None."""
    h_s = model.final_hidden(params, ids)
    z_s = h_s @ params["output_layer.weight"].t()
    with torch.no_grad():
        h_t = model.final_hidden(teacher, ids)
        z_t = h_t @ teacher["output_layer.weight"].t()
    m = mask.reshape(-1)
    v, h = z_s.shape[-1], h_s.shape[-1]
    lm = (F.cross_entropy(z_s.reshape(-1, v), labels.reshape(-1), reduction="none") * m).sum()
    T = case["temperature"]
    kl = F.kl_div(F.log_softmax(z_s.reshape(-1, v) / T, -1), F.log_softmax(z_t.reshape(-1, v) / T, -1),
                  reduction="none", log_target=True).sum(-1)
    logits = (kl * m).sum()
    cos = F.cosine_embedding_loss(h_s.reshape(-1, h), h_t.reshape(-1, h),
                                  torch.ones(m.numel(), dtype=torch.float64), reduction="none")
    inter = (cos * m).sum()
    if ratios is None:
        rescale = logits.item() / inter.item() if inter.item() > 0 else 1.0
        kd = logits.item() + inter.item() * rescale
        ratios = (rescale, lm.item() / kd)
    rescale, match = ratios
    if case["skip_lm_loss"]:
        total = logits + inter * rescale
        reported_lm = torch.zeros((), dtype=torch.float64)
    else:
        total = lm + case["kd_loss_scale"] * (logits + inter * rescale) * match
        reported_lm = lm
    return {"lm": reported_lm, "total": total, "logits": logits, "intermediate": inter}, ratios


def main(out_dir):
    gen = torch.Generator().manual_seed(20261208)
    student = model.make_weights(gen, STUDENT_LAYERS)
    teacher = model.make_weights(gen, TEACHER_LAYERS)
    ids = torch.randint(0, model.VOCAB, (model.BATCH, model.SEQ), generator=gen)
    labels = torch.randint(0, model.VOCAB, (model.BATCH, model.SEQ), generator=gen)
    mask = torch.ones(model.BATCH, model.SEQ, dtype=torch.float64)
    mask[0, -3:] = 0.0
    mask[1, 0] = 0.0
    golden = {"s." + k: t.float().numpy() for k, t in student.items()}
    golden.update({"t." + k: t.float().numpy() for k, t in teacher.items()})
    golden.update({
        "input_ids": ids.to(torch.int32).numpy(),
        "labels": labels.to(torch.int32).numpy(),
        "loss_mask": mask.float().numpy(),
    })
    count = mask.sum()
    for name, case in CASES.items():
        params = {k: t.clone().requires_grad_(True) for k, t in student.items()}
        terms, ratios = losses(params, teacher, ids, labels, mask, case)
        (terms["total"] / count).backward()
        safetensors_io.check_gradients(
            lambda: losses(params, teacher, ids, labels, mask, case, ratios)[0]["total"] / count,
            params, ["layers.0.input_layernorm.weight", "layers.1.mlp.dense_h_to_4h.weight",
                     "final_layernorm.weight", "final_layernorm.bias", "output_layer.weight",
                     "embedding.word_embeddings.weight"],
            torch.Generator().manual_seed(11))
        for k, t in terms.items():
            golden[f"{name}.{k}"] = np.array((t / count).item(), dtype=np.float64)
        for k, t in params.items():
            golden[f"{name}.grad.{k}"] = t.grad.float().numpy()
        print(name, {k: round((t / count).item(), 8) for k, t in terms.items()})
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(out_dir, "golden.safetensors"), golden,
                        {"generator": "tools/reference/distillation_reference.py",
                         "torch": torch.__version__})
    print(f"wrote {out_dir}/golden.safetensors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/distillation")
