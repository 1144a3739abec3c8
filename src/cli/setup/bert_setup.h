// The BERT model flags shared by `pretrain-bert` and `finetune` (beyond add_training_args):
// the LayerNorm order, and the BertConfig the flags describe.
#pragma once

#include <cstdint>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/training_flags.h"
#include "model/bert_config.h"

namespace megatron::cli {

struct BertLayerNormFlags {
  bool post_layernorm = false;
  bool residual_post_layernorm = false;
};

// Registers --post-layernorm and --apply-residual-connection-post-layernorm.
void add_bert_layernorm_flags(ArgTable& table, BertLayerNormFlags& flags);
// Throws Error when the two contradict.
void check_bert_layernorm_flags(const BertLayerNormFlags& flags);

// The model of the flags; `vocab`: the tokenizer's size (padded here for the TP size).
BertConfig bert_config(const Args& a, const BertLayerNormFlags& f, bool binary_head, int64_t vocab);

}  // namespace megatron::cli
