// Modelled time of a compiled tile program: kernel calls -> timing::kernel_query, send slices ->
// bytes received, supersteps -> slowest compute + sync + slowest exchange (docs/timing.md).
#include "tessera/host/program_timing.hpp"

#include <algorithm>

#include "tessera/models/kernel_list.hpp"
#include "tessera/models/token_sampling.hpp"
#include "tessera/timing/estimator.hpp"

namespace tessera::host {

using exchange::batch_rows;
using exchange::kernel_call;
using exchange::row_range;
using exchange::slice_kind;
using exchange::slice_ref;
using exchange::tensor_desc;
using timing::kernel_query;

exchange::batch_rows rows_of(const std::vector<int32_t>& seq_lengths) {
  batch_rows r;
  r.seq_offsets.push_back(0);
  for (int32_t l : seq_lengths) r.seq_offsets.push_back(r.seq_offsets.back() + l);
  r.active_tokens = r.seq_offsets.back();
  return r;
}

uint64_t slice_elements(const slice_ref& s, const batch_rows& rows) {
  switch (s.kind) {
    case slice_kind::fixed:
      return s.count;
    case slice_kind::token_rows: {
      auto m = rows.micro_rows(s.micro, s.micros);
      return static_cast<uint64_t>(m.end - m.begin) * s.count;
    }
    case slice_kind::token_part: {
      auto m = rows.micro_rows(s.micro, s.micros);
      auto p = exchange::token_partition(m.end - m.begin, s.part, s.parts);
      return static_cast<uint64_t>(p.end - p.begin) * s.count;
    }
  }
  return 0;
}

namespace {

using tensor_map = std::map<uint32_t, tensor_desc>;

result<const tensor_desc*> find(const tensor_map& t, uint32_t id, const std::string& kernel) {
  auto it = t.find(id);
  if (it == t.end()) return status::not_found(kernel + ": tensor " + std::to_string(id) + " is not in the plan");
  return &it->second;
}

int64_t dim(const tensor_desc& d, size_t i) { return d.shape.size() > i ? d.shape[i] : 0; }

struct micro_span {
  row_range rows, seqs;
  int64_t n() const { return rows.end - rows.begin; }
};

std::string name_of(const kernel_call& c) { return std::string(models::kernel_name(c.kernel)); }

/// The call's parameters as kernel K's struct.
template <models::kernel_id K>
result<models::params_t<K>> params_of(const kernel_call& c) {
  models::params_t<K> p;
  if (auto err = models::from_wire(p, c.params, c.fparams)) return status::invalid(name_of(c) + ": " + *err);
  return p;
}

/// The rows of the micro-batch a call of kernel K works on.
template <models::kernel_id K>
result<micro_span> micro_of(const kernel_call& c, const batch_rows& rows) {
  auto p = params_of<K>(c);
  if (!p) return p.error();
  if (p->micros == 0 || p->micro >= p->micros) return status::invalid(name_of(c) + ": micro-batch out of range");
  return micro_span{rows.micro_rows(p->micro, p->micros), rows.micro_seqs(p->micro, p->micros)};
}

}  // namespace

result<std::vector<kernel_query>> kernel_queries(const kernel_call& c, const tensor_map& tensors, const batch_rows& rows,
                                                 timing::dtype type) {
  std::vector<kernel_query> q;
  using models::kernel_id;
  auto add = [&](kernel_id id, const auto& shape) { q.push_back(timing::make_query(id, shape, type)); };
  auto in = [&](size_t i) -> result<const tensor_desc*> {
    if (i >= c.inputs.size()) return status::invalid(name_of(c) + ": missing input " + std::to_string(i));
    return find(tensors, c.inputs[i], name_of(c));
  };
  auto out = [&](size_t i) -> result<const tensor_desc*> {
    if (i >= c.outputs.size()) return status::invalid(name_of(c) + ": missing output " + std::to_string(i));
    return find(tensors, c.outputs[i], name_of(c));
  };
  if (static_cast<size_t>(c.kernel) >= models::all_kernels.size())
    return status::not_found("kernel #" + std::to_string(static_cast<int>(c.kernel)) + " has no timing mapping");
  const std::optional<kernel_id> id = c.kernel;
  // Every kernel of the list (no default: the compiler names a kernel added without a case here).
  switch (*id) {
  case kernel_id::embed: {
    auto m = micro_of<kernel_id::embed>(c, rows);
    if (!m) return m.error();
    auto x = out(0);
    if (!x) return x.error();
    const int64_t h = dim(**x, 1);
    if (m->n() > 0 && h > 0) {
      add(kernel_id::embed, timing::rows_shape{.tokens = m->n(), .hidden = h});
      add(kernel_id::layer_norm, timing::rows_shape{.tokens = m->n(), .hidden = h});
    }
    break;
  }
  case kernel_id::linear: {
    auto m = micro_of<kernel_id::linear>(c, rows);
    if (!m) return m.error();
    auto w = in(1);
    if (!w) return w.error();
    const int64_t o = dim(**w, 0), i = dim(**w, 1), n = m->n();
    if (n > 0 && o > 0) {
      if (i == 0) {
        if (c.inputs.size() > 2) add(kernel_id::copy, timing::elements_shape{.elements = n * o});
      } else {
        add(kernel_id::linear, timing::linear_shape{.tokens = n, .in = i, .out = o});
        // Any activation (GELU erf/tanh, ReLU, SiLU) is timed as one elementwise pass.
        if (auto p = params_of<kernel_id::linear>(c); p && p->act != models::activation::none)
          add(kernel_id::gelu, timing::elements_shape{.elements = n * o});
      }
    }
    break;
  }
  case kernel_id::attention: {
    auto m = micro_of<kernel_id::attention>(c, rows);
    if (!m) return m.error();
    auto p = params_of<kernel_id::attention>(c);
    if (!p) return p.error();
    const int64_t heads = p->heads, hd = p->head_dim;
    if (m->n() > 0 && heads > 0 && hd > 0) {
      std::vector<int64_t> lens;
      for (int64_t s = m->seqs.begin; s < m->seqs.end; ++s)
        lens.push_back(rows.seq_offsets[static_cast<size_t>(s + 1)] - rows.seq_offsets[static_cast<size_t>(s)]);
      if (lens.empty()) lens.push_back(m->n());  // rows without sequence boundaries: one block
      add(kernel_id::attention, timing::attention_shape{.heads = heads, .head_dim = hd, .seq_lens = std::move(lens)});
    }
    break;
  }
  case kernel_id::bias_residual_ln: {
    auto m = micro_of<kernel_id::bias_residual_ln>(c, rows);
    if (!m) return m.error();
    auto p = params_of<kernel_id::bias_residual_ln>(c);
    if (!p) return p.error();
    if (p->parts == 0) return status::invalid("bias_residual_ln: parts must be > 0");
    auto x = out(0);
    if (!x) return x.error();
    auto part = exchange::token_partition(m->n(), p->part, p->parts);
    const int64_t r = part.end - part.begin, h = dim(**x, 1);
    if (r > 0 && h > 0) {
      add(kernel_id::add, timing::elements_shape{.elements = r * h});
      add(kernel_id::add, timing::elements_shape{.elements = r * h});
      add(kernel_id::layer_norm, timing::rows_shape{.tokens = r, .hidden = h});
    }
    break;
  }
  case kernel_id::classifier: {
    auto m = micro_of<kernel_id::classifier>(c, rows);
    if (!m) return m.error();
    auto x = in(0);
    if (!x) return x.error();
    auto l = out(0);
    if (!l) return l.error();
    const int64_t seqs = m->seqs.end - m->seqs.begin, h = dim(**x, 1), labels = dim(**l, 1);
    if (seqs > 0 && h > 0 && labels > 0)
      add(kernel_id::classifier, timing::classifier_shape{.seqs = seqs, .hidden = h, .labels = labels});
    break;
  }
  case kernel_id::pool: {  // one pass over the micro-batch's rows: timed as an add over them
    auto m = micro_of<kernel_id::pool>(c, rows);
    if (!m) return m.error();
    auto x = in(0);
    if (!x) return x.error();
    const int64_t r = m->rows.end - m->rows.begin, h = dim(**x, 1);
    if (r > 0 && h > 0) add(kernel_id::add, timing::elements_shape{.elements = r * h});
    break;
  }
  case kernel_id::copy:
  case kernel_id::add:
  case kernel_id::scale: {
    auto y = out(0);
    if (!y) return y.error();
    if ((*y)->elements() > 0) add(*id, timing::elements_shape{.elements = static_cast<int64_t>((*y)->elements())});
    break;
  }
  case kernel_id::reduce_sum: {
    auto y = out(0);
    if (!y) return y.error();
    int64_t elements = 0;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      auto x = in(i);
      if (!x) return x.error();
      elements += static_cast<int64_t>((*x)->elements());
    }
    const auto outputs = static_cast<int64_t>(std::max<uint64_t>(1, (*y)->elements()));
    if (elements > 0) add(*id, timing::reduce_shape{.elements = elements, .outputs = outputs});
    break;
  }
  case kernel_id::matmul: {
    auto a = in(0);
    if (!a) return a.error();
    auto b = in(1);
    if (!b) return b.error();
    const int64_t m = dim(**a, 0), kk = dim(**a, 1), n = dim(**b, 1);
    if (m > 0 && n > 0 && kk > 0) add(kernel_id::matmul, timing::matmul_shape{.m = m, .n = n, .k = kk});
    break;
  }
  // Decoder kernels (tile_daemon/src/decoder_kernels.cpp), timed as the estimated kernels they are made of.
  case kernel_id::dec_embed: {  // a row gather, plus the learned position rows where there are any
    auto m = micro_of<kernel_id::dec_embed>(c, rows);
    if (!m) return m.error();
    auto x = out(0);
    if (!x) return x.error();
    const int64_t e = m->n() * dim(**x, 1);
    if (e > 0) add(kernel_id::copy, timing::elements_shape{.elements = e});
    if (e > 0 && c.inputs.size() > 3) add(kernel_id::add, timing::elements_shape{.elements = e});
    break;
  }
  case kernel_id::dec_norm: {  // RMSNorm or LayerNorm: one normalisation per row
    auto m = micro_of<kernel_id::dec_norm>(c, rows);
    if (!m) return m.error();
    auto x = out(0);
    if (!x) return x.error();
    if (m->n() > 0) add(kernel_id::layer_norm, timing::rows_shape{.tokens = m->n(), .hidden = dim(**x, 1)});
    break;
  }
  case kernel_id::dec_residual: {  // this lane's share of the rows: (bias +) residual add
    auto m = micro_of<kernel_id::dec_residual>(c, rows);
    if (!m) return m.error();
    auto x = out(0);
    if (!x) return x.error();
    auto p = params_of<kernel_id::dec_residual>(c);
    if (!p) return p.error();
    const int64_t parts = p->parts > 0 ? p->parts : 1;
    const int64_t e = (m->n() + parts - 1) / parts * dim(**x, 1);
    if (e > 0) add(kernel_id::add, timing::elements_shape{.elements = e});
    if (e > 0 && c.inputs.size() > 2) add(kernel_id::add, timing::elements_shape{.elements = e});
    break;
  }
  case kernel_id::dec_reduce: {  // an all-reduce's sum on every row: W - 1 adds, (bias), residual
    auto m = micro_of<kernel_id::dec_reduce>(c, rows);
    if (!m) return m.error();
    auto x = out(0);
    if (!x) return x.error();
    auto p = params_of<kernel_id::dec_reduce>(c);
    if (!p) return p.error();
    const int64_t e = m->n() * dim(**x, 1);
    const int64_t adds = int64_t{p->lanes} + (c.inputs.size() > p->lanes + 1 ? 1 : 0);  // W - 1 sums, bias, x
    if (e > 0 && adds > 0) add(kernel_id::add, timing::elements_shape{.elements = e * adds});
    break;
  }
  case kernel_id::dec_multiply: {  // SwiGLU's gate * up
    auto m = micro_of<kernel_id::dec_multiply>(c, rows);
    if (!m) return m.error();
    auto x = out(0);
    if (!x) return x.error();
    if (m->n() > 0) add(kernel_id::add, timing::elements_shape{.elements = m->n() * dim(**x, 1)});
    break;
  }
  case kernel_id::dec_logits: {  // at most one row per sequence: final norm, LM head
    auto m = micro_of<kernel_id::dec_logits>(c, rows);
    if (!m) return m.error();
    auto head = in(2);
    if (!head) return head.error();
    auto p = params_of<kernel_id::dec_logits>(c);
    if (!p) return p.error();
    const int64_t seqs = m->seqs.end - m->seqs.begin, vocab = dim(**head, 0), h = dim(**head, 1);
    if (seqs > 0 && vocab > 0) {
      add(kernel_id::layer_norm, timing::rows_shape{.tokens = seqs, .hidden = h});
      if (p->head) add(kernel_id::linear, timing::linear_shape{.tokens = seqs, .in = h, .out = vocab});
    }
    break;
  }
  case kernel_id::dec_sample: {  // a pass over each sequence's logits row (argmax, or softmax weights)
    auto m = micro_of<kernel_id::dec_sample>(c, rows);
    if (!m) return m.error();
    auto lg = in(0);
    if (!lg) return lg.error();
    const int64_t e = (m->seqs.end - m->seqs.begin) * dim(**lg, 1);
    if (e > 0) add(kernel_id::add, timing::elements_shape{.elements = e});
    break;
  }
  case kernel_id::dec_head: {  // a vocab slice of the LM head over the normed rows the out tile sent
    auto m = micro_of<kernel_id::dec_head>(c, rows);
    if (!m) return m.error();
    auto head = in(2);
    if (!head) return head.error();
    const int64_t seqs = m->seqs.end - m->seqs.begin, vocab = dim(**head, 0), h = dim(**head, 1);
    if (seqs > 0 && vocab > 0) add(kernel_id::linear, timing::linear_shape{.tokens = seqs, .in = h, .out = vocab});
    break;
  }
  case kernel_id::dec_sample_part: {  // a pass over each row's logits slice
    auto m = micro_of<kernel_id::dec_sample_part>(c, rows);
    if (!m) return m.error();
    auto lg = in(0);
    if (!lg) return lg.error();
    const int64_t e = (m->seqs.end - m->seqs.begin) * dim(**lg, 1);
    if (e > 0) add(kernel_id::add, timing::elements_shape{.elements = e});
    break;
  }
  case kernel_id::dec_sample_merge: {  // the slices' records of each row
    auto m = micro_of<kernel_id::dec_sample_merge>(c, rows);
    if (!m) return m.error();
    const int64_t e = (m->seqs.end - m->seqs.begin) * models::kSliceRecord;
    if (e > 0) add(kernel_id::add, timing::elements_shape{.elements = e});
    break;
  }
  case kernel_id::dec_next_ids:  // one id a row, and dec_feed one a token: too small to time
  case kernel_id::dec_feed:
    break;
  case kernel_id::dec_attention:
    // Its cost depends on each sequence's cached context, which travels in the step's metadata,
    // not in the program: decoder steps are timed by timing's LLM step model instead.
    return status::not_found("kernel 'dec_attention' is timed by the LLM step model (timing/llm_step.hpp), not per call: "
                             "its cost depends on the cached context lengths");
  case kernel_id::layer_norm:
  case kernel_id::gelu:
  case kernel_id::softmax:
    return status::not_found("kernel '" + name_of(c) + "' runs inside other tile kernels, never on its own");
  }
  return q;
}

double program_timing::tile_seconds(size_t step, uint32_t tile) const {
  if (step >= steps.size() || clock_hz <= 0) return 0;
  const auto& s = steps[step];
  for (const auto& t : s.tiles)
    if (t.tile == tile) return (t.compute_cycles + s.sync_cycles + t.exchange_cycles) / clock_hz;
  return 0;
}

result<program_timing> time_program(const std::map<uint32_t, exchange::program>& programs, const tensor_table& tensors,
                                    const std::vector<int32_t>& seq_lengths, const timing::ipu_preset& preset,
                                    const program_timing_options& opt) {
  if (programs.empty()) return status::invalid("no programs to time");
  const int64_t emulated = opt.emulated_tiles > 0 ? opt.emulated_tiles : static_cast<int64_t>(programs.size());
  auto share = timing::make_tile_share(preset, emulated);
  if (!share) return share.error();
  const double s = share->physical_per_emulated;
  const batch_rows rows = rows_of(seq_lengths);
  program_timing out;
  out.preset = preset.name;
  out.share = *share;
  out.clock_hz = preset.clock_hz;
  size_t steps = 0;
  for (const auto& [t, p] : programs) steps = std::max(steps, p.steps.size());
  static const tensor_map empty;
  for (size_t i = 0; i < steps; ++i) {
    superstep_timing st;
    st.index = i;
    st.sync = false;
    std::map<uint32_t, size_t> slot;
    for (const auto& [t, p] : programs) {
      slot[t] = st.tiles.size();
      st.tiles.push_back({.tile = t});
    }
    for (const auto& [t, p] : programs) {
      if (i >= p.steps.size()) continue;
      const auto& step = p.steps[i];
      st.sync |= step.sync && programs.size() > 1;
      auto& ts = st.tiles[slot[t]];
      auto tt = tensors.find(t);
      const tensor_map& mine = tt == tensors.end() ? empty : tt->second;
      for (const auto& call : step.compute) {
        ts.kernels.emplace_back(models::kernel_name(call.kernel));
        auto q = kernel_queries(call, mine, rows, opt.compute);
        if (!q) {
          if (q.error().code() == errc::not_found) {
            out.unmodelled.push_back("tile " + std::to_string(t) + " step " + std::to_string(i) + ": " + q.error().message());
            continue;
          }
          return status::invalid("tile " + std::to_string(t) + " step " + std::to_string(i) + ": " + q.error().message());
        }
        for (auto& one : *q) {
          auto cycles = timing::estimate_tile_cycles(one, preset, s);
          if (!cycles) return cycles.error();
          ts.compute_cycles += *cycles;
          ts.queries.push_back(std::move(one));
        }
      }
      for (const auto& send : step.sends) {
        const double bytes = static_cast<double>(slice_elements(send.src, rows)) * opt.exchange_element_bytes;
        ts.bytes_sent += bytes;
        auto it = slot.find(send.peer);
        if (it != slot.end()) st.tiles[it->second].bytes_received += bytes;
      }
    }
    for (auto& ts : st.tiles) {
      ts.exchange_cycles = ts.bytes_received > 0 ? timing::exchange_cycles(preset, ts.bytes_received, s) : 0;
      if (ts.compute_cycles > st.compute_cycles) st.compute_cycles = ts.compute_cycles, st.slowest_compute_tile = ts.tile;
      if (ts.exchange_cycles > st.exchange_cycles) st.exchange_cycles = ts.exchange_cycles, st.slowest_exchange_tile = ts.tile;
    }
    if (st.compute_cycles == 0 && !st.tiles.empty()) st.slowest_compute_tile = st.tiles.front().tile;
    st.sync_cycles = st.sync ? timing::sync_cycles(preset) : 0;
    st.total_cycles = st.compute_cycles + st.sync_cycles + st.exchange_cycles;
    st.seconds = st.total_cycles / preset.clock_hz;
    out.total_cycles += st.total_cycles;
    out.steps.push_back(std::move(st));
  }
  out.total_seconds = out.total_cycles / preset.clock_hz;
  return out;
}

tensor_table tensors_of(const compiled_model& c) {
  tensor_table t;
  for (const auto& sh : c.shards) t[sh.tile][sh.desc.id] = sh.desc;
  for (const auto& replica : c.programs)
    for (const auto& [tile, p] : replica)
      for (const auto& d : p.temporaries) t[tile][d.id] = d;
  return t;
}

result<program_timing> time_compiled(const compiled_model& c, int replica, const std::vector<int32_t>& seq_lengths,
                                     const timing::ipu_preset& preset, program_timing_options opt) {
  if (replica < 0 || replica >= static_cast<int>(c.programs.size()))
    return status::invalid("replica " + std::to_string(replica) + " does not exist");
  if (opt.emulated_tiles <= 0) opt.emulated_tiles = c.chosen.tiles();
  return time_program(c.programs[static_cast<size_t>(replica)], tensors_of(c), seq_lengths, preset, opt);
}

}  // namespace tessera::host
