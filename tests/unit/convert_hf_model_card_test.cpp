// The model card of an HF export (convert/hf_model_card.h): the architecture, the training
// that the checkpoint records, how to load it — and nothing the checkpoint does not record.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "convert/hf_model_card.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

nlohmann::json trained_state() {
  return {{"iteration", 20},
          {"consumed_train_samples", 160},
          {"model",
           {{"num_layers", 2},
            {"hidden_size", 128},
            {"num_attention_heads", 4},
            {"ffn_hidden_size", 512},
            {"max_position_embeddings", 64}}},
          {"args",
           {{"data_path", {"runs/own/data/corpus_text_document"}},
            {"split", "949,50,1"},
            {"seq_length", 64},
            {"train_iters", 20},
            {"global_batch_size", 8},
            {"micro_batch_size", 4},
            {"lr", 0.002},
            {"min_lr", 0.0001},
            {"lr_decay_style", "cosine"},
            {"lr_warmup_iters", 2},
            {"lr_warmup_fraction", "None"},
            {"weight_decay", 0.01},
            {"clip_grad", 1.0},
            {"bf16", false},
            {"fp16", false},
            {"tensor_model_parallel_size", 2},
            {"pipeline_model_parallel_size", 1},
            {"seed", 1234}}},
          {"tokenizer",
           {{"type", "GPT2BPETokenizer"},
            {"vocab_size", 50257},
            {"files",
             {{"vocab_file", {{"path", "/data/gpt2-vocab.json"}}},
              {"merge_file", {{"path", "/data/gpt2-merges.txt"}}}}}}}};
}

const nlohmann::json kGpt2Config = {
    {"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", 50257}};

TEST(HfModelCard, SaysWhatTheCheckpointRecords) {
  const std::string card = hf_model_card(trained_state(), kGpt2Config, 6967680,
                                         "runs/own/tp2/checkpoints/iter_0000020", "runs/own/hf");
  EXPECT_EQ(card.rfind("---\nlibrary_name: transformers\npipeline_tag: text-generation\n", 0), 0u);
  EXPECT_THAT(card, HasSubstr("# hf\n"));
  EXPECT_THAT(card, HasSubstr("A `GPT2LMHeadModel` (model type `gpt2`) of 7.0 M parameters"));
  EXPECT_THAT(card, HasSubstr("`runs/own/tp2/checkpoints/iter_0000020` (iteration 20)"));
  EXPECT_THAT(card, HasSubstr("| layers | 2 |\n"));
  EXPECT_THAT(card, HasSubstr("| hidden size | 128 |\n"));
  EXPECT_THAT(card, HasSubstr("| positions (longest context) | 64 |\n"));
  EXPECT_THAT(card, HasSubstr("| vocabulary | 50257 |\n"));
  EXPECT_THAT(card, HasSubstr("| parameters | 6,967,680 (7.0 M) |\n"));
  EXPECT_THAT(card, HasSubstr("for 20 iterations (`--train-iters 20`)"));
  EXPECT_THAT(card, HasSubstr("| training data | `runs/own/data/corpus_text_document` |\n"));
  EXPECT_THAT(card, HasSubstr("| tokens seen | 10,240 (160 sequences of 64 tokens) |\n"));
  EXPECT_THAT(card, HasSubstr("| tokenizer | GPT2BPETokenizer (`/data/gpt2-merges.txt`, "
                              "`/data/gpt2-vocab.json`) |\n"));
  EXPECT_THAT(card, HasSubstr("| learning rate | 0.002 to 0.0001, cosine decay, warm-up 2 "
                              "iterations |\n"));
  EXPECT_THAT(card, HasSubstr("| precision | fp32 |\n"));
  EXPECT_THAT(card, HasSubstr("| parallel layout | tensor-parallel 2, pipeline-parallel 1"));
  EXPECT_THAT(card, HasSubstr("| sequence length | 64 |\n"));
  // No tokenizer_config.json in runs/own/hf (not written here): no AutoTokenizer, and a note.
  EXPECT_THAT(card, HasSubstr("from transformers import GPT2LMHeadModel\n"));
  EXPECT_THAT(card, HasSubstr("tokenize with the tokenizer the model was trained with "
                              "(Training, above)"));
  EXPECT_THAT(card, HasSubstr("GPT2LMHeadModel.from_pretrained(\"runs/own/hf\")"));
  EXPECT_THAT(card, HasSubstr("megatron convert --model-type gpt --from hf --load runs/own/hf"));
  // Not recorded, so not written: no query groups, no SwiGLU, no imported origin.
  EXPECT_THAT(card, Not(HasSubstr("key/value head groups")));
  EXPECT_THAT(card, Not(HasSubstr("SwiGLU")));
  EXPECT_THAT(card, Not(HasSubstr("imported")));
}

TEST(HfModelCard, WithTheTokenizersFilesItLoadsThemToo) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hf_model_card_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << "{}\n";
  const std::string card = hf_model_card(trained_state(), kGpt2Config, 10, "c", dir.string());
  std::filesystem::remove_all(dir);
  EXPECT_THAT(card, HasSubstr("from transformers import GPT2LMHeadModel, AutoTokenizer\n"));
  EXPECT_THAT(card, HasSubstr("tokenizer = AutoTokenizer.from_pretrained(\"" + dir.string()));
  EXPECT_THAT(card, Not(HasSubstr("No tokenizer files")));
}

TEST(HfModelCard, AnImportedModelNotTrainedHereSendsToItsOwnCard) {
  nlohmann::json state = {{"iteration", 0},
                          {"consumed_train_samples", 0},
                          {"model", {{"num_layers", 12}, {"hidden_size", 768}}},
                          {"args", {{"seq_length", 1024}}},
                          {"converted_from", {{"format", "hf-gpt2"}, {"path", "/models/gpt2"}}}};
  const std::string card = hf_model_card(state, kGpt2Config, 124439808, "ckpt", "out/gpt2");
  EXPECT_THAT(card, HasSubstr("of 124.4 M parameters"));
  EXPECT_THAT(card, HasSubstr("imported from hf-gpt2 (`/models/gpt2`) and not trained further"));
  EXPECT_THAT(card, Not(HasSubstr("tokens seen")));
  EXPECT_THAT(card, Not(HasSubstr("learning rate")));
}

TEST(HfModelCard, BertIsAFillMaskModel) {
  nlohmann::json state = trained_state();
  state["args"]["bf16"] = true;
  const std::string card = hf_model_card(
      state, {{"architectures", {"BertForPreTraining"}}, {"model_type", "bert"}}, 1000, "c", "b");
  EXPECT_THAT(card, HasSubstr("pipeline_tag: fill-mask"));
  EXPECT_THAT(card, HasSubstr("| precision | bf16 (mixed) |"));
  EXPECT_THAT(card, HasSubstr("megatron convert --model-type bert --from hf"));
}

}  // namespace
}  // namespace megatron
