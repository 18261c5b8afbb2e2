// tessera/models/decoder.hpp: GPT-2 and LLaMA-family causal decoders, single process.
//
// A decoder_model is a model_shape (gpt2 or llama) and its weights, from a Hugging Face folder
// (config.json + model.safetensors or model.safetensors.index.json shards; F32/F16/BF16) or a
// preset with seeded weights. step() runs one MIXED batch over a paged KV cache: prefill chunks
// of some sequences and single decode tokens of others, each at its own positions, packed
// without padding; attention is causal and only within a sequence.
//
//   auto m = tessera::models::load_decoder("llama-tiny");      // or an HF folder
//   kv_layout layout{16, 64};
//   auto cache = paged_kv_cache::make(m->shape(), layout);
//   step_batch b;
//   b.seqs.push_back({/*seq_id=*/7, /*tokens=*/{1, 42, 99}, /*start_pos=*/0, /*block_table=*/{0}});
//   auto logits = m->step(b, *cache);                         // logits[0]: [vocab] of token 99
//   auto g = greedy_generate(*m, {1, 42, 99}, {.max_tokens = 32});
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/bf16.hpp"
#include "tessera/models/decoder_config.hpp"
#include "tessera/models/huge_pages.hpp"
#include "tessera/models/kernels_q8.hpp"
#include "tessera/models/kv_cache.hpp"
#include "tessera/models/shape.hpp"
#include "tessera/models/token_sampling.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::models {

/// One decoder layer's weights in the kernels' layout: Linear weights [out, in] row-major, biases
/// [out] or nullptr (LLaMA has none), norm beta nullptr for RMSNorm, gate_w nullptr unless gated.
struct decoder_layer_weights {
  const float *norm1_w = nullptr, *norm1_b = nullptr;
  const float *q_w = nullptr, *q_b = nullptr;  ///< [q_width, hidden]
  const float *k_w = nullptr, *k_b = nullptr;  ///< [kv_width, hidden]
  const float *v_w = nullptr, *v_b = nullptr;  ///< [kv_width, hidden]
  const float *o_w = nullptr, *o_b = nullptr;  ///< [hidden, q_width]
  const float *norm2_w = nullptr, *norm2_b = nullptr;
  const float* gate_w = nullptr;               ///< [intermediate, hidden] (gated MLP only)
  const float *up_w = nullptr, *up_b = nullptr;      ///< [intermediate, hidden]
  const float *down_w = nullptr, *down_b = nullptr;  ///< [hidden, intermediate]
};

struct decoder_weights {
  const float* token_embedding = nullptr;     ///< [vocab, hidden]
  const float* position_embedding = nullptr;  ///< [max_positions, hidden] (learned positions only)
  std::vector<decoder_layer_weights> layers;
  const float *final_norm_w = nullptr, *final_norm_b = nullptr;
  const float* lm_head = nullptr;             ///< [vocab, hidden] (== token_embedding when tied)
};

/// Every tensor a decoder of this shape has in its Hugging Face checkpoint, HF names and shapes
/// (GPT2LMHeadModel without the "transformer." prefix and Conv1D weights [in, out];
/// LlamaForCausalLM with "model."), in HF order. A tied LM head is not listed.
std::vector<tensor_spec> expected_decoder_tensors(const model_shape& shape);

/// One sequence's part of a step: `tokens` at positions start_pos .. start_pos + tokens.size() - 1
/// (a prefill chunk, or one decode token). K/V of positions < start_pos are in the cache already;
/// block_table[i] holds positions [i*block_tokens, (i+1)*block_tokens) and must cover every
/// position up to the last new one.
struct seq_step {
  uint64_t seq_id = 0;
  std::vector<int32_t> tokens;
  int32_t start_pos = 0;
  std::vector<int32_t> block_table;
  bool want_logits = true;
  /// With want_logits: a backend that samples where the LM head is (llm_backend_info::samples)
  /// answers this row's token and log-probabilities in place of its logits; others ignore it.
  std::optional<sample_params> sample;
};

/// The checks of one step entry that need only the shape (decoder_model::step and the tile
/// decoder make them alike): tokens present, each id in the vocabulary, start_pos >= 0, positions
/// within max_position_embeddings. `where` starts the message ("sequence 7 (batch entry 0)").
status check_step_entry(const seq_step& s, const model_shape& shape, const std::string& where);

/// A mixed batch: prefill chunks and decode tokens together, in any order.
struct step_batch {
  std::vector<seq_step> seqs;
  int64_t num_tokens() const;
};

class decoder_model {
 public:
  decoder_model() = default;

  /// Binds HF-named tensors (names with or without "transformer." for GPT-2) to a decoder
  /// shape: every expected tensor present with its exact shape (errors name `source`, the
  /// tensor and the expected shape), extras ignored. GPT-2's Conv1D weights are transposed into
  /// the kernels' [out, in] layout. `storage` keeps the data alive.
  static result<decoder_model> bind(const model_shape& shape, std::map<std::string, tensor_view> tensors,
                                    std::shared_ptr<const void> storage, std::string_view source);

  const model_shape& shape() const { return shape_; }
  const decoder_weights& weights() const { return w_; }
  /// The tensor of that HF name (as in expected_decoder_tensors), or nullptr.
  const tensor_view* find(std::string_view hf_name) const;
  std::string source;  ///< folder path or "preset:<name>:seed=<n>"

  /// Runs one mixed batch: writes the new tokens' K/V into `cache` and returns logits [vocab] of
  /// the last new token of every sequence with want_logits, in batch order. Errors (nothing is
  /// written to the cache then) for an empty sequence, a token id out of range, a negative
  /// start_pos, a position at or beyond max_position_embeddings, a block table too short for the
  /// positions or naming a block outside the cache, or a cache of another shape.
  result<std::vector<std::vector<float>>> step(const step_batch& batch, paged_kv_cache& cache) const;
  /// The same, into `logits` (resized to the rows that want logits, each to vocab_size): a loop
  /// that passes the same vectors every step allocates nothing for them (a fresh 4 MB of logits a
  /// step at batch 32, 32000 vocab, cost llama-tiny's decode more than its layers: page faults as
  /// malloc handed the heap's top back to the kernel and took it again).
  status step(const step_batch& batch, paged_kv_cache& cache, std::vector<std::vector<float>>& logits) const;

  /// Logits [tokens.size()][vocab] of every position of one sequence from scratch, without a
  /// cache (plain causal attention over the whole sequence): the reference the cached paths are
  /// checked against.
  result<std::vector<std::vector<float>>> full_logits(const std::vector<int32_t>& tokens) const;
  /// The forward's dtype. bf16: every Linear matrix (Q/K/V fused, O, MLP, the LM head) converted
  /// once to bf16 and run on oneDNN's bf16 matmul with fp32 accumulation; GEMM inputs are rounded
  /// to bf16, the residual stream, norms, rotary, attention (softmax included) and logits stay fp32;
  /// embedding rows are read from the fp32 tables. step() and full_logits() both follow it. Error
  /// (`unsupported`, nothing changed) when this CPU has no native bf16. fp32 drops the copies.
  /// q8_0: every Linear matrix whose `in` is a multiple of 32 quantised once to GGUF Q8_0 blocks
  /// (quantize_q8_0; Q, K and V stacked) and run by the Q8_0 kernel (kernels_q8.hpp: blocks
  /// dequantised in the kernel, fp32 activations, accumulation, norms, attention and logits; the KV
  /// cache stays fp32); other matrices stay fp32. A model loaded with its file's Q8_0 blocks
  /// (load_gguf_decoder(path, dtype::q8_0)) is in q8_0 already. int8 is refused (the encoder's).
  status set_dtype(dtype d);
  dtype compute_dtype() const { return q8_ ? dtype::q8_0 : bf16_ ? dtype::bf16 : dtype::fp32; }
  /// The KV cache element type that goes with the dtype: bf16 for bf16, fp32 otherwise (q8_0 too).
  dtype default_kv_dtype() const { return bf16_ ? dtype::bf16 : dtype::fp32; }
  /// False for a model built straight into bf16 (make_seeded_decoder(shape, seed, dtype::bf16)) or
  /// loaded with its file's Q8_0 blocks: its Linear matrices exist only as the bf16 copies or the
  /// blocks, so set_dtype(fp32), save_decoder, write_gguf and find()'s matrix views (data nullptr)
  /// have nothing to read and refuse or say so.
  bool holds_fp32_matrices() const { return !bf16_only_ && !q8_only_; }
  /// Bytes of the Linear matrices the forward reads in the current dtype (Q8_0 blocks with their
  /// scales, bf16 copies, or fp32; the LM head included, the embedding table not).
  int64_t matrix_bytes() const;
  /// Runs q8_0 with these Q8_0 matrices (HF names as expected_decoder_tensors gives them, the LM
  /// head of a tied model under the token embedding's name; values [out, in] in the kernels'
  /// layout, GPT-2's c_attn as one [q + 2 kv, hidden] matrix) and, for the other matrices, the fp32
  /// ones quantised (in a multiple of 32) or kept fp32. A matrix whose fp32 data is absent
  /// (tensor_view data nullptr: the GGUF reader keeps blocks without dequantising them) must be
  /// among `blocks`; the model then holds no fp32 matrices. Errors name the matrix.
  status adopt_q8_0(std::map<std::string, q8_0_weight> blocks);
  /// Seeded weights (fill_decoder_preset_tensor) of a LLaMA-family shape generated one matrix at a
  /// time and packed into bf16 at once: the process holds 2 bytes a matrix weight (plus the fp32
  /// embedding and norms), never the fp32 model. Logits equal make_seeded_decoder + set_dtype(bf16)
  /// bit for bit. GPT-2 (Conv1D layouts) is refused by name. Use make_seeded_decoder(..., bf16).
  static result<decoder_model> seeded_bf16(const model_shape& shape, uint64_t seed);

 private:
  model_shape shape_;
  decoder_weights w_;
  std::shared_ptr<const void> storage_;
  // GPT-2 Conv1D weights in [out, in], on huge pages (streamed once a decode step)
  std::shared_ptr<std::vector<float, huge_page_allocator<float>>> transposed_;
  std::map<std::string, tensor_view, std::less<>> tensors_;
  std::shared_ptr<const struct bf16_decoder_weights> bf16_;  // set_dtype(bf16)
  bool bf16_only_ = false;  // seeded_bf16: no fp32 matrices
  std::shared_ptr<const struct q8_decoder_weights> q8_;  // set_dtype(q8_0), adopt_q8_0
  bool q8_only_ = false;    // adopt_q8_0 of a file's blocks without their fp32 values
};
/// How far bf16 decoder logits may be from fp32's: max |diff| <= this x max(1, max |fp32 logit|)
/// (docs/models.md, "bf16 decoders": 1.7x the worst measured on the seeded tiny decoders of every
/// family, whose logits are small next to their hidden states; a model of another seed is 10x off).
inline constexpr double bf16_decoder_logit_bound = 0.1;
/// Greedy agreement with the fp32 reference holds up to the first near-tie: a step whose fp32
/// top-2 logit gap is below twice the bound (bf16_decoder_logit_bound x max(1, max |fp32 logit|)
/// each way), where either token is within bf16's error.
inline double bf16_decoder_near_tie(double max_abs_fp32_logit, double bound = bf16_decoder_logit_bound) {
  return 2 * bound * (max_abs_fp32_logit > 1 ? max_abs_fp32_logit : 1.0);
}
/// The same with the KV cache in bf16 too (the model's bf16 default: greedy_generate, tiles):
/// bf16 matrices alone reach 0.105 at one teacher-forced llama-tiny step, a bf16 cache alone 0.048,
/// the two 0.174 (docs/models.md, "bf16 paged KV cache"); an fp32-weight model over a bf16 cache
/// stays within bf16_decoder_logit_bound.
inline constexpr double bf16_kv_decoder_logit_bound = 0.25;
/// How far q8_0 decoder logits may be from the fp32 run of the same weights dequantised (a GGUF file
/// loaded with dtype::fp32, or the dequantised matrices): max |diff| <= this x max(1, max |fp32
/// logit|). The Q8_0 kernel multiplies the very fp32 weights a dequantised load holds; only the
/// order of fp32 sums differs (none for 4..48 rows), so the logits differ by fp32 rounding carried
/// through the layers (docs/models.md, "Q8_0 weights": measured <= 3.9e-6 at batch-1 decode steps, 0 for
/// prefills and batched steps, on the test models).
inline constexpr double q8_0_decoder_logit_bound = 1e-4;

/// A decoder preset (gpt2-tiny, gpt2, gpt2-medium, llama-tiny, llama-1b; llama-2-7b and
/// llama-3-8b are shapes for timing) with seeded weights, bit-identical on every machine and
/// scaled so that greedy generations vary. Refuses, naming the bytes needed and available, a
/// preset whose fp32 weights do not fit in this machine's available memory.
result<decoder_model> make_preset_decoder(std::string_view preset, uint64_t seed = 0);
/// Seeded weights (fill_decoder_preset_tensor) for any decoder shape, e.g. from a config.json;
/// the same memory refusal as make_preset_decoder.
result<decoder_model> make_seeded_decoder(const model_shape& shape, uint64_t seed = 0);
/// The same weights in `d`: fp32 as above; bf16 built straight into bf16 for LLaMA-family shapes
/// (decoder_model::seeded_bf16: llama-2-7b in 13.5 GB instead of 27 GB of fp32 + 13.5 GB of
/// copies), GPT-2 through fp32 + set_dtype. The memory refusal counts the bytes the dtype keeps.
result<decoder_model> make_seeded_decoder(const model_shape& shape, uint64_t seed, dtype d);
/// make_preset_decoder in `d` (make_seeded_decoder(shape, seed, d); q8_0: fp32, then set_dtype).
result<decoder_model> make_preset_decoder(std::string_view preset, uint64_t seed, dtype d);
/// Seeded weights for the shape of a config.json file (its file name names the shape); errors name
/// the file (unreadable, or the field parse_decoder_config_json refuses).
result<decoder_model> make_decoder_from_config(const std::string& config_path, uint64_t seed = 0);

// parse_decoder_config_json, decoder_config_json, load_decoder_config: decoder_config.hpp.

/// Loads a Hugging Face folder (config.json + model.safetensors, or model.safetensors.index.json
/// and its shards) or a preset by name. Errors name the file, the tensor and the expected shape.
result<decoder_model> load_decoder(std::string_view path_or_preset, uint64_t preset_seed = 0);
/// The same in dtype `d`: a GGUF file through load_gguf_decoder(path, d) (q8_0 keeps the file's
/// Q8_0 blocks, never dequantising them), a preset through make_preset_decoder(name, seed, d),
/// a folder loaded then set_dtype(d).
result<decoder_model> load_decoder(std::string_view path_or_preset, uint64_t preset_seed, dtype d);
/// Writes config.json + model.safetensors (fp32, HF names and layouts, "transformer." prefixed
/// for GPT-2, Conv1D [in, out]): what Hugging Face transformers and the golden script load.
status save_decoder(const decoder_model& model, const std::string& dir);

struct generate_options {
  int max_tokens = 16;        ///< new tokens to generate
  bool stop_at_eos = false;   ///< stop after generating the shape's eos_token_id
  int block_tokens = 16;      ///< cache block size
  int prefill_chunk = 0;      ///< prefill in chunks of this many tokens (0 = the whole prompt at once)
  bool keep_logits = false;   ///< keep every step's logits in generation::logits (vocab floats a token)
  std::optional<dtype> kv_dtype;  ///< the KV cache's element type (unset: the model's default_kv_dtype())
};

struct generation {
  std::vector<int32_t> tokens;       ///< generated tokens (the prompt not included)
  std::vector<float> top2_margin;    ///< per generated token: best logit minus the second best
  std::vector<std::vector<float>> logits;  ///< per generated token: its logits (with keep_logits)
};

/// Greedy decoding of one prompt through step() and a cache of its own.
result<generation> greedy_generate(const decoder_model& model, const std::vector<int32_t>& prompt,
                                   const generate_options& options = {});

}  // namespace tessera::models
