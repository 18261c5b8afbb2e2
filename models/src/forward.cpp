// The single-process reference forward (packed) and the padded GPU-style forward.
#include "tessera/models/forward.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include "tessera/common/check.hpp"
#include "tessera/models/bf16_weights.hpp"
#include "tessera/models/int8_weights.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/op_profile.hpp"
#include "forward_internal.hpp"

namespace tessera::models {
namespace {

thread_local forward_profile* profile = nullptr;
thread_local int8_ranges* int8_observer = nullptr;

// Calibration (int8_weights.hpp): max |x| of layer l's GEMM input at `site`, when observing.
void observe(int l, int8_site site, const float* x, int64_t T, int64_t n) {
  if (!int8_observer || l >= static_cast<int>(int8_observer->abs_max.size())) return;
  float& m = int8_observer->abs_max[static_cast<size_t>(l)][static_cast<size_t>(site)];
  m = std::max(m, abs_max(x, T, n));
}

double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs f, adding its wall time and `flops` to op in the calling thread's profile (if any).
template <class F>
void timed(forward_op op, double flops, F&& f) {
  forward_profile* p = profile;
  if (!p) return f();
  const double t0 = clock_seconds();
  f();
  p->secs[static_cast<size_t>(op)] += clock_seconds() - t0;
  p->flops[static_cast<size_t>(op)] += flops;
}

// The whole forward's wall time (the ops' sum falls short of it by what lies between them).
struct forward_clock {
  forward_profile* p = profile;
  double t0 = p ? clock_seconds() : 0;
  ~forward_clock() {
    if (!p) return;
    p->forward_secs += clock_seconds() - t0;
    ++p->forwards;
  }
};

activation act_of(const bert_config& c) {
  switch (c.activation) {
    case activation_kind::gelu: return activation::gelu_erf;
    case activation_kind::gelu_tanh: return activation::gelu_tanh;
    case activation_kind::relu: return activation::relu;
    case activation_kind::silu: return activation::silu;
  }
  return activation::gelu_erf;
}

// Activation buffers between the encoder's kernels, kept per thread at their largest and never
// zeroed (every kernel writes its rows before the next reads them): a fresh std::vector per
// forward was zero-filled by page faults, 10% of the packed forward's wall time on bert-base at
// batch 32 (perf: memset + exc_page_fault; the profile's "between ops"). A thread holds its largest
// batch's buffers (bert-base, 5.8k tokens: 88 MB fp32) until it exits.
template <class T>
class workspace {
 public:
  T* get(size_t n) {
    if (n > size_) {
      buf_.reset();
      buf_.reset(new T[n]);
      size_ = n;
    }
    return buf_.get();
  }

 private:
  std::unique_ptr<T[]> buf_;
  size_t size_ = 0;
};

using attention_fn = std::function<void(const float* qkv, int64_t ld, float* ctx)>;

// Embeddings + all layers over T rows; seq_offsets delimit position restarts. Returns [T, hidden].
std::vector<float> run_encoder(const bert_model& m, const int32_t* ids, const int32_t* types,
                               const int32_t* seq_offsets, int num_rows_groups, int64_t T,
                               const attention_fn& attend) {
  const bert_config& c = m.config;
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  const auto& e = m.weights.embeddings();
  std::vector<float> x(static_cast<size_t>(T * h));
  thread_local workspace<float> ws;
  float* const base = ws.get(static_cast<size_t>(T * (5 * h + f)));
  float *const qkv = base, *const ctx = qkv + T * 3 * h, *const tmp = ctx + T * h, *const ffn = tmp + T * h;
  const double hh = 2.0 * T * h * h, hf = 2.0 * T * h * f;
  timed(forward_op::embed, 0, [&] {
    embed(ids, types, seq_offsets, num_rows_groups, e.word, e.position, e.token_type, h, x.data(),
          c.position_pad_id());
    layer_norm(x.data(), T, h, e.ln_gamma, e.ln_beta, c.norm_eps, x.data());
  });
  const activation act = act_of(c);
  for (int l = 0; l < c.num_layers; ++l) {
    const layer_weights& w = m.weights.layer(l);
    observe(l, int8_site::qkv_in, x.data(), T, h);
    timed(forward_op::qkv_gemm, 3 * hh, [&] {
      linear(x.data(), T, h, w.query_w, w.query_b, h, qkv, activation::none, h, 3 * h);
      linear(x.data(), T, h, w.key_w, w.key_b, h, qkv + h, activation::none, h, 3 * h);
      linear(x.data(), T, h, w.value_w, w.value_b, h, qkv + 2 * h, activation::none, h, 3 * h);
    });
    timed(forward_op::attention, 0, [&] { attend(qkv, 3 * h, ctx); });
    observe(l, int8_site::context, ctx, T, h);
    timed(forward_op::attn_out_gemm, hh,
          [&] { linear(ctx, T, h, w.attn_out_w, w.attn_out_b, h, tmp); });
    timed(forward_op::attn_add_norm, 0, [&] {
      add_layer_norm(tmp, x.data(), T, h, w.attn_ln_gamma, w.attn_ln_beta, c.norm_eps, x.data());
    });
    observe(l, int8_site::ffn_in, x.data(), T, h);
    timed(forward_op::ffn_in_gemm, hf, [&] { linear(x.data(), T, h, w.ffn_in_w, w.ffn_in_b, f, ffn, act); });
    observe(l, int8_site::ffn_act, ffn, T, f);
    timed(forward_op::ffn_out_gemm, hf,
          [&] { linear(ffn, T, f, w.ffn_out_w, w.ffn_out_b, h, tmp); });
    timed(forward_op::ffn_add_norm, 0, [&] {
      add_layer_norm(tmp, x.data(), T, h, w.out_ln_gamma, w.out_ln_beta, c.norm_eps, x.data());
    });
  }
  return x;
}

// The encoder with int8 Linear layers (int8_weights.hpp) over T rows: the residual stream,
// attention and LayerNorm in fp32 as run_encoder; each GEMM input quantized with its layer's static
// scale (the FFN-in GEMM writes its GELU output as int8 directly). Returns [T, hidden] fp32.
std::vector<float> run_encoder_int8(const bert_model& m, const int32_t* ids, const int32_t* types,
                                    const int32_t* seq_offsets, int num_rows_groups, int64_t T,
                                    const attention_fn& attend) {
  const bert_config& c = m.config;
  const int8_bert_weights& w = *m.int8;
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  const auto& e = m.weights.embeddings();
  std::vector<float> x(static_cast<size_t>(T * h));
  thread_local workspace<float> ws;
  thread_local workspace<int8_t> ws8;
  float* const base = ws.get(static_cast<size_t>(T * 5 * h));
  float *const qkv = base, *const ctx = qkv + T * 3 * h, *const tmp = ctx + T * h;
  int8_t* const base8 = ws8.get(static_cast<size_t>(T * (2 * h + f)));
  int8_t *const xq = base8, *const ctxq = xq + T * h, *const ffnq = ctxq + T * h;
  const double hh = 2.0 * T * h * h, hf = 2.0 * T * h * f;
  timed(forward_op::embed, 0, [&] {
    embed(ids, types, seq_offsets, num_rows_groups, e.word, e.position, e.token_type, h, x.data(),
          c.position_pad_id());
    layer_norm(x.data(), T, h, e.ln_gamma, e.ln_beta, c.norm_eps, x.data());
  });
  const activation act = act_of(c);
  using enum int8_site;
  auto scale = [](const int8_layer_weights& lw, int8_site s) { return lw.x_scale[static_cast<size_t>(s)]; };
  for (int l = 0; l < c.num_layers; ++l) {
    const int8_layer_weights& lw = w.layers[static_cast<size_t>(l)];
    const layer_weights& fw = m.weights.layer(l);
    timed(forward_op::qkv_gemm, 3 * hh, [&] {
      quantize(x.data(), T, h, scale(lw, qkv_in), xq);
      linear(xq, T, scale(lw, qkv_in), lw.qkv, lw.qkv_bias.data(), qkv);
    });
    timed(forward_op::attention, 0, [&] { attend(qkv, 3 * h, ctx); });
    timed(forward_op::attn_out_gemm, hh, [&] {
      quantize(ctx, T, h, scale(lw, context), ctxq);
      linear(ctxq, T, scale(lw, context), lw.attn_out, fw.attn_out_b, tmp);
    });
    timed(forward_op::attn_add_norm, 0, [&] {
      add_layer_norm(tmp, x.data(), T, h, fw.attn_ln_gamma, fw.attn_ln_beta, c.norm_eps, x.data());
    });
    timed(forward_op::ffn_in_gemm, hf, [&] {
      quantize(x.data(), T, h, scale(lw, ffn_in), xq);
      linear(xq, T, scale(lw, ffn_in), lw.ffn_in, fw.ffn_in_b, scale(lw, ffn_act), ffnq, act);
    });
    timed(forward_op::ffn_out_gemm, hf,
          [&] { linear(ffnq, T, scale(lw, ffn_act), lw.ffn_out, fw.ffn_out_b, tmp); });
    timed(forward_op::ffn_add_norm, 0, [&] {
      add_layer_norm(tmp, x.data(), T, h, fw.out_ln_gamma, fw.out_ln_beta, c.norm_eps, x.data());
    });
  }
  return x;
}

// The fp32-activation encoder of m's dtype (fp32 or int8).
std::vector<float> run_encoder_f32(const bert_model& m, const int32_t* ids, const int32_t* types,
                                   const int32_t* seq_offsets, int num_rows_groups, int64_t T,
                                   const attention_fn& attend) {
  if (m.compute == dtype::int8) return run_encoder_int8(m, ids, types, seq_offsets, num_rows_groups, T, attend);
  return run_encoder(m, ids, types, seq_offsets, num_rows_groups, T, attend);
}

void check_batch(const bert_model& m, const packed_batch& b) {
  const status st = validate_batch(m.config, b);
  TESSERA_CHECK(st.ok()) << "forward on an invalid batch (call validate_batch first): " << st.to_string();
  TESSERA_CHECK(m.compute != dtype::bf16 || m.bf16) << "a bf16 model without bf16 weights (use set_dtype)";
  TESSERA_CHECK(m.compute != dtype::int8 || m.int8) << "an int8 model without int8 weights (use set_dtype)";
}

// Logits need a classification head: an embedding model has none (reference_embed pools instead).
void check_head(const bert_model& m) {
  TESSERA_CHECK(m.config.num_labels > 0 && m.weights.head().classifier_w)
      << m.source << ": logits of a model without a classification head (an embedding model: use reference_embed)";
}

using attention_bf16_fn = std::function<void(const bfloat16* qkv, int64_t ld, bfloat16* ctx)>;

// The encoder in bf16 over T rows (packed sequences, or a padded rectangle with its attention):
// activations between kernels are bf16 [T, *] rows, every kernel accumulates in fp32. Returns the
// final hidden states [T, hidden] as bf16.
std::vector<bfloat16> run_encoder_bf16(const bert_model& m, const int32_t* ids, const int32_t* types,
                                       const int32_t* seq_offsets, int num_row_groups, int64_t T,
                                       const attention_bf16_fn& attend) {
  const bert_config& c = m.config;
  const bf16_bert_weights& w = *m.bf16;
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  std::vector<bfloat16> x(static_cast<size_t>(T * h));
  thread_local workspace<bfloat16> ws;
  bfloat16* const base = ws.get(static_cast<size_t>(T * (5 * h + f)));
  bfloat16 *const qkv = base, *const ctx = qkv + T * 3 * h, *const tmp = ctx + T * h, *const ffn = tmp + T * h;
  timed(forward_op::embed, 0, [&] {
    std::vector<float> e(static_cast<size_t>(T * h));
    embed(ids, types, seq_offsets, num_row_groups, w.word.data(), w.position.data(), w.token_type.data(), h,
          e.data(), c.position_pad_id());
    const auto& ew = m.weights.embeddings();
    layer_norm(e.data(), T, h, ew.ln_gamma, ew.ln_beta, c.norm_eps, x.data());
  });
  const activation act = act_of(c);
  const double hh = 2.0 * T * h * h, hf = 2.0 * T * h * f;
  for (int l = 0; l < c.num_layers; ++l) {
    const bf16_layer_weights& lw = w.layers[static_cast<size_t>(l)];
    const layer_weights& fw = m.weights.layer(l);
    timed(forward_op::qkv_gemm, 3 * hh, [&] { linear(x.data(), T, lw.qkv, lw.qkv_bias.data(), qkv); });
    timed(forward_op::attention, 0, [&] { attend(qkv, 3 * h, ctx); });
    timed(forward_op::attn_out_gemm, hh, [&] { linear(ctx, T, lw.attn_out, fw.attn_out_b, tmp); });
    timed(forward_op::attn_add_norm, 0, [&] {
      add_layer_norm(tmp, x.data(), T, h, fw.attn_ln_gamma, fw.attn_ln_beta, c.norm_eps, x.data());
    });
    timed(forward_op::ffn_in_gemm, hf, [&] { linear(x.data(), T, lw.ffn_in, fw.ffn_in_b, ffn, act); });
    timed(forward_op::ffn_out_gemm, hf, [&] { linear(ffn, T, lw.ffn_out, fw.ffn_out_b, tmp); });
    timed(forward_op::ffn_add_norm, 0, [&] {
      add_layer_norm(tmp, x.data(), T, h, fw.out_ln_gamma, fw.out_ln_beta, c.norm_eps, x.data());
    });
  }
  return x;
}

// The packed encoder in bf16.
std::vector<bfloat16> run_encoder_bf16(const bert_model& m, const packed_batch& b) {
  const bert_config& c = m.config;
  const int64_t h = c.hidden_size;
  const int n = b.num_seqs();
  const int32_t* offsets = b.seq_offsets.data();
  return run_encoder_bf16(m, b.token_ids.data(), b.token_type_ids.data(), offsets, n, b.num_tokens(),
                          [&](const bfloat16* qkv, int64_t ld, bfloat16* ctx) {
                            attention_packed(bf16_strided{qkv, ld}, bf16_strided{qkv + h, ld},
                                             bf16_strided{qkv + 2 * h, ld}, offsets, n, c.num_heads, c.head_dim(),
                                             bf16_strided_out{ctx, h});
                          });
}

}  // namespace

void set_forward_profile(forward_profile* p) { profile = p; }
void detail::set_int8_observer(int8_ranges* r) { int8_observer = r; }
forward_profile* current_forward_profile() { return profile; }

const char* op_name(forward_op op) {
  switch (op) {
    case forward_op::embed: return "embed+norm";
    case forward_op::qkv_gemm: return "qkv_gemm";
    case forward_op::attention: return "attention";
    case forward_op::attn_out_gemm: return "attn_out_gemm";
    case forward_op::attn_add_norm: return "attn_add+norm";
    case forward_op::ffn_in_gemm: return "ffn_in_gemm+gelu";
    case forward_op::ffn_out_gemm: return "ffn_out_gemm";
    case forward_op::ffn_add_norm: return "ffn_add+norm";
    case forward_op::head: return "pooler+classifier";
    case forward_op::count: break;
  }
  return "?";
}

const char* part_name(attention_part part) {
  switch (part) {
    case attention_part::copy_in: return "attn.copy_in";
    case attention_part::scores_gemm: return "attn.scores_gemm";
    case attention_part::softmax: return "attn.scale+softmax";
    case attention_part::context_gemm: return "attn.context_gemm";
    case attention_part::copy_out: return "attn.copy_out";
    case attention_part::count: break;
  }
  return "?";
}

std::vector<float> reference_encoder(const bert_model& m, const packed_batch& b) {
  check_batch(m, b);
  if (m.compute == dtype::bf16) {
    const std::vector<bfloat16> x = run_encoder_bf16(m, b);
    std::vector<float> out(x.size());
    to_float(x.data(), static_cast<int64_t>(x.size()), out.data());
    return out;
  }
  const int64_t h = m.config.hidden_size;
  const int num_heads = m.config.num_heads, head_dim = m.config.head_dim();
  const int32_t* offsets = b.seq_offsets.data();
  const int n = b.num_seqs();
  return run_encoder_f32(m, b.token_ids.data(), b.token_type_ids.data(), offsets, n, b.num_tokens(),
                         [&](const float* qkv, int64_t ld, float* ctx) {
                           attention_packed({qkv, ld}, {qkv + h, ld}, {qkv + 2 * h, ld}, offsets, n, num_heads,
                                            head_dim, {ctx, h});
                         });
}

std::vector<float> reference_forward(const bert_model& m, const packed_batch& b) {
  check_head(m);
  const forward_clock clock;
  std::vector<float> logits(static_cast<size_t>(b.num_seqs()) * m.config.num_labels);
  const auto& hw = m.weights.head();
  const double h = m.config.hidden_size;
  const double head_flops = 2.0 * b.num_seqs() * h * (h + m.config.num_labels);
  if (m.compute == dtype::bf16) {
    check_batch(m, b);
    const std::vector<bfloat16> x = run_encoder_bf16(m, b);
    timed(forward_op::head, head_flops, [&] {
      pooler_classifier(x.data(), m.config.hidden_size, b.seq_offsets.data(), b.num_seqs(), m.bf16->pooler,
                        hw.pooler_b, m.bf16->classifier, hw.classifier_b, logits.data());
    });
    return logits;
  }
  const std::vector<float> x = reference_encoder(m, b);
  timed(forward_op::head, head_flops, [&] {
    pooler_classifier(x.data(), m.config.hidden_size, b.seq_offsets.data(), b.num_seqs(), m.config.hidden_size,
                      hw.pooler_w, hw.pooler_b, hw.classifier_w, hw.classifier_b, m.config.num_labels,
                      logits.data());
  });
  return logits;
}

namespace detail {

void for_each_padded_chunk(const bert_model& m, const packed_batch& b, int batch_size,
                           const std::function<void(const padded_chunk&)>& sink) {
  check_batch(m, b);
  const bert_config& c = m.config;
  const int64_t h = c.hidden_size;
  const int n = b.num_seqs();
  if (batch_size <= 0) batch_size = std::max(n, 1);
  for (int first = 0; first < n; first += batch_size) {
    const int count = std::min(batch_size, n - first);
    int max_len = 0;
    for (int s = first; s < first + count; ++s) max_len = std::max(max_len, b.seq_len(s));
    const int64_t T = int64_t{count} * max_len;
    // Padding rows hold the pad token ([PAD] 0, RoBERTa's <pad> 1), type 0; every row of the
    // rectangle is computed.
    std::vector<int32_t> ids(static_cast<size_t>(T), c.pad_token_id), types(static_cast<size_t>(T), 0), lengths, rows, offsets;
    for (int i = 0; i < count; ++i) {
      const int s = first + i, len = b.seq_len(s);
      std::copy_n(b.token_ids.begin() + b.seq_offsets[s], len, ids.begin() + int64_t{i} * max_len);
      std::copy_n(b.token_type_ids.begin() + b.seq_offsets[s], len, types.begin() + int64_t{i} * max_len);
      lengths.push_back(len);
      rows.push_back(i * max_len);
      offsets.push_back(i * max_len);
    }
    offsets.push_back(static_cast<int32_t>(T));
    padded_chunk chunk{.first = first, .count = count, .max_len = max_len, .num_rows = T,
                       .row_starts = rows.data(), .lengths = lengths.data()};
    if (m.compute == dtype::bf16) {
      const auto x = run_encoder_bf16(m, ids.data(), types.data(), offsets.data(), count, T,
                                      [&](const bfloat16* qkv, int64_t ld, bfloat16* ctx) {
                                        attention_padded(bf16_strided{qkv, ld}, bf16_strided{qkv + h, ld},
                                                         bf16_strided{qkv + 2 * h, ld}, lengths.data(), count, max_len,
                                                         c.num_heads, c.head_dim(), bf16_strided_out{ctx, h});
                                      });
      chunk.hidden_bf16 = x.data();
      sink(chunk);
      continue;
    }
    const auto x = run_encoder_f32(m, ids.data(), types.data(), offsets.data(), count, T,
                                   [&](const float* qkv, int64_t ld, float* ctx) {
                                     attention_padded({qkv, ld}, {qkv + h, ld}, {qkv + 2 * h, ld}, lengths.data(),
                                                      count, max_len, c.num_heads, c.head_dim(), {ctx, h});
                                   });
    chunk.hidden = x.data();
    sink(chunk);
  }
}

}  // namespace detail

std::vector<float> padded_forward(const bert_model& m, const packed_batch& b, int batch_size) {
  check_head(m);
  const bert_config& c = m.config;
  const int64_t h = c.hidden_size;
  const auto& hw = m.weights.head();
  std::vector<float> logits(static_cast<size_t>(b.num_seqs()) * c.num_labels);
  detail::for_each_padded_chunk(m, b, batch_size, [&](const detail::padded_chunk& k) {
    float* out = logits.data() + int64_t{k.first} * c.num_labels;
    if (k.hidden_bf16)
      pooler_classifier(k.hidden_bf16, h, k.row_starts, k.count, m.bf16->pooler, hw.pooler_b, m.bf16->classifier,
                        hw.classifier_b, out);
    else
      pooler_classifier(k.hidden, h, k.row_starts, k.count, h, hw.pooler_w, hw.pooler_b, hw.classifier_w,
                        hw.classifier_b, c.num_labels, out);
  });
  return logits;
}

double linear_flops(const bert_config& c, int64_t tokens) {
  const double h = c.hidden_size, f = c.intermediate_size;
  return 2.0 * static_cast<double>(tokens) * c.num_layers * (4 * h * h + 2 * h * f);
}

double forward_flops(const bert_config& c, const std::vector<int>& lengths) {
  const double h = c.hidden_size;
  double total = 0;
  for (int L : lengths)
    total += linear_flops(c, L) + c.num_layers * 4.0 * L * L * h + 2.0 * h * h + 2.0 * h * c.num_labels;
  return total;
}

}  // namespace tessera::models
