// --use-checkpoint-args: Megatron's load_args_from_checkpoint for the model's shape.
//
// The arguments stored in the --load checkpoint (state.json "args" of the newest iteration,
// tensor-parallel rank 0) give the model: num_layers, hidden_size, ffn_hidden_size, seq_length,
// num_attention_heads and max_position_embeddings where the command line left them unset, and
// hidden_dropout / attention_dropout always (Megatron forces those). Each value taken is
// logged as Megatron logs it ("Setting num_layers to 4 from checkpoint").
#pragma once

#include "cli/args.h"

namespace megatron::cli {

// Throws megatron::Error when --load is not given or holds no readable checkpoint.
void load_args_from_checkpoint(Args& args);

}  // namespace megatron::cli
