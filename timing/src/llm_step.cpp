// The LLM step model: a mixed prefill/decode step as GEMM and attention rooflines per layer.
#include "tessera/timing/llm_step.hpp"

#include <algorithm>
#include <filesystem>

#include "tessera/models/decoder_config.hpp"
#include "tessera/timing/llm_system.hpp"

namespace tessera::timing {

int64_t decoder_dims::layer_linear_params() const {
  const int64_t q = heads * head_dim, kv = kv_heads * head_dim;
  return hidden * q + 2 * hidden * kv + q * hidden + (gated ? 3 : 2) * hidden * intermediate;
}

double decoder_dims::weight_bytes() const {
  return (double(layers) * double(layer_linear_params()) + double(lm_head_params())) * element_bytes;
}

result<models::model_shape> resolve_decoder_shape(const std::string& preset_or_path) {
  auto preset = models::shape_preset(preset_or_path);
  if (preset) return preset;
  const bool looks_like_path = preset_or_path.find('/') != std::string::npos || preset_or_path.ends_with(".json") ||
                               std::filesystem::exists(preset_or_path);
  if (!looks_like_path)
    return status::invalid("--model " + preset_or_path + ": not a shape preset (" + preset.error().message() +
                           ") and not a path; pass a preset name or a Hugging Face config.json (or its folder)");
  return models::load_decoder_config(preset_or_path);
}

result<decoder_dims> decoder_dims_of(const models::model_shape& s) {
  if (!s.is_decoder())
    return status::unsupported(s.name + " is an encoder; the LLM step model times decoders (e.g. llama-2-7b, "
                                        "llama-3-8b, gpt2)");
  TESSERA_RETURN_IF_ERROR(s.validate());
  decoder_dims d;
  d.name = s.name;
  d.layers = s.num_layers;
  d.hidden = s.hidden_size;
  d.heads = s.num_heads;
  d.kv_heads = s.num_kv_heads;
  d.head_dim = s.head_dim();
  d.intermediate = s.intermediate_size;
  d.vocab = s.vocab_size;
  d.gated = s.gated_mlp;
  d.tied_embeddings = s.tie_word_embeddings;
  d.window = s.sliding_window;
  return d;
}

namespace {
// Keys attended by queries at positions a-1 .. b-1 (a query at position n-1 sees n keys, at most W).
double keys_attended(double a, double b, double W) {
  if (W <= 0 || b <= W) return (a + b) * (b - a + 1) / 2;
  if (a >= W) return W * (b - a + 1);
  return (a + W) * (W - a + 1) / 2 + W * (b - W);
}
}  // namespace

int64_t llm_step_batch::tokens() const {
  int64_t t = static_cast<int64_t>(decode_contexts.size());
  for (const auto& p : prefills) t += p.tokens;
  return t;
}

int64_t llm_step_batch::logit_rows() const {
  int64_t n = static_cast<int64_t>(decode_contexts.size());
  for (const auto& p : prefills) n += p.logits ? 1 : 0;
  return n;
}

status llm_step_batch::validate() const {
  for (const auto& p : prefills)
    if (p.tokens <= 0 || p.context < 0)
      return status::invalid("a prefill chunk needs tokens > 0 and context >= 0, got tokens " +
                             std::to_string(p.tokens) + ", context " + std::to_string(p.context));
  for (int64_t c : decode_contexts)
    if (c < 0) return status::invalid("a decode context must be >= 0, got " + std::to_string(c));
  if (tokens() == 0) return status::invalid("an empty step (no prefill chunk, no decode)");
  return {};
}

result<llm_step_time> model_llm_step(const llm_system& sys, const decoder_dims& d, const llm_step_batch& b) {
  TESSERA_RETURN_IF_ERROR(b.validate());
  if (!(sys.flops_per_s > 0 && sys.weight_bytes_per_s > 0 && sys.kv_bytes_per_s > 0))
    return status::invalid("system '" + sys.spec + "' has no compute or memory rate; build it with make_llm_system");
  if (sys.collectives_per_layer > 0 && sys.tensor_parallel > 1 && !(sys.collective_bytes_per_s > 0))
    return status::invalid("system '" + sys.spec + "' all-reduces over " + std::to_string(sys.tensor_parallel) +
                           " ranks but has no link bandwidth; build it with make_llm_system");
  const double T = double(b.tokens());
  // Keys each query attends to (causal) and cached keys read from memory.
  // A sliding window W caps both at W keys a query.
  const double W = double(d.window);
  auto capped = [W](double n) { return W > 0 ? std::min(n, W) : n; };
  double attended = 0, kv_read = 0;
  for (int64_t c : b.decode_contexts) attended += capped(double(c) + 1), kv_read += capped(double(c));
  for (const auto& p : b.prefills) {
    const double k = double(p.tokens), c = double(p.context);
    attended += keys_attended(c + 1, c + k, W);
    kv_read += capped(c);
  }
  const double L = double(d.layers), e = d.element_bytes, F = sys.flops_per_s;
  const double P = double(d.layer_linear_params());
  const double gemm_flops = 2 * T * P, gemm_bytes = P * e;
  const double attn_flops = 4.0 * double(d.heads * d.head_dim) * attended;
  const double attn_bytes = d.kv_bytes_per_token_per_layer() * (kv_read + T);  // read cached, write new

  llm_step_time t;
  t.gemm_compute_s = L * gemm_flops / F;
  t.gemm_memory_s = L * gemm_bytes / sys.weight_bytes_per_s;
  t.attn_compute_s = L * attn_flops / F;
  t.attn_memory_s = L * attn_bytes / sys.kv_bytes_per_s;
  t.overhead_s = L * sys.per_layer_overhead_s + sys.per_step_overhead_s;
  const double layers_s = std::max(t.gemm_compute_s, t.gemm_memory_s) + std::max(t.attn_compute_s, t.attn_memory_s);

  const double rows = double(b.logit_rows());
  if (rows > 0) {
    const double head = double(d.lm_head_params());
    t.lm_head_s = std::max(2 * rows * head / F, head * e / sys.weight_bytes_per_s);
  }
  // Activations between chips: a pipeline passes T x hidden values per hop; tensor parallelism
  // all-reduces them (a ring, allreduce_seconds) after attention and after the MLP.
  const double act_bytes = T * double(d.hidden) * d.activation_bytes;
  if (sys.hops > 0) t.link_s += double(sys.hops) * (act_bytes / sys.hop_bytes_per_s + sys.hop_latency_s);
  if (sys.collectives_per_layer > 0 && sys.tensor_parallel > 1)
    t.link_s += L * double(sys.collectives_per_layer) * allreduce_seconds(sys, act_bytes);
  t.flops = L * (gemm_flops + attn_flops) + 2 * rows * double(d.lm_head_params());
  t.bytes = L * (gemm_bytes + attn_bytes) + (rows > 0 ? double(d.lm_head_params()) * e : 0);
  t.seconds = layers_s + t.lm_head_s + t.overhead_s + t.link_s;
  return t;
}

}  // namespace tessera::timing
