// The decoder forward: one mixed batch (prefill chunks + decode tokens) over the paged KV cache,
// a cache-free full recomputation (the reference the cache is checked against), greedy decoding.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "tessera/models/decoder.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_bf16.hpp"
#include "tessera/models/kernels_q8.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::models {

// A decoder's Linear matrices held as Matrix (bf16_weight or q8_matrix): every layer's Q/K/V
// stacked, attention out, gate (empty without one), up and down, and the LM head.
template <class Matrix>
struct decoder_matrices {
  struct layer {
    Matrix qkv, o, gate, up, down;  // qkv: [q_width + 2 kv_width, hidden], Q, K, V rows
    std::vector<float> qkv_bias;    // empty when the layer has no Q/K/V biases
  };
  std::vector<layer> layers;
  Matrix lm_head;
};

// The bf16 copies of a decoder's Linear matrices (decoder_model::set_dtype).
struct bf16_decoder_weights : decoder_matrices<bf16_weight> {};

// One Linear matrix of a q8_0 decoder: Q8_0 blocks, or fp32 [out, in] (a matrix whose `in` is not
// a multiple of 32, or one the file holds in another type) read in place or owned (stacked Q/K/V).
struct q8_matrix {
  q8_0_weight q;
  const float* w = nullptr;
  std::shared_ptr<const std::vector<float>> own;
  int64_t out = 0, in = 0;
  void run(const float* x, int64_t T, const float* b, float* y, activation a = activation::none, int64_t ldx = 0,
           int64_t ldy = 0) const {
    if (!q.empty()) linear(x, T, q, b, y, a, ldx, ldy);
    else linear(x, T, in, w, b, out, y, a, ldx, ldy);
  }
  int64_t bytes() const { return q.empty() ? out * in * 4 : q.bytes(); }
};

// The Linear matrices of decoder_model::set_dtype(q8_0) / adopt_q8_0.
struct q8_decoder_weights : decoder_matrices<q8_matrix> {};

namespace {

activation act_of(activation_kind a) {
  switch (a) {
    case activation_kind::gelu: return activation::gelu_erf;
    case activation_kind::gelu_tanh: return activation::gelu_tanh;
    case activation_kind::relu: return activation::relu;
    case activation_kind::silu: return activation::silu;
  }
  return activation::none;
}

void norm(const model_shape& c, const float* x, int64_t T, const float* w, const float* b, float* y) {
  if (c.norm == norm_kind::rms_norm) rms_norm(x, T, c.hidden_size, w, c.norm_eps, y);
  else layer_norm(x, T, c.hidden_size, w, b, c.norm_eps, y);
}

// Attention of one layer: qkv rows [T, q_width + 2 kv_width] (rotated) -> ctx [T, q_width].
using attention_fn = std::function<void(int layer, float* qkv, int64_t ld, float* ctx)>;

// Per-thread activations, grown as needed and never zeroed: a step allocates nothing large (fresh
// multi-megabyte vectors every step cost their page faults and memset).
// Growth leaves the new buffer uninitialised (every kernel writes before it reads): a zero fill of
// a 768-token batch's buffers took a third of the step.
struct buffer {
  std::unique_ptr<float[]> p;
  int64_t n = 0;
};
struct workspace {
  buffer x, xn, tmp, qkv, ctx, up, gate, cos_t, sin_t, last, logits;
};
struct bf16_buffer {
  std::unique_ptr<bfloat16[]> p;
  int64_t n = 0;
};
bfloat16* grow(bf16_buffer& b, int64_t n) {
  if (b.n < n) {
    b.p.reset(new bfloat16[static_cast<size_t>(n)]);
    b.n = n;
  }
  return b.p.get();
}
float* grow(buffer& b, int64_t n) {
  if (b.n < n) {
    b.p.reset(new float[static_cast<size_t>(n)]);
    b.n = n;
  }
  return b.p.get();
}

// Embeddings, every layer, and the final norm + LM head on `logit_rows` into out [rows][vocab]
// (vectors reused: resized, not reallocated when they already have the room).
void run_decoder(const model_shape& c, const decoder_weights& w, const bf16_decoder_weights* bw,
                 const q8_decoder_weights* q8, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& positions, const std::vector<int32_t>& logit_rows,
                 const attention_fn& attend, std::vector<std::vector<float>>& out) {
  const int64_t T = static_cast<int64_t>(tokens.size()), h = c.hidden_size, f = c.intermediate_size;
  const int64_t qw = c.q_width(), kvw = c.kv_width(), ld = qw + 2 * kvw;
  const int d = c.head_dim();
  thread_local workspace ws;
  thread_local bf16_buffer xb16;
  // y[T, W.out()] = act(x W^T + b) on the bf16 matrix: x's rows (stride ldx) rounded to bf16 once.
  auto linear16 = [&](const float* in, int64_t ldx, const bf16_weight& W, const float* b, float* y, activation a,
                      int64_t ldy) {
    const int64_t k = W.in();
    bfloat16* xb = grow(xb16, T * k);
    for (int64_t t = 0; t < T; ++t) to_bf16(in + t * ldx, k, xb + t * k);
    linear(xb, T, W, b, y, a, 0, ldy);
  };
  float* x = grow(ws.x, T * h);
  float* xn = grow(ws.xn, T * h);
  float* tmp = grow(ws.tmp, T * h);
  float* qkv = grow(ws.qkv, T * ld);
  float* ctx = grow(ws.ctx, T * qw);
  float* up = grow(ws.up, T * f);
  float* gate = c.gated_mlp ? grow(ws.gate, T * f) : nullptr;
  for (int64_t t = 0; t < T; ++t) {
    const float* e = w.token_embedding + int64_t{tokens[t]} * h;
    float* o = x + t * h;
    if (w.position_embedding) {
      const float* p = w.position_embedding + int64_t{positions[t]} * h;
      for (int64_t i = 0; i < h; ++i) o[i] = e[i] + p[i];
    } else {
      std::copy_n(e, h, o);
    }
  }
  const bool rotary = c.positions == position_kind::rotary;
  float* cos_t = rotary ? grow(ws.cos_t, T * d / 2) : nullptr;
  float* sin_t = rotary ? grow(ws.sin_t, T * d / 2) : nullptr;
  if (rotary) {
    rotary_tables(positions.data(), T, d, c.rope(), cos_t, sin_t);
  }
  const activation act = act_of(c.activation);
  for (int l = 0; l < c.num_layers; ++l) {
    const decoder_layer_weights& lw = w.layers[static_cast<size_t>(l)];
    norm(c, x, T, lw.norm1_w, lw.norm1_b, xn);
    if (q8) {  // fp32 activations through the Q8_0 matrices
      const auto& ql = q8->layers[static_cast<size_t>(l)];
      ql.qkv.run(xn, T, ql.qkv_bias.empty() ? nullptr : ql.qkv_bias.data(), qkv, activation::none, h, ld);
      if (rotary) {
        apply_rotary(qkv, T, c.num_heads, d, ld, cos_t, sin_t);
        apply_rotary(qkv + qw, T, c.num_kv_heads, d, ld, cos_t, sin_t);
      }
      attend(l, qkv, ld, ctx);
      ql.o.run(ctx, T, lw.o_b, tmp, activation::none, qw, h);
      add(x, tmp, T * h, x);
      norm(c, x, T, lw.norm2_w, lw.norm2_b, xn);
      if (c.gated_mlp) {
        ql.gate.run(xn, T, nullptr, gate, act, h, f);
        ql.up.run(xn, T, lw.up_b, up, activation::none, h, f);
        multiply(gate, up, T * f, up);
      } else {
        ql.up.run(xn, T, lw.up_b, up, act, h, f);
      }
      ql.down.run(up, T, lw.down_b, tmp, activation::none, f, h);
      add(x, tmp, T * h, x);
      continue;
    }
    if (bw) {
      const auto& bl = bw->layers[static_cast<size_t>(l)];
      linear16(xn, h, bl.qkv, bl.qkv_bias.empty() ? nullptr : bl.qkv_bias.data(), qkv, activation::none, ld);
      if (rotary) {
        apply_rotary(qkv, T, c.num_heads, d, ld, cos_t, sin_t);
        apply_rotary(qkv + qw, T, c.num_kv_heads, d, ld, cos_t, sin_t);
      }
      attend(l, qkv, ld, ctx);
      linear16(ctx, qw, bl.o, lw.o_b, tmp, activation::none, h);
      add(x, tmp, T * h, x);
      norm(c, x, T, lw.norm2_w, lw.norm2_b, xn);
      if (c.gated_mlp) {
        linear16(xn, h, bl.gate, nullptr, gate, act, f);
        linear16(xn, h, bl.up, lw.up_b, up, activation::none, f);
        multiply(gate, up, T * f, up);
      } else {
        linear16(xn, h, bl.up, lw.up_b, up, act, f);
      }
      linear16(up, f, bl.down, lw.down_b, tmp, activation::none, h);
      add(x, tmp, T * h, x);
      continue;
    }
    // GPT-2's c_attn is one [q + 2 kv, hidden] matrix (and bias): one GEMM instead of three.
    const bool fused_qkv = lw.k_w == lw.q_w + qw * h && lw.v_w == lw.k_w + kvw * h &&
                           ((!lw.q_b && !lw.k_b && !lw.v_b) || (lw.k_b == lw.q_b + qw && lw.v_b == lw.k_b + kvw));
    if (fused_qkv) {
      linear(xn, T, h, lw.q_w, lw.q_b, ld, qkv);
    } else {
      linear(xn, T, h, lw.q_w, lw.q_b, qw, qkv, activation::none, h, ld);
      linear(xn, T, h, lw.k_w, lw.k_b, kvw, qkv + qw, activation::none, h, ld);
      linear(xn, T, h, lw.v_w, lw.v_b, kvw, qkv + qw + kvw, activation::none, h, ld);
    }
    if (rotary) {
      apply_rotary(qkv, T, c.num_heads, d, ld, cos_t, sin_t);
      apply_rotary(qkv + qw, T, c.num_kv_heads, d, ld, cos_t, sin_t);
    }
    attend(l, qkv, ld, ctx);
    linear(ctx, T, qw, lw.o_w, lw.o_b, h, tmp);
    add(x, tmp, T * h, x);
    norm(c, x, T, lw.norm2_w, lw.norm2_b, xn);
    if (c.gated_mlp) {
      linear(xn, T, h, lw.gate_w, nullptr, f, gate, act);
      linear(xn, T, h, lw.up_w, lw.up_b, f, up);
      multiply(gate, up, T * f, up);
    } else {
      linear(xn, T, h, lw.up_w, lw.up_b, f, up, act);
    }
    linear(up, T, f, lw.down_w, lw.down_b, h, tmp);
    add(x, tmp, T * h, x);
  }
  const int64_t R = static_cast<int64_t>(logit_rows.size()), V = c.vocab_size;
  float* last = grow(ws.last, R * h);
  float* logits = grow(ws.logits, R * V);
  for (int64_t r = 0; r < R; ++r) std::copy_n(x + int64_t{logit_rows[r]} * h, h, last + r * h);
  norm(c, last, R, w.final_norm_w, w.final_norm_b, last);
  if (q8) {
    q8->lm_head.run(last, R, nullptr, logits);
  } else if (bw) {
    bfloat16* lb = grow(xb16, R * h);
    to_bf16(last, R * h, lb);
    linear(lb, R, bw->lm_head, nullptr, logits);
  } else {
    linear(last, R, h, w.lm_head, nullptr, V, logits);
  }
  out.resize(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) out[static_cast<size_t>(r)].assign(logits + r * V, logits + (r + 1) * V);
}

status check_token(const model_shape& c, int32_t id, const std::string& where) {
  if (id < 0 || id >= c.vocab_size)
    return status::invalid(where + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(c.vocab_size) + ")");
  return {};
}

}  // namespace

status check_step_entry(const seq_step& s, const model_shape& c, const std::string& where) {
  if (s.tokens.empty()) return status::invalid(where + " has no tokens");
  if (s.start_pos < 0) return status::invalid(where + ": negative start_pos " + std::to_string(s.start_pos));
  const int64_t end = int64_t{s.start_pos} + static_cast<int64_t>(s.tokens.size());
  if (end > c.max_position_embeddings)
    return status::invalid(where + ": positions up to " + std::to_string(end - 1) +
                           " reach beyond max_position_embeddings " + std::to_string(c.max_position_embeddings));
  for (int32_t t : s.tokens) TESSERA_RETURN_IF_ERROR(check_token(c, t, where));
  return ok_status();
}

result<std::vector<std::vector<float>>> decoder_model::step(const step_batch& batch, paged_kv_cache& cache) const {
  std::vector<std::vector<float>> logits;
  TESSERA_RETURN_IF_ERROR(step(batch, cache, logits));
  return logits;
}

status decoder_model::step(const step_batch& batch, paged_kv_cache& cache,
                           std::vector<std::vector<float>>& logits) const {
  const model_shape& c = shape_;
  if (cache.num_layers() != c.num_layers || cache.num_kv_heads() != c.num_kv_heads || cache.head_dim() != c.head_dim())
    return status::invalid("the KV cache holds " + std::to_string(cache.num_layers()) + " layers x " +
                           std::to_string(cache.num_kv_heads()) + " kv heads x head_dim " +
                           std::to_string(cache.head_dim()) + " but the model has " + std::to_string(c.num_layers) +
                           " x " + std::to_string(c.num_kv_heads) + " x " + std::to_string(c.head_dim()));
  const int bt = cache.layout().block_tokens, nblocks = cache.layout().num_blocks;
  std::vector<int32_t> tokens, positions, logit_rows;
  std::vector<paged_seq> seqs;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const seq_step& s = batch.seqs[i];
    const std::string where = "sequence " + std::to_string(s.seq_id) + " (batch entry " + std::to_string(i) + ")";
    TESSERA_RETURN_IF_ERROR(check_step_entry(s, c, where));
    const int64_t end = int64_t{s.start_pos} + static_cast<int64_t>(s.tokens.size());
    const int64_t need = (end + bt - 1) / bt;
    if (static_cast<int64_t>(s.block_table.size()) < need)
      return status::invalid(where + ": block table has " + std::to_string(s.block_table.size()) + " blocks of " +
                             std::to_string(bt) + " positions but positions up to " + std::to_string(end - 1) +
                             " need " + std::to_string(need) + " (the KV cache is out of room or the caller did not "
                             "allocate)");
    for (int64_t b = 0; b < need; ++b)
      if (s.block_table[static_cast<size_t>(b)] < 0 || s.block_table[static_cast<size_t>(b)] >= nblocks)
        return status::invalid(where + ": block_table[" + std::to_string(b) + "] = " +
                               std::to_string(s.block_table[static_cast<size_t>(b)]) + " is outside the cache's " +
                               std::to_string(nblocks) + " blocks");
    seqs.push_back({static_cast<int32_t>(tokens.size()), static_cast<int32_t>(s.tokens.size()), s.start_pos,
                    s.block_table.data()});
    for (size_t k = 0; k < s.tokens.size(); ++k) {
      tokens.push_back(s.tokens[k]);
      positions.push_back(s.start_pos + static_cast<int32_t>(k));
    }
    if (s.want_logits) logit_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
  }
  if (tokens.empty()) {
    logits.clear();
    return {};
  }
  const int d = c.head_dim(), kvh = c.num_kv_heads;
  const int64_t qw = c.q_width(), kvw = c.kv_width();
  const int64_t block_stride = int64_t{kvh} * bt * d, head_stride = int64_t{bt} * d;
  auto attend = [&](int layer, float* qkv, int64_t ld, float* ctx) {
    // The new tokens' K and V into their blocks, then attention over the cache.
    float* kbase = cache.key(layer, 0, 0);
    float* vbase = cache.value(layer, 0, 0);
    bfloat16* kbase16 = cache.key16(layer, 0, 0);  // a bf16 cache: rows rounded as they are stored
    bfloat16* vbase16 = cache.value16(layer, 0, 0);
    for (const paged_seq& s : seqs) {
      for (int r = 0; r < s.rows; ++r) {
        const int pos = s.start_pos + r;
        const int64_t off = int64_t{s.block_table[pos / bt]} * block_stride + int64_t{pos % bt} * d;
        const float* row = qkv + int64_t{s.row + r} * ld;
        for (int hh = 0; hh < kvh; ++hh) {
          if (kbase16) {
            to_bf16(row + qw + int64_t{hh} * d, d, kbase16 + off + hh * head_stride);
            to_bf16(row + qw + kvw + int64_t{hh} * d, d, vbase16 + off + hh * head_stride);
          } else {
            std::copy_n(row + qw + int64_t{hh} * d, d, kbase + off + hh * head_stride);
            std::copy_n(row + qw + kvw + int64_t{hh} * d, d, vbase + off + hh * head_stride);
          }
        }
      }
    }
    attention_paged({qkv, ld}, {kbase, vbase, bt, block_stride, head_stride, kbase16, vbase16}, seqs.data(),
                    static_cast<int>(seqs.size()), c.num_heads, kvh, d, {ctx, qw}, c.sliding_window);
  };
  run_decoder(c, w_, bf16_.get(), q8_.get(), tokens, positions, logit_rows, attend, logits);
  return {};
}

result<std::vector<std::vector<float>>> decoder_model::full_logits(const std::vector<int32_t>& tokens) const {
  const model_shape& c = shape_;
  if (tokens.empty()) return status::invalid("full_logits of an empty sequence");
  if (static_cast<int64_t>(tokens.size()) > c.max_position_embeddings)
    return status::invalid(std::to_string(tokens.size()) + " tokens exceed max_position_embeddings " +
                           std::to_string(c.max_position_embeddings));
  for (int32_t t : tokens) TESSERA_RETURN_IF_ERROR(check_token(c, t, "full_logits"));
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> positions(tokens.size()), rows(tokens.size());
  for (int64_t t = 0; t < T; ++t) positions[t] = rows[t] = static_cast<int32_t>(t);
  const int d = c.head_dim(), group = c.num_heads / c.num_kv_heads;
  const int64_t qw = c.q_width(), kvw = c.kv_width();
  // Plain causal attention over contiguous K and V: scores, softmax and the weighted sum in
  // straightforward loops (double accumulation), independent of the paged kernel. A sliding window
  // W leaves position i the keys j > i - W.
  const int64_t W = c.sliding_window;
  auto attend = [&](int, float* qkv, int64_t ld, float* ctx) {
    std::vector<double> p(static_cast<size_t>(T));
    for (int h = 0; h < c.num_heads; ++h) {
      const int64_t kcol = qw + int64_t{h / group} * d, vcol = kcol + kvw;
      for (int64_t i = 0; i < T; ++i) {
        double mx = -INFINITY, sum = 0.0;
        const int64_t j0 = W > 0 ? std::max<int64_t>(0, i - W + 1) : 0;
        for (int64_t j = j0; j <= i; ++j) {
          double s = 0.0;
          for (int k = 0; k < d; ++k) s += double{qkv[i * ld + h * d + k]} * qkv[j * ld + kcol + k];
          p[j] = s / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = j0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int k = 0; k < d; ++k) {
          double o = 0.0;
          for (int64_t j = j0; j <= i; ++j) o += p[j] * qkv[j * ld + vcol + k];
          ctx[i * qw + h * d + k] = static_cast<float>(o / sum);
        }
      }
    }
  };
  std::vector<std::vector<float>> logits;
  run_decoder(c, w_, bf16_.get(), q8_.get(), tokens, positions, rows, attend, logits);
  return logits;
}

status decoder_model::set_dtype(dtype d) {
  if (d == dtype::int8)
    return status::unsupported("--dtype int8 is the BERT encoder's; decoders run fp32, bf16 or q8_0");
  if (q8_only_ && d != dtype::q8_0)
    return status::unsupported(shape_.name + ": this model holds its matrices only as the file's Q8_0 blocks (" +
                               source + "); load it with --dtype " + std::string(dtype_name(d)) +
                               " (dequantised at load) to run " + std::string(dtype_name(d)));
  if (d == dtype::fp32) {
    if (bf16_only_)
      return status::unsupported(shape_.name + ": this model was built straight into bf16 (" + source +
                                 "): it has no fp32 matrices to run in fp32; build it in fp32 instead");
    bf16_.reset();
    q8_.reset();
    return ok_status();
  }
  if (d == dtype::q8_0) {
    if (q8_) return ok_status();
    if (bf16_only_)
      return status::unsupported(shape_.name + ": this model was built straight into bf16 (" + source +
                                 "): it has no fp32 matrices to quantise to Q8_0; build it in fp32 instead");
    TESSERA_RETURN_IF_ERROR(adopt_q8_0({}));
    bf16_.reset();
    return ok_status();
  }
  TESSERA_RETURN_IF_ERROR(check_dtype_supported(d));
  q8_.reset();
  if (bf16_) return ok_status();
  const model_shape& c = shape_;
  const int64_t h = c.hidden_size, f = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
  auto b = std::make_shared<bf16_decoder_weights>();
  std::vector<float> rows;
  for (const decoder_layer_weights& lw : w_.layers) {
    bf16_decoder_weights::layer bl;
    // Q, K and V stacked as one matrix (one GEMM a layer), whether or not the checkpoint fuses them.
    rows.resize(static_cast<size_t>((qw + 2 * kvw) * h));
    std::copy_n(lw.q_w, qw * h, rows.data());
    std::copy_n(lw.k_w, kvw * h, rows.data() + qw * h);
    std::copy_n(lw.v_w, kvw * h, rows.data() + (qw + kvw) * h);
    bl.qkv = bf16_weight::pack(rows.data(), qw + 2 * kvw, h);
    if (lw.q_b || lw.k_b || lw.v_b) {
      bl.qkv_bias.assign(static_cast<size_t>(qw + 2 * kvw), 0.0f);
      if (lw.q_b) std::copy_n(lw.q_b, qw, bl.qkv_bias.data());
      if (lw.k_b) std::copy_n(lw.k_b, kvw, bl.qkv_bias.data() + qw);
      if (lw.v_b) std::copy_n(lw.v_b, kvw, bl.qkv_bias.data() + qw + kvw);
    }
    bl.o = bf16_weight::pack(lw.o_w, h, qw);
    if (lw.gate_w) bl.gate = bf16_weight::pack(lw.gate_w, f, h);
    bl.up = bf16_weight::pack(lw.up_w, f, h);
    bl.down = bf16_weight::pack(lw.down_w, h, f);
    b->layers.push_back(std::move(bl));
  }
  b->lm_head = bf16_weight::pack(w_.lm_head, c.vocab_size, h);
  bf16_ = std::move(b);
  return ok_status();
}

status decoder_model::adopt_q8_0(std::map<std::string, q8_0_weight> blocks) {
  const model_shape& c = shape_;
  const int64_t h = c.hidden_size, f = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
  const bool gpt2 = c.traits().conv1d_weights;
  bool fp32_missing = false;
  std::set<std::string> used;
  // The matrix `name` [out, in]: its given blocks, else its fp32 rows (quantised when in allows).
  auto matrix = [&](const std::string& name, const float* fp32, int64_t out, int64_t in) -> result<q8_matrix> {
    q8_matrix m;
    m.out = out;
    m.in = in;
    if (auto it = blocks.find(name); it != blocks.end()) {
      if (it->second.out() != out || it->second.in() != in)
        return status::invalid(source + ": Q8_0 matrix \"" + name + "\" is [" + std::to_string(it->second.out()) + ", " +
                               std::to_string(it->second.in()) + "], expected [" + std::to_string(out) + ", " +
                               std::to_string(in) + "]");
      used.insert(name);
      m.q = it->second;
      if (!fp32) fp32_missing = true;
      return m;
    }
    if (!fp32) return status::invalid(source + ": matrix \"" + name + "\" has neither fp32 values nor Q8_0 blocks");
    if (in % q8_0_block_values == 0) m.q = q8_0_weight::quantize(fp32, out, in);
    else m.w = fp32;
    return m;
  };
  // Row-stacked parts as one matrix: Q8_0 when every part is, else fp32 (blocks dequantised exactly).
  auto stacked = [](std::vector<q8_matrix> parts) {
    bool all_q = true;
    for (const auto& p : parts) all_q = all_q && !p.q.empty();
    q8_matrix m;
    m.in = parts.front().in;
    for (const auto& p : parts) m.out += p.out;
    if (all_q) {
      std::vector<const q8_0_weight*> qs;
      for (const auto& p : parts) qs.push_back(&p.q);
      m.q = q8_0_weight::stack(qs);
      return m;
    }
    auto rows = std::make_shared<std::vector<float>>(static_cast<size_t>(m.out * m.in));
    float* dst = rows->data();
    for (const auto& p : parts) {
      if (p.q.empty()) std::copy_n(p.w, p.out * p.in, dst);
      else p.q.dequantize_rows(0, p.out, dst);
      dst += p.out * p.in;
    }
    m.w = rows->data();
    m.own = std::move(rows);
    return m;
  };
#define TESSERA_Q8(lhs, expr)      \
  do {                             \
    auto r_ = (expr);              \
    if (!r_) return r_.error();    \
    lhs = std::move(*r_);          \
  } while (0)
  auto q8 = std::make_shared<q8_decoder_weights>();
  for (int l = 0; l < c.num_layers; ++l) {
    const decoder_layer_weights& lw = w_.layers[static_cast<size_t>(l)];
    q8_decoder_weights::layer ql;
    if (gpt2) {
      const std::string pre = "h." + std::to_string(l) + ".";
      TESSERA_Q8(ql.qkv, matrix(pre + "attn.c_attn.weight", lw.q_w, qw + 2 * kvw, h));
      TESSERA_Q8(ql.o, matrix(pre + "attn.c_proj.weight", lw.o_w, h, qw));
      TESSERA_Q8(ql.up, matrix(pre + "mlp.c_fc.weight", lw.up_w, f, h));
      TESSERA_Q8(ql.down, matrix(pre + "mlp.c_proj.weight", lw.down_w, h, f));
    } else {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      std::vector<q8_matrix> parts(3);
      TESSERA_Q8(parts[0], matrix(pre + "self_attn.q_proj.weight", lw.q_w, qw, h));
      TESSERA_Q8(parts[1], matrix(pre + "self_attn.k_proj.weight", lw.k_w, kvw, h));
      TESSERA_Q8(parts[2], matrix(pre + "self_attn.v_proj.weight", lw.v_w, kvw, h));
      ql.qkv = stacked(std::move(parts));
      TESSERA_Q8(ql.o, matrix(pre + "self_attn.o_proj.weight", lw.o_w, h, qw));
      TESSERA_Q8(ql.gate, matrix(pre + "mlp.gate_proj.weight", lw.gate_w, f, h));
      TESSERA_Q8(ql.up, matrix(pre + "mlp.up_proj.weight", lw.up_w, f, h));
      TESSERA_Q8(ql.down, matrix(pre + "mlp.down_proj.weight", lw.down_w, h, f));
    }
    if (lw.q_b || lw.k_b || lw.v_b) {
      ql.qkv_bias.assign(static_cast<size_t>(qw + 2 * kvw), 0.0f);
      if (lw.q_b) std::copy_n(lw.q_b, qw, ql.qkv_bias.data());
      if (lw.k_b) std::copy_n(lw.k_b, kvw, ql.qkv_bias.data() + qw);
      if (lw.v_b) std::copy_n(lw.v_b, kvw, ql.qkv_bias.data() + qw + kvw);
    }
    q8->layers.push_back(std::move(ql));
  }
  const std::string head = !c.tie_word_embeddings ? "lm_head.weight" : gpt2 ? "wte.weight" : "model.embed_tokens.weight";
  TESSERA_Q8(q8->lm_head, matrix(head, w_.lm_head, c.vocab_size, h));
#undef TESSERA_Q8
  for (const auto& [name, b] : blocks)
    if (!used.count(name))
      return status::invalid(source + ": Q8_0 matrix \"" + name + "\" is not a Linear matrix of this " +
                             std::string(c.traits().model_type) + " decoder");
  q8_ = std::move(q8);
  q8_only_ = fp32_missing;
  bf16_.reset();
  return ok_status();
}

int64_t decoder_model::matrix_bytes() const {
  const model_shape& c = shape_;
  if (q8_) {
    int64_t n = q8_->lm_head.bytes();
    for (const auto& l : q8_->layers)
      n += l.qkv.bytes() + l.o.bytes() + (l.gate.out ? l.gate.bytes() : 0) + l.up.bytes() + l.down.bytes();
    return n;
  }
  if (bf16_) {
    int64_t n = bf16_->lm_head.bytes();
    for (const auto& l : bf16_->layers)
      n += l.qkv.bytes() + l.o.bytes() + (l.gate.empty() ? 0 : l.gate.bytes()) + l.up.bytes() + l.down.bytes();
    return n;
  }
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  const int64_t per_layer = (c.q_width() + 2 * c.kv_width()) * h + h * c.q_width() + f * h * (c.gated_mlp ? 3 : 2);
  return 4 * (per_layer * c.num_layers + int64_t{c.vocab_size} * h);
}

result<decoder_model> decoder_model::seeded_bf16(const model_shape& c, uint64_t seed) {
  TESSERA_RETURN_IF_ERROR(c.validate());
  if (!c.is_decoder()) return status::invalid(c.name + " is not a decoder");
  if (c.traits().conv1d_weights)
    return status::unsupported(c.name + ": seeded weights straight into bf16 are for LLaMA-family [out, in] matrices; "
                               "GPT-2's Conv1D weights go through fp32 (make_seeded_decoder + set_dtype)");
  TESSERA_RETURN_IF_ERROR(check_dtype_supported(dtype::bf16));
  auto is_matrix = [](const std::string& n) {
    return n == "lm_head.weight" || (n.size() > 12 && n.compare(n.size() - 12, 12, "_proj.weight") == 0);
  };
  std::vector<tensor_spec> small;
  std::map<std::string, tensor_spec> big;
  for (auto& s : expected_decoder_tensors(c)) {
    if (is_matrix(s.name)) big[s.name] = s;
    else small.push_back(s);
  }
  auto t = make_seeded_tensors(small, seed, fill_decoder_preset_tensor);
  for (const auto& [name, s] : big) t.views[name] = tensor_view{s.shape, nullptr};  // bf16 only, below
  auto bound = bind(c, std::move(t.views), std::move(t.storage), "seeded weights");
  if (!bound) return bound.error();
  decoder_model m = std::move(*bound);
  const int64_t h = c.hidden_size, f = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
  auto b = std::make_shared<bf16_decoder_weights>();
  std::vector<float> rows;  // one matrix (Q, K, V together) at a time
  auto gen = [&](const std::string& name, float* dst) { fill_decoder_preset_tensor(big.at(name), seed, dst); };
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const decoder_layer_weights& lw = m.w_.layers[static_cast<size_t>(l)];
    bf16_decoder_weights::layer bl;
    // As set_dtype: Q, K and V stacked as one matrix, biases stacked when present.
    rows.resize(static_cast<size_t>((qw + 2 * kvw) * h));
    gen(pre + "self_attn.q_proj.weight", rows.data());
    gen(pre + "self_attn.k_proj.weight", rows.data() + qw * h);
    gen(pre + "self_attn.v_proj.weight", rows.data() + (qw + kvw) * h);
    bl.qkv = bf16_weight::pack(rows.data(), qw + 2 * kvw, h);
    if (lw.q_b || lw.k_b || lw.v_b) {
      bl.qkv_bias.assign(static_cast<size_t>(qw + 2 * kvw), 0.0f);
      if (lw.q_b) std::copy_n(lw.q_b, qw, bl.qkv_bias.data());
      if (lw.k_b) std::copy_n(lw.k_b, kvw, bl.qkv_bias.data() + qw);
      if (lw.v_b) std::copy_n(lw.v_b, kvw, bl.qkv_bias.data() + qw + kvw);
    }
    rows.resize(static_cast<size_t>(h * qw));
    gen(pre + "self_attn.o_proj.weight", rows.data());
    bl.o = bf16_weight::pack(rows.data(), h, qw);
    rows.resize(static_cast<size_t>(f * h));
    gen(pre + "mlp.gate_proj.weight", rows.data());
    bl.gate = bf16_weight::pack(rows.data(), f, h);
    gen(pre + "mlp.up_proj.weight", rows.data());
    bl.up = bf16_weight::pack(rows.data(), f, h);
    gen(pre + "mlp.down_proj.weight", rows.data());
    bl.down = bf16_weight::pack(rows.data(), h, f);
    b->layers.push_back(std::move(bl));
  }
  if (c.tie_word_embeddings) {
    b->lm_head = bf16_weight::pack(m.w_.token_embedding, c.vocab_size, h);
  } else {
    rows.resize(static_cast<size_t>(c.vocab_size * h));
    gen("lm_head.weight", rows.data());
    b->lm_head = bf16_weight::pack(rows.data(), c.vocab_size, h);
  }
  rows = {};
  m.bf16_ = std::move(b);
  m.bf16_only_ = true;
  m.source = "seeded weights (bf16):seed=" + std::to_string(seed);
  return m;
}

result<generation> greedy_generate(const decoder_model& model, const std::vector<int32_t>& prompt,
                                   const generate_options& o) {
  const model_shape& c = model.shape();
  if (prompt.empty()) return status::invalid("greedy_generate: the prompt is empty");
  if (o.max_tokens < 0) return status::invalid("max_tokens must be zero or more, got " + std::to_string(o.max_tokens));
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.max_tokens;
  if (total > c.max_position_embeddings)
    return status::invalid("prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                           std::to_string(o.max_tokens) + ") exceed max_position_embeddings " +
                           std::to_string(c.max_position_embeddings));
  if (o.block_tokens < 1) return status::invalid("block_tokens must be positive, got " + std::to_string(o.block_tokens));
  if (o.prefill_chunk < 0)
    return status::invalid("prefill_chunk must be zero (whole prompt) or positive, got " + std::to_string(o.prefill_chunk));
  kv_layout layout{o.block_tokens, 0, o.kv_dtype.value_or(model.default_kv_dtype())};
  layout.num_blocks = std::max(1, layout.blocks_for(total));
  auto cache = paged_kv_cache::make(c, layout);
  if (!cache) return cache.error();
  seq_step s;
  s.seq_id = 0;
  for (int b = 0; b < layout.num_blocks; ++b) s.block_table.push_back(b);
  generation g;
  if (o.max_tokens == 0) return g;
  const size_t chunk = o.prefill_chunk > 0 ? static_cast<size_t>(o.prefill_chunk) : prompt.size();
  std::vector<float> logits;
  for (size_t first = 0; first < prompt.size(); first += chunk) {
    s.start_pos = static_cast<int32_t>(first);
    s.tokens.assign(prompt.begin() + static_cast<int64_t>(first),
                    prompt.begin() + static_cast<int64_t>(std::min(prompt.size(), first + chunk)));
    s.want_logits = first + chunk >= prompt.size();
    auto r = model.step(step_batch{{s}}, *cache);
    if (!r) return r.error();
    if (s.want_logits) logits = std::move(r->front());
  }
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int n = 0; n < o.max_tokens; ++n) {
    int best = 0, second = -1;
    for (int v = 1; v < c.vocab_size; ++v) {
      if (logits[v] > logits[best]) { second = best; best = v; }
      else if (second < 0 || logits[v] > logits[second]) second = v;
    }
    g.tokens.push_back(best);
    g.top2_margin.push_back(second < 0 ? INFINITY : logits[best] - logits[second]);
    if (o.keep_logits) g.logits.push_back(logits);
    if ((o.stop_at_eos && best == c.eos_token_id) || n + 1 == o.max_tokens) break;
    s.tokens = {best};
    s.start_pos = pos++;
    s.want_logits = true;
    auto r = model.step(step_batch{{s}}, *cache);
    if (!r) return r.error();
    logits = std::move(r->front());
  }
  return g;
}

}  // namespace tessera::models
