#include "checkpoint/megatron_lm_distrib_optim.h"

#include <filesystem>
#include <numeric>
#include <regex>
#include <set>

#include "checkpoint/layout.h"
#include "core/error.h"
#include "core/torch_file.h"
#include "optim/optimizer.h"

namespace megatron {

namespace {

constexpr int64_t kParamAlignment = 64;       // optimizer/param_layout.py: pad_param_start
constexpr int64_t kBucketEndAlignment = 128;  // bucket_end_divisor: lcm(DP, 128)

int64_t round_up(int64_t v, int64_t multiple) {
  return (v + multiple - 1) / multiple * multiple;
}

bool flag(const nlohmann::json& args, const char* key) {
  const auto it = args.find(key);
  return it != args.end() && it->is_boolean() && it->get<bool>();
}

// The buffer's (param dtype, grad dtype) key: the weights' dtype, and the gradients' — fp32
// with accumulate_allreduce_grads_in_fp32, which Megatron turns on for bf16 (arguments.py).
std::pair<std::string, std::string> buffer_dtypes(const nlohmann::json& args) {
  const std::string param = flag(args, "bf16")   ? "bfloat16"
                            : flag(args, "fp16") ? "float16"
                                                 : "float32";
  const auto it = args.find("accumulate_allreduce_grads_in_fp32");
  const bool fp32_grads =
      it != args.end() && it->is_boolean() ? it->get<bool>() : param != "float16";
  return {param, fp32_grads ? "float32" : param};
}

std::vector<MegatronLmBufferParam> buffer_params(
    const std::vector<std::pair<std::string, int64_t>>& names_and_numels,
    const nlohmann::json& args, int pp_size) {
  const bool tied = !flag(args, "untie_embeddings_and_output_weights");
  std::vector<MegatronLmBufferParam> out;
  for (const auto& [name, numel] : names_and_numels)
    out.push_back({numel, megatron_lm_shared_embedding(name, tied, pp_size)});
  return out;
}

int64_t data_parallel_size(const nlohmann::json& args) {
  const auto it = args.find("data_parallel_size");
  return it != args.end() && it->is_number_integer() ? std::max<int64_t>(1, it->get<int64_t>()) : 1;
}

}  // namespace

MegatronLmBufferLayout megatron_lm_buffer_layout(const std::vector<MegatronLmBufferParam>& params,
                                                 std::optional<int64_t> bucket_size,
                                                 int64_t dp_size) {
  MT_REQUIRE(dp_size >= 1, "the data-parallel size must be >= 1, got ", dp_size);
  const int64_t end_alignment = std::lcm(dp_size, kBucketEndAlignment);
  MegatronLmBufferLayout layout;
  layout.offset.assign(params.size(), 0);
  layout.bucket.assign(params.size(), 0);
  // Positions in the padded buffer; `bucket_start` of the open bucket, `coalesced_start` where it
  // begins once the earlier buckets' end padding is dropped.
  int64_t next = 0, bucket_start = 0, coalesced_start = 0;
  int members = 0;
  auto close_bucket = [&](int64_t end) {
    const int64_t unpadded = end - bucket_start;
    layout.bucket_numel_unpadded.push_back(unpadded);
    const int64_t padded_end = round_up(end, end_alignment);
    layout.bucket_numel.push_back(padded_end - bucket_start);
    coalesced_start += unpadded;
    bucket_start = next = padded_end;
    members = 0;
  };
  for (size_t k = params.size(); k-- > 0;) {  // the backward's order
    const MegatronLmBufferParam& p = params[k];
    next = round_up(next, kParamAlignment);
    if (p.shared_embedding && members > 0) close_bucket(next);
    const int64_t end = next + p.numel;
    layout.offset[k] = coalesced_start + (next - bucket_start);
    layout.bucket[k] = int(layout.bucket_numel.size());
    ++members;
    if ((bucket_size && end - bucket_start >= *bucket_size) || p.shared_embedding)
      close_bucket(end);
    else
      next = end;
  }
  if (members > 0) close_bucket(next);
  layout.numel_unpadded = coalesced_start;
  return layout;
}

std::optional<int64_t> megatron_lm_bucket_size(const nlohmann::json& args, int pp_rank) {
  if (!flag(args, "overlap_grad_reduce") || pp_rank > 0) return std::nullopt;
  const auto it = args.find("ddp_bucket_size");
  if (it != args.end() && it->is_number_integer()) return it->get<int64_t>();
  return std::max<int64_t>(40000000, 1000000 * data_parallel_size(args));
}

bool megatron_lm_shared_embedding(const std::string& name, bool tied_embeddings, int pp_size) {
  return tied_embeddings && pp_size > 1 &&
         (name.empty() || name == "embedding.word_embeddings.weight");
}

std::string megatron_lm_distrib_optim_path(const MegatronLmRank& rank) {
  const std::filesystem::path p =
      std::filesystem::path(rank.path).parent_path() / kMegatronLmDistribOptimFileName;
  return std::filesystem::exists(p) ? p.string() : "";
}

std::map<std::string, std::map<std::string, Tensor>> megatron_lm_coalesced_state(
    const std::map<std::string, Tensor>& flat, const std::string& where, int pp_rank, int pp_size,
    const std::vector<std::pair<std::string, Tensor>>& parameters, const nlohmann::json& args) {
  std::vector<std::pair<std::string, int64_t>> numels;
  for (const auto& [name, t] : parameters) numels.emplace_back(name, t.numel());
  const MegatronLmBufferLayout layout =
      megatron_lm_buffer_layout(buffer_params(numels, args, pp_size),
                                megatron_lm_bucket_size(args, pp_rank), data_parallel_size(args));
  const bool mixed_precision = flag(args, "bf16") || flag(args, "fp16");
  std::vector<std::pair<const char*, std::string>> keys = {{"exp_avg", "exp_avg"},
                                                           {"exp_avg_sq", "exp_avg_sq"}};
  if (mixed_precision) keys.emplace_back("param", kMasterWeightsBuffer);
  std::map<std::string, std::map<std::string, Tensor>> out;
  for (const auto& [key, buffer] : keys) {
    auto it = flat.find(key);
    MT_REQUIRE(it != flat.end(), where, " has no '", key, "'");
    const Tensor& t = it->second;
    MT_REQUIRE(t.dtype() == DType::F32 && t.dim() == 1, where, " '", key, "' is ",
               dtype_name(t.dtype()), " ", shape_str(t.shape()),
               ", Megatron writes a flat float32 tensor");
    MT_REQUIRE(t.numel() == layout.numel_unpadded, where, " holds a buffer of ", t.numel(),
               " elements, the model its args describe lays out ", layout.numel_unpadded, " (",
               parameters.size(), " parameters in ", layout.bucket_numel.size(),
               " buckets): its bucket layout does not match the model (another model, "
               "--ddp-bucket-size or --overlap-grad-reduce than its args record)");
    for (size_t i = 0; i < parameters.size(); ++i) {
      const auto& [name, param] = parameters[i];
      if (name.empty()) continue;  // the tied copy: the embedding's state is on the first stage
      out[buffer][name] =
          t.slice(0, layout.offset[i], layout.offset[i] + param.numel()).view(param.shape());
    }
  }
  return out;
}

std::map<std::string, std::map<std::string, Tensor>> megatron_lm_distrib_optim_state(
    const std::string& path, int pp_rank, int pp_size,
    const std::vector<std::pair<std::string, Tensor>>& parameters, const nlohmann::json& args) {
  const std::string where = "the distributed optimizer's state '" + path + "'";
  const PyValue root = torch_load(path);
  const PyDict& d = root.as_dict(where);
  const PyValue* coalesced = d.find("buckets_coalesced");
  MT_REQUIRE(coalesced && coalesced->as_bool(where + " buckets_coalesced"), where,
             " is in the layout Megatron-LM wrote before February 2024 (per-bucket lists, no "
             "buckets_coalesced); convert it with Megatron-LM's "
             "--ckpt-convert-update-legacy-dist-opt-format first");
  // The buffers: int keys 0, 1, ...
  std::vector<const PyValue*> buffers;
  for (const auto& [k, v] : d.items)
    if (k.kind() == PyValue::Kind::kInt) buffers.push_back(&v);
  MT_REQUIRE(buffers.size() == 1, where, " holds ", buffers.size(),
             " gradient buffers; megatron-cpp reads a dense model's one buffer (mixture-of-"
             "experts and mixed-dtype models keep several)");
  const PyDict& by_dtype = buffers.front()->as_dict(where + " buffer 0");
  MT_REQUIRE(by_dtype.items.size() == 1, where, " buffer 0 has ", by_dtype.items.size(),
             " dtype entries, Megatron writes one");
  const std::string buffer_where = where + " buffer 0 " + by_dtype.items.front().first.describe();
  const PyDict& state = by_dtype.items.front().second.as_dict(buffer_where);
  std::map<std::string, Tensor> flat;
  for (const auto& [k, v] : state.items)
    if (v.kind() == PyValue::Kind::kTensor) flat[k.as_str(buffer_where)] = v.as_tensor("").data;
  const PyValue* numel = state.find("numel_unpadded");
  MT_REQUIRE(numel, buffer_where, " has no numel_unpadded");
  for (const auto& [key, t] : flat)
    MT_REQUIRE(t.numel() == numel->as_int(buffer_where + " numel_unpadded"), buffer_where, " '",
               key, "' has ", t.numel(), " elements, its numel_unpadded says ", numel->as_int(""));
  return megatron_lm_coalesced_state(flat, buffer_where, pp_rank, pp_size, parameters, args);
}

std::map<std::string, Tensor> megatron_lm_dp_reshardable_buffers(const DcpCheckpoint& dcp,
                                                                 int mp_rank) {
  // sharded_param_state_dp_reshardable's keys: optimizer.distributed.dp_group_idx_<model-parallel
  // rank>.gbuf_idx_<buffer>.dtype_<(param dtype, grad dtype)>.bucket_idx_<bucket>.<state>, each
  // of global shape [the bucket's numel_unpadded].
  static const std::regex pattern(
      R"((?:chained_\d+\.)?optimizer\.distributed\.dp_group_idx_(\d+)\.gbuf_idx_(\d+)\.dtype_(.+)\.bucket_idx_(\d+)\.(\w+))");
  std::map<std::string, std::map<int, std::string>> buckets;  // state → bucket → key
  std::set<std::string> buffers;
  for (const auto& [key, t] : dcp.tensors()) {
    std::smatch m;
    if (!std::regex_match(key, m, pattern) || std::stoi(m[1]) != mp_rank) continue;
    buffers.insert(m[2].str() + " " + m[3].str());
    MT_REQUIRE(t.shape.size() == 1, "Megatron-LM checkpoint '", dcp.dir(), "': '", key, "' is ",
               shape_str(t.shape), ", a dp_reshardable bucket is flat");
    buckets[m[5]][std::stoi(m[4])] = key;
  }
  std::map<std::string, Tensor> out;
  if (buckets.empty()) return out;
  MT_REQUIRE(buffers.size() == 1, "Megatron-LM checkpoint '", dcp.dir(), "': model-parallel rank ",
             mp_rank, "'s dp_reshardable optimizer state has ", buffers.size(),
             " gradient buffers; megatron-cpp reads a dense model's one buffer (mixture-of-"
             "experts and mixed-dtype models keep several)");
  for (const auto& [state, keys] : buckets) {
    std::vector<Tensor> parts;
    int64_t numel = 0;
    for (const auto& [bucket, key] : keys) {
      MT_REQUIRE(bucket == int(parts.size()), "Megatron-LM checkpoint '", dcp.dir(),
                 "' has no bucket ", parts.size(), " of model-parallel rank ", mp_rank, "'s ",
                 state, " (next: '", key, "')");
      parts.push_back(dcp.read_tensor(key));
      numel += parts.back().numel();
    }
    Tensor flat = Tensor::empty({numel}, parts.front().dtype());
    int64_t at = 0;
    for (const Tensor& p : parts) {
      flat.slice(0, at, at + p.numel()).copy_from(p);
      at += p.numel();
    }
    out[state] = flat;
  }
  return out;
}

PyValue megatron_lm_distrib_optim_file(
    const std::vector<const Parameter*>& order, int pp_rank, int pp_size,
    const std::map<std::string, std::map<std::string, Tensor>>& buffers,
    const nlohmann::json& args) {
  std::vector<std::pair<std::string, int64_t>> numels;
  for (const Parameter* p : order)
    numels.emplace_back(p->spec.stage_tie == StageTie::kCopy ? "" : p->spec.name,
                        shape_numel(p->local_shape));
  const MegatronLmBufferLayout layout =
      megatron_lm_buffer_layout(buffer_params(numels, args, pp_size),
                                megatron_lm_bucket_size(args, pp_rank), data_parallel_size(args));
  const bool mixed_precision = flag(args, "bf16") || flag(args, "fp16");
  auto buffer = [&](const std::string& name) -> const std::map<std::string, Tensor>& {
    auto it = buffers.find(name);
    MT_REQUIRE(it != buffers.end(), "the checkpoint has no optimizer buffer '", name,
               "', which Megatron-LM's distributed optimizer state needs");
    return it->second;
  };
  PyValue state = PyValue::dict();
  PyDict& s = state.as_dict("");
  for (const auto& [key, name] : std::vector<std::pair<const char*, std::string>>{
           {"param", mixed_precision ? kMasterWeightsBuffer : ""},
           {"exp_avg", "exp_avg"},
           {"exp_avg_sq", "exp_avg_sq"}}) {
    const std::map<std::string, Tensor>* values = name.empty() ? nullptr : &buffer(name);
    // Zero between parameters, as Megatron's gather leaves the alignment padding.
    Tensor flat = Tensor::zeros({layout.numel_unpadded}, DType::F32);
    for (size_t i = 0; i < order.size(); ++i) {
      const Parameter& p = *order[i];
      Tensor src;
      if (values) {
        auto it = values->find(p.spec.name);
        MT_REQUIRE(it != values->end(), "the checkpoint's optimizer buffer ", name, " has no ",
                   p.spec.name);
        src = it->second;
      } else {
        src = p.value;  // an fp32 run's main params are its weights
      }
      Tensor host = src.to(Device::CPU);
      MT_REQUIRE(host.dtype() == DType::F32, "the checkpoint's ", name.empty() ? "weight" : name,
                 " of ", p.spec.name, " is ", dtype_name(host.dtype()), ", f32 expected");
      if (!host.is_contiguous()) host = host.clone();
      flat.slice(0, layout.offset[i], layout.offset[i] + host.numel()).copy_from(host.flatten());
    }
    s.set(PyValue::str(key), PyValue::tensor(flat));
  }
  s.set(PyValue::str("numel_unpadded"), PyValue::integer(layout.numel_unpadded));
  const auto [param_dtype, grad_dtype] = buffer_dtypes(args);
  PyValue by_dtype = PyValue::dict();
  by_dtype.as_dict("").set(
      PyValue::tuple({PyValue::global("torch", param_dtype), PyValue::global("torch", grad_dtype)}),
      std::move(state));
  PyValue root = PyValue::dict();
  root.as_dict("").set(PyValue::str("buckets_coalesced"), PyValue::boolean(true));
  root.as_dict("").set(PyValue::integer(0), std::move(by_dtype));
  return root;
}

}  // namespace megatron
