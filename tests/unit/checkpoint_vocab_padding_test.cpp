// Megatron pads the vocabulary for the TP size (50257 → 50304 / 50432 / 50688 at TP 1 / 2 / 4),
// so a checkpoint saved at one TP size has another embedding shape than a model built at
// another. Loading cuts or extends the padding (zeros) for the parameters registered with
// ParamSpec::vocab_rows — GPT's word embedding, BERT's word embedding and lm_head.bias — values
// and optimizer state alike, at the real GPT-2 and BERT vocabulary sizes, TP 1 ↔ 2 ↔ 4.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_shape.h"
#include "convert/convert_common.h"
#include "convert/gpt_checkpoint.h"
#include "kernels/elementwise.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

constexpr float kPadding = -7.0f;  // what the saved padding rows hold

// The value of element `index` of parameter `name` (rows of the vocabulary padding: kPadding),
// + 0.5 in the optimizer buffer.
float value(const Parameter& p, int64_t local, int buffer) {
  const int64_t index = full_element_index(p, local);
  const int64_t row = p.spec.full_shape.size() == 1 ? index : index / p.spec.full_shape[1];
  if (p.spec.vocab_rows > 0 && row >= p.spec.vocab_rows) return kPadding + 0.5f * float(buffer);
  return float(parameter_stream_key(p.spec.name) % 1000) + float(index % 4099) +
         0.5f * float(buffer);
}

template <typename Model, typename Config>
void save(const std::string& dir, Config config, int tp) {
  config.padded_vocab_size = padded_vocab_size(config.vocab_size, 128, tp);
  CheckpointTransaction t(dir, 3, 1);
  for (int rank = 0; rank < tp; ++rank) {
    ParameterStore store = registered_parameter_store<Model>(config, rank, tp);
    std::map<std::string, Tensor> optimizer = {
        {"exp_avg", Tensor::zeros({store.flat_values().numel()}, DType::F32)}};
    for (Parameter& p : store.params()) {
      float* v = p.value.data<float>();
      float* m = optimizer["exp_avg"].data<float>() + p.flat_offset;
      for (int64_t k = 0; k < p.value.numel(); ++k) {
        v[k] = value(p, k, 0);
        m[k] = value(p, k, 1);
      }
    }
    write_checkpoint_rank(t.path(), 3, store, optimizer, {{"iteration", 3}}, {rank, tp, 0, 1});
  }
  t.commit();
}

// Loads `dir` (saved at TP `saved_tp`) at TP `tp` and counts the elements that differ from
// what they must be: the saved values, padding rows the checkpoint has as saved, others zero.
template <typename Model, typename Config>
int64_t load_mismatches(const std::string& dir, Config config, int saved_tp, int tp) {
  const int64_t saved_rows = padded_vocab_size(config.vocab_size, 128, saved_tp);
  config.padded_vocab_size = padded_vocab_size(config.vocab_size, 128, tp);
  CheckpointShardReader reader(checkpoint_iteration_dir(dir, -1));
  int64_t mismatches = 0, vocab_params = 0;
  for (int rank = 0; rank < tp; ++rank) {
    ParameterStore store = registered_parameter_store<Model>(config, rank, tp);
    std::map<std::string, Tensor> optimizer = {
        {"exp_avg", Tensor::empty({store.flat_values().numel()}, DType::F32)}};
    kernels::fill(optimizer["exp_avg"], 99.0f);  // what loading must overwrite
    kernels::fill(store.flat_values(), 99.0f);
    check_checkpoint_matches(reader, store, true);
    read_parameters(reader, store, &optimizer);
    for (const Parameter& p : store.params()) {
      vocab_params += p.spec.vocab_rows > 0 && rank == 0;
      const int64_t width = p.spec.full_shape.size() == 1 ? 1 : p.spec.full_shape[1];
      for (int64_t k = 0; k < p.value.numel(); ++k) {
        const int64_t row = full_element_index(p, k) / width;
        const bool zero = p.spec.vocab_rows > 0 && row >= saved_rows;
        for (int buffer : {0, 1}) {
          const float got = buffer == 0 ? p.value.data<float>()[k]
                                        : optimizer["exp_avg"].data<float>()[p.flat_offset + k];
          mismatches += got != (zero ? 0.0f : value(p, k, buffer));
        }
      }
    }
  }
  EXPECT_GT(vocab_params, 0);
  return mismatches;
}

GptConfig gpt2_config() {
  GptConfig c;
  c.num_layers = 1;
  c.hidden_size = 8;
  c.num_attention_heads = 4;
  c.vocab_size = 50257;  // GPT-2's: 50304 / 50432 / 50688 rows at TP 1 / 2 / 4
  c.max_position_embeddings = c.seq_length = 8;
  return c;
}

BertConfig bert_config() {
  BertConfig c;
  c.num_layers = 1;
  c.hidden_size = 8;
  c.num_attention_heads = 4;
  c.vocab_size = 30522;  // bert-base-uncased: 30592 / 30720 / 30720
  c.max_position_embeddings = c.seq_length = 8;
  return c;
}

TEST(CheckpointVocabPadding, Gpt2VocabularyLoadsAtEveryTpSize) {
  for (int saved : {1, 2, 4}) {
    TempDir dir;
    save<GptModel>(dir.file("ckpt"), gpt2_config(), saved);
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << "saved at TP " << saved << ", loaded at TP " << tp);
      EXPECT_EQ((load_mismatches<GptModel>(dir.file("ckpt"), gpt2_config(), saved, tp)), 0);
    }
  }
}

TEST(CheckpointVocabPadding, BertVocabularyAndLmHeadBiasLoadAtEveryTpSize) {
  for (int saved : {1, 4}) {
    TempDir dir;
    save<BertModel>(dir.file("ckpt"), bert_config(), saved);
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << "saved at TP " << saved << ", loaded at TP " << tp);
      EXPECT_EQ((load_mismatches<BertModel>(dir.file("ckpt"), bert_config(), saved, tp)), 0);
    }
  }
}

TEST(CheckpointVocabPadding, AnotherRealVocabularyIsAnError) {
  TempDir dir;
  GptConfig small = gpt2_config();
  small.vocab_size = 50000;  // 50048 rows at TP 1: fewer than GPT-2's 50257 real ones
  save<GptModel>(dir.file("ckpt"), small, 1);
  GptConfig c = gpt2_config();
  c.padded_vocab_size = padded_vocab_size(c.vocab_size, 128, 1);
  ParameterStore store = registered_parameter_store<GptModel>(c, 0, 1);
  CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("ckpt"), -1));
  try {
    check_checkpoint_matches(reader, store, true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("embedding.word_embeddings.weight: checkpoint shape "
                                       "[50048, 8], model shape [50304, 8]"));
  }
  // Padded alike (50304 rows), but another tokenizer: the placement metadata tells.
  GptConfig other = gpt2_config();
  other.vocab_size = 50300;
  save<GptModel>(dir.file("other"), other, 1);
  CheckpointShardReader other_reader(checkpoint_iteration_dir(dir.file("other"), -1));
  try {
    check_checkpoint_matches(other_reader, store, true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("embedding.word_embeddings.weight: checkpoint vocabulary "
                                       "of 50300 entries, model vocabulary of 50257"));
  }
}

TEST(CheckpointVocabPadding, ConvertRepadsForTheTargetTpSize) {
  TempDir dir;
  GptConfig c = gpt2_config();
  save<GptModel>(dir.file("tp1"), c, 1);
  // A state.json recording the real vocabulary, as the trainer writes it.
  {
    c.padded_vocab_size = padded_vocab_size(c.vocab_size, 128, 1);
    CheckpointTransaction t(dir.file("src"), 3, 2);
    CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("tp1"), -1));
    ParameterStore store = registered_parameter_store<GptModel>(c, 0, 1);
    std::map<std::string, Tensor> optimizer = {
        {"exp_avg", Tensor::zeros({store.flat_values().numel()}, DType::F32)}};
    read_parameters(reader, store, &optimizer);
    write_checkpoint_rank(t.path(), 3, store, optimizer,
                          {{"iteration", 3}, {"model", gpt_model_shape_json(c)}}, {0, 1, 0, 1});
    t.commit();
  }
  reshard_checkpoint(dir.file("src"), -1, dir.file("tp4"), 4);
  CheckpointShardReader reader(checkpoint_iteration_dir(dir.file("tp4"), -1));
  EXPECT_EQ(reader.placement("embedding.word_embeddings.weight").full_shape, (Shape{50688, 8}));
  EXPECT_EQ(reader.state(0, 0)["model"]["padded_vocab_size"], 50688);
  EXPECT_EQ((load_mismatches<GptModel>(dir.file("tp4"), gpt2_config(), 1, 4)), 0);
}

}  // namespace
}  // namespace megatron
