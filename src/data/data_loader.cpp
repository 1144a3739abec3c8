#include "data/data_loader.h"

#include "core/error.h"
#include "data/scheduled_loader.h"

namespace megatron {

namespace {

// Reads samples first .. first + b − 1 (modulo the source size) into one micro-batch.
GptMicroBatch make_micro_batch(const GptSampleSource& source, const GptDataLoaderOptions& opt,
                               int64_t first) {
  const int64_t b = opt.micro_batch;
  const int64_t s = source.seq_length();
  GptMicroBatch mb;
  mb.tokens = Tensor::empty({b, s}, DType::I32);
  mb.labels = Tensor::empty({b, s}, DType::I32);
  mb.loss_mask = Tensor::empty({b, s}, DType::F32);
  mb.first_sample = first;
  int32_t* tokens = mb.tokens.data<int32_t>();    // [b, s]
  int32_t* labels = mb.labels.data<int32_t>();    // [b, s]
  float* loss_mask = mb.loss_mask.data<float>();  // [b, s]
  std::vector<int32_t> sample;                    // [s + 1]
  for (int64_t j = 0; j < b; ++j) {
    source.sample((first + j) % source.size(), sample);
    for (int64_t i = 0; i < s; ++i) {
      tokens[j * s + i] = sample[size_t(i)];
      labels[j * s + i] = sample[size_t(i + 1)];
      // Megatron's get_ltor_masks_and_position_ids: no loss on the position whose input is
      // EOD, i.e. on predicting the first token of the next document from the separator.
      const bool masked = opt.eod_mask_loss && sample[size_t(i)] == opt.eod_token;
      loss_mask[j * s + i] = masked ? 0.0f : 1.0f;
    }
  }
  return mb;
}

}  // namespace

struct GptDataLoader::Impl {
  Impl(std::shared_ptr<const GptSampleSource> src, GptDataLoaderOptions opt)
      : source(std::move(src)),
        options(opt),
        loader(
            MicroBatchSchedule(opt.micro_batch, opt.global_batch, opt.dp_rank, opt.dp_size,
                               opt.consumed_samples),
            [this](int64_t first) { return make_micro_batch(*source, options, first); },
            opt.prefetch) {}

  std::shared_ptr<const GptSampleSource> source;
  GptDataLoaderOptions options;
  ScheduledLoader<GptMicroBatch> loader;  // last: its thread uses the members above
};

GptDataLoader::GptDataLoader(std::shared_ptr<const GptSampleSource> source,
                             GptDataLoaderOptions options) {
  MT_CHECK(source != nullptr, "GptDataLoader needs a sample source");
  MT_CHECK(source->size() > 0, "GptDataLoader: the sample source is empty");
  MT_REQUIRE(!options.eod_mask_loss || options.eod_token >= 0,
             "--eod-mask-loss needs a tokenizer with an end-of-document token");
  impl_ = std::make_unique<Impl>(std::move(source), options);
}

GptDataLoader::~GptDataLoader() = default;

GptMicroBatch GptDataLoader::next() {
  return impl_->loader.next();
}

int64_t GptDataLoader::consumed_samples() const {
  return impl_->loader.consumed_samples();
}

}  // namespace megatron
