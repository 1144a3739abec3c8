#include "model/language_model_config.h"

#include "core/error.h"

namespace megatron {

void LanguageModelConfig::validate_language_model(const TransformerConfig& transformer, int tp_size,
                                                  const char* model_name) const {
  transformer.validate(tp_size);
  MT_REQUIRE(vocab_size > 0, "vocabulary size must be positive, got ", vocab_size);
  MT_REQUIRE(padded_vocab_size >= vocab_size, "padded vocabulary size ", padded_vocab_size,
             " is smaller than the vocabulary size ", vocab_size);
  MT_REQUIRE(padded_vocab_size % tp_size == 0, "padded vocabulary size ", padded_vocab_size,
             " is not divisible by --tensor-model-parallel-size ", tp_size);
  MT_REQUIRE(seq_length > 0 && seq_length <= max_position_embeddings, "--seq-length ", seq_length,
             " must be in [1, --max-position-embeddings = ", max_position_embeddings, "]");
  MT_REQUIRE(!sequence_parallel || tp_size > 1,
             "--sequence-parallel splits the sequence over the tensor-parallel ranks: it needs "
             "--tensor-model-parallel-size > 1 (drop --sequence-parallel at TP = 1)");
  MT_REQUIRE(!sequence_parallel || seq_length % tp_size == 0, "--sequence-parallel: --seq-length ",
             seq_length, " is not divisible by --tensor-model-parallel-size ", tp_size,
             "; choose a sequence length that is a multiple of the TP size");
  MT_REQUIRE(compute_dtype == DType::F32 || compute_dtype == DType::BF16, "compute dtype ",
             dtype_name(compute_dtype), " is not supported by ", model_name,
             " (expected f32 or bf16)");
}

}  // namespace megatron
