#include "cli/setup/gpt_setup.h"

#include "core/logging.h"
#include "data/fim_dataset.h"
#include "data/mock_gpt_dataset.h"
#include "data/tokenizers/make_tokenizer.h"
#include "data/tokenizers/tokenizer_identity.h"
#include "model/gpt_model.h"

namespace megatron::cli {

Vocabulary build_vocabulary(const Args& a) {
  if (a.tokenizer_type.empty())  // --mock-data --vocab-size V
    return {a.vocab_size, -1, nullptr, nullptr};
  TokenizerOptions o{a.tokenizer_type,
                     a.vocab_file,
                     a.merge_file,
                     a.tokenizer_model,
                     a.vocab_size,
                     a.tiktoken_pattern,
                     a.tiktoken_num_special_tokens};
  std::shared_ptr<const Tokenizer> tokenizer = make_tokenizer(o);
  MT_REQUIRE(tokenizer->vocab_size() > 0, "--tokenizer-type ", a.tokenizer_type,
             " gave an empty vocabulary");
  return {tokenizer->vocab_size(), tokenizer->eod(), tokenizer_identity(o, *tokenizer), tokenizer};
}

namespace {

// --fim-* as the dataset's options, the sentinels looked up in the vocabulary.
FimOptions fim_options(const FimArgs& f, const Tokenizer& tokenizer) {
  FimOptions o;
  o.rate = f.rate;
  o.spm_rate = f.spm_rate;
  o.tokens = resolve_fim_tokens(tokenizer, {.prefix = f.prefix_token,
                                            .middle = f.middle_token,
                                            .suffix = f.suffix_token,
                                            .pad = f.pad_token,
                                            .eod = f.eod_token});
  if (!f.split_sample.empty()) {
    const std::optional<int32_t> split = tokenizer.token_to_id(f.split_sample);
    MT_REQUIRE(split.has_value(), "--fim-split-sample '", f.split_sample,
               "' is not a token of the tokenizer's vocabulary; give one of its tokens");
    MT_REQUIRE(f.fragment_rate.has_value(),
               "--fim-split-sample needs --fim-fragment-rate (the probability that each "
               "fragment is rearranged)");
    o.split_token = split;
    o.fragment_rate = *f.fragment_rate;
  }
  if (!f.no_prefix.empty()) o.no_prefix = f.no_prefix;
  validate_fim_options(o);
  return o;
}

// The sources without FIM (indexed datasets or --mock-data).
GptDatasets build_plain_gpt_data(const Args& a, const Vocabulary& vocab) {
  const int64_t train = a.train_iters * a.global_batch_size;
  const int64_t eval_gb = a.eval_global_batch();
  const int64_t valid = (a.train_iters / a.eval_interval + 1) * a.eval_iters * eval_gb;
  const int64_t test = a.eval_iters * eval_gb;
  if (a.mock_data) {
    // Distinct seeds give the validation set other samples than the training set.
    return {std::make_shared<MockGptDataset>(train, a.seq_length, vocab.size, a.seed),
            valid > 0
                ? std::make_shared<MockGptDataset>(valid, a.seq_length, vocab.size, a.seed + 1)
                : nullptr,
            nullptr};
  }
  if (!a.data_path.empty())
    return build_gpt_datasets(a.data_path, a.split, a.seq_length, a.seed, {train, valid, test},
                              a.data_cache_path);
  // Megatron's --train/valid/test-data-path: each split's blend, all of its documents.
  auto whole = [&](const std::vector<std::string>& path,
                   int64_t samples) -> std::shared_ptr<const GptSampleSource> {
    if (path.empty() || samples <= 0) return nullptr;
    return build_gpt_datasets(path, "1,0,0", a.seq_length, a.seed, {samples, 0, 0},
                              a.data_cache_path)
        .train;
  };
  return {whole(a.train_data_path, train), whole(a.valid_data_path, valid),
          whole(a.test_data_path, test)};
}

}  // namespace

GptDatasets build_gpt_data(const Args& a, const Vocabulary& vocab) {
  if (!a.fim.data) return build_plain_gpt_data(a, vocab);
  MT_REQUIRE(!a.mock_data && vocab.tokenizer,
             "--fim-data rearranges the text of indexed data (--data-path and a tokenizer); "
             "--mock-data has no text: drop one of them");
  const FimOptions options = fim_options(a.fim, *vocab.tokenizer);
  GptDatasets data = build_plain_gpt_data(a, vocab);
  for (std::shared_ptr<const GptSampleSource>* source : {&data.train, &data.valid, &data.test})
    if (*source) *source = std::make_shared<FimDataset>(*source, vocab.tokenizer, options, a.seed);
  return data;
}

namespace {

GptConfig gpt_config(const Args& a, const Vocabulary& vocab) {
  GptConfig c;
  static_cast<LanguageModelConfig&>(c) = language_model_config(a, vocab.size);
  c.layernorm_epsilon = norm_epsilon(a.arch, a.layernorm_epsilon);
  c.arch = architecture_options(a.arch);
  return c;
}

}  // namespace

GptStepConfig gpt_step_config(const Args& a, const Vocabulary& vocab, bool eod_mask_loss) {
  MT_REQUIRE(vocab.size > 0, "the vocabulary is empty: give --vocab-size or a tokenizer");
  MT_REQUIRE(!eod_mask_loss || vocab.eod >= 0,
             "--eod-mask-loss needs a tokenizer with an end-of-document token (--tokenizer-type)");
  GptStepConfig cfg;
  cfg.model = gpt_config(a, vocab);
  // Architecture flags that contradict the shape (e.g. --num-query-groups not dividing the
  // heads) are reported here, with the other flag errors, before any model is built.
  cfg.model.validate(a.tensor_model_parallel_size);
  log_info(" > padded vocab (size: ", vocab.size, ") with ",
           cfg.model.padded_vocab_size - vocab.size,
           " dummy tokens (new size: ", cfg.model.padded_vocab_size, ")");
  cfg.eod_token = vocab.eod;
  cfg.eod_mask_loss = eod_mask_loss;
  return cfg;
}

}  // namespace megatron::cli
