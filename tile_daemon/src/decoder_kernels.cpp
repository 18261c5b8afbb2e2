// Decoder kernels for tile programs (GPT-2, LLaMA): thin adapters from tile tensors to
// models/kernels.hpp, the functions decoder_model::step runs, on the tile's layers and heads.
// Every kernel works on the rows of one micro-batch (its parameters' micro of micros); the
// parameters are the kernel's struct in models/kernel_params.hpp.
// The step metadata (models/step_meta.hpp; placement.hpp tensor_ids::step_meta) gives each
// sequence's start position, whether it wants logits, and its block table: it travels with every step.
//   dec_embed      ids, meta, token_embedding, (position_embedding) -> x
//   dec_norm       x, w, (b) -> y                               dec_norm_params (RMSNorm or LayerNorm, eps)
//   dec_attention  q, k, v, meta, kv_keys, kv_values -> ctx     dec_attention_params (layer, heads, RoPE, window)
//   dec_residual   partial, x, (bias) -> x                      dec_residual_params (rows this lane owns)
//   dec_reduce     partial_0 .. partial_{W-1}, x, (bias) -> x   dec_reduce_params (lanes W: an all-reduce's
//                  sum of the lanes' partial sums in lane order, + bias, + x, on every row of the micro-batch)
//   dec_multiply   a, b -> b (b = a * b)                        rows_params
//   dec_logits     x, meta, lm_head, norm_w, (norm_b) -> logits [max_seqs, vocab], last_rows [max_seqs, hidden]
//                                                               dec_logits_params (the final norm; head:
//                                                               false on a split head's out tile)
//   dec_sample     logits, meta, sample_params -> samples [max_seqs, kSampleRecord]
//                                                               every logits row of the step whose
//                  sample tensor row asks: adjusted, sampled and scored (models/token_sampling.hpp)
// A vocab-parallel LM head (plan V > 1): each slice tile holds LM-head rows [begin, begin + n).
//   dec_head       last_rows (normed: the out tile's dec_logits without its head, sent to the other
//                  slices), meta, lm_head slice -> logits [max_seqs, n]   (every slice at once)
//   dec_sample_part logits, meta, sample_params -> sample_parts (one kSliceRecord a row)
//                                                               dec_slice_params (slice, begin, vocab)
//   dec_sample_merge sample_parts [slices, max_seqs, kSliceRecord], meta, sample_params -> samples
//                  (models::merge_slice_records: the unsplit row's token and log-probabilities)
// Async scheduling (compile_decoder's feed_tokens): a step's input ids may come from the previous
// step's samples, so the host sends step t+1 before step t's ids are back.
//   dec_next_ids   samples, meta, sample_params -> next_ids [max_seqs] (the out tile, after
//                  sampling: row r's token, -1 for a row not sampled; sent on to the stage-0 tiles)
//   dec_feed       token_ids, next_ids -> token_ids (stage 0, before dec_embed): an id -(j + 1)
//                  is replaced by next_ids[j], the token the previous step sampled in its row j
// A bf16 decoder's tiles hold the KV cache (kv_keys, kv_values) and the LM head in bf16: K/V rows
// are rounded as they are stored and read back into fp32; the linear kernel takes its bf16
// matrices. Activations, norms, softmax and logits stay fp32.
#include <algorithm>
#include <vector>

#include "kernel_util.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_bf16.hpp"
#include "tessera/models/step_meta.hpp"
#include "tessera/models/token_sampling.hpp"
#include "tessera/tile/kernel_registry.hpp"

namespace tessera::tile {
namespace {

using detail::micro_of;
using detail::need_rows;

/// The step metadata tensor of this batch (models/step_meta.hpp), checked.
result<models::step_meta_view> meta_of(const kernel_args& a, const tile_tensor& t) {
  auto m = models::step_meta_view::parse({t.i32(), static_cast<size_t>(t.elements())},
                                         static_cast<int64_t>(a.ctx.seq_lengths.size()));
  if (!m) return m.error().with_context("tensor '" + t.desc.name + "'");
  return m;
}

// The kernels that take a bf16 tensor (the KV cache, the LM head) keep every other one f32.
status all_f32(std::initializer_list<const tile_tensor*> ts, const char* kernel) {
  for (const auto* t : ts)
    if (t->desc.type != exchange::dtype::f32 && t->desc.type != exchange::dtype::i32)
      return status::unsupported(std::string(kernel) + ": tensor '" + t->desc.name + "' must be f32");
  return ok_status();
}

status dec_embed(const kernel_args& a) {
  auto prm = a.params_as<models::rows_params>();
  if (!prm) return prm.error();
  auto mv = micro_of(a, *prm);
  if (!mv) return mv.error();
  auto meta = meta_of(a, *a.inputs[1]);
  if (!meta) return meta.error();
  const auto& word = *a.inputs[2];
  auto& x = *a.outputs[0];
  const int64_t hidden = word.desc.shape.size() == 2 ? word.desc.shape[1] : 0, vocab = word.desc.shape[0];
  TESSERA_RETURN_IF_ERROR(need_rows(x, mv->r1, hidden));
  if (a.inputs[0]->elements() < static_cast<uint64_t>(mv->r1)) return status::invalid("token ids shorter than the batch");
  const float* pos = a.inputs.size() > 3 ? a.inputs[3]->f32() : nullptr;
  const int64_t max_pos = a.inputs.size() > 3 ? a.inputs[3]->desc.shape[0] : INT64_MAX;
  const int32_t* ids = a.inputs[0]->i32();
  for (int64_t s = mv->s0; s < mv->s1; ++s) {
    const int64_t r0 = a.ctx.seq_offsets[static_cast<size_t>(s)], r1 = a.ctx.seq_offsets[static_cast<size_t>(s) + 1];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = meta->start(s) + (r - r0);
      if (ids[r] < 0 || ids[r] >= vocab)
        return status::invalid("token id " + std::to_string(ids[r]) + " is outside the vocabulary [0, " +
                               std::to_string(vocab) + ")");
      if (p >= max_pos) return status::invalid("position " + std::to_string(p) + " is beyond the position table");
      const float* e = word.f32() + int64_t{ids[r]} * hidden;
      float* o = x.f32() + r * hidden;
      if (pos) {
        const float* pe = pos + p * hidden;
        for (int64_t i = 0; i < hidden; ++i) o[i] = e[i] + pe[i];
      } else {
        std::copy_n(e, hidden, o);
      }
    }
  }
  return ok_status();
}

status dec_norm(const kernel_args& a) {
  auto prm = a.params_as<models::dec_norm_params>();
  if (!prm) return prm.error();
  auto mv = micro_of(a, *prm);
  if (!mv) return mv.error();
  const int64_t hidden = a.inputs[1]->elements();
  TESSERA_RETURN_IF_ERROR(need_rows(*a.inputs[0], mv->r1, hidden));
  TESSERA_RETURN_IF_ERROR(need_rows(*a.outputs[0], mv->r1, hidden));
  const int64_t rows = mv->r1 - mv->r0;
  if (rows == 0) return ok_status();
  const float* x = a.inputs[0]->f32() + mv->r0 * hidden;
  float* y = a.outputs[0]->f32() + mv->r0 * hidden;
  if (prm->rms) {
    models::rms_norm(x, rows, hidden, a.inputs[1]->f32(), prm->eps, y);
  } else {
    if (a.inputs.size() < 3) return status::invalid("dec_norm: LayerNorm needs a bias");
    models::layer_norm(x, rows, hidden, a.inputs[1]->f32(), a.inputs[2]->f32(), prm->eps, y);
  }
  return ok_status();
}

status dec_attention(const kernel_args& a) {
  auto prm = a.params_as<models::dec_attention_params>();
  if (!prm) return prm.error();
  auto mv = micro_of(a, *prm);
  if (!mv) return mv.error();
  if (prm->layer > INT32_MAX || prm->q1 > INT32_MAX || prm->k1 > INT32_MAX || prm->head_dim > INT32_MAX ||
      prm->group > INT32_MAX || prm->window > INT32_MAX)
    return status::invalid("dec_attention: a parameter is out of range");
  const int layer = static_cast<int>(prm->layer), q0 = static_cast<int>(prm->q0), q1 = static_cast<int>(prm->q1),
            k0 = static_cast<int>(prm->k0), k1 = static_cast<int>(prm->k1), d = static_cast<int>(prm->head_dim),
            group = static_cast<int>(prm->group);
  const bool rotary = prm->rotary;
  const int64_t window = prm->window;
  const int nq = q1 - q0, nk = k1 - k0;
  if (nq <= 0 || nk <= 0 || d <= 0 || group <= 0 || q0 / group < k0 || (q1 - 1) / group >= k1)
    return status::invalid("dec_attention: query heads [" + std::to_string(q0) + ", " + std::to_string(q1) +
                           ") do not read within kv heads [" + std::to_string(k0) + ", " + std::to_string(k1) + ")");
  auto meta = meta_of(a, *a.inputs[3]);
  if (!meta) return meta.error();
  auto &q = *a.inputs[0], &k = *a.inputs[1], &v = *a.inputs[2], &keys = *a.inputs[4], &values = *a.inputs[5];
  TESSERA_RETURN_IF_ERROR(all_f32({&q, &k, &v, a.outputs[0]}, "dec_attention"));
  const int64_t ldq = int64_t{nq} * d, ldk = int64_t{nk} * d;
  TESSERA_RETURN_IF_ERROR(need_rows(q, mv->r1, ldq));
  TESSERA_RETURN_IF_ERROR(need_rows(k, mv->r1, ldk));
  TESSERA_RETURN_IF_ERROR(need_rows(v, mv->r1, ldk));
  TESSERA_RETURN_IF_ERROR(need_rows(*a.outputs[0], mv->r1, ldq));
  // keys/values: [layers, blocks, kv heads, block_tokens, head_dim]
  const auto& ks = keys.desc.shape;
  if (ks.size() != 5 || ks[2] != nk || ks[4] != d || layer < 0 || layer >= ks[0] || values.desc.shape != ks)
    return status::invalid("dec_attention: KV cache tensors do not match layer " + std::to_string(layer) + ", " +
                           std::to_string(nk) + " kv heads of " + std::to_string(d));
  const int64_t nblocks = ks[1];
  const int bt = static_cast<int>(ks[3]);
  const int64_t head_stride = int64_t{bt} * d, block_stride = nk * head_stride, layer_stride = nblocks * block_stride;
  // A bf16 cache (a bf16 decoder): rows rounded as they are stored, read back as fp32.
  const bool kv16 = keys.desc.type == exchange::dtype::bf16;
  if (values.desc.type != keys.desc.type || (!kv16 && keys.desc.type != exchange::dtype::f32))
    return status::invalid("dec_attention: the KV cache's keys and values must both be f32 or both bf16");
  float* kbase = kv16 ? nullptr : keys.f32() + layer * layer_stride;
  float* vbase = kv16 ? nullptr : values.f32() + layer * layer_stride;
  models::bfloat16* kbase16 = kv16 ? reinterpret_cast<models::bfloat16*>(keys.data) + layer * layer_stride : nullptr;
  models::bfloat16* vbase16 = kv16 ? reinterpret_cast<models::bfloat16*>(values.data) + layer * layer_stride : nullptr;
  const int64_t T = mv->r1 - mv->r0;
  if (T == 0) return ok_status();
  // Positions of the micro-batch's rows, and every block they read checked against the cache.
  std::vector<int32_t> positions(static_cast<size_t>(T));
  std::vector<models::paged_seq> seqs;
  for (int64_t s = mv->s0; s < mv->s1; ++s) {
    const int32_t r0 = a.ctx.seq_offsets[static_cast<size_t>(s)], r1 = a.ctx.seq_offsets[static_cast<size_t>(s) + 1];
    const int64_t end = int64_t{meta->start(s)} + (r1 - r0);
    const int64_t need = (end + bt - 1) / bt;
    if (need > meta->blocks(s))
      return status::invalid("sequence " + std::to_string(s) + " of the step reaches position " + std::to_string(end - 1) +
                             " but its block table has " + std::to_string(meta->blocks(s)) + " blocks of " +
                             std::to_string(bt));
    for (int64_t b = 0; b < need; ++b)
      if (meta->table(s)[b] < 0 || meta->table(s)[b] >= nblocks)
        return status::out_of_memory("tile " + std::to_string(a.ctx.tile_id) + "'s KV cache holds " +
                                     std::to_string(nblocks) + " blocks of " + std::to_string(bt) + " positions (" +
                                     std::to_string(nblocks * bt) + " tokens); sequence " + std::to_string(s) +
                                     " of the step names block " + std::to_string(meta->table(s)[b]));
    for (int32_t r = r0; r < r1; ++r) positions[static_cast<size_t>(r - mv->r0)] = meta->start(s) + (r - r0);
    seqs.push_back({static_cast<int32_t>(r0 - mv->r0), r1 - r0, meta->start(s), meta->table(s)});
  }
  float* qp = q.f32() + mv->r0 * ldq;
  float* kp = k.f32() + mv->r0 * ldk;
  float* vp = v.f32() + mv->r0 * ldk;
  if (rotary) {
    std::vector<float> cos_t(static_cast<size_t>(T * d / 2)), sin_t(cos_t.size());
    models::rotary_tables(positions.data(), T, d, prm->rope, cos_t.data(), sin_t.data());
    models::apply_rotary(qp, T, nq, d, ldq, cos_t.data(), sin_t.data());
    models::apply_rotary(kp, T, nk, d, ldk, cos_t.data(), sin_t.data());
  }
  for (const auto& s : seqs)
    for (int r = 0; r < s.rows; ++r) {
      const int pos = s.start_pos + r;
      const int64_t off = int64_t{s.block_table[pos / bt]} * block_stride + int64_t{pos % bt} * d;
      for (int h = 0; h < nk; ++h) {
        const float* kr = kp + int64_t{s.row + r} * ldk + int64_t{h} * d;
        const float* vr = vp + int64_t{s.row + r} * ldk + int64_t{h} * d;
        if (kv16) {
          models::to_bf16(kr, d, kbase16 + off + h * head_stride);
          models::to_bf16(vr, d, vbase16 + off + h * head_stride);
        } else {
          std::copy_n(kr, d, kbase + off + h * head_stride);
          std::copy_n(vr, d, vbase + off + h * head_stride);
        }
      }
    }
  float* out = a.outputs[0]->f32() + mv->r0 * ldq;
  if (q0 == k0 * group && nq == nk * group) {
    models::attention_paged({qp, ldq}, {kbase, vbase, bt, block_stride, head_stride, kbase16, vbase16}, seqs.data(),
                            static_cast<int>(seqs.size()), nq, nk, d, {out, ldq}, static_cast<int>(window));
  } else {  // query heads that share a kv head with another lane's: one head at a time
    for (int h = 0; h < nq; ++h) {
      const int64_t kv = (q0 + h) / group - k0;
      models::paged_kv_view view{nullptr, nullptr, bt, block_stride, head_stride};
      if (kv16) view.k16 = kbase16 + kv * head_stride, view.v16 = vbase16 + kv * head_stride;
      else view.k = kbase + kv * head_stride, view.v = vbase + kv * head_stride;
      models::attention_paged({qp + int64_t{h} * d, ldq}, view,
                              seqs.data(), static_cast<int>(seqs.size()), 1, 1, d, {out + int64_t{h} * d, ldq},
                              static_cast<int>(window));
    }
  }
  return ok_status();
}

status dec_residual(const kernel_args& a) {
  auto prm = a.params_as<models::dec_residual_params>();
  if (!prm) return prm.error();
  auto mv = micro_of(a, *prm);
  if (!mv) return mv.error();
  auto part = exchange::token_partition(mv->r1 - mv->r0, prm->part, prm->parts);
  auto& x = *a.outputs[0];
  const int64_t hidden = x.desc.shape.size() == 2 ? x.desc.shape[1] : 0;
  TESSERA_RETURN_IF_ERROR(need_rows(*a.inputs[0], mv->r1, hidden));
  TESSERA_RETURN_IF_ERROR(need_rows(x, mv->r1, hidden));
  const float* bias = a.inputs.size() > 2 ? a.inputs[2]->f32() : nullptr;
  if (bias && a.inputs[2]->elements() != static_cast<uint64_t>(hidden)) return status::invalid("dec_residual: bias length");
  for (int64_t r = mv->r0 + part.begin; r < mv->r0 + part.end; ++r) {
    float* p = a.inputs[0]->f32() + r * hidden;
    if (bias) models::add(p, bias, hidden, p);
    models::add(x.f32() + r * hidden, p, hidden, x.f32() + r * hidden);
  }
  return ok_status();
}

// Every lane sums the same W rows in the same order (partial_0 first), so every lane's x is
// bit-identical: ((p0 + p1) + ...) + bias, then x + that, as dec_residual adds one lane's sum.
status dec_reduce(const kernel_args& a) {
  auto prm = a.params_as<models::dec_reduce_params>();
  if (!prm) return prm.error();
  auto mv = micro_of(a, *prm);
  if (!mv) return mv.error();
  const size_t W = prm->lanes;
  if (W < 1 || a.inputs.size() < W + 1 || a.inputs.size() > W + 2)
    return status::invalid("dec_reduce: " + std::to_string(a.inputs.size()) + " inputs for " + std::to_string(W) +
                           " lanes (their partial sums, x, and an optional bias)");
  auto& x = *a.outputs[0];
  const int64_t hidden = x.desc.shape.size() == 2 ? x.desc.shape[1] : 0;
  TESSERA_RETURN_IF_ERROR(need_rows(x, mv->r1, hidden));
  for (size_t q = 0; q < W; ++q) TESSERA_RETURN_IF_ERROR(need_rows(*a.inputs[q], mv->r1, hidden));
  const float* bias = a.inputs.size() > W + 1 ? a.inputs[W + 1]->f32() : nullptr;
  if (bias && a.inputs[W + 1]->elements() != static_cast<uint64_t>(hidden)) return status::invalid("dec_reduce: bias length");
  std::vector<float> sum(static_cast<size_t>(hidden));
  for (int64_t r = mv->r0; r < mv->r1; ++r) {
    const float* p0 = a.inputs[0]->f32() + r * hidden;
    if (W == 1) std::copy_n(p0, hidden, sum.data());
    else models::add(p0, a.inputs[1]->f32() + r * hidden, hidden, sum.data());
    for (size_t q = 2; q < W; ++q) models::add(sum.data(), a.inputs[q]->f32() + r * hidden, hidden, sum.data());
    if (bias) models::add(sum.data(), bias, hidden, sum.data());
    models::add(x.f32() + r * hidden, sum.data(), hidden, x.f32() + r * hidden);
  }
  return ok_status();
}

status dec_multiply(const kernel_args& a) {
  auto prm = a.params_as<models::rows_params>();
  if (!prm) return prm.error();
  auto mv = micro_of(a, *prm);
  if (!mv) return mv.error();
  auto &g = *a.inputs[0], &u = *a.inputs[1];
  const int64_t width = u.desc.shape.size() == 2 ? u.desc.shape[1] : 0;
  TESSERA_RETURN_IF_ERROR(need_rows(g, mv->r1, width));
  TESSERA_RETURN_IF_ERROR(need_rows(*a.outputs[0], mv->r1, width));
  models::multiply(g.f32() + mv->r0 * width, u.f32() + mv->r0 * width, (mv->r1 - mv->r0) * width,
                   a.outputs[0]->f32() + mv->r0 * width);
  return ok_status();
}

status dec_logits(const kernel_args& a) {
  auto prm = a.params_as<models::dec_logits_params>();
  if (!prm) return prm.error();
  auto mv = micro_of(a, *prm);
  if (!mv) return mv.error();
  auto meta = meta_of(a, *a.inputs[1]);
  if (!meta) return meta.error();
  const auto& x = *a.inputs[0];
  const auto& head = *a.inputs[2];
  auto &logits = *a.outputs[0], &last = *a.outputs[1];
  TESSERA_RETURN_IF_ERROR(all_f32({&x, a.inputs[3], &logits, &last}, "dec_logits"));
  if (a.inputs.size() > 4) TESSERA_RETURN_IF_ERROR(all_f32({a.inputs[4]}, "dec_logits"));
  const int64_t hidden = x.desc.shape.size() == 2 ? x.desc.shape[1] : 0;
  const int64_t vocab = head.desc.shape.size() == 2 ? head.desc.shape[0] : 0;
  if (head.desc.shape.size() != 2 || head.desc.shape[1] != hidden) return status::invalid("dec_logits: LM head shape");
  int64_t first = 0;  // logits rows of sequences before this micro-batch
  for (int64_t s = 0; s < mv->s0; ++s) first += meta->want(s) ? 1 : 0;
  int64_t n = 0;
  for (int64_t s = mv->s0; s < mv->s1; ++s) {
    if (!meta->want(s)) continue;
    TESSERA_RETURN_IF_ERROR(need_rows(last, first + n + 1, hidden));
    if (prm->head) TESSERA_RETURN_IF_ERROR(need_rows(logits, first + n + 1, vocab));
    std::copy_n(x.f32() + int64_t{a.ctx.seq_offsets[static_cast<size_t>(s) + 1] - 1} * hidden, hidden,
                last.f32() + (first + n) * hidden);
    ++n;
  }
  if (n == 0) return ok_status();
  float* rows = last.f32() + first * hidden;
  if (prm->rms) {
    models::rms_norm(rows, n, hidden, a.inputs[3]->f32(), prm->eps, rows);
  } else {
    if (a.inputs.size() < 5) return status::invalid("dec_logits: LayerNorm needs a bias");
    models::layer_norm(rows, n, hidden, a.inputs[3]->f32(), a.inputs[4]->f32(), prm->eps, rows);
  }
  if (!prm->head) return ok_status();  // a split head: dec_head on every slice
  if (head.desc.type == exchange::dtype::bf16) {  // a bf16 LM head: the normed rows rounded to bf16, fp32 logits
    std::vector<models::bfloat16> rb(static_cast<size_t>(n * hidden));
    models::to_bf16(rows, n * hidden, rb.data());
    models::linear(rb.data(), n, models::bf16_weight::view(reinterpret_cast<const models::bfloat16*>(head.data), vocab, hidden),
                   nullptr, logits.f32() + first * vocab);
    return ok_status();
  }
  models::linear(rows, n, hidden, head.f32(), nullptr, vocab, logits.f32() + first * vocab);
  return ok_status();
}

status dec_sample(const kernel_args& a) {
  auto prm = a.params_as<models::rows_params>();
  if (!prm) return prm.error();
  auto meta = meta_of(a, *a.inputs[1]);
  if (!meta) return meta.error();
  const auto& logits = *a.inputs[0];
  const auto& in = *a.inputs[2];
  auto& out = *a.outputs[0];
  if (logits.desc.type != exchange::dtype::f32 || logits.desc.shape.size() != 2)
    return status::invalid("dec_sample: logits must be f32 [rows, vocab]");
  if (in.desc.type != exchange::dtype::i32 || out.desc.type != exchange::dtype::i32)
    return status::invalid("dec_sample: the sample tensors must be int32");
  const int64_t vocab = logits.desc.shape[1];
  int64_t rows = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(a.ctx.seq_lengths.size()); ++s) rows += meta->want(s) ? 1 : 0;
  std::span<const int32_t> d{in.i32(), static_cast<size_t>(in.elements())};
  if (!d.empty() && d[0] == 0) return ok_status();  // nothing asked this step: the host takes logits
  TESSERA_RETURN_IF_ERROR(need_rows(logits, rows, vocab));
  TESSERA_RETURN_IF_ERROR(need_rows(out, rows, models::kSampleRecord));
  auto parsed = models::parse_sample_tensor(d, rows, vocab);
  if (!parsed) return parsed.error().with_context("dec_sample on tile " + std::to_string(a.ctx.tile_id));
  thread_local models::sample_scratch scratch;
  thread_local std::vector<float> adjusted;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& row = (*parsed)[static_cast<size_t>(r)];
    int32_t* rec = out.i32() + r * models::kSampleRecord;
    if (!row.sample) {
      models::write_sample_record(rec, -1, nullptr);
      continue;
    }
    const float* raw = logits.f32() + r * vocab;
    const float* from = raw;
    if (row.params.adjusts()) {  // penalties and bias on a copy: log-probabilities are the raw row's
      adjusted.assign(raw, raw + vocab);
      models::adjust_row(adjusted.data(), vocab, row.params);
      from = adjusted.data();
    }
    const int32_t token = models::sample_row(from, vocab, row.params, scratch);
    if (row.params.logprobs >= 0) {
      const auto lp = models::logprob_of(raw, vocab, token, row.params.logprobs);
      models::write_sample_record(rec, token, &lp);
    } else {
      models::write_sample_record(rec, token, nullptr);
    }
  }
  return ok_status();
}

// The rows the step asks logits of (every sequence that wants them), and the parsed sample tensor.
int64_t logits_rows(const kernel_args& a, const models::step_meta_view& meta) {
  int64_t rows = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(a.ctx.seq_lengths.size()); ++s) rows += meta.want(s) ? 1 : 0;
  return rows;
}

status dec_head(const kernel_args& a) {
  auto meta = meta_of(a, *a.inputs[1]);
  if (!meta) return meta.error();
  const auto& last = *a.inputs[0];
  const auto& head = *a.inputs[2];
  auto& logits = *a.outputs[0];
  TESSERA_RETURN_IF_ERROR(all_f32({&last, &logits}, "dec_head"));
  const int64_t hidden = last.desc.shape.size() == 2 ? last.desc.shape[1] : 0;
  if (head.desc.shape.size() != 2 || head.desc.shape[1] != hidden) return status::invalid("dec_head: LM head shape");
  const int64_t vocab = head.desc.shape[0];
  const int64_t n = logits_rows(a, *meta);
  if (n == 0) return ok_status();
  TESSERA_RETURN_IF_ERROR(need_rows(last, n, hidden));
  TESSERA_RETURN_IF_ERROR(need_rows(logits, n, vocab));
  if (head.desc.type == exchange::dtype::bf16) {  // as dec_logits: the normed rows rounded to bf16
    std::vector<models::bfloat16> rb(static_cast<size_t>(n * hidden));
    models::to_bf16(last.f32(), n * hidden, rb.data());
    models::linear(rb.data(), n, models::bf16_weight::view(reinterpret_cast<const models::bfloat16*>(head.data), vocab, hidden),
                   nullptr, logits.f32());
    return ok_status();
  }
  models::linear(last.f32(), n, hidden, head.f32(), nullptr, vocab, logits.f32());
  return ok_status();
}

status dec_sample_part(const kernel_args& a) {
  auto prm = a.params_as<models::dec_slice_params>();
  if (!prm) return prm.error();
  auto meta = meta_of(a, *a.inputs[1]);
  if (!meta) return meta.error();
  const auto& logits = *a.inputs[0];
  const auto& in = *a.inputs[2];
  auto& out = *a.outputs[0];
  if (logits.desc.type != exchange::dtype::f32 || logits.desc.shape.size() != 2)
    return status::invalid("dec_sample_part: logits must be f32 [rows, vocab slice]");
  if (in.desc.type != exchange::dtype::i32 || out.desc.type != exchange::dtype::i32)
    return status::invalid("dec_sample_part: the sample tensors must be int32");
  const int64_t n = logits.desc.shape[1];
  if (int64_t{prm->begin} + n > int64_t{prm->vocab})
    return status::invalid("dec_sample_part: slice [" + std::to_string(prm->begin) + ", +" + std::to_string(n) +
                           ") is outside the vocabulary of " + std::to_string(prm->vocab));
  const int64_t rows = logits_rows(a, *meta);
  std::span<const int32_t> d{in.i32(), static_cast<size_t>(in.elements())};
  if (!d.empty() && d[0] == 0) return ok_status();  // nothing asked this step: the host takes logits
  TESSERA_RETURN_IF_ERROR(need_rows(logits, rows, n));
  if (static_cast<int64_t>(out.elements()) < rows * models::kSliceRecord) return status::invalid("dec_sample_part: the slice records overrun their tensor");
  auto parsed = models::parse_sample_tensor(d, rows, prm->vocab);
  if (!parsed) return parsed.error().with_context("dec_sample_part on tile " + std::to_string(a.ctx.tile_id));
  thread_local models::sample_scratch scratch;
  thread_local std::vector<float> adjusted;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& row = (*parsed)[static_cast<size_t>(r)];
    int32_t* rec = out.i32() + r * models::kSliceRecord;
    if (!row.sample) {
      models::write_empty_slice_record(rec);
      continue;
    }
    const float* raw = logits.f32() + r * n;
    const float* from = raw;
    if (row.params.adjusts()) {  // penalties and bias on a copy: log-probabilities are the raw row's
      adjusted.assign(raw, raw + n);
      models::adjust_slice(adjusted.data(), prm->begin, n, row.params);
      from = adjusted.data();
    }
    models::write_slice_record(rec, raw, from, prm->begin, n, row.params, scratch);
  }
  return ok_status();
}

status dec_sample_merge(const kernel_args& a) {
  auto prm = a.params_as<models::dec_slice_params>();
  if (!prm) return prm.error();
  auto meta = meta_of(a, *a.inputs[1]);
  if (!meta) return meta.error();
  const auto& parts = *a.inputs[0];
  const auto& in = *a.inputs[2];
  auto& out = *a.outputs[0];
  if (parts.desc.type != exchange::dtype::i32 || in.desc.type != exchange::dtype::i32 || out.desc.type != exchange::dtype::i32)
    return status::invalid("dec_sample_merge: the sample tensors must be int32");
  if (parts.desc.shape.size() != 3 || parts.desc.shape[0] != prm->slices || parts.desc.shape[2] != models::kSliceRecord)
    return status::invalid("dec_sample_merge: the slice records must be int32 [slices, rows, kSliceRecord]");
  const int64_t per_slice = parts.desc.shape[1];
  const int64_t rows = logits_rows(a, *meta);
  std::span<const int32_t> d{in.i32(), static_cast<size_t>(in.elements())};
  if (!d.empty() && d[0] == 0) return ok_status();
  if (rows > per_slice) return status::invalid("dec_sample_merge: " + std::to_string(rows) + " rows, records for " + std::to_string(per_slice));
  TESSERA_RETURN_IF_ERROR(need_rows(out, rows, models::kSampleRecord));
  auto parsed = models::parse_sample_tensor(d, rows, prm->vocab);
  if (!parsed) return parsed.error().with_context("dec_sample_merge on tile " + std::to_string(a.ctx.tile_id));
  thread_local models::sample_scratch scratch;
  std::vector<const int32_t*> recs(prm->slices);
  for (int64_t r = 0; r < rows; ++r) {
    const auto& row = (*parsed)[static_cast<size_t>(r)];
    int32_t* rec = out.i32() + r * models::kSampleRecord;
    if (!row.sample) {
      models::write_sample_record(rec, -1, nullptr);
      continue;
    }
    for (uint32_t j = 0; j < prm->slices; ++j) recs[j] = parts.i32() + (int64_t{j} * per_slice + r) * models::kSliceRecord;
    auto lp = models::merge_slice_records(recs, row.params, prm->vocab, scratch);
    if (!lp) return lp.error().with_context("dec_sample_merge on tile " + std::to_string(a.ctx.tile_id) + ", row " + std::to_string(r));
    models::write_sample_record(rec, lp->token, row.params.logprobs >= 0 ? &*lp : nullptr);
  }
  return ok_status();
}

status dec_next_ids(const kernel_args& a) {
  auto meta = meta_of(a, *a.inputs[1]);
  if (!meta) return meta.error();
  const auto& samples = *a.inputs[0];
  const auto& in = *a.inputs[2];
  auto& out = *a.outputs[0];
  if (samples.desc.type != exchange::dtype::i32 || in.desc.type != exchange::dtype::i32 || out.desc.type != exchange::dtype::i32)
    return status::invalid("dec_next_ids: the sample tensors and next_ids must be int32");
  int32_t* ids = out.i32();
  const int64_t n = static_cast<int64_t>(out.elements());
  std::fill_n(ids, n, -1);
  // Nothing asked this step (the host took logits): the samples tensor holds an older step's.
  if (in.elements() == 0 || in.i32()[0] == 0) return ok_status();
  const int64_t rows = std::min(logits_rows(a, *meta), n);
  TESSERA_RETURN_IF_ERROR(need_rows(samples, rows, models::kSampleRecord));
  for (int64_t r = 0; r < rows; ++r) ids[r] = samples.i32()[r * models::kSampleRecord];
  return ok_status();
}

status dec_feed(const kernel_args& a) {
  auto& ids = *a.outputs[0];
  const auto& next = *a.inputs[1];
  if (a.inputs[0]->desc.id != ids.desc.id) return status::invalid("dec_feed writes the token ids it reads");
  if (ids.desc.type != exchange::dtype::i32 || next.desc.type != exchange::dtype::i32)
    return status::invalid("dec_feed: token_ids and next_ids must be int32");
  const int64_t rows = a.ctx.active_tokens, n = static_cast<int64_t>(next.elements());
  if (static_cast<int64_t>(ids.elements()) < rows) return status::invalid("token ids shorter than the batch");
  int32_t* t = ids.i32();
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] >= 0) continue;
    const int64_t j = -int64_t{t[r]} - 1;
    if (j >= n || next.i32()[j] < 0)
      return status::invalid("token row " + std::to_string(r) + " takes the token sampled in row " + std::to_string(j) +
                             " of the previous step on tile " + std::to_string(a.ctx.tile_id) + ", which sampled " +
                             (j >= n ? "fewer rows" : "no token there"));
    t[r] = next.i32()[j];
  }
  return ok_status();
}

}  // namespace

void register_decoder_kernels(kernel_registry& reg) {
  reg.add(models::kernel_id::dec_embed, {3, 4, 1, 1}, dec_embed);
  reg.add(models::kernel_id::dec_norm, {2, 3, 1, 1}, dec_norm);
  reg.add(models::kernel_id::dec_attention, {6, 6, 1, 1, true}, dec_attention);  // a bf16 KV cache
  reg.add(models::kernel_id::dec_residual, {2, 3, 1, 1}, dec_residual);
  reg.add(models::kernel_id::dec_reduce, {2, 64, 1, 1}, dec_reduce);
  reg.add(models::kernel_id::dec_multiply, {2, 2, 1, 1}, dec_multiply);
  reg.add(models::kernel_id::dec_logits, {4, 5, 2, 2, true}, dec_logits);  // a bf16 LM head
  reg.add(models::kernel_id::dec_sample, {3, 3, 1, 1}, dec_sample);
  reg.add(models::kernel_id::dec_head, {3, 3, 1, 1, true}, dec_head);  // a bf16 LM head slice
  reg.add(models::kernel_id::dec_sample_part, {3, 3, 1, 1}, dec_sample_part);
  reg.add(models::kernel_id::dec_sample_merge, {3, 3, 1, 1}, dec_sample_merge);
  reg.add(models::kernel_id::dec_next_ids, {3, 3, 1, 1}, dec_next_ids);
  reg.add(models::kernel_id::dec_feed, {2, 2, 1, 1}, dec_feed);
}

}  // namespace tessera::tile
