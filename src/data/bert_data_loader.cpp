#include "data/bert_data_loader.h"

#include <algorithm>

#include "core/error.h"
#include "data/scheduled_loader.h"

namespace megatron {

namespace {

BertMicroBatch make_micro_batch(const BertSampleSource& source, int64_t b, int64_t first) {
  const int64_t s = source.seq_length();
  BertMicroBatch mb;
  mb.tokens = Tensor::empty({b, s}, DType::I32);
  mb.token_types = Tensor::empty({b, s}, DType::I32);
  mb.labels = Tensor::empty({b, s}, DType::I32);
  mb.loss_mask = Tensor::empty({b, s}, DType::F32);
  mb.padding_mask = Tensor::empty({b, s}, DType::F32);
  mb.sop_labels = Tensor::empty({b}, DType::I32);
  mb.first_sample = first;
  BertSample sample;
  for (int64_t j = 0; j < b; ++j) {
    source.sample((first + j) % source.size(), sample);
    MT_CHECK(int64_t(sample.tokens.size()) == s, "BERT sample has ", sample.tokens.size(),
             " tokens, expected ", s);
    std::copy(sample.tokens.begin(), sample.tokens.end(), mb.tokens.data<int32_t>() + j * s);
    std::copy(sample.token_types.begin(), sample.token_types.end(),
              mb.token_types.data<int32_t>() + j * s);
    std::copy(sample.labels.begin(), sample.labels.end(), mb.labels.data<int32_t>() + j * s);
    std::copy(sample.loss_mask.begin(), sample.loss_mask.end(), mb.loss_mask.data<float>() + j * s);
    std::copy(sample.padding_mask.begin(), sample.padding_mask.end(),
              mb.padding_mask.data<float>() + j * s);
    mb.sop_labels.data<int32_t>()[j] = sample.sop_label;
  }
  return mb;
}

}  // namespace

struct BertDataLoader::Impl {
  Impl(std::shared_ptr<const BertSampleSource> src, const BertDataLoaderOptions& opt)
      : source(std::move(src)),
        loader(
            MicroBatchSchedule(opt.micro_batch, opt.global_batch, opt.dp_rank, opt.dp_size,
                               opt.consumed_samples),
            [this, b = opt.micro_batch](int64_t first) {
              return make_micro_batch(*source, b, first);
            },
            opt.prefetch) {}

  std::shared_ptr<const BertSampleSource> source;
  ScheduledLoader<BertMicroBatch> loader;  // last: its thread uses the members above
};

BertDataLoader::BertDataLoader(std::shared_ptr<const BertSampleSource> source,
                               BertDataLoaderOptions options) {
  MT_CHECK(source != nullptr, "BertDataLoader needs a sample source");
  MT_CHECK(source->size() > 0, "BertDataLoader: the sample source is empty");
  impl_ = std::make_unique<Impl>(std::move(source), options);
}

BertDataLoader::~BertDataLoader() = default;

BertMicroBatch BertDataLoader::next() {
  return impl_->loader.next();
}

int64_t BertDataLoader::consumed_samples() const {
  return impl_->loader.consumed_samples();
}

}  // namespace megatron
