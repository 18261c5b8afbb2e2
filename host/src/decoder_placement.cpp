// Decoders on tiles: the step program (a mixed batch of prefill chunks and decode tokens), the
// shards, and the memory plan with each tile's part of the paged KV cache. See placement.hpp
// (compile_decoder). The structure is BERT's (placement.cpp): R x S x W tiles, 4 supersteps a
// layer (attention, its reduce-scatter + residual + all-gather, the MLP, the same again), stages
// handing their micro-batch's rows on; the kernels are the decoder's (tile_daemon's
// decoder_kernels.cpp, over models/kernels.hpp as decoder_model::step uses them).
// With plan::reduce all_reduce, 2 supersteps a layer: attention, then every lane's whole partial
// rows to the other lanes; dec_reduce (the W partials summed in lane order, bias, residual) and
// the MLP, its partials the same way; the next layer's first superstep opens with the MLP's
// dec_reduce, and a stage's last layer takes one superstep more for it (where the rows are
// handed to the next stage).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "placement_internal.hpp"

namespace tessera::host {

namespace {

struct heads_range {
  int q0 = 0, q1 = 0, k0 = 0, k1 = 0;
};

struct dlayout {
  const models::model_shape& c;
  plan p;
  int budget = 0;
  int max_seqs = 0;
  int block_tokens = 16;
  int max_blocks = 0;  // per sequence
  int64_t meta = 0;
  int64_t sample = 0;  // the sample tensor's int32 capacity
  models::dtype dt = models::dtype::fp32;
  bool feeds = false;  // placement_request::feed_tokens
  int hd() const { return c.head_dim(); }
  bool bf16() const { return dt == models::dtype::bf16; }
  // A Linear matrix (and the KV cache): bf16 in a bf16 decoder. Embeddings, norms, biases and the
  // activations stay fp32, as in decoder_model::step's bf16 path.
  tensor_desc mat(uint32_t id, std::string name, std::vector<int64_t> shape) const {
    return {id, std::move(name), bf16() ? exchange::dtype::bf16 : exchange::dtype::f32, std::move(shape)};
  }
  int group() const { return c.num_heads / c.num_kv_heads; }
  bool all_reduce() const { return p.width > 1 && p.reduce == collective::all_reduce; }
  row_range layers_of(int stage) const { return token_partition(c.num_layers, stage, p.stages); }
  heads_range heads_of(int lane) const {
    const int g = group();
    if (c.num_kv_heads >= p.width) {  // kv heads split; each lane's query heads are their groups
      auto k = token_partition(c.num_kv_heads, lane, p.width);
      return {static_cast<int>(k.begin) * g, static_cast<int>(k.end) * g, static_cast<int>(k.begin),
              static_cast<int>(k.end)};
    }
    auto q = token_partition(c.num_heads, lane, p.width);  // kv heads replicated where lanes share them
    const int q0 = static_cast<int>(q.begin), q1 = static_cast<int>(q.end);
    return {q0, q1, q0 / g, q1 > q0 ? (q1 - 1) / g + 1 : q0 / g};
  }
  row_range ffn_of(int lane) const { return token_partition(c.intermediate_size, lane, p.width); }
  uint32_t tile_of(int r, int s, int w) const { return static_cast<uint32_t>((r * p.stages + s) * p.width + w); }
  // bf16: the LM head is a bf16 copy even when tied (the embedding rows are read as fp32); a split
  // head is a copy of its rows.
  bool lm_head_is_embedding(const tile_plan& t) const {
    return !bf16() && p.vocab_slices == 1 && c.tie_word_embeddings && t.stage == 0 && t.stage == p.stages - 1 && t.lane == 0;
  }
  // A vocab-parallel LM head: slice j of V on the last stage's lane j, then on the earlier stages'
  // tiles from the last backwards (compiled_model::head_tiles); -1: the tile holds none.
  int slice_of(int stage, int lane) const {
    const int i = stage == p.stages - 1 ? lane : p.width * (p.stages - 1 - stage) + lane;
    return i < p.vocab_slices ? i : -1;
  }
  row_range vocab_of(int slice) const {
    return token_partition(c.vocab_size, static_cast<uint32_t>(slice), static_cast<uint32_t>(p.vocab_slices));
  }
};

struct dtile {
  tile_plan plan;
  heads_range heads;
  uint64_t kv_bytes_per_block = 0;
};

std::string lname(int l, const char* what) { return "layers." + std::to_string(l) + "." + what; }

// Weights and activations of one tile (the KV cache is added once the block count is known).
void plan_tile(const dlayout& L, dtile& d, std::vector<weight_shard>& shards, std::vector<tensor_desc>& temps) {
  tile_plan& t = d.plan;
  const models::model_shape& c = L.c;
  const int64_t H = c.hidden_size, T = L.budget, hd = L.hd();
  d.heads = L.heads_of(t.lane);
  auto ffn = L.ffn_of(t.lane);
  auto layers = L.layers_of(t.stage);
  t.layer_begin = static_cast<int>(layers.begin), t.layer_end = static_cast<int>(layers.end);
  t.head_begin = d.heads.q0, t.head_end = d.heads.q1;
  t.ffn_begin = static_cast<int>(ffn.begin), t.ffn_end = static_cast<int>(ffn.end);
  const int64_t qw = (d.heads.q1 - d.heads.q0) * hd, kw = (d.heads.k1 - d.heads.k0) * hd, fw = ffn.end - ffn.begin;
  const auto& traits = c.traits();
  const bool layer_norm = c.norm != models::norm_kind::rms_norm;
  detail::tile_contents add{t, shards, temps};
  const bool first = t.stage == 0, last = t.stage == L.p.stages - 1;
  if (first) {
    add.weight(f32(ids::word, "token_embedding", {c.vocab_size, H}), shard_kind::whole, "token_embedding");
    if (c.positions == models::position_kind::learned)
      add.weight(f32(ids::position, "position_embedding", {c.max_position_embeddings, H}), shard_kind::whole,
             "position_embedding");
  }
  for (int l = t.layer_begin; l < t.layer_end; ++l) {
    const std::string tag = "L" + std::to_string(l) + ".";
    auto vec = [&](uint32_t what, const char* name, int64_t n) {
      add.weight(f32(ids::dec_layer(l, what), tag + name, {n}), shard_kind::whole, lname(l, name));
    };
    auto rows = [&](uint32_t what, const char* name, int64_t r0, int64_t r1, int64_t in) {
      add.weight(in ? L.mat(ids::dec_layer(l, what), tag + name, {r1 - r0, in}) : f32(ids::dec_layer(l, what), tag + name, {r1 - r0}),
             shard_kind::rows, lname(l, name), static_cast<int>(r0), static_cast<int>(r1));
    };
    auto cols = [&](uint32_t what, const char* name, int64_t c0, int64_t c1) {
      add.weight(L.mat(ids::dec_layer(l, what), tag + name, {H, c1 - c0}), shard_kind::columns, lname(l, name),
             static_cast<int>(c0), static_cast<int>(c1));
    };
    vec(ids::norm1_w, "norm1_w", H);
    if (layer_norm) vec(ids::norm1_b, "norm1_b", H);
    rows(ids::q_w, "q_w", d.heads.q0 * hd, d.heads.q1 * hd, H);
    rows(ids::k_w, "k_w", d.heads.k0 * hd, d.heads.k1 * hd, H);
    rows(ids::v_w, "v_w", d.heads.k0 * hd, d.heads.k1 * hd, H);
    if (traits.qkv_bias) {
      rows(ids::q_b, "q_b", d.heads.q0 * hd, d.heads.q1 * hd, 0);
      rows(ids::k_b, "k_b", d.heads.k0 * hd, d.heads.k1 * hd, 0);
      rows(ids::v_b, "v_b", d.heads.k0 * hd, d.heads.k1 * hd, 0);
    }
    cols(ids::o_w, "o_w", d.heads.q0 * hd, d.heads.q1 * hd);
    if (traits.o_bias) vec(ids::o_b, "o_b", H);
    vec(ids::norm2_w, "norm2_w", H);
    if (layer_norm) vec(ids::norm2_b, "norm2_b", H);
    if (c.gated_mlp) rows(ids::gate_w, "gate_w", ffn.begin, ffn.end, H);
    rows(ids::up_w, "up_w", ffn.begin, ffn.end, H);
    if (traits.mlp_bias) rows(ids::up_b, "up_b", ffn.begin, ffn.end, 0);
    cols(ids::down_w, "down_w", ffn.begin, ffn.end);
    if (traits.mlp_bias) vec(ids::down_b, "down_b", H);
  }
  const bool out_tile = last && t.lane == 0;
  const int V = L.p.vocab_slices, slice = V > 1 ? L.slice_of(t.stage, t.lane) : (out_tile ? 0 : -1);
  const row_range vocab = V > 1 && slice >= 0 ? L.vocab_of(slice) : row_range{0, c.vocab_size};
  if (out_tile) {
    add.weight(f32(ids::final_norm_w, "final_norm_w", {H}), shard_kind::whole, "final_norm_w");
    if (layer_norm) add.weight(f32(ids::final_norm_b, "final_norm_b", {H}), shard_kind::whole, "final_norm_b");
  }
  if (V == 1 && out_tile && !L.lm_head_is_embedding(t))
    add.weight(L.mat(ids::lm_head, "lm_head", {c.vocab_size, H}), shard_kind::whole, "lm_head");
  if (V > 1 && slice >= 0)  // this tile's vocabulary rows of the LM head (of the embedding when tied)
    add.weight(L.mat(ids::lm_head, "lm_head", {vocab.end - vocab.begin, H}), shard_kind::rows, "lm_head",
               static_cast<int>(vocab.begin), static_cast<int>(vocab.end));
  if (first) add.act({ids::token_ids, "token_ids", dtype::i32, {T}});
  add.act({ids::step_meta, "step_meta", dtype::i32, {L.meta}});
  add.act(f32(ids::hidden, "hidden", {T, H}));
  if (t.layer_end > t.layer_begin) {
    add.act(f32(ids::normed, "normed", {T, H}));
    add.act(f32(ids::dec_q, "q", {T, qw}));
    add.act(f32(ids::dec_k, "k", {T, kw}));
    add.act(f32(ids::dec_v, "v", {T, kw}));
    add.act(f32(ids::context, "context", {T, qw}));
    add.act(f32(ids::partial, "partial_sum", {T, H}));
    add.act(f32(ids::dec_up, "mlp_up", {T, fw}));
    if (c.gated_mlp) add.act(f32(ids::dec_gate, "mlp_gate", {T, fw}));
  }
  if (slice >= 0) {
    add.act(f32(ids::last_rows, "last_rows", {L.max_seqs, H}));
    add.act(f32(ids::logits, "logits", {L.max_seqs, vocab.end - vocab.begin}));
    add.act({ids::sample_params, "sample_params", dtype::i32, {L.sample}});
  }
  if (out_tile) add.act({ids::samples, "samples", dtype::i32, {L.max_seqs, models::kSampleRecord}});
  if (L.feeds && (out_tile || first)) add.act({ids::next_ids, "next_ids", dtype::i32, {L.max_seqs}});
  if (V > 1 && slice >= 0)  // the out tile gathers every slice's records
    add.act({ids::sample_parts, "sample_parts", dtype::i32, {out_tile ? V : 1, L.max_seqs, models::kSliceRecord}});
  const int64_t W = L.p.width;
  const bool all_reduce = L.all_reduce() && t.layer_end > t.layer_begin;
  // An all-reduce receives the other lanes' partial rows into its slots (they are its inbound
  // buffer); reduce-scatter + all-gather, a share of the rows from each other lane.
  if (all_reduce)
    for (int j = 0; j + 1 < W; ++j)
      add.act(f32(ids::reduce_slot(j), "reduce_slot_" + std::to_string(j), {T, H}), "exchange");
  int64_t inbound = all_reduce ? 0 : (W - 1) * ((T + W - 1) / W) * H;
  if (t.stage > 0) inbound = std::max<int64_t>(inbound, T * H);
  if (inbound > 0) add.act(f32(ids::exchange_buffer, "exchange_buffer", {inbound}), "exchange");
  d.kv_bytes_per_block = static_cast<uint64_t>(models::kv_layout::bytes_per_block(
      L.block_tokens, t.layer_end - t.layer_begin, d.heads.k1 - d.heads.k0, L.hd(), L.dt));
}

void add_kv(const dlayout& L, dtile& d, int blocks, std::vector<tensor_desc>& temps) {
  const int layers = d.plan.layer_end - d.plan.layer_begin, kvh = d.heads.k1 - d.heads.k0;
  if (layers == 0 || kvh == 0) return;
  for (auto [id, name] : {std::pair{ids::kv_keys, "kv_keys"}, std::pair{ids::kv_values, "kv_values"}}) {
    tensor_desc desc = L.mat(id, name, {layers, blocks, kvh, L.block_tokens, L.hd()});
    d.plan.memory.push_back({name, "kv", arena_bytes(desc.bytes())});
    temps.push_back(std::move(desc));
  }
}

std::map<uint32_t, program> build_replica(const dlayout& L, int r, const std::vector<dtile>& tiles,
                                          const std::vector<std::vector<tensor_desc>>& temps) {
  detail::program_builder b;
  const models::model_shape& c = L.c;
  const int S = L.p.stages, W = L.p.width, M = L.p.micro_batches;
  const int64_t H = c.hidden_size;
  const auto& traits = c.traits();
  const bool qkv_bias = traits.qkv_bias, o_bias = traits.o_bias, mlp_bias = traits.mlp_bias;
  const bool layer_norm = c.norm != models::norm_kind::rms_norm;
  const bool rms = !layer_norm;
  models::activation act = models::activation::none;
  switch (c.activation) {
    case models::activation_kind::gelu: act = models::activation::gelu_erf; break;
    case models::activation_kind::gelu_tanh: act = models::activation::gelu_tanh; break;
    case models::activation_kind::relu: act = models::activation::relu; break;
    case models::activation_kind::silu: act = models::activation::silu; break;
  }
  const bool rotary = c.positions == models::position_kind::rotary;
  int max_layers = 0;
  for (int s = 0; s < S; ++s) {
    auto lr = L.layers_of(s);
    max_layers = std::max<int>(max_layers, static_cast<int>(lr.end - lr.begin));
  }
  const bool all_reduce = L.all_reduce();
  const int per_layer = all_reduce ? 2 : 4;  // supersteps
  const int K = per_layer * max_layers + 1;
  const int clocks = M + S - 1;
  const std::vector<uint32_t> members = detail::replica_tiles(L, r);
  b.open(members, temps, static_cast<size_t>(clocks * K));
  auto with = [](std::vector<uint32_t> v, bool cond, uint32_t id) {
    if (cond) v.push_back(id);
    return v;
  };
  for (int cl = 0; cl < clocks; ++cl) {
    for (int s = 0; s < S; ++s) {
      const int m = cl - s;
      if (m < 0 || m >= M) continue;
      auto lr = L.layers_of(s);
      const models::micro_batch mb{static_cast<uint32_t>(m), static_cast<uint32_t>(M)};
      const models::linear_params plain{mb, models::activation::none};
      const models::dec_norm_params norm{mb, rms, c.norm_eps};
      for (int w = 0; w < W; ++w) {
        const uint32_t t = L.tile_of(r, s, w);
        const dtile& d = tiles[t];
        // All-reduce: the W partial sums of layer l's sub-layer (attention's o_b or the MLP's
        // down_b) summed in lane order (slot j holds lane j < w ? j : j + 1), bias, residual.
        auto reduce = [&](int l, uint32_t bias, bool has_bias) {
          std::vector<uint32_t> in;
          for (int q = 0; q < W; ++q) in.push_back(q == w ? ids::partial : ids::reduce_slot(q < w ? q : q - 1));
          in.push_back(ids::hidden);
          if (has_bias) in.push_back(ids::dec_layer(l, bias));
          return make_call<kid::dec_reduce>(in, {ids::hidden}, models::dec_reduce_params{mb, static_cast<uint32_t>(W)});
        };
        for (int l = static_cast<int>(lr.begin); l < lr.end; ++l) {
          const size_t base = static_cast<size_t>(cl * K + per_layer * (l - lr.begin));
          auto& a = b.step(t, base).compute;
          if (all_reduce && l > lr.begin) a.push_back(reduce(l - 1, ids::down_b, mlp_bias));
          if (s == 0 && l == lr.begin)
            a.push_back(make_call<kid::dec_embed>(with({ids::token_ids, ids::step_meta, ids::word},
                                                     c.positions == models::position_kind::learned, ids::position),
                                                {ids::hidden}, {mb}));
          const models::dec_residual_params lane{mb, static_cast<uint32_t>(w), static_cast<uint32_t>(W)};
          a.push_back(make_call<kid::dec_norm>(
              with({ids::hidden, ids::dec_layer(l, ids::norm1_w)}, layer_norm, ids::dec_layer(l, ids::norm1_b)), {ids::normed}, norm));
          a.push_back(make_call<kid::linear>(with({ids::normed, ids::dec_layer(l, ids::q_w)}, qkv_bias, ids::dec_layer(l, ids::q_b)),
                                           {ids::dec_q}, plain));
          a.push_back(make_call<kid::linear>(with({ids::normed, ids::dec_layer(l, ids::k_w)}, qkv_bias, ids::dec_layer(l, ids::k_b)),
                                           {ids::dec_k}, plain));
          a.push_back(make_call<kid::linear>(with({ids::normed, ids::dec_layer(l, ids::v_w)}, qkv_bias, ids::dec_layer(l, ids::v_b)),
                                           {ids::dec_v}, plain));
          models::dec_attention_params att{mb};
          att.layer = static_cast<uint32_t>(l - lr.begin);
          att.q0 = static_cast<uint32_t>(d.heads.q0), att.q1 = static_cast<uint32_t>(d.heads.q1);
          att.k0 = static_cast<uint32_t>(d.heads.k0), att.k1 = static_cast<uint32_t>(d.heads.k1);
          att.head_dim = static_cast<uint32_t>(L.hd()), att.group = static_cast<uint32_t>(L.group());
          att.rotary = rotary, att.window = static_cast<uint32_t>(c.sliding_window);
          att.rope = c.rope();
          a.push_back(make_call<kid::dec_attention>(
              {ids::dec_q, ids::dec_k, ids::dec_v, ids::step_meta, ids::kv_keys, ids::kv_values}, {ids::context}, att));
          a.push_back(make_call<kid::linear>({ids::context, ids::dec_layer(l, ids::o_w)}, {ids::partial}, plain));
          if (all_reduce) b.step(t, base + 1).compute.push_back(reduce(l, ids::o_b, o_bias));
          else
            b.step(t, base + 1).compute.push_back(make_call<kid::dec_residual>(
                with({ids::partial, ids::hidden}, o_bias, ids::dec_layer(l, ids::o_b)), {ids::hidden}, lane));
          auto& f = b.step(t, all_reduce ? base + 1 : base + 2).compute;
          f.push_back(make_call<kid::dec_norm>(
              with({ids::hidden, ids::dec_layer(l, ids::norm2_w)}, layer_norm, ids::dec_layer(l, ids::norm2_b)), {ids::normed}, norm));
          if (c.gated_mlp) {
            f.push_back(make_call<kid::linear>({ids::normed, ids::dec_layer(l, ids::gate_w)}, {ids::dec_gate}, {mb, act}));
            f.push_back(make_call<kid::linear>({ids::normed, ids::dec_layer(l, ids::up_w)}, {ids::dec_up}, plain));
            f.push_back(make_call<kid::dec_multiply>({ids::dec_gate, ids::dec_up}, {ids::dec_up}, {mb}));
          } else {
            f.push_back(make_call<kid::linear>(with({ids::normed, ids::dec_layer(l, ids::up_w)}, mlp_bias, ids::dec_layer(l, ids::up_b)),
                                             {ids::dec_up}, {mb, act}));
          }
          f.push_back(make_call<kid::linear>({ids::dec_up, ids::dec_layer(l, ids::down_w)}, {ids::partial}, plain));
          if (all_reduce) {
            // The partial sums after the attention (base) and after the MLP (base + 1) to every
            // other lane; the stage's last layer sums the MLP's in a superstep of its own
            // (base + 2), which hands the rows to the next stage.
            const auto lanes = lanes_of(L, r, s, W);
            b.all_reduce_exchange(t, base, H, w, m, M, lanes);
            b.all_reduce_exchange(t, base + 1, H, w, m, M, lanes);
            if (l == lr.end - 1) {
              b.step(t, base + 2).compute.push_back(reduce(l, ids::down_b, mlp_bias));
              if (s + 1 < S) b.hand_on(t, base + 2, H, w, W, m, M, lanes_of(L, r, s + 1, W));
            }
            continue;
          }
          b.step(t, base + 3).compute.push_back(make_call<kid::dec_residual>(
              with({ids::partial, ids::hidden}, mlp_bias, ids::dec_layer(l, ids::down_b)), {ids::hidden}, lane));
          // Reduce-scatter the partial sums by token rows, all-gather the updated rows; the stage's
          // last layer hands its rows of the micro-batch to every lane of the next stage.
          b.layer_exchange(t, base, H, w, m, M, lanes_of(L, r, s, W),
                           l == lr.end - 1 && s + 1 < S ? lanes_of(L, r, s + 1, W) : std::vector<uint32_t>{});
        }
        if (s == S - 1 && w == 0) {
          const uint32_t head = L.lm_head_is_embedding(d.plan) ? ids::word : ids::lm_head;
          models::dec_logits_params final_norm;
          static_cast<models::dec_norm_params&>(final_norm) = norm;
          final_norm.head = L.p.vocab_slices == 1;  // split: every slice's dec_head after the rows are sent
          b.step(t, static_cast<size_t>(cl * K + K - 1)).compute.push_back(make_call<kid::dec_logits>(
              with({ids::hidden, ids::step_meta, head, ids::final_norm_w}, layer_norm, ids::final_norm_b),
              {ids::logits, ids::last_rows}, final_norm));
          // After the last micro-batch's logits: sample the rows that asked (models/token_sampling.hpp).
          if (m == M - 1 && L.p.vocab_slices == 1)
            b.step(t, static_cast<size_t>(cl * K + K - 1)).compute.push_back(make_call<kid::dec_sample>(
                {ids::logits, ids::step_meta, ids::sample_params}, {ids::samples}, models::rows_params{mb}));
        }
      }
    }
  }
  if (L.p.vocab_slices > 1) {
    // A vocab-parallel LM head, after the last micro-batch's dec_logits (the normed last rows, no
    // logits): the out tile sends the rows to the other slices (in that last step); every slice
    // (the out tile too) computes its logits and its record of every row at once and sends it to
    // the out tile (one superstep); the out tile merges them (a last superstep without exchange).
    const int V = L.p.vocab_slices;
    const size_t last = static_cast<size_t>(clocks * K - 1), part = last + 1, merge = last + 2;
    const uint32_t out = L.tile_of(r, S - 1, 0);
    const uint64_t rows_n = static_cast<uint64_t>(L.max_seqs) * static_cast<uint64_t>(H);
    const uint64_t rec_n = static_cast<uint64_t>(L.max_seqs) * models::kSliceRecord;
    const models::rows_params whole{models::micro_batch{0, 1}};
    for (int j = 0; j < V; ++j) {
      uint32_t t = out;
      for (int s = 0; s < S; ++s)
        for (int w = 0; w < W; ++w)
          if (L.slice_of(s, w) == j) t = L.tile_of(r, s, w);
      const row_range v = L.vocab_of(j);
      models::dec_slice_params sp{models::micro_batch{0, 1}};
      sp.slice = static_cast<uint32_t>(j), sp.slices = static_cast<uint32_t>(V);
      sp.begin = static_cast<uint32_t>(v.begin), sp.vocab = static_cast<uint32_t>(c.vocab_size);
      auto& a = b.step(t, part).compute;
      if (j > 0)
        b.connect(out, t, last, {ids::last_rows, slice_kind::fixed, 0, rows_n}, {ids::last_rows, slice_kind::fixed, 0, rows_n}, false);
      a.push_back(make_call<kid::dec_head>({ids::last_rows, ids::step_meta, ids::lm_head}, {ids::logits}, whole));
      a.push_back(make_call<kid::dec_sample_part>({ids::logits, ids::step_meta, ids::sample_params}, {ids::sample_parts}, sp));
      if (j > 0)
        b.connect(t, out, part, {ids::sample_parts, slice_kind::fixed, 0, rec_n},
                  {ids::sample_parts, slice_kind::fixed, static_cast<uint64_t>(j) * rec_n, rec_n}, false);
      if (j == 0) {
        sp.slice = 0;
        b.step(out, merge).compute.push_back(
            make_call<kid::dec_sample_merge>({ids::sample_parts, ids::step_meta, ids::sample_params}, {ids::samples}, sp));
      }
    }
  }
  b.set_sync_flags(members);
  if (L.feeds) {
    // The out tile's sampled ids go to the first stage in the step's last superstep (no barrier:
    // the run ends there, and the receive waits for them); the next step's first superstep puts
    // them in place of the ids that name a row (dec_feed, before dec_embed).
    const uint32_t out = L.tile_of(r, S - 1, 0);
    const size_t last = static_cast<size_t>(clocks * K - 1);
    const models::rows_params whole{models::micro_batch{0, 1}};
    b.step(out, last).compute.push_back(
        make_call<kid::dec_next_ids>({ids::samples, ids::step_meta, ids::sample_params}, {ids::next_ids}, whole));
    const slice_ref next{ids::next_ids, slice_kind::fixed, 0, static_cast<uint64_t>(L.max_seqs)};
    for (uint32_t t : lanes_of(L, r, 0, W)) {
      if (t != out) b.connect(out, t, last, next, next, false);
      auto& first = b.step(t, 0).compute;
      first.insert(first.begin(), make_call<kid::dec_feed>({ids::token_ids, ids::next_ids}, {ids::token_ids}, whole));
    }
  }
  return b.progs;
}

// tiles, max_bytes: with the chosen (or minimum) KV; fits: that KV fits.
struct dlayout_result : detail::laid_out {
  std::vector<dtile> dtiles;
  std::vector<weight_shard> shards;
  std::vector<std::vector<tensor_desc>> temps;
  int kv_blocks = 0;  // chosen (0: the minimum does not fit)
};

dlayout_result lay_out(const dlayout& L, uint64_t cap, int forced_blocks, int min_blocks, int auto_cap_blocks) {
  dlayout_result out;
  out.dtiles.resize(static_cast<size_t>(L.p.tiles()));
  out.temps.resize(out.dtiles.size());
  detail::for_each_place(L, [&](const tile_plan& place) {
    dtile& d = out.dtiles[place.tile];
    d.plan = place;
    plan_tile(L, d, out.shards, out.temps[place.tile]);
  });
  // Blocks every tile can hold after its weights and activations (the fullest decides).
  int64_t fit = INT32_MAX;
  for (const auto& d : out.dtiles) {
    const uint64_t base = d.plan.total_bytes();
    if (d.kv_bytes_per_block == 0) continue;
    // Two tensors (K, V), each rounded to the arena's alignment: allow for it.
    const int64_t room = base + 2 * exchange::tensor_alignment > cap ? -1
                                                                     : static_cast<int64_t>((cap - base - 2 * exchange::tensor_alignment) / d.kv_bytes_per_block);
    fit = std::min(fit, room);
  }
  int blocks = forced_blocks > 0 ? forced_blocks : static_cast<int>(std::min<int64_t>(fit, auto_cap_blocks));
  blocks = std::max(blocks, forced_blocks > 0 ? forced_blocks : min_blocks);
  out.kv_blocks = fit >= blocks ? blocks : 0;
  out.fits = out.kv_blocks > 0;
  for (size_t i = 0; i < out.dtiles.size(); ++i) {
    add_kv(L, out.dtiles[i], blocks, out.temps[i]);
    out.max_bytes = std::max(out.max_bytes, out.dtiles[i].plan.total_bytes());
    out.tiles.push_back(out.dtiles[i].plan);
  }
  return out;
}

}  // namespace

double estimate_step_seconds(const models::model_shape& c, const plan& p, int tokens, int seqs, const machine_model& mm,
                             models::dtype weights) {
  const double wbytes = weights == models::dtype::bf16 ? 2 : 4;
  const double H = c.hidden_size, F = c.intermediate_size, W = p.width, M = p.micro_batches;
  const double qw = c.q_width(), kvw = c.kv_width();
  const double n = p.tiles();
  const double rate = mm.tile_flops * std::min(1.0, mm.cores / n);
  const double micro_tokens = std::max(1.0, tokens / M);
  const double avg_context = c.sliding_window > 0 ? std::min(256.0, double(c.sliding_window)) : 256.0;
  const double layer_weights = H * (qw + 2 * kvw) + qw * H + H * F * (c.gated_mlp ? 3 : 2);
  const double layer_flops = micro_tokens * (2 * layer_weights + 4 * avg_context * qw);
  const double layers = std::ceil(double(c.num_layers) / p.stages);
  // A decode step reads every weight once: memory bound below ~ (bandwidth / flops) tokens.
  const double bytes_per_s = 10e9 * std::min(1.0, mm.cores / n);
  double step = layers * std::max(layer_flops / W / rate, layer_weights * wbytes / W / bytes_per_s);
  if (p.width > 1 && p.reduce == collective::all_reduce) {
    // Two exchanges a layer, each lane's whole partial rows to the W - 1 others.
    const double bytes = 2 * (W - 1) * micro_tokens * H * 4;
    step += layers * (bytes / mm.link_bytes_per_s + 2 * (W - 1) * mm.message_seconds + 2 * mm.sync_seconds);
  } else if (p.width > 1) {
    const double bytes = 2 * 2 * (W - 1) / W * micro_tokens * H * 4;
    step += layers * (bytes / mm.link_bytes_per_s + 4 * (W - 1) * mm.message_seconds + 4 * mm.sync_seconds);
  }
  if (p.stages > 1) step += micro_tokens * H * 4 / mm.link_bytes_per_s + mm.sync_seconds;
  // A vocab-parallel head: each slice reads its rows, then two exchanges (rows out, records back).
  const double V = std::max(1, p.vocab_slices);
  double head = std::max(2.0 * seqs * H * c.vocab_size / rate, H * c.vocab_size * wbytes / bytes_per_s) / V;
  if (V > 1) head += 2 * (mm.sync_seconds + (V - 1) * mm.message_seconds);
  return (M + p.stages - 1) * step + head;
}

result<std::vector<float>> materialize(const models::decoder_model& m, const weight_shard& sh) {
  const models::model_shape& c = m.shape();
  const models::decoder_weights& w = m.weights();
  const int64_t H = c.hidden_size, F = c.intermediate_size, qw = c.q_width(), kvw = c.kv_width();
  struct src {
    const float* data;
    int64_t rows, cols;
  };
  auto find = [&](const std::string& name) -> result<src> {
    if (name == "token_embedding") return src{w.token_embedding, c.vocab_size, H};
    if (name == "position_embedding") return src{w.position_embedding, c.max_position_embeddings, H};
    if (name == "final_norm_w") return src{w.final_norm_w, H, 1};
    if (name == "final_norm_b") return src{w.final_norm_b, H, 1};
    if (name == "lm_head") return src{w.lm_head, c.vocab_size, H};
    int l = -1;
    char what[32] = {0};
    if (std::sscanf(name.c_str(), "layers.%d.%31s", &l, what) == 2 && l >= 0 && l < c.num_layers) {
      const auto& lw = w.layers[static_cast<size_t>(l)];
      const std::string k = what;
      if (k == "norm1_w") return src{lw.norm1_w, H, 1};
      if (k == "norm1_b") return src{lw.norm1_b, H, 1};
      if (k == "norm2_w") return src{lw.norm2_w, H, 1};
      if (k == "norm2_b") return src{lw.norm2_b, H, 1};
      if (k == "q_w") return src{lw.q_w, qw, H};
      if (k == "q_b") return src{lw.q_b, qw, 1};
      if (k == "k_w") return src{lw.k_w, kvw, H};
      if (k == "k_b") return src{lw.k_b, kvw, 1};
      if (k == "v_w") return src{lw.v_w, kvw, H};
      if (k == "v_b") return src{lw.v_b, kvw, 1};
      if (k == "o_w") return src{lw.o_w, H, qw};
      if (k == "o_b") return src{lw.o_b, H, 1};
      if (k == "gate_w") return src{lw.gate_w, F, H};
      if (k == "up_w") return src{lw.up_w, F, H};
      if (k == "up_b") return src{lw.up_b, F, 1};
      if (k == "down_w") return src{lw.down_w, H, F};
      if (k == "down_b") return src{lw.down_b, H, 1};
    }
    return status::not_found("the decoder has no tensor '" + name + "'");
  };
  auto t = find(sh.source);
  if (!t) return t.error();
  if (!t->data) return status::not_found("the decoder's tensor '" + sh.source + "' is absent (" + m.source + ")");
  std::vector<float> out(sh.desc.elements());
  switch (sh.kind) {
    case shard_kind::whole:
      if (static_cast<uint64_t>(t->rows * t->cols) != out.size())
        return status::invalid("tensor " + sh.source + " has " + std::to_string(t->rows * t->cols) +
                               " values, the shard expects " + std::to_string(out.size()));
      std::copy_n(t->data, out.size(), out.begin());
      break;
    case shard_kind::rows:
      if (sh.begin < 0 || sh.end > t->rows || static_cast<uint64_t>((sh.end - sh.begin) * t->cols) != out.size())
        return status::invalid("rows [" + std::to_string(sh.begin) + ", " + std::to_string(sh.end) + ") of " + sh.source +
                               " do not make the shard " + sh.desc.name);
      std::copy_n(t->data + int64_t{sh.begin} * t->cols, out.size(), out.begin());
      break;
    case shard_kind::columns: {
      const int64_t wd = sh.end - sh.begin;
      if (sh.begin < 0 || sh.end > t->cols || static_cast<uint64_t>(t->rows * wd) != out.size())
        return status::invalid("columns [" + std::to_string(sh.begin) + ", " + std::to_string(sh.end) + ") of " +
                               sh.source + " do not make the shard " + sh.desc.name);
      for (int64_t r = 0; r < t->rows; ++r)
        std::copy(t->data + r * t->cols + sh.begin, t->data + r * t->cols + sh.end, out.begin() + r * wd);
      break;
    }
    default:
      return status::internal("shard kind not used by decoders for " + sh.source);
  }
  return out;
}

result<compiled_model> compile_decoder(const models::model_shape& c, const placement_request& req) {
  if (!c.is_decoder()) return status::invalid("compile_decoder takes a decoder shape, not " + c.name);
  if (req.tiles <= 0) return status::invalid("--tiles must be positive");
  if (req.dtype == models::dtype::int8)
    return status::unsupported("--dtype int8 runs the BERT encoder only; a decoder on tiles runs in fp32 or bf16");
  if (req.token_budget < 1) return status::invalid("--token-budget must be positive");
  if (req.kv_block_tokens < 1) return status::invalid("--kv-block-tokens must be positive");
  if (req.kv_blocks < 0) return status::invalid("--kv-blocks must be zero (as many as fit) or positive");
  const int max_seqs = req.max_sequences > 0 ? req.max_sequences : std::clamp(req.token_budget / 8, 1, 64);
  const int bt = req.kv_block_tokens;
  const int max_blocks = (c.max_position_embeddings + bt - 1) / bt;
  const int64_t meta = 2 + int64_t{max_seqs} * (3 + max_blocks);
  // Every row's header, and 8192 history / bias entries shared by the rows (a row that does not
  // fit is sampled on the host from its logits).
  const int64_t sample = 1 + int64_t{max_seqs} * models::kSampleHeader + 2 * 8192;
  const int min_blocks = max_blocks;                                  // one sequence of the longest length
  const int auto_cap = std::max(min_blocks, (65536 + bt - 1) / bt);  // 65536 tokens in flight
  if (req.forced && req.forced->vocab_slices > req.forced->stages * req.forced->width)
    return status::invalid("--plan " + req.forced->to_string() + ": V=" + std::to_string(req.forced->vocab_slices) +
                           " LM-head vocabulary slices need as many tiles in a replica, which has S x W = " +
                           std::to_string(req.forced->stages * req.forced->width));
  if (req.feed_tokens && req.forced && req.forced->vocab_slices > 1)
    return status::invalid("--plan " + req.forced->to_string() + ": async scheduling (--async-scheduling on) needs the LM "
                           "head whole (V = 1); use --async-scheduling off with a vocab-parallel head");
  if (req.forced && req.forced->vocab_slices > c.vocab_size)
    return status::invalid("--plan " + req.forced->to_string() + ": more LM-head slices than vocabulary rows (" +
                           std::to_string(c.vocab_size) + ")");
  if (req.forced && req.reduce == collective::all_reduce && req.forced->width == 1)
    return status::invalid("--collective allreduce reduces the partial sums of a stage's lanes, and --plan " +
                           req.forced->to_string() + " has one lane (W=1): give a plan with W > 1, or rs-ag or auto");
  if (req.forced && req.reduce == collective::all_reduce && req.forced->width - 1 > ids::max_reduce_slots)
    return status::invalid("--collective allreduce: W=" + std::to_string(req.forced->width) + " lanes need " +
                           std::to_string(req.forced->width - 1) + " receive slots, at most " +
                           std::to_string(ids::max_reduce_slots) + " (use rs-ag)");
  auto make_layout = [&](const plan& p) {
    return dlayout{c, p, req.token_budget, max_seqs, bt, max_blocks, meta, sample, req.dtype, req.feed_tokens};
  };
  compiled_model best;
  const detail::plan_refusal words{
      "the decoder does not fit: weights, activations and " +
          std::string(req.kv_blocks > 0 ? "the " + std::to_string(req.kv_blocks) + " KV blocks asked for"
                                        : "a minimum KV cache (" + std::to_string(min_blocks) + " blocks of " +
                                              std::to_string(bt) + " positions: one sequence of " +
                                              std::to_string(c.max_position_embeddings) + " tokens)") +
          " need",
      "on the fullest tile", " with " + std::to_string(req.kv_blocks > 0 ? req.kv_blocks : min_blocks) + " KV blocks",
      "no tile count fits with this memory (the embedding is not split)"};
  TESSERA_RETURN_IF_ERROR(detail::search_plans(
      c, req, /*lanes_need_heads=*/true, best, words,
      [&](const plan& p) { return lay_out(make_layout(p), req.tile_memory, req.kv_blocks, min_blocks, auto_cap); },
      // Ranked by decode throughput: a step of max_seqs decode tokens.
      [&](const plan& p) {
        return p.replicas * max_seqs / estimate_step_seconds(c, p, max_seqs, max_seqs, req.machine, req.dtype);
      },
      [&](const plan& p, dlayout_result& lr) {
        best.tiles = lr.tiles;
        best.shards = std::move(lr.shards);
        best.estimated_batch_seconds = estimate_step_seconds(c, p, req.token_budget, max_seqs, req.machine, req.dtype);
        best.kv = {bt, lr.kv_blocks, req.dtype};
        best.programs.clear();
        for (int r = 0; r < p.replicas; ++r) best.programs.push_back(build_replica(make_layout(p), r, lr.dtiles, lr.temps));
        best.kv_heads_note = c.num_kv_heads >= p.width
                                 ? std::to_string(c.num_kv_heads) + " kv heads split across " + std::to_string(p.width) +
                                       " lane(s)"
                                 : std::to_string(c.num_kv_heads) + " kv heads replicated: each of the " +
                                       std::to_string(p.width) + " lanes holds the kv heads its query heads read";
      },
      // A forced plan's V as given; else V = 1 (the head whole), 2, ... up to every tile of a
      // replica: the first that fits.
      [&](const plan& p) {
        std::vector<plan> v{p};
        if (req.forced || req.feed_tokens) return v;  // async scheduling keeps the head whole
        for (int n = 2; n <= p.stages * p.width && n <= c.vocab_size; ++n) {
          v.push_back(p);
          v.back().vocab_slices = n;
        }
        return v;
      },
      // W > 1: lanes that all-reduce (first: the other must be 2% faster to replace it) and lanes
      // that reduce-scatter + all-gather, as --collective allows.
      [&](const plan& p) {
        std::vector<plan> v;
        if (p.width == 1) return std::vector<plan>{p};
        if (req.reduce != collective::rs_ag && p.width - 1 <= ids::max_reduce_slots) {
          v.push_back(p);
          v.back().reduce = collective::all_reduce;
        }
        if (req.reduce != collective::all_reduce) {
          v.push_back(p);
          v.back().reduce = collective::rs_ag;
        }
        return v;
      }));
  static_cast<models::model_shape&>(best.config) = c;
  best.dtype = req.dtype;
  best.token_budget = req.token_budget;
  best.max_sequences = max_seqs;
  best.decoder = true;
  best.max_blocks_per_seq = max_blocks;
  best.meta_elements = meta;
  best.sample_elements = sample;
  best.feeds = req.feed_tokens;
  return best;
}

}  // namespace tessera::host
