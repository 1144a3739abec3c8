#include "checkpoint/megatron_lm_torch_dist_writer.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>

#include "checkpoint/architecture_json.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_core_keys.h"
#include "checkpoint/megatron_lm_torch.h"
#include "checkpoint/megatron_lm_trainer_state.h"
#include "checkpoint/regions.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/torch_file.h"
#include "distributed/agreement.h"
#include "distributed/broadcast_bytes.h"
#include "optim/divergence_guard.h"
#include "optim/optimizer.h"

namespace megatron {

namespace {

// Where a tensor goes in Megatron-Core's sharded state dict, and its full shape.
struct CoreKeyPlace {
  MegatronCoreKey core;
  Shape full_shape;
};

CoreKeyPlace require_core_key(const std::string& name, const Shape& full_shape,
                              const MegatronCoreKeyContext& context) {
  const std::optional<MegatronCoreKey> key = megatron_core_key(name, full_shape, context);
  MT_REQUIRE(key, "tensor ", name,
             " has no key in Megatron-Core's GPT checkpoints as megatron-cpp ",
             "writes them (multi-latent attention and BERT are not written yet); save in ",
             "megatron-cpp's format (leave out --ckpt-format)");
  return {*key, full_shape};
}

// Megatron's global shape of the full tensor `place`.
Shape core_global_shape(const CoreKeyPlace& place, int64_t num_layers) {
  Shape shape = place.full_shape;
  if (place.core.merge_axis >= 0) {
    const size_t a = size_t(place.core.merge_axis);
    shape[a + 1] *= shape[a];
    shape.erase(shape.begin() + ptrdiff_t(a));
  }
  if (place.core.layer >= 0) shape.insert(shape.begin(), num_layers);
  return shape;
}

// `t` as a contiguous host tensor: itself when it is one already (the chunks are written before
// training goes on, so the rank's state needs no copy), else a copy.
Tensor host_contiguous(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.to(Device::CPU);
  return h.is_contiguous() ? h : h.clone();
}

// The chunks of the box `box` (megatron-cpp's full-tensor coordinates) of tensor `place`, under
// `key` (its own, or an optimizer state's).
void add_box_chunks(const std::string& key, const CoreKeyPlace& place, int64_t num_layers,
                    const PlacedBox& box, std::vector<DcpChunkToWrite>& out) {
  if (box.view.numel() == 0) return;
  const Shape global = core_global_shape(place, num_layers);
  const MegatronCoreKey& core = place.core;
  auto add = [&](Shape offsets, Tensor data) {
    if (core.layer >= 0) {
      offsets.insert(offsets.begin(), core.layer);
      Shape sizes = data.shape();
      sizes.insert(sizes.begin(), 1);
      data = data.view(sizes);
    }
    out.push_back({key, global, std::move(offsets), std::move(data)});
  };
  if (core.merge_axis < 0) {
    add(box.origin, host_contiguous(box.view));
    return;
  }
  // One chunk per half: rows [k·ffn + i0, k·ffn + i1) of Megatron's [..., 2·ffn, ...].
  const int a = core.merge_axis;
  const int64_t ffn = place.full_shape[size_t(a) + 1];
  for (int64_t k = 0; k < box.view.size(a); ++k) {
    Shape offsets = box.origin;
    offsets.erase(offsets.begin() + a);
    offsets[size_t(a)] += (box.origin[size_t(a)] + k) * ffn;
    const Tensor half = host_contiguous(box.view.slice(a, k, k + 1));
    Shape sizes = half.shape();
    sizes.erase(sizes.begin() + a);
    add(std::move(offsets), half.view(sizes));
  }
}

// Where the slice of `p` sits in its full tensor.
Shape slice_origin(const Parameter& p) {
  Shape origin(p.spec.full_shape.size(), 0);
  if (!p.replicated()) origin[size_t(p.spec.partition_dim)] = p.local_start;
  if (p.spec.expert) origin[0] = p.expert_start;
  return origin;
}

// The boxes of `part` of the 2-D slice of `p` at `origin` (data as part_boxes takes it) with its
// rows moved to Megatron-Core's rows (MLA's rope rows, megatron_core_keys.h): a whole slice as
// one permuted host copy, a part of one (a distributed-optimizer shard) row by row.
std::vector<PlacedBox> permuted_row_boxes(const Parameter& p, const Shape& origin,
                                          const SlicePart& part, const Tensor& data,
                                          const MlaOptions& mla) {
  MT_CHECK(p.local_shape.size() == 2 && (p.replicated() || p.spec.partition_dim == 0),
           "permuted_row_boxes: ", p.spec.name, " is not split by rows");
  const int64_t rows = p.local_shape[0], cols = p.local_shape[1];
  const Tensor host = data.device().is_cpu() ? data : data.to(Device::CPU);
  auto row_of = [&](int64_t r) { return megatron_core_row(p.spec.name, origin[0] + r, mla); };
  if (part.begin == 0 && part.end == rows * cols) {
    // Megatron's rows of one head (query) or of the key latent stay within this slice.
    Tensor copy = Tensor::empty({rows, cols}, host.dtype());
    const Tensor whole = host.view({rows, cols});
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t to = row_of(r) - origin[0];
      copy.slice(0, to, to + 1).copy_from(whole.slice(0, r, r + 1));
    }
    return {PlacedBox{origin, copy}};
  }
  std::vector<PlacedBox> boxes;
  for (int64_t r = part.begin / cols; r * cols < part.end; ++r) {
    const int64_t lo = std::max(part.begin, r * cols), hi = std::min(part.end, (r + 1) * cols);
    const Tensor piece = host.slice(0, lo - part.begin, hi - part.begin).view({1, hi - lo});
    boxes.push_back({Shape{row_of(r), origin[1] + lo - r * cols}, piece});
  }
  return boxes;
}

// The key context of the model `params` holds (MoE layers: those with a router).
MegatronCoreKeyContext key_context(const ParameterStore& params, bool per_layer_keys,
                                   const MlaOptions& mla) {
  MegatronCoreKeyContext context{per_layer_keys, {}, mla};
  const std::string router = "mlp.router.weight";
  for (const Parameter& p : params.params())
    if (p.spec.name.ends_with("." + router))
      context.moe_layers.insert(p.spec.name.substr(0, p.spec.name.size() - router.size()));
  return context;
}

// Megatron-Core's name of megatron-cpp's optimizer buffer, or "".
std::string optimizer_state_name(const std::string& buffer) {
  if (buffer == "exp_avg" || buffer == "exp_avg_sq") return buffer;
  if (buffer == kMasterWeightsBuffer) return "fp32_param";
  return "";
}

constexpr const char* kConfigJson =
    R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1, )"
    R"("common_backend": "torch", "common_backend_version": 1})";

}  // namespace

std::string megatron_lm_torch_dist_unwritable(const ParameterStore& params,
                                              const std::vector<std::string>& optimizer_buffers) {
  // Which keys exist does not depend on MLA's dimensions, only on its being there.
  MlaOptions mla;
  mla.enabled = std::any_of(params.params().begin(), params.params().end(), [](const Parameter& p) {
    return p.spec.name.ends_with("self_attention.linear_kv_down_proj.weight");
  });
  const MegatronCoreKeyContext context = key_context(params, false, mla);
  for (const Parameter& p : params.params())
    if (p.spec.stage_tie != StageTie::kCopy &&
        !megatron_core_key(p.spec.name, p.spec.full_shape, context))
      return "parameter " + p.spec.name +
             " has no key in Megatron-Core's GPT checkpoints as megatron-cpp writes them (dense, "
             "mixture-of-experts, QK-norm, multi-latent-attention and multi-token-prediction GPT "
             "models are written; BERT not yet)";
  for (const std::string& buffer : optimizer_buffers)
    if (optimizer_state_name(buffer).empty())
      return "the optimizer state '" + buffer +
             "' has no name in Megatron-Core's torch_dist checkpoints (Adam's exp_avg, "
             "exp_avg_sq and fp32 main params do)";
  return "";
}

std::vector<DcpChunkToWrite> megatron_lm_torch_dist_chunks(
    const ParameterStore& params, const std::map<std::string, Tensor>& optimizer_flat_buffers,
    FlatRange optimizer_range, int64_t num_layers, const TorchDistWrites& writes) {
  std::vector<DcpChunkToWrite> out;
  const int64_t total = params.flat_values().numel();
  const int64_t range_begin = optimizer_range.begin;
  const int64_t range_end = optimizer_range.end < 0 ? total : optimizer_range.end;
  for (const auto& [buffer, data] : optimizer_flat_buffers)
    MT_REQUIRE(!optimizer_state_name(buffer).empty(), "the optimizer state '", buffer,
               "' has no name in Megatron-Core's torch_dist checkpoints (Adam's exp_avg, "
               "exp_avg_sq and fp32 main params do): save in megatron-cpp's format (leave out "
               "--ckpt-format), or with --no-save-optim");
  const MegatronCoreKeyContext context = key_context(params, writes.per_layer_keys, writes.mla);
  // An expert parameter's tensor split is the expert grid's (etp); its experts are EP's.
  const int etp_rank = params.etp_rank() >= 0 ? params.etp_rank() : params.tp_rank();
  for (const Parameter& p : params.params()) {
    // The last stage's copy of a tied embedding is the embedding's replica in Megatron; a
    // replicated tensor's main replica is TP rank 0's (etp rank 0's for an expert's).
    if (p.spec.stage_tie == StageTie::kCopy) continue;
    const CoreKeyPlace place = require_core_key(p.spec.name, p.spec.full_shape, context);
    if (p.replicated() && (p.spec.expert ? etp_rank : params.tp_rank()) != 0) continue;
    const bool main = p.spec.expert ? writes.experts : writes.dense;
    const Shape origin = slice_origin(p);
    const bool permuted = megatron_core_permutes_rows(p.spec.name, writes.mla);
    if (main && permuted)
      for (const PlacedBox& box :
           permuted_row_boxes(p, origin, SlicePart::whole(p.local_shape), p.value, writes.mla))
        add_box_chunks(place.core.key, place, num_layers, box, out);
    else if (main)
      for (const PlacedBox& box : part_boxes(origin, SlicePart::whole(p.local_shape), p.value))
        add_box_chunks(place.core.key, place, num_layers, box, out);
    if (!main && !writes.sharded_optimizer) continue;
    const int64_t begin = std::max(p.flat_offset, range_begin);
    const int64_t end = std::min(p.flat_offset + p.value.numel(), range_end);
    if (begin >= end) continue;
    for (const auto& [buffer, data] : optimizer_flat_buffers) {
      const Tensor piece = data.slice(0, begin - range_begin, end - range_begin);
      const SlicePart part{p.local_shape, begin - p.flat_offset, end - p.flat_offset};
      for (const PlacedBox& box : permuted ? permuted_row_boxes(p, origin, part, piece, writes.mla)
                                           : part_boxes(origin, part, piece))
        add_box_chunks("optimizer.state." + optimizer_state_name(buffer) + "." + place.core.key,
                       place, num_layers, box, out);
    }
  }
  // The persistent buffers (the routers' expert bias): whole on every rank, replicated.
  if (writes.dense && params.tp_rank() == 0)
    for (const Buffer& b : params.buffers()) {
      if (!b.spec.persistent) continue;
      const CoreKeyPlace place = require_core_key(b.spec.name, b.spec.shape, context);
      const Tensor value = host_contiguous(b.value);
      add_box_chunks(place.core.key, place, num_layers,
                     PlacedBox{Shape(b.spec.shape.size(), 0), value}, out);
    }
  return out;
}

PyValue megatron_lm_torch_dist_common_state(const nlohmann::json& state,
                                            const ParameterStore& params, int tp, int pp,
                                            bool mixed_precision) {
  nlohmann::json args = megatron_lm_saved_args(state, tp, pp, "torch_dist");
  // Megatron-Core's MLA has its latent norms (megatron-cpp's always are) with --qk-layernorm.
  if (args.value("multi_latent_attention", false)) args["qk_layernorm"] = true;
  PyValue root = PyValue::dict();
  PyDict& d = root.as_dict("");
  d.set(PyValue::str("args"), megatron_lm_args_namespace(args));
  d.set(PyValue::str("checkpoint_version"), PyValue::real(3.0));
  d.set(PyValue::str("num_floating_point_operations_so_far"), PyValue::integer(0));
  // How Megatron-Core (2025+) laid the sharded keys out: one stacked tensor per layer module,
  // optimizer keys without a chained-optimizer prefix.
  PyValue content = PyValue::dict();
  content.as_dict("").set(PyValue::str("singleton_local_shards"), PyValue::boolean(false));
  content.as_dict("").set(PyValue::str("chained_optim_avoid_prefix"), PyValue::boolean(true));
  d.set(PyValue::str("content_metadata"), content);
  std::pair<int64_t, int64_t> groups{0, 0};
  for (const Parameter& p : params.params()) ++(p.spec.weight_decay ? groups.first : groups.second);
  add_megatron_lm_trainer_state(d, state, args, mixed_precision, groups);
  return root;
}

void write_megatron_lm_torch_dist_common(const std::string& iteration_dir, const PyValue& common) {
  torch_save(iteration_dir + "/common.pt", common);
  write_file_durably(iteration_dir + "/metadata.json", kConfigJson);
}

void save_megatron_lm_torch_dist(const std::string& save_dir, int64_t iteration,
                                 const ParameterStore& params,
                                 const std::map<std::string, Tensor>& optimizer_flat_buffers,
                                 const nlohmann::json& state, const ParallelState& ps,
                                 const OptimizerShard& optimizer_shard) {
  MT_CHECK(ps.world != nullptr, "save_megatron_lm_torch_dist: no world communicator");
  const bool sharded = optimizer_shard.dp_size > 1;
  // The distributed optimizer's shards of expert parameters on an expert grid of their own are
  // not laid out as the dense ones (megatron-cpp's format refuses them too: checkpoint.cpp).
  MT_REQUIRE(!sharded || (ps.ep_size == 1 && ps.etp_size == ps.tp_size),
             "--save with --use-distributed-optimizer and an expert grid of its own "
             "(--expert-model-parallel-size ",
             ps.ep_size, ", --expert-tensor-parallel-size ", ps.etp_size,
             ") is not implemented (docs/moe.md)");
  std::string tmp;
  std::unique_ptr<CheckpointTransaction> transaction = begin_save(save_dir, iteration, ps, tmp);
  std::string mine;  // this rank's item records
  run_on_all_ranks(*ps.world, "writing the checkpoint", [&] {
    // Data-parallel replicas hold identical values (and, unless sharded, optimizer state); the
    // experts' replicas are the expert-data-parallel ones.
    const ArchitectureOptions architecture = architecture_from_args_json(state.at("model"));
    TorchDistWrites writes;
    writes.dense = ps.dp_cp_rank == 0;
    writes.experts = ps.edp_rank == 0;
    writes.sharded_optimizer = sharded;
    writes.per_layer_keys = megatron_core_per_layer_keys(architecture.moe);
    writes.mla = architecture.mla;
    if (!writes.dense && !writes.experts && !sharded) return;
    check_finite_for_checkpoint(iteration, params, optimizer_flat_buffers, optimizer_shard.range);
    const int64_t num_layers = state.at("model").at("num_layers").get<int64_t>();
    const std::vector<DcpChunkToWrite> chunks = megatron_lm_torch_dist_chunks(
        params, optimizer_flat_buffers, optimizer_shard.range, num_layers, writes);
    if (chunks.empty()) return;
    mine = dcp_items_text(
        write_dcp_data_file(tmp, "__" + std::to_string(ps.rank) + "_0.distcp", chunks, {}));
  });
  // Every rank's records to rank 0, one broadcast per rank.
  std::vector<DcpWrittenItem> items;
  for (int r = 0; r < ps.world->size(); ++r) {
    const std::string text = broadcast_string(*ps.world, mine, r);
    if (ps.rank != 0 || text.empty()) continue;
    for (DcpWrittenItem& i : dcp_items_from_text(text)) items.push_back(std::move(i));
  }
  run_on_all_ranks(*ps.world, "committing the checkpoint", [&] {
    if (ps.rank != 0) return;
    write_megatron_lm_torch_dist_common(
        tmp,
        megatron_lm_torch_dist_common_state(state, params, ps.tp_size, ps.pp_size,
                                            optimizer_flat_buffers.count(kMasterWeightsBuffer)));
    const std::string final_dir =
        std::filesystem::absolute(save_dir + "/" + iteration_dir_name(iteration)).string();
    write_dcp_metadata(tmp, items, final_dir, tmp.substr(tmp.rfind(".tmp-") + 5));
    fsync_directory(tmp);
    commit_save(*transaction, save_dir);
  });
}

}  // namespace megatron
