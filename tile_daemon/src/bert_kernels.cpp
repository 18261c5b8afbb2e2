// BERT's kernels for tile programs: thin adapters from tile tensors to models/kernels.hpp.
//
// Every kernel works on the rows of one micro-batch (its parameters' micro of micros) of
// the batch being run, so the unused tail of the token budget is never computed.
// Parameters: the kernel's struct in models/kernel_params.hpp.
//   embed             ids, types, word, position, type, gamma, beta -> x            embed_params
//   linear            x, W [out,in], (bias) -> y                      linear_params (activation)
//                     int8: x, W [out,in] i8, scales [2+out], (bias) -> y
//   attention         qkv [B, 3*h*d] -> ctx [B, h*d]                  attention_params
//   bias_residual_ln  partial, bias, x, gamma, beta -> x              bias_residual_ln_params
//   classifier        x, pooler_w, pooler_b, cls_w, cls_b -> logits [max_seqs, labels]   rows_params
//   pool              x -> pooled [max_seqs, hidden] (an embedding model's head)      pool_params
//
// An int8 model's tiles hold its encoder Linear matrices as i8 rows quantized per output channel
// (models/kernels_int8.hpp), each with an f32 scales tensor [2 + out]: the input's static scale,
// the output's (0: fp32 out), then each row's w_scale; linear's inputs are then x, W, scales and
// the bias if any. Its FFN activation is i8 (the FFN-in GEMM's GELU output, requantized there);
// every other tensor is f32 as in an fp32 model. An f32 input is quantized with its scale as it
// goes in.
//
// A bf16 model's tiles hold its matrices (embedding tables, Linear weights) and activations
// (hidden, qkv, context, ffn) as bf16 and everything else as f32: biases, LayerNorm gains, the
// partial sums the exchange reduces (summing in bf16 would round at every tile) and the logits.
// Each kernel follows its tensors' dtypes and refuses a mix it does not compute. A bf16 decoder's
// tiles hold only the matrices in bf16: linear takes fp32 rows and a bf16 W (rows rounded to bf16
// as they go in, fp32 out), as decoder_model::step's bf16 path does.
#include <cmath>
#include <vector>

#include "tessera/models/embedding.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_bf16.hpp"
#include "tessera/models/kernels_int8.hpp"
#include "kernel_util.hpp"
#include "tessera/tile/kernel_registry.hpp"

namespace tessera::tile {
namespace {

using detail::micro_of;
using detail::need_rows;
using exchange::dtype;

bool is_bf16(const tile_tensor& t) { return t.desc.type == dtype::bf16; }
models::bfloat16* bf16_of(const tile_tensor& t) { return reinterpret_cast<models::bfloat16*>(t.data); }

// Every tensor is f32, or all named ones are bf16: what a kernel's bf16 path needs.
status same_dtype(std::initializer_list<const tile_tensor*> ts, dtype want) {
  for (const auto* t : ts)
    if (t->desc.type != want)
      return status::invalid("tensor '" + t->desc.name + "' is " + (is_bf16(*t) ? "bf16" : "f32") + ", this call needs " +
                             (want == dtype::bf16 ? "bf16" : "f32"));
  return ok_status();
}


status embed_kernel(const kernel_args& a) {
  auto p = a.params_as<models::embed_params>();
  if (!p) return p.error();
  auto m = micro_of(a, *p);
  if (!m) return m.error();
  if (m->r1 == m->r0) return ok_status();
  auto& x = *a.outputs[0];
  const int64_t hidden = x.desc.shape.size() == 2 ? x.desc.shape[1] : 0;
  TESSERA_RETURN_IF_ERROR(need_rows(x, m->r1, hidden));
  if (a.inputs[0]->elements() < static_cast<uint64_t>(m->r1)) return status::invalid("token ids shorter than the batch");
  const int64_t rows = m->r1 - m->r0;
  const int32_t* ids = a.inputs[0]->i32() + m->r0;
  const int32_t* types = a.inputs[1]->i32() + m->r0;
  const int seqs = static_cast<int>(m->s1 - m->s0);
  const dtype dt = x.desc.type;
  TESSERA_RETURN_IF_ERROR(same_dtype({&x, a.inputs[2], a.inputs[3], a.inputs[4]}, dt));
  TESSERA_RETURN_IF_ERROR(same_dtype({a.inputs[5], a.inputs[6]}, dtype::f32));
  // Every position row a sequence reads must be in the table (RoBERTa's start at pad + 1).
  const int64_t table_rows = a.inputs[3]->desc.shape.empty() ? 0 : a.inputs[3]->desc.shape[0];
  for (int s = 0; s < seqs; ++s) {
    const int64_t len = m->offsets[static_cast<size_t>(s) + 1] - m->offsets[static_cast<size_t>(s)];
    const int64_t last = p->position_pad_id < 0 ? len - 1 : int64_t{p->position_pad_id} + len;
    if (last >= table_rows)
      return status::invalid("sequence of " + std::to_string(len) + " tokens reads position " + std::to_string(last) +
                             " of a " + std::to_string(table_rows) + "-row position table");
  }
  if (dt == dtype::bf16) {
    std::vector<float> sum(static_cast<size_t>(rows * hidden));
    models::embed(ids, types, m->offsets.data(), seqs, bf16_of(*a.inputs[2]), bf16_of(*a.inputs[3]),
                  bf16_of(*a.inputs[4]), hidden, sum.data(), p->position_pad_id);
    models::layer_norm(sum.data(), rows, hidden, a.inputs[5]->f32(), a.inputs[6]->f32(), p->eps,
                       bf16_of(x) + m->r0 * hidden);
    return ok_status();
  }
  float* out = x.f32() + m->r0 * hidden;
  models::embed(ids, types, m->offsets.data(), seqs, a.inputs[2]->f32(), a.inputs[3]->f32(), a.inputs[4]->f32(),
                hidden, out, p->position_pad_id);
  models::layer_norm(out, rows, hidden, a.inputs[5]->f32(), a.inputs[6]->f32(), p->eps, out);
  return ok_status();
}

bool is_i8(const tile_tensor& t) { return t.desc.type == dtype::i8; }
int8_t* i8_of(const tile_tensor& t) { return reinterpret_cast<int8_t*>(t.data); }

// linear with an i8 W: x (f32 or i8), W, scales [2 + out], (bias) -> y (f32 or i8).
status linear_int8(const kernel_args& a, const models::linear_params& p, const detail::micro_view& m) {
  if (a.inputs.size() < 3) return status::invalid("int8 linear: an int8 W needs its scales tensor (x, W, scales[, bias])");
  const auto& w = *a.inputs[1];
  const auto& sc = *a.inputs[2];
  const int64_t out = w.desc.shape[0], in = w.desc.shape[1];
  const auto& x = *a.inputs[0];
  auto& y = *a.outputs[0];
  TESSERA_RETURN_IF_ERROR(need_rows(x, m.r1, in));
  TESSERA_RETURN_IF_ERROR(need_rows(y, m.r1, out));
  if (sc.desc.type != dtype::f32 || sc.elements() != static_cast<uint64_t>(2 + out))
    return status::invalid("int8 linear: scales tensor '" + sc.desc.name + "' must be f32 [2 + " + std::to_string(out) +
                           "] (input scale, output scale, one per row of W)");
  const float* bias = a.inputs.size() > 3 ? a.inputs[3]->f32() : nullptr;
  if (bias && (a.inputs[3]->desc.type != dtype::f32 || a.inputs[3]->elements() != static_cast<uint64_t>(out)))
    return status::invalid("int8 linear: bias must be f32 of out values");
  if (is_bf16(x) || is_bf16(y)) return status::invalid("int8 linear: x and y are f32 or int8, not bf16");
  const float x_scale = sc.f32()[0], y_scale = sc.f32()[1];
  auto positive = [](float v) { return v > 0 && std::isfinite(v); };
  if (!positive(x_scale) || (is_i8(y) && !positive(y_scale)))
    return status::invalid("int8 linear: scales tensor '" + sc.desc.name + "' holds input scale " +
                           std::to_string(x_scale) + " and output scale " + std::to_string(y_scale) +
                           " (an int8 output needs one > 0)");
  if (m.r1 == m.r0 || out == 0) return ok_status();
  const int64_t rows = m.r1 - m.r0;
  if (in == 0) {
    // A lane that holds no heads or columns contributes only the bias (or nothing) to the sum.
    std::vector<float> fill(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) fill[static_cast<size_t>(r * out + j)] = bias ? bias[j] : 0.f;
    if (is_i8(y)) models::quantize(fill.data(), rows, out, y_scale, i8_of(y) + m.r0 * out);
    else std::copy(fill.begin(), fill.end(), y.f32() + m.r0 * out);
    return ok_status();
  }
  const int8_t* xq = nullptr;
  thread_local std::vector<int8_t> quantized;
  if (is_i8(x)) {
    xq = i8_of(x) + m.r0 * in;
  } else {
    quantized.resize(static_cast<size_t>(rows * in));
    models::quantize(x.f32() + m.r0 * in, rows, in, x_scale, quantized.data());
    xq = quantized.data();
  }
  const auto W = models::int8_weight::view(i8_of(w), sc.f32() + 2, out, in);
  if (is_i8(y)) models::linear(xq, rows, x_scale, W, bias, y_scale, i8_of(y) + m.r0 * out, p.act);
  else models::linear(xq, rows, x_scale, W, bias, y.f32() + m.r0 * out, p.act);
  return ok_status();
}

status linear_kernel(const kernel_args& a) {
  auto p = a.params_as<models::linear_params>();
  if (!p) return p.error();
  auto m = micro_of(a, *p);
  if (!m) return m.error();
  const auto& w = *a.inputs[1];
  if (w.desc.shape.size() != 2) return status::invalid("weight must be [out, in]");
  if (is_i8(w)) return linear_int8(a, *p, *m);
  if (a.inputs.size() > 3)
    return status::invalid("linear takes x, W and a bias (a scales tensor only beside an int8 W)");
  if (is_i8(*a.inputs[0]) || is_i8(*a.outputs[0])) return status::invalid("int8 activations need an int8 W");
  const int64_t out = w.desc.shape[0], in = w.desc.shape[1];
  TESSERA_RETURN_IF_ERROR(need_rows(*a.inputs[0], m->r1, in));
  TESSERA_RETURN_IF_ERROR(need_rows(*a.outputs[0], m->r1, out));
  const float* bias = a.inputs.size() > 2 ? a.inputs[2]->f32() : nullptr;
  if (bias && a.inputs[2]->elements() != static_cast<uint64_t>(out)) return status::invalid("bias length differs from out");
  const auto& x = *a.inputs[0];
  auto& y = *a.outputs[0];
  // A decoder's bf16 matrix under fp32 activations: x's rows rounded to bf16 once, fp32 out.
  const bool mixed = !is_bf16(x) && is_bf16(w);
  if (mixed) TESSERA_RETURN_IF_ERROR(same_dtype({&y}, dtype::f32));
  else if (is_bf16(x) || is_bf16(w)) TESSERA_RETURN_IF_ERROR(same_dtype({&x, &w}, dtype::bf16));
  if (bias) TESSERA_RETURN_IF_ERROR(same_dtype({a.inputs[2]}, dtype::f32));
  if (m->r1 == m->r0 || out == 0) return ok_status();
  const int64_t rows = m->r1 - m->r0;
  if (in == 0) {
    // A lane that holds no heads or columns contributes only the bias (or nothing) to the sum.
    std::vector<float> fill(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) fill[static_cast<size_t>(r * out + j)] = bias ? bias[j] : 0.f;
    if (is_bf16(y)) models::to_bf16(fill.data(), rows * out, bf16_of(y) + m->r0 * out);
    else std::copy(fill.begin(), fill.end(), y.f32() + m->r0 * out);
    return ok_status();
  }
  const models::activation act = p->act;
  if (mixed) {
    thread_local std::vector<models::bfloat16> xs;
    xs.resize(static_cast<size_t>(rows * in));
    models::to_bf16(x.f32() + m->r0 * in, rows * in, xs.data());
    models::linear(xs.data(), rows, models::bf16_weight::view(bf16_of(w), out, in), bias, y.f32() + m->r0 * out, act);
    return ok_status();
  }
  if (is_bf16(x)) {
    const auto W = models::bf16_weight::view(bf16_of(w), out, in);
    const models::bfloat16* xs = bf16_of(x) + m->r0 * in;
    if (is_bf16(y)) models::linear(xs, rows, W, bias, bf16_of(y) + m->r0 * out, act);
    else models::linear(xs, rows, W, bias, y.f32() + m->r0 * out, act);  // partial sums stay f32
    return ok_status();
  }
  TESSERA_RETURN_IF_ERROR(same_dtype({&y}, dtype::f32));
  models::linear(x.f32() + m->r0 * in, rows, in, w.f32(), bias, out, y.f32() + m->r0 * out, act);
  return ok_status();
}

status attention_kernel(const kernel_args& a) {
  auto p = a.params_as<models::attention_params>();
  if (!p) return p.error();
  auto m = micro_of(a, *p);
  if (!m) return m.error();
  const int heads = static_cast<int>(p->heads), head_dim = static_cast<int>(p->head_dim);
  const int64_t width = int64_t{heads} * head_dim;
  TESSERA_RETURN_IF_ERROR(need_rows(*a.inputs[0], m->r1, 3 * width));
  TESSERA_RETURN_IF_ERROR(need_rows(*a.outputs[0], m->r1, width));
  if (m->r1 == m->r0 || heads == 0) return ok_status();
  TESSERA_RETURN_IF_ERROR(same_dtype({a.inputs[0], a.outputs[0]}, a.inputs[0]->desc.type));
  if (is_bf16(*a.inputs[0])) {
    const models::bfloat16* qkv = bf16_of(*a.inputs[0]) + m->r0 * 3 * width;
    models::attention_packed(models::bf16_strided{qkv, 3 * width}, models::bf16_strided{qkv + width, 3 * width},
                             models::bf16_strided{qkv + 2 * width, 3 * width}, m->offsets.data(),
                             static_cast<int>(m->s1 - m->s0), heads, head_dim,
                             models::bf16_strided_out{bf16_of(*a.outputs[0]) + m->r0 * width, width});
    return ok_status();
  }
  const float* qkv = a.inputs[0]->f32() + m->r0 * 3 * width;
  models::attention_packed({qkv, 3 * width}, {qkv + width, 3 * width}, {qkv + 2 * width, 3 * width}, m->offsets.data(),
                           static_cast<int>(m->s1 - m->s0), heads, head_dim,
                           {a.outputs[0]->f32() + m->r0 * width, width});
  return ok_status();
}

status bias_residual_ln_kernel(const kernel_args& a) {
  auto prm = a.params_as<models::bias_residual_ln_params>();
  if (!prm) return prm.error();
  auto m = micro_of(a, *prm);
  if (!m) return m.error();
  auto part = exchange::token_partition(m->r1 - m->r0, prm->part, prm->parts);
  const int64_t r0 = m->r0 + part.begin, rows = part.end - part.begin;
  auto& partial = *a.inputs[0];
  auto& x = *a.outputs[0];
  const int64_t hidden = x.desc.shape.size() == 2 ? x.desc.shape[1] : 0;
  TESSERA_RETURN_IF_ERROR(need_rows(partial, m->r1, hidden));
  TESSERA_RETURN_IF_ERROR(need_rows(x, m->r1, hidden));
  if (rows == 0) return ok_status();
  TESSERA_RETURN_IF_ERROR(same_dtype({&partial, a.inputs[1], a.inputs[3], a.inputs[4]}, dtype::f32));
  for (int i : {1, 3, 4})
    if (a.inputs[static_cast<size_t>(i)]->elements() != static_cast<uint64_t>(hidden))
      return status::invalid("bias_residual_ln: bias, gamma and beta must hold hidden values");
  // Bias, residual and LayerNorm in one pass over the rows (partial is left as it arrived).
  const float* p = partial.f32() + r0 * hidden;
  const float* bias = a.inputs[1]->f32();
  if (is_bf16(x)) {
    models::bfloat16* xr = bf16_of(x) + r0 * hidden;
    models::add_layer_norm(p, xr, rows, hidden, a.inputs[3]->f32(), a.inputs[4]->f32(), prm->eps, xr, bias);
    return ok_status();
  }
  float* xr = x.f32() + r0 * hidden;
  models::add_layer_norm(p, xr, rows, hidden, a.inputs[3]->f32(), a.inputs[4]->f32(), prm->eps, xr, bias);
  return ok_status();
}

status classifier_kernel(const kernel_args& a) {
  auto p = a.params_as<models::rows_params>();
  if (!p) return p.error();
  auto m = micro_of(a, *p);
  if (!m) return m.error();
  auto& x = *a.inputs[0];
  auto& logits = *a.outputs[0];
  const int64_t hidden = x.desc.shape.size() == 2 ? x.desc.shape[1] : 0;
  const int labels = logits.desc.shape.size() == 2 ? static_cast<int>(logits.desc.shape[1]) : 0;
  if (logits.desc.shape.size() != 2 || logits.desc.shape[0] < m->s1)
    return status::invalid("logits tensor holds fewer sequences than the batch (" + std::to_string(m->s1) + ")");
  if (m->s1 == m->s0) return ok_status();
  std::vector<int32_t> cls;
  for (int64_t s = m->s0; s < m->s1; ++s) cls.push_back(a.ctx.seq_offsets[static_cast<size_t>(s)]);
  TESSERA_RETURN_IF_ERROR(same_dtype({a.inputs[2], a.inputs[4], &logits}, dtype::f32));
  TESSERA_RETURN_IF_ERROR(same_dtype({a.inputs[1], a.inputs[3]}, x.desc.type));
  if (is_bf16(x)) {
    models::pooler_classifier(bf16_of(x), hidden, cls.data(), static_cast<int>(cls.size()),
                              models::bf16_weight::view(bf16_of(*a.inputs[1]), hidden, hidden), a.inputs[2]->f32(),
                              models::bf16_weight::view(bf16_of(*a.inputs[3]), labels, hidden), a.inputs[4]->f32(),
                              logits.f32() + m->s0 * labels);
    return ok_status();
  }
  models::pooler_classifier(x.f32(), hidden, cls.data(), static_cast<int>(cls.size()), hidden, a.inputs[1]->f32(),
                            a.inputs[2]->f32(), a.inputs[3]->f32(), a.inputs[4]->f32(), labels,
                            logits.f32() + m->s0 * labels);
  return ok_status();
}

// An embedding model's head: each sequence's pooled vector (pool_params: the micro-batch and a
// models::pooling_mode), so only [seqs, hidden] floats leave the tile, not every token's row.
status pool_kernel(const kernel_args& a) {
  auto p = a.params_as<models::pool_params>();
  if (!p) return p.error();
  auto m = micro_of(a, *p);
  if (!m) return m.error();
  auto& x = *a.inputs[0];
  auto& pooled = *a.outputs[0];
  const int64_t hidden = x.desc.shape.size() == 2 ? x.desc.shape[1] : 0;
  TESSERA_RETURN_IF_ERROR(need_rows(x, m->r1, hidden));
  if (pooled.desc.shape.size() != 2 || pooled.desc.shape[1] != hidden || pooled.desc.shape[0] < m->s1)
    return status::invalid("pooled tensor is not [>= " + std::to_string(m->s1) + ", " + std::to_string(hidden) + "]");
  TESSERA_RETURN_IF_ERROR(same_dtype({&pooled}, dtype::f32));
  if (m->s1 == m->s0) return ok_status();
  const int seqs = static_cast<int>(m->s1 - m->s0);
  std::vector<int32_t> starts(static_cast<size_t>(seqs)), lengths(static_cast<size_t>(seqs));
  for (int i = 0; i < seqs; ++i) {
    starts[static_cast<size_t>(i)] = m->offsets[static_cast<size_t>(i)];
    lengths[static_cast<size_t>(i)] = m->offsets[static_cast<size_t>(i) + 1] - m->offsets[static_cast<size_t>(i)];
  }
  const int64_t rows = m->r1 - m->r0;
  std::vector<float> converted;
  const float* xr = nullptr;
  if (is_bf16(x)) {
    converted.resize(static_cast<size_t>(rows * hidden));
    models::to_float(bf16_of(x) + m->r0 * hidden, rows * hidden, converted.data());
    xr = converted.data();
  } else {
    xr = x.f32() + m->r0 * hidden;
  }
  models::pool_rows(xr, hidden, hidden, starts.data(), lengths.data(), seqs,
                    p->mode, pooled.f32() + m->s0 * hidden);
  return ok_status();
}

}  // namespace

void register_bert_kernels(kernel_registry& reg) {
  reg.add(models::kernel_id::embed, {7, 7, 1, 1, true}, embed_kernel);
  reg.add(models::kernel_id::linear, {2, 4, 1, 1, true, true}, linear_kernel);
  reg.add(models::kernel_id::attention, {1, 1, 1, 1, true}, attention_kernel);
  reg.add(models::kernel_id::bias_residual_ln, {5, 5, 1, 1, true}, bias_residual_ln_kernel);
  reg.add(models::kernel_id::classifier, {5, 5, 1, 1, true}, classifier_kernel);
  reg.add(models::kernel_id::pool, {1, 1, 1, 1, true}, pool_kernel);
}

}  // namespace tessera::tile
