// HF BERT (BertForPreTraining) <-> our BERT checkpoints, offline (`megatron convert
// --model-type bert`): the BERT counterparts of import_hf_gpt2 / export_hf_gpt2.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/hf_tokenizer_files.h"
#include "model/bert_config.h"
#include "model/stage_range.h"
#include "parallel/parameter.h"

namespace megatron {

// Reads an HF BERT directory and writes a post-LN checkpoint (iteration 0, no optimizer
// state) at tensor-parallel size target_tp that `pretrain-bert --post-layernorm --load` can
// continue from.
void import_hf_bert(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                    int make_vocab_size_divisible_by);
// Gathers a (post-LN) BERT checkpoint's shards and writes an HF BertForPreTraining directory,
// with the tokenizer's files (write_hf_tokenizer_files) and the model card README.md
// (convert/hf_model_card.h).
void export_hf_bert(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                    const TokenizerFileOverrides& tokenizer = {});
// What an HF config.json says of a BERT model: the shape record plus the dropouts and the init
// scale — the arguments an import records and exported_hf_config_text() compares.
nlohmann::json bert_hf_description(const BertConfig& config);

// The BertConfig whose parameters a BERT checkpoint holds, from its state.json: the shape from
// "model", dropouts and init scale from "args". Throws Error naming a missing field and `dir`.
BertConfig bert_config_from_checkpoint_state(const nlohmann::json& state, const std::string& dir);
// RankParameters (convert/gpt_checkpoint.h) of BERT pretraining models (BertModel).
ParameterStore bert_rank_parameters(const nlohmann::json& state, const std::string& dir,
                                    int tp_rank, int tp_size, const StageRange& stage);

}  // namespace megatron
