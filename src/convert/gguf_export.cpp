#include "convert/gguf_export.h"

#include <cmath>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint.h"
#include "checkpoint/shards.h"
#include "convert/convert_common.h"
#include "convert/gguf_tokenizer.h"
#include "convert/gpt_checkpoint.h"
#include "convert/hf_directory.h"
#include "convert/hf_gpt2.h"
#include "convert/hf_llama.h"
#include "convert/hf_moe.h"
#include "convert/llama_checkpoint.h"
#include "kernels/rotary.h"

namespace megatron {

namespace {

// llama_ftype of a file whose matrices are `type` (llama.h's LLAMA_FTYPE_*).
uint32_t file_type(GgufTensorType type) {
  switch (type) {
    case GgufTensorType::kF32:
      return 0;  // ALL_F32
    case GgufTensorType::kF16:
      return 1;  // MOSTLY_F16
    case GgufTensorType::kBF16:
      return 32;  // MOSTLY_BF16
  }
  MT_THROW("unknown GGUF tensor type ", int32_t(type));
}

// "h.3.attn.c_attn.weight" with prefix "h." -> {3, "attn.c_attn.weight"}; {-1, name} when
// `name` is not a layer's.
std::pair<int, std::string> split_layer(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return {-1, name};
  const size_t dot = name.find('.', prefix.size());
  return {std::stoi(name.substr(prefix.size(), dot - prefix.size())), name.substr(dot + 1)};
}

std::string block(int layer, const std::string& what) {
  return "blk." + std::to_string(layer) + "." + what;
}

// Rows of a q or k projection (weight [heads·d, h] or bias [heads·d]) reordered per head from
// the rotated halves (j, j + d/2) to llama.cpp's adjacent pairs (2j, 2j + 1): within a head,
// row t·d/2 + j goes to 2j + t.
Tensor pairs_adjacent(const Tensor& t, int64_t heads) {
  const int64_t rows = t.size(0), cols = t.dim() == 2 ? t.size(1) : 1;
  const int64_t half = rows / heads / 2;
  MT_CHECK(half * heads * 2 == rows, "RoPE permutation of ", t.describe(), " over ", heads,
           " heads");
  const Tensor grouped = t.clone().view({heads, 2, half, cols});
  return grouped.transpose(1, 2).clone().view(t.shape());
}

// The tensor's stored type: llama.cpp's converter keeps 1-D tensors (norms, biases) and the
// position embedding in f32 whatever the file type.
GgufTensorType stored_type(const std::string& gguf_name, const Tensor& t, GgufTensorType type) {
  return t.dim() == 1 || gguf_name.rfind("position_embd.", 0) == 0 ? GgufTensorType::kF32 : type;
}

// GPT-2-style model -> llama.cpp gpt2 tensors, through HF GPT-2's layout (gguf_architecture
// has refused what it cannot describe).
std::map<std::string, Tensor> gpt2_tensors(const TensorMap& full, const GptConfig& c) {
  static const std::map<std::string, std::string> kLayer = {
      {"ln_1.weight", "attn_norm.weight"},          {"ln_1.bias", "attn_norm.bias"},
      {"attn.c_attn.weight", "attn_qkv.weight"},    {"attn.c_attn.bias", "attn_qkv.bias"},
      {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
      {"ln_2.weight", "ffn_norm.weight"},           {"ln_2.bias", "ffn_norm.bias"},
      {"mlp.c_fc.weight", "ffn_up.weight"},         {"mlp.c_fc.bias", "ffn_up.bias"},
      {"mlp.c_proj.weight", "ffn_down.weight"},     {"mlp.c_proj.bias", "ffn_down.bias"}};
  static const std::map<std::string, std::string> kGlobal = {{"wte.weight", "token_embd.weight"},
                                                             {"wpe.weight", "position_embd.weight"},
                                                             {"ln_f.weight", "output_norm.weight"},
                                                             {"ln_f.bias", "output_norm.bias"}};
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : hf_tensors_from_gpt(full, c)) {
    const auto [layer, rest] = split_layer(name, "h.");
    if (layer < 0) {
      MT_CHECK(kGlobal.count(name), "HF GPT-2 tensor '", name, "' has no GGUF name");
      out[kGlobal.at(name)] = t;
      continue;
    }
    MT_CHECK(kLayer.count(rest), "HF GPT-2 tensor '", name, "' has no GGUF name");
    const bool conv1d = t.dim() == 2;  // HF GPT-2's Conv1D weights are [in, out]
    out[block(layer, kLayer.at(rest))] = conv1d ? transposed_matrix(t) : t;
  }
  return out;
}

// The tensors stacked along a new first dimension: [parts, ...part's shape].
Tensor stacked(const std::vector<Tensor>& parts) {
  Shape shape = parts.at(0).shape();
  shape.insert(shape.begin(), int64_t(parts.size()));
  Tensor out = Tensor::empty(shape, DType::F32);
  for (size_t i = 0; i < parts.size(); ++i) out.select(0, int64_t(i)).copy_from(parts[i]);
  return out;
}

// Moves MoE layer `layer`'s HF sparse block (convert/hf_moe.h) out of `hf` into llama.cpp's
// tensors: the router ffn_gate_inp [E, h], the experts' gate/up/down stacked into
// ffn_gate_exps / ffn_up_exps [E, F, h] and ffn_down_exps [E, h, F], and a shared expert's
// ffn_{gate,up,down}_shexp with its gate ffn_gate_inp_shexp [h] (qwen2moe).
void take_moe_block(TensorMap& hf, const GptConfig& c, int layer,
                    std::map<std::string, Tensor>& out) {
  const HfSparseBlockNames n = hf_sparse_block_names(c, layer);
  const auto take = [&](const std::string& name) {
    auto it = hf.find("model." + name);
    MT_CHECK(it != hf.end(), "HF tensor 'model.", name, "' missing from the MoE export");
    Tensor t = it->second;
    hf.erase(it);
    return t;
  };
  out[block(layer, "ffn_gate_inp.weight")] = take(n.router);
  std::vector<Tensor> gate, up, down;
  for (const auto& [g, u, d] : n.experts) {
    gate.push_back(take(g));
    up.push_back(take(u));
    down.push_back(take(d));
  }
  out[block(layer, "ffn_gate_exps.weight")] = stacked(gate);
  out[block(layer, "ffn_up_exps.weight")] = stacked(up);
  out[block(layer, "ffn_down_exps.weight")] = stacked(down);
  if (n.shared_gate.empty()) return;
  out[block(layer, "ffn_gate_shexp.weight")] = take(n.shared[0]);
  out[block(layer, "ffn_up_shexp.weight")] = take(n.shared[1]);
  out[block(layer, "ffn_down_shexp.weight")] = take(n.shared[2]);
  out[block(layer, "ffn_gate_inp_shexp.weight")] = take(n.shared_gate).view({c.hidden_size});
}

// Llama-family model -> llama.cpp llama (or qwen2 / qwen2moe: `permute` false) tensors.
std::map<std::string, Tensor> llama_tensors(const TensorMap& full, const GptConfig& c,
                                            bool permute) {
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  static const std::map<std::string, std::string> kGlobal = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  const TransformerConfig t = c.transformer_config();
  std::map<std::string, Tensor> out;
  TensorMap hf = hf_llama_tensors_from_gpt(full, c);
  if (c.arch.moe.enabled())
    for (int layer = 0; layer < c.num_layers; ++layer) take_moe_block(hf, c, layer, out);
  for (const auto& [name, value] : hf) {
    const auto [layer, rest] = split_layer(name, "model.layers.");
    if (layer < 0) {
      MT_CHECK(kGlobal.count(name), "HF Llama tensor '", name, "' has no GGUF name");
      out[kGlobal.at(name)] = value;
      continue;
    }
    MT_CHECK(kLayer.count(rest), "HF Llama tensor '", name, "' has no GGUF name");
    const bool q = rest.rfind("self_attn.q_proj.", 0) == 0;
    const bool k = rest.rfind("self_attn.k_proj.", 0) == 0;
    out[block(layer, kLayer.at(rest))] =
        permute && (q || k) ? pairs_adjacent(value, q ? c.num_attention_heads : t.query_groups())
                            : value;
  }
  return out;
}

// Llama 3.1's scaling as llama.cpp's rope_freqs: the factor each of the r/2 frequencies is
// divided by (inverse frequency / scaled inverse frequency, as our rotary kernel scales it).
Tensor llama3_rope_freqs(const GptConfig& c, int64_t rotary_dim) {
  const kernels::Llama3RopeScaling& l3 = c.arch.rope_scaling;
  std::vector<float> factors(size_t(rotary_dim / 2));
  for (int64_t j = 0; j < rotary_dim / 2; ++j) {
    const float inv_freq = 1.0f / std::pow(c.arch.rotary_base, float(2 * j) / float(rotary_dim));
    factors[size_t(j)] = inv_freq / kernels::llama3_scaled_inv_freq(
                                        inv_freq, l3.factor, l3.low_freq_factor,
                                        l3.high_freq_factor, l3.original_max_position_embeddings);
  }
  return Tensor::from_vector(factors, {rotary_dim / 2});
}

// The llama.cpp architecture that computes the checkpoint's model, after refusing, each with a
// sentence, what none of those written here computes.
std::string gguf_architecture(const nlohmann::json& state, const GptConfig& c) {
  const ArchitectureOptions& a = c.arch;
  MT_REQUIRE(!a.mla.enabled,
             "a multi-latent-attention model does not export to GGUF: llama.cpp's deepseek2 "
             "architecture is not written here; keep it in megatron-cpp's format");
  MT_REQUIRE(!a.mup.enabled,
             "a --use-mup model does not export to GGUF: llama.cpp's gpt2 and llama "
             "architectures have no muP attention scale or multipliers");
  if (!is_llama_checkpoint(state)) {
    hf_config_from_gpt(c);  // refuses, with its sentence, what GPT-2 cannot describe
    MT_REQUIRE(c.gelu == kernels::GeluForm::kTanh,
               "llama.cpp's gpt2 architecture computes the tanh GeLU, this model the exact erf "
               "GeLU: it does not export to GGUF (train with --openai-gelu for a model that does)");
    return "gpt2";
  }
  MT_REQUIRE(!a.qk_layernorm,
             "a model with QK norms (--qk-layernorm, Qwen3) does not export to GGUF yet: "
             "llama.cpp's qwen3 architecture is not written here");
  MT_REQUIRE(a.rotary_percent == 1.0f && !a.rotary_interleaved, "a model with ",
             a.rotary_interleaved ? "--rotary-interleaved" : "--rotary-percent ",
             a.rotary_interleaved ? "" : std::to_string(a.rotary_percent),
             " does not export to GGUF yet: only RoPE over whole heads, in halves as HF rotates "
             "them, is mapped onto llama.cpp's llama and qwen2");
  const MoeOptions& moe = a.moe;
  const std::string hf_arch = moe.enabled()    ? hf_moe_architecture_of(c)
                              : a.add_qkv_bias ? "Qwen2ForCausalLM"
                                               : "LlamaForCausalLM";
  // Refuses, with its sentence, what the HF architecture cannot describe (biases, norm gains,
  // Mixtral's routing, ...).
  hf_llama_config_from_gpt(c, hf_arch);
  // Mixtral is llama.cpp's llama with experts on every layer (softmax, top k, the k weights
  // renormalised: Mixtral's routing); Qwen2-MoE its qwen2moe (the same without renormalising,
  // every layer sparse, the sigmoid-gated shared expert, q/k/v biases).
  if (moe.enabled()) {
    MT_REQUIRE(moe.count_moe_layers(c.num_layers) == c.num_layers,
               "llama.cpp's MoE architectures make every layer a mixture of experts; this model "
               "has dense layers (--moe-layer-freq ",
               moe.layer_freq, "), so it does not export to GGUF");
    MT_REQUIRE(hf_arch != "Qwen2MoeForCausalLM" || (moe.pre_softmax && a.add_qkv_bias),
               "llama.cpp's qwen2moe keeps the top-k softmax weights as they are (Qwen2-MoE's "
               "norm_topk_prob false: --moe-router-pre-softmax) and needs q/k/v biases "
               "(--add-qkv-bias); this model does not export to GGUF");
  }
  const std::string arch = moe.enabled() && moe.shared_expert_ffn > 0 ? "qwen2moe"
                           : a.add_qkv_bias                           ? "qwen2"
                                                                      : "llama";
  MT_REQUIRE(!(a.rope_scaling.enabled() && a.rotary_seq_len_interpolation_factor != 1.0f),
             "--use-rope-scaling and --rotary-seq-len-interpolation-factor together do not "
             "export to GGUF (llama.cpp applies one scaling)");
  MT_REQUIRE(arch == "llama" || !a.rope_scaling.enabled(),
             "llama.cpp's qwen2 architecture has no Llama 3.1 RoPE scaling: a model with q/k/v "
             "biases and --use-rope-scaling does not export to GGUF");
  const TransformerConfig t = c.transformer_config();
  MT_REQUIRE(arch == "llama" || t.head_dim() * c.num_attention_heads == c.hidden_size,
             "llama.cpp's qwen2 architecture needs heads x head size = hidden size (",
             c.num_attention_heads, " x ", t.head_dim(), " != ", c.hidden_size, ")");
  return arch;
}

}  // namespace

GgufTensorType gguf_tensor_type_from_name(const std::string& name) {
  if (name == "f32") return GgufTensorType::kF32;
  if (name == "f16") return GgufTensorType::kF16;
  if (name == "bf16") return GgufTensorType::kBF16;
  MT_THROW("--gguf-dtype ", name, " is not a GGUF tensor type written here: use f32, f16 or bf16");
}

nlohmann::json hf_tokenizer_identity(const std::string& hf_dir) {
  const std::string vocab = hf_dir + "/vocab.json", merges = hf_dir + "/merges.txt";
  if (!std::filesystem::exists(vocab) || !std::filesystem::exists(merges)) {
    const std::string model = hf_dir + "/tokenizer.model";
    if (!std::filesystem::exists(model)) return nullptr;
    return {{"type", "Llama2Tokenizer"}, {"files", {{"tokenizer_model", {{"path", model}}}}}};
  }
  const nlohmann::json config = read_hf_directory(hf_dir).config;
  MT_REQUIRE(config.contains("eos_token_id") && config["eos_token_id"].is_number_integer(),
             "HF directory '", hf_dir,
             "': config.json has no integer eos_token_id, the end-of-document token its "
             "vocab.json and merges.txt need in the GGUF file");
  return {{"type", "GPT2BPETokenizer"},
          {"eod", config["eos_token_id"]},
          {"files", {{"vocab_file", {{"path", vocab}}}, {"merge_file", {{"path", merges}}}}}};
}

std::string export_gguf(const std::string& load_dir, int64_t iteration,
                        const std::string& gguf_path, const GgufExportOptions& options) {
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const GptConfig c =
      gpt_config_from_checkpoint_state(state, reader.iteration_dir(), options.vocab_size);
  const ArchitectureOptions& a = c.arch;
  const std::string arch = gguf_architecture(state, c);
  warn_mtp_not_exported(c, "GGUF");
  const TensorMap full =
      read_full_model_tensors(reader, registered_parameter_store<GptModel>(c, 0, 1));
  const TransformerConfig t = c.transformer_config();
  std::map<std::string, Tensor> tensors =
      arch == "gpt2" ? gpt2_tensors(full, c) : llama_tensors(full, c, arch == "llama");
  if (a.rope_scaling.enabled()) tensors["rope_freqs.weight"] = llama3_rope_freqs(c, t.head_dim());

  GgufWriter gguf;
  gguf.add_string("general.architecture", arch);
  gguf.add_string("general.name", options.name);
  gguf.add_uint32("general.file_type", file_type(options.type));
  const std::string p = arch + ".";
  gguf.add_uint32(p + "context_length", uint32_t(c.max_position_embeddings));
  gguf.add_uint32(p + "embedding_length", uint32_t(c.hidden_size));
  gguf.add_uint32(p + "block_count", uint32_t(c.num_layers));
  // Mixtral in llama: the experts' width is the feed-forward length.
  gguf.add_uint32(
      p + "feed_forward_length",
      uint32_t(arch == "llama" && a.moe.enabled() ? t.expert_ffn_size() : t.ffn_size()));
  if (a.moe.enabled()) {
    gguf.add_uint32(p + "expert_count", uint32_t(a.moe.num_experts));
    gguf.add_uint32(p + "expert_used_count", uint32_t(a.moe.topk));
  }
  if (arch == "qwen2moe") {
    gguf.add_uint32(p + "expert_feed_forward_length", uint32_t(t.expert_ffn_size()));
    gguf.add_uint32(p + "expert_shared_feed_forward_length", uint32_t(a.moe.shared_expert_ffn));
  }
  gguf.add_uint32(p + "attention.head_count", uint32_t(c.num_attention_heads));
  gguf.add_uint32(p + "attention.head_count_kv", uint32_t(t.query_groups()));
  gguf.add_uint32(p + "vocab_size", uint32_t(c.vocab_size));
  if (arch == "gpt2") {
    gguf.add_float32(p + "attention.layer_norm_epsilon", c.layernorm_epsilon);
  } else {
    gguf.add_float32(p + "attention.layer_norm_rms_epsilon", c.layernorm_epsilon);
    gguf.add_float32(p + "rope.freq_base", a.rotary_base);
    gguf.add_uint32(p + "rope.dimension_count", uint32_t(t.head_dim()));
    if (t.head_dim() * c.num_attention_heads != c.hidden_size) {
      gguf.add_uint32(p + "attention.key_length", uint32_t(t.head_dim()));
      gguf.add_uint32(p + "attention.value_length", uint32_t(t.head_dim()));
    }
    if (a.rotary_seq_len_interpolation_factor != 1.0f) {
      gguf.add_string(p + "rope.scaling.type", "linear");
      gguf.add_float32(p + "rope.scaling.factor", a.rotary_seq_len_interpolation_factor);
    }
  }
  add_gguf_tokenizer(gguf,
                     options.tokenizer_identity.is_null() ? checkpoint_tokenizer(state)
                                                          : options.tokenizer_identity,
                     c.vocab_size, options.tokenizer);
  for (const auto& [tensor_name, value] : tensors)
    gguf.add_tensor(tensor_name, value, stored_type(tensor_name, value, options.type));
  gguf.write(gguf_path);
  return arch;
}

}  // namespace megatron
