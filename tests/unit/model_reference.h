// A naive double-precision GPT/transformer reference for the model tests, written from the
// definitions (GPT-2 / Megatron-LM equations) and independent of the code under test: plain
// loops over std::vector<double>, full (unsplit) weights looked up by logical name, and
// dropout masks drawn straight from PhiloxStream with the keying scheme documented in
// parallel/random.h (so the test also checks that the model keys its masks as specified).
// Gradients are obtained from it by central finite differences.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/philox.h"
#include "model/transformer_config.h"
#include "parallel/parameter.h"

namespace megatron::test {

using RefParams = std::map<std::string, std::vector<double>>;  // logical name → full tensor

// The full parameters of a TP=1 store, in double.
inline RefParams ref_params_from_store(const ParameterStore& store) {
  RefParams out;
  for (const Parameter& p : store.params()) {
    const float* v = p.value.data<float>();
    out[p.spec.name] = std::vector<double>(v, v + p.value.numel());
  }
  return out;
}

struct RefDropout {
  bool enabled = false;
  uint64_t seed = 0;
  int64_t iteration = 0, first_sample = 0;
  double hidden_p = 0, attention_p = 0;

  // Scale of element `counter` of the stream keyed by `fields`: 0 or 1/(1-p).
  double scale(std::initializer_list<uint64_t> fields, uint64_t counter, double p) const {
    if (!enabled || p <= 0) return 1.0;
    const float u = PhiloxStream(seed, philox_key(fields)).uniform(counter);
    return u >= float(p) ? 1.0 / (1.0 - p) : 0.0;
  }
  // Hidden-state dropout of (sample row r, position pos, channel c) at (layer, site).
  double hidden(int64_t layer, uint64_t site, int64_t r, int64_t pos, int64_t c, int64_t h) const {
    return scale({uint64_t(iteration), uint64_t(first_sample + r), uint64_t(layer), site},
                 uint64_t(pos * h + c), hidden_p);
  }
  double attention(int64_t layer, int64_t r, int64_t head, int64_t q, int64_t k, int64_t s) const {
    return scale(
        {uint64_t(iteration), uint64_t(first_sample + r), uint64_t(layer), 2, uint64_t(head)},
        uint64_t(q * s + k), attention_p);
  }
};

struct RefShape {
  int64_t s = 0, b = 0, h = 0, heads = 0, ffn = 0;
  double eps = 1e-5;
  bool tanh_gelu = false;  // GeLU's tanh form (--openai-gelu); else the exact erf form
};

// Activations are [s, b, h] flattened: element (pos, r, c) at (pos·b + r)·h + c.
using Act = std::vector<double>;

inline Act ref_layernorm(const Act& x, const std::vector<double>& g,
                         const std::vector<double>& beta, int64_t h, double eps) {
  Act y(x.size());
  for (size_t row = 0; row < x.size() / h; ++row) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < h; ++c) mean += x[row * h + c];
    mean /= double(h);
    for (int64_t c = 0; c < h; ++c) var += (x[row * h + c] - mean) * (x[row * h + c] - mean);
    var /= double(h);
    for (int64_t c = 0; c < h; ++c)
      y[row * h + c] = (x[row * h + c] - mean) / std::sqrt(var + eps) * g[c] + beta[c];
  }
  return y;
}

// y[n, o] = Σ_i W[o, i] x[n, i] (+ b[o]); W [out, in].
inline Act ref_linear(const Act& x, const std::vector<double>& w, const std::vector<double>* b,
                      int64_t in, int64_t out) {
  const size_t n = x.size() / in;
  Act y(n * out);
  for (size_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += w[o * in + i] * x[r * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

inline double ref_gelu(double u, bool tanh_form) {
  if (tanh_form)
    return 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
  return 0.5 * u * (1.0 + std::erf(u / std::sqrt(2.0)));
}

// Self-attention of one layer; pad[r·s + k] = 1 marks key k of sample r as padding.
inline Act ref_attention(const RefShape& sh, const RefParams& p, const std::string& prefix,
                         int64_t layer, const Act& x, bool causal, const std::vector<int>& pad,
                         const RefDropout& drop) {
  const int64_t s = sh.s, b = sh.b, h = sh.h, d = h / sh.heads;
  Act qkv = ref_linear(x, p.at(prefix + "query_key_value.weight"),
                       &p.at(prefix + "query_key_value.bias"), h, 3 * h);  // [s, b, 3h]
  auto at = [&](int64_t pos, int64_t r, int64_t head, int64_t which, int64_t k) {
    return qkv[(pos * b + r) * 3 * h + head * 3 * d + which * d + k];  // rows [heads, 3, d]
  };
  Act context(s * b * h, 0.0);
  for (int64_t r = 0; r < b; ++r)
    for (int64_t head = 0; head < sh.heads; ++head)
      for (int64_t q = 0; q < s; ++q) {
        std::vector<double> score(s, -INFINITY);
        double mx = -INFINITY;
        for (int64_t k = 0; k < s; ++k) {
          if ((causal && k > q) || (!pad.empty() && pad[r * s + k])) continue;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += at(q, r, head, 0, e) * at(k, r, head, 1, e);
          score[k] = dot / std::sqrt(double(d));
          mx = std::max(mx, score[k]);
        }
        double sum = 0;
        for (int64_t k = 0; k < s; ++k) sum += std::isinf(score[k]) ? 0.0 : std::exp(score[k] - mx);
        for (int64_t k = 0; k < s; ++k) {
          if (std::isinf(score[k])) continue;
          const double prob =
              std::exp(score[k] - mx) / sum * drop.attention(layer, r, head, q, k, s);
          for (int64_t e = 0; e < d; ++e)
            context[(q * b + r) * h + head * d + e] += prob * at(k, r, head, 2, e);
        }
      }
  return ref_linear(context, p.at(prefix + "dense.weight"), nullptr, h, h);  // bias added later
}

inline Act ref_mlp(const RefShape& sh, const RefParams& p, const std::string& prefix,
                   const Act& x) {
  Act u = ref_linear(x, p.at(prefix + "dense_h_to_4h.weight"), &p.at(prefix + "dense_h_to_4h.bias"),
                     sh.h, sh.ffn);
  for (double& v : u) v = ref_gelu(v, sh.tanh_gelu);
  return ref_linear(u, p.at(prefix + "dense_4h_to_h.weight"), nullptr, sh.ffn, sh.h);
}

// residual + dropout(x + bias) at a hidden-dropout site.
inline Act ref_bias_dropout_add(const RefShape& sh, const Act& x, const std::vector<double>& bias,
                                const Act& residual, const RefDropout& drop, int64_t layer,
                                uint64_t site) {
  Act y(x.size());
  for (int64_t pos = 0; pos < sh.s; ++pos)
    for (int64_t r = 0; r < sh.b; ++r)
      for (int64_t c = 0; c < sh.h; ++c) {
        const int64_t i = (pos * sh.b + r) * sh.h + c;
        y[i] = residual[i] + (x[i] + bias[c]) * drop.hidden(layer, site, r, pos, c, sh.h);
      }
  return y;
}

inline Act ref_layer(const RefShape& sh, const RefParams& p, const std::string& name_prefix,
                     int64_t layer, const Act& x, LayerNormOrder order, bool residual_post_ln,
                     bool causal, const std::vector<int>& pad, const RefDropout& drop) {
  const std::string pre = name_prefix + "layers." + std::to_string(layer) + ".";
  auto ln = [&](const std::string& n, const Act& v) {
    return ref_layernorm(v, p.at(pre + n + ".weight"), p.at(pre + n + ".bias"), sh.h, sh.eps);
  };
  const auto& attn_bias = p.at(pre + "self_attention.dense.bias");
  const auto& mlp_bias = p.at(pre + "mlp.dense_4h_to_h.bias");
  if (order == LayerNormOrder::kPreLayerNorm) {
    Act ln1 = ln("input_layernorm", x);
    Act a = ref_attention(sh, p, pre + "self_attention.", layer, ln1, causal, pad, drop);
    Act h1 = ref_bias_dropout_add(sh, a, attn_bias, residual_post_ln ? ln1 : x, drop, layer, 3);
    Act ln2 = ln("post_attention_layernorm", h1);
    Act m = ref_mlp(sh, p, pre + "mlp.", ln2);
    return ref_bias_dropout_add(sh, m, mlp_bias, residual_post_ln ? ln2 : h1, drop, layer, 4);
  }
  Act a = ref_attention(sh, p, pre + "self_attention.", layer, x, causal, pad, drop);
  Act ln1 =
      ln("post_attention_layernorm", ref_bias_dropout_add(sh, a, attn_bias, x, drop, layer, 3));
  Act m = ref_mlp(sh, p, pre + "mlp.", ln1);
  return ln("post_mlp_layernorm", ref_bias_dropout_add(sh, m, mlp_bias, ln1, drop, layer, 4));
}

struct RefGpt {
  RefShape shape;
  int layers = 0;
  int64_t vocab = 0;  // real vocabulary; padded rows of the table are ignored
};

// Full-vocabulary logits [b, s, vocab] of a pre-LN GPT with tied LM head.
inline std::vector<double> ref_gpt_logits(const RefGpt& g, const RefParams& p,
                                          const std::vector<int>& tokens /*[b, s]*/,
                                          const RefDropout& drop) {
  const RefShape& sh = g.shape;
  const auto& wte = p.at("embedding.word_embeddings.weight");
  const auto& wpe = p.at("embedding.position_embeddings.weight");
  Act x(sh.s * sh.b * sh.h);
  for (int64_t pos = 0; pos < sh.s; ++pos)
    for (int64_t r = 0; r < sh.b; ++r)
      for (int64_t c = 0; c < sh.h; ++c)
        x[(pos * sh.b + r) * sh.h + c] =
            (wte[tokens[r * sh.s + pos] * sh.h + c] + wpe[pos * sh.h + c]) *
            drop.hidden(0, 1, r, pos, c, sh.h);
  for (int l = 0; l < g.layers; ++l)
    x = ref_layer(sh, p, "", l, x, LayerNormOrder::kPreLayerNorm, false, true, {}, drop);
  x = ref_layernorm(x, p.at("final_layernorm.weight"), p.at("final_layernorm.bias"), sh.h, sh.eps);
  std::vector<double> logits(sh.b * sh.s * g.vocab);
  for (int64_t r = 0; r < sh.b; ++r)
    for (int64_t pos = 0; pos < sh.s; ++pos)
      for (int64_t v = 0; v < g.vocab; ++v) {
        double acc = 0;
        for (int64_t c = 0; c < sh.h; ++c)
          acc += wte[v * sh.h + c] * x[(pos * sh.b + r) * sh.h + c];
        logits[(r * sh.s + pos) * g.vocab + v] = acc;
      }
  return logits;
}

// Σ(loss·mask)/Σ(mask) over [b, s] tokens.
inline double ref_gpt_loss(const RefGpt& g, const RefParams& p, const std::vector<int>& tokens,
                           const std::vector<int>& labels, const std::vector<float>& mask,
                           const RefDropout& drop) {
  std::vector<double> logits = ref_gpt_logits(g, p, tokens, drop);
  double weighted = 0, total = 0;
  for (size_t t = 0; t < labels.size(); ++t) {
    const double* row = &logits[t * g.vocab];
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < g.vocab; ++v) mx = std::max(mx, row[v]);
    for (int64_t v = 0; v < g.vocab; ++v) sum += std::exp(row[v] - mx);
    weighted += (std::log(sum) + mx - row[labels[t]]) * mask[t];
    total += mask[t];
  }
  return weighted / total;
}

// Central finite difference of f with respect to every element of `v` (modified in place and
// restored).
template <typename F>
std::vector<double> finite_differences(std::vector<double>& v, F&& f, double eps = 1e-6) {
  std::vector<double> grad(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + eps;
    const double up = f();
    v[i] = keep - eps;
    const double down = f();
    v[i] = keep;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}

// ‖a − b‖₂ / ‖b‖₂ (norm-wise relative error; b is the reference).
template <typename A, typename B>
double relative_error(const A& a, const B& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace megatron::test
