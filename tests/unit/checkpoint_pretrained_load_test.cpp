// load_pretrained: a model with a new head loads its body from a checkpoint (resharded from
// TP 2), keeps the head's initialisation, leaves the checkpoint's extra parameters unread, and
// refuses a checkpoint that lacks a body parameter or a prefix that names nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../common/checkpoint_fixture.h"
#include "../common/temp_dir.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained_load.h"
#include "core/error.h"

namespace megatron {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace megatron::testing;

// The fixture saved at TP 2 (every value a fixed function of parameter and element).
void save_fixture_tp2(const std::string& dir) {
  CheckpointTransaction t(dir, 7, 1);
  for (int r = 0; r < 2; ++r) {
    ParameterStore store = make_fixture_store(r, 2);
    fill_fixture(store, store.flat_values(), 0);
    write_checkpoint_rank(t.path(), 7, store, {}, {{"iteration", 7}}, {r, 2, 0, 1});
  }
  t.commit();
}

// The fixture's body without its final LayerNorm (a pretraining-only parameter here), plus a
// task head.
ParameterStore finetune_store() {
  std::vector<ParamSpec> specs = fixture_specs();
  specs.pop_back();  // final_layernorm.weight
  ParameterStore store(0, 1);
  for (const ParamSpec& s : specs) store.add(s);
  store.add({"classification_head.weight", {3, 8}, -1, true});
  store.add({"classification_head.bias", {3}, -1, false});
  store.allocate();
  for (Parameter& p : store.params()) init_constant(p, -5.0f);
  return store;
}

TEST(PretrainedLoad, BodyLoadedHeadKeptExtrasUnread) {
  TempDir dir;
  save_fixture_tp2(dir.path());
  ParameterStore store = finetune_store();
  const PretrainedLoadReport report =
      load_pretrained(dir.path(), -1, store, {"classification_head."});
  EXPECT_THAT(report.fresh, ElementsAre("classification_head.weight", "classification_head.bias"));
  EXPECT_THAT(report.unused, ElementsAre("final_layernorm.weight"));
  for (const Parameter& p : store.params()) {
    const float* v = p.value.data<float>();
    for (int64_t k = 0; k < p.value.numel(); ++k) {
      const float want = p.spec.name.starts_with("classification_head.")
                             ? -5.0f
                             : fixture_value(fixture_id(p.spec.name), full_element_index(p, k));
      ASSERT_EQ(v[k], want) << p.spec.name << " element " << k;
    }
  }
}

TEST(PretrainedLoad, FreshPrefixAlsoShadowsACheckpointParameter) {
  TempDir dir;
  save_fixture_tp2(dir.path());
  ParameterStore store = finetune_store();
  load_pretrained(dir.path(), -1, store, {"classification_head.", "layers.0.mlp."});
  EXPECT_EQ(store.get("layers.0.mlp.dense_4h_to_h.weight").value.data<float>()[0], -5.0f);
}

TEST(PretrainedLoad, Errors) {
  TempDir dir;
  save_fixture_tp2(dir.path());
  const auto error = [&](const std::vector<std::string>& fresh) {
    ParameterStore store = finetune_store();
    try {
      load_pretrained(dir.path(), -1, store, fresh);
    } catch (const Error& e) {
      EXPECT_EQ(store.params()[0].value.data<float>()[0], -5.0f) << "changed before the error";
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Without the head marked fresh, the checkpoint lacks it.
  EXPECT_THAT(error({}), HasSubstr("classification_head.weight: missing in the checkpoint"));
  EXPECT_THAT(error({"classifier."}),
              HasSubstr("fresh parameter prefix 'classifier.' matches no parameter"));
}

}  // namespace
}  // namespace megatron
