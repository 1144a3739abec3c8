#include "data/bert_data_loader.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "data/scheduled_loader.h"

namespace megatron {

BertMaskedPositions bert_masked_positions(const Tensor& labels, const Tensor& loss_mask) {
  check_dtype(labels, DType::I32, "BERT labels");
  check_dtype(loss_mask, DType::F32, "BERT loss mask");
  MT_CHECK(labels.dim() == 2, "BERT labels must be [b, s], got ", labels.describe());
  check_shape(loss_mask, labels.shape(), "BERT loss mask");
  check_contiguous(labels, "BERT labels");
  check_contiguous(loss_mask, "BERT loss mask");
  MT_CHECK(labels.device().is_cpu() && loss_mask.device().is_cpu(),
           "bert_masked_positions reads host tensors");
  const int64_t b = labels.size(0), s = labels.size(1);
  const int32_t* l = labels.data<int32_t>();  // [b, s]
  const float* m = loss_mask.data<float>();   // [b, s]
  std::vector<int32_t> rows, targets;
  std::vector<float> weights;
  for (int64_t pos = 0; pos < s; ++pos)
    for (int64_t j = 0; j < b; ++j) {
      const float w = m[j * s + pos];
      if (w == 0.0f) continue;
      rows.push_back(int32_t(pos * b + j));
      targets.push_back(l[j * s + pos]);
      weights.push_back(w);
    }
  const int64_t n = int64_t(rows.size());
  return {Tensor::from_vector(rows, {n}), Tensor::from_vector(targets, {n}),
          Tensor::from_vector(weights, {n})};
}

namespace {

BertMicroBatch make_micro_batch(const BertSampleSource& source, int64_t b, int64_t first) {
  const int64_t s = source.seq_length();
  BertMicroBatch mb;
  mb.tokens = Tensor::empty({b, s}, DType::I32);
  mb.token_types = Tensor::empty({b, s}, DType::I32);
  mb.labels = Tensor::empty({b, s}, DType::I32);
  mb.loss_mask = Tensor::empty({b, s}, DType::F32);
  mb.pad_mask = Tensor::empty({b, s}, DType::U8);
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
    uint8_t* pad = mb.pad_mask.data<uint8_t>() + j * s;
    for (int64_t k = 0; k < s; ++k) pad[k] = sample.padding_mask[size_t(k)] == 0.0f ? 1 : 0;
    mb.sop_labels.data<int32_t>()[j] = sample.sop_label;
  }
  mb.masked = bert_masked_positions(mb.labels, mb.loss_mask);
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
