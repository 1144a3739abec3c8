// The PyTorch BERT golden fixture (tests/data/bert_tiny, written by
// tools/reference/bert_reference.py): a tiny post-LN BertForPreTraining in HF layout, its
// inputs (with padding), MLM/SOP logits, losses and the gradient of every HF weight. Loads it
// into a BertModel at any TP rank.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "convert/hf_bert.h"
#include "convert/hf_directory.h"
#include "core/safetensors.h"
#include "data/bert_data_loader.h"
#include "model/bert_model.h"
#include "parallel/full_tensors.h"

namespace megatron::testing {

inline std::string bert_fixture_dir() {
  const char* src = std::getenv("MEGATRON_SOURCE_DIR");
  EXPECT_NE(src, nullptr) << "MEGATRON_SOURCE_DIR must name the source tree (CTest sets it)";
  return std::string(src ? src : ".") + "/tests/data/bert_tiny";
}

struct BertGolden {
  std::unique_ptr<SafetensorsReader> file;
  BertConfig config;
  HfDirectory hf;
  BertBatch batch;
  TensorMap hf_grads;  // HF name -> d loss / d weight

  double golden(const char* name) const { return file->get(name).data<double>()[0]; }
};

// `padded_vocab`: rows of our word embedding (divisible by the TP size).
inline BertGolden load_bert_golden(int64_t padded_vocab) {
  BertGolden g;
  const std::string dir = bert_fixture_dir();
  g.file = std::make_unique<SafetensorsReader>(dir + "/golden.safetensors");
  g.hf = read_hf_directory(dir + "/hf");
  g.config = bert_config_from_hf(g.hf.config, padded_vocab, hf_bert_has_binary_head(g.hf.tensors));
  const int64_t b = g.file->get("input_ids").size(0), s = g.file->get("input_ids").size(1);
  g.config.seq_length = int(s);
  g.batch.tokens = g.file->get("input_ids").clone();
  g.batch.token_types = g.file->get("token_type_ids").clone();
  // HF's attention_mask is 1 on real tokens; ours is 1 on padding.
  g.batch.pad_mask = Tensor::empty({b, s}, DType::U8);
  const int32_t* real = g.file->get("attention_mask").data<int32_t>();
  for (int64_t i = 0; i < b * s; ++i) g.batch.pad_mask.data<uint8_t>()[i] = real[i] ? 0 : 1;
  // HF labels are -100 where no loss is taken: our loss mask is 0 there, and the masked
  // positions are the others (chosen on the host, as the data loader does).
  const Tensor labels = g.file->get("mlm_labels").clone();
  Tensor loss_mask = Tensor::empty({b, s}, DType::F32);
  for (int64_t i = 0; i < b * s; ++i)
    loss_mask.data<float>()[i] = labels.data<int32_t>()[i] == -100 ? 0.0f : 1.0f;
  const BertMaskedPositions masked = bert_masked_positions(labels, loss_mask);
  g.batch.masked_rows = masked.rows;
  g.batch.masked_labels = masked.labels;
  g.batch.masked_weights = masked.weights;
  g.batch.sop_labels = g.file->get("sop_labels").clone();
  for (const std::string& name : g.file->names())
    if (name.rfind("grad.", 0) == 0) g.hf_grads[name.substr(5)] = g.file->get(name);
  return g;
}

// A BertModel on this rank holding the fixture's weights (dropout off), on `device`.
struct LoadedBert {
  ParameterStore store;
  std::unique_ptr<BertModel> model;

  LoadedBert(const BertGolden& g, const ParallelState& ps, Device device = Device::CPU)
      : store(ps.tp_rank, ps.tp_size, device) {
    BertConfig c = g.config;
    c.hidden_dropout = 0.0f;
    c.attention_dropout = 0.0f;
    model = std::make_unique<BertModel>(c, ps, store);
    store.allocate();
    assign_from_full_tensors(bert_tensors_from_hf(g.hf.tensors, c), store);
    model->refresh_compute_weights();
  }
};

}  // namespace megatron::testing
