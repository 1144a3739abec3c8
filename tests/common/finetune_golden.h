// The PyTorch finetuning golden fixture (tests/data/bert_tiny/finetune_golden.safetensors,
// written by tools/reference/finetune_reference.py): the tiny BERT of bert_golden.h as the
// pretrained body under Megatron's multiple-choice head (case "race": 2 questions x 4 options)
// or classification head (case "mnli": 3 classes), with the inputs, logits, first-iteration
// loss and the gradients of the head and a few body weights. Loads it into a BertClassifier
// at any TP rank, and maps our gradients back to HF names.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "../common/bert_golden.h"
#include "model/bert_classifier.h"

namespace megatron::testing {

struct FinetuneCase {
  std::string name;  // "race" or "mnli"
  BertClassifierConfig config;
  ClassifierBatch batch;
  Tensor logits;  // f32 [samples, classes]
  double loss = 0;
  TensorMap grads;  // HF name (or "head.weight" / "head.bias") -> d loss / d weight
};

inline FinetuneCase load_finetune_case(const BertGolden& g, const std::string& name) {
  SafetensorsReader file(bert_fixture_dir() + "/finetune_golden.safetensors");
  auto get = [&](const std::string& key) { return file.get(name + "." + key).clone(); };
  FinetuneCase c;
  c.name = name;
  c.config.bert = g.config;  // binary_head stays as imported: the pooler's HF names map
  c.config.bert.hidden_dropout = 0.0f;
  c.config.bert.attention_dropout = 0.0f;
  c.config.multiple_choice = name == "race";
  c.config.head_name = c.config.multiple_choice ? "multichoice_head" : "classification_head";
  c.logits = get("logits");
  c.config.classes = c.logits.size(1);
  c.loss = file.get(name + ".loss").data<double>()[0];
  const Tensor ids = get("input_ids");
  const int64_t rows = ids.size(0), s = ids.size(1);
  c.config.bert.seq_length = int(s);
  c.batch.tokens = ids;
  c.batch.token_types = get("token_type_ids");
  c.batch.pad_mask = Tensor::empty({rows, s}, DType::U8);
  const Tensor real = get("attention_mask");
  for (int64_t i = 0; i < rows * s; ++i)
    c.batch.pad_mask.data<uint8_t>()[i] = real.data<int32_t>()[i] ? 0 : 1;
  c.batch.labels = get("labels");
  const std::string prefix = name + ".grad.";
  for (const std::string& key : file.names())
    if (key.rfind(prefix, 0) == 0) c.grads[key.substr(prefix.size())] = file.get(key).clone();
  return c;
}

// A BertClassifier on this rank holding the fixture's body and head (dropout off).
struct LoadedClassifier {
  ParameterStore store;
  std::unique_ptr<BertClassifier> model;

  LoadedClassifier(const BertGolden& g, const FinetuneCase& c, const ParallelState& ps)
      : store(ps.tp_rank, ps.tp_size, Device::CPU) {
    model = std::make_unique<BertClassifier>(c.config, ps, store);
    store.allocate();
    TensorMap full = bert_tensors_from_hf(g.hf.tensors, c.config.bert);
    TensorMap body;  // the pretraining heads are not part of the classifier
    for (auto& [name, t] : full)
      if (name.rfind("lm_head.", 0) != 0 && name.rfind("binary_head.", 0) != 0) body[name] = t;
    SafetensorsReader file(bert_fixture_dir() + "/finetune_golden.safetensors");
    body[c.config.head_name + ".weight"] = file.get(c.name + ".head.weight").clone();
    body[c.config.head_name + ".bias"] = file.get(c.name + ".head.bias").clone();
    assign_from_full_tensors(body, store);
    model->refresh_compute_weights();
  }
};

// Our full gradients (name -> f32 full tensor) in HF names ("head.*" for the task head):
// the pretraining heads, which the classifier lacks, are mapped as zeros.
inline TensorMap hf_gradients(const TensorMap& ours, const FinetuneCase& c, const BertGolden& g) {
  TensorMap all;
  for (const auto& [name, t] : bert_tensors_from_hf(g.hf.tensors, c.config.bert))
    all[name] = ours.count(name) ? ours.at(name) : Tensor::zeros(t.shape(), DType::F32);
  TensorMap hf = hf_tensors_from_bert(all, c.config.bert);
  hf["head.weight"] = ours.at(c.config.head_name + ".weight");
  hf["head.bias"] = ours.at(c.config.head_name + ".bias");
  return hf;
}

// Whether the gradient `grad_name` of case `c` is exactly zero in exact arithmetic: the
// multiple-choice bias adds the same value to every choice of a question, which a softmax
// over the choices ignores (the reference's value is rounding noise).
inline bool gradient_is_exactly_zero(const FinetuneCase& c, const std::string& grad_name) {
  return c.config.multiple_choice && grad_name == "head.bias";
}

}  // namespace megatron::testing
