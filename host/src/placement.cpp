#include "tessera/host/placement.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "placement_internal.hpp"
#include "tessera/common/units.hpp"
#include "tessera/models/int8_weights.hpp"
#include "tessera/models/kernels_int8.hpp"
#include "tessera/models/model.hpp"

namespace tessera::host {

using detail::plans_for;
using detail::memory_table;
using detail::program_builder;

std::string plan::to_string() const {
  return "R=" + std::to_string(replicas) + " S=" + std::to_string(stages) + " W=" + std::to_string(width) +
         " M=" + std::to_string(micro_batches) + (vocab_slices > 1 ? " V=" + std::to_string(vocab_slices) : "") +
         (width > 1 && reduce == collective::all_reduce ? " all-reduce" : "");
}

const char* collective_name(collective c) {
  switch (c) {
    case collective::rs_ag: return "rs-ag";
    case collective::all_reduce: return "allreduce";
    case collective::automatic: return "auto";
  }
  return "?";
}

result<collective> parse_collective(const std::string& text) {
  for (collective c : {collective::all_reduce, collective::rs_ag, collective::automatic})
    if (text == collective_name(c)) return c;
  return status::invalid("--collective '" + text +
                         "' is not allreduce (one superstep a sub-layer: every lane sums all partials), rs-ag "
                         "(reduce-scatter + all-gather: two) or auto (the plan ranking's choice)");
}

result<plan> parse_plan(const std::string& text) {
  std::vector<int> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      int x = std::stoi(item, &used);
      if (used != item.size() || x <= 0) throw std::invalid_argument("bad");
      v.push_back(x);
    } catch (const std::exception&) {
      v.clear();
      break;
    }
  }
  if (v.size() < 3 || v.size() > 5)
    return status::invalid("--plan '" + text +
                           "' is not R,S,W or R,S,W,M or R,S,W,M,V with positive integers (e.g. 2,1,4; V: LM-head "
                           "vocabulary slices of a decoder, e.g. 1,1,2,1,2)");
  plan p{v[0], v[1], v[2], v.size() >= 4 ? v[3] : (v[1] > 1 ? 2 * v[1] : 1), v.size() == 5 ? v[4] : 1};
  return p;
}

machine_model machine_model::this_machine() {
  machine_model m;
  m.cores = std::max(1u, std::thread::hardware_concurrency());
  return m;
}

uint64_t tile_plan::total_bytes() const {
  uint64_t n = 0;
  for (const auto& i : memory) n += i.bytes;
  return n;
}

uint64_t tile_plan::bytes_of(const std::string& kind) const {
  uint64_t n = 0;
  for (const auto& i : memory)
    if (i.kind == kind) n += i.bytes;
  return n;
}

std::vector<uint32_t> compiled_model::stage_tiles(int replica, int stage) const {
  std::vector<uint32_t> v;
  for (int w = 0; w < chosen.width; ++w)
    v.push_back(static_cast<uint32_t>((replica * chosen.stages + stage) * chosen.width + w));
  return v;
}

int compiled_model::output_width() const { return config.num_labels > 0 ? config.num_labels : config.hidden_size; }

uint32_t compiled_model::output_tile(int replica) const { return stage_tiles(replica, chosen.stages - 1)[0]; }

std::vector<uint32_t> compiled_model::head_tiles(int replica) const {
  // The last stage's lanes, then the earlier stages' tiles from the last backwards.
  std::vector<uint32_t> v;
  for (int s = chosen.stages - 1; s >= 0 && static_cast<int>(v.size()) < chosen.vocab_slices; --s)
    for (uint32_t t : stage_tiles(replica, s))
      if (static_cast<int>(v.size()) < chosen.vocab_slices) v.push_back(t);
  return v;
}

exchange::row_range compiled_model::vocab_slice(int slice) const {
  return exchange::token_partition(config.vocab_size, static_cast<uint32_t>(slice), static_cast<uint32_t>(chosen.vocab_slices));
}

int compiled_model::barriers() const {
  if (programs.empty()) return 0;
  int n = 0;
  for (const auto& s : programs[0].begin()->second.steps) n += s.sync ? 1 : 0;
  return n;
}

int compiled_model::supersteps() const { return programs.empty() ? 0 : static_cast<int>(programs[0].begin()->second.steps.size()); }

namespace {

struct layout {
  const models::bert_config& cfg;
  plan p;
  int budget;
  int max_seqs;
  models::dtype dt = models::dtype::fp32;
  models::pooling_mode pooling = models::pooling_mode::cls;  ///< an embedding model's (num_labels 0)
  // A matrix or an activation: bf16 in a bf16 model.
  tensor_desc mat(uint32_t id, std::string name, std::vector<int64_t> shape) const {
    return {id, std::move(name), dt == models::dtype::bf16 ? dtype::bf16 : dtype::f32, std::move(shape)};
  }
  bool int8() const { return dt == models::dtype::int8; }
  // An encoder Linear matrix (and the FFN activation): i8 in an int8 model, else as mat.
  tensor_desc lin(uint32_t id, std::string name, std::vector<int64_t> shape) const {
    if (int8()) return {id, std::move(name), dtype::i8, std::move(shape)};
    return mat(id, std::move(name), std::move(shape));
  }
  int hd() const { return cfg.head_dim(); }
  row_range layers_of(int stage) const { return token_partition(cfg.num_layers, stage, p.stages); }
  row_range heads_of(int lane) const { return token_partition(cfg.num_heads, lane, p.width); }
  row_range ffn_of(int lane) const { return token_partition(cfg.intermediate_size, lane, p.width); }
  uint32_t tile_of(int r, int s, int w) const { return static_cast<uint32_t>((r * p.stages + s) * p.width + w); }
};

// Everything one tile holds: weights (as shards) and activations (as program temporaries).
void plan_tile(const layout& L, tile_plan& t, std::vector<weight_shard>& shards, std::vector<tensor_desc>& temps) {
  const int64_t H = L.cfg.hidden_size, T = L.budget;
  auto heads = L.heads_of(t.lane);
  auto ffn = L.ffn_of(t.lane);
  auto layers = L.layers_of(t.stage);
  t.layer_begin = static_cast<int>(layers.begin), t.layer_end = static_cast<int>(layers.end);
  t.head_begin = static_cast<int>(heads.begin), t.head_end = static_cast<int>(heads.end);
  t.ffn_begin = static_cast<int>(ffn.begin), t.ffn_end = static_cast<int>(ffn.end);
  const int64_t hw = (heads.end - heads.begin) * L.hd(), fw = ffn.end - ffn.begin;
  detail::tile_contents add{t, shards, temps};
  const bool first = t.stage == 0, last = t.stage == L.p.stages - 1;
  if (first) {
    add.weight(L.mat(ids::word, "word_embeddings", {L.cfg.vocab_size, H}), shard_kind::whole, "embeddings.word_embeddings.weight");
    add.weight(L.mat(ids::position, "position_embeddings", {L.cfg.max_position_embeddings, H}), shard_kind::whole,
           "embeddings.position_embeddings.weight");
    add.weight(L.mat(ids::token_type, "token_type_embeddings", {L.cfg.type_vocab_size, H}), shard_kind::whole,
           "embeddings.token_type_embeddings.weight");
    add.weight(f32(ids::emb_gamma, "embeddings.ln.gamma", {H}), shard_kind::whole, "embeddings.LayerNorm.weight");
    add.weight(f32(ids::emb_beta, "embeddings.ln.beta", {H}), shard_kind::whole, "embeddings.LayerNorm.bias");
  }
  // int8: each Linear matrix's scales beside it (f32 [2 + rows]: its input's and output's static
  // scales, then each row's w_scale, from the whole rows).
  using site = models::int8_site;
  auto scales = [&](int l, uint32_t what, const std::string& name, int64_t rows, shard_kind cut, const std::string& source,
                    int b, int e, site x, std::optional<site> y = std::nullopt) {
    if (!L.int8()) return;
    weight_shard::int8_scales_ref ref{cut, l, static_cast<int>(x), y ? static_cast<int>(*y) : -1};
    add.weight(f32(ids::layer(l, what), name, {2 + rows}), shard_kind::int8_scales, source, b, e, ref);
  };
  for (int l = t.layer_begin; l < t.layer_end; ++l) {
    const std::string pre = "encoder.layer." + std::to_string(l) + ".";
    const std::string tag = "L" + std::to_string(l) + ".";
    add.weight(L.lin(ids::layer(l, ids::qkv_w), tag + "qkv.w", {3 * hw, H}), shard_kind::qkv_w, pre, t.head_begin, t.head_end);
    scales(l, ids::qkv_s, tag + "qkv.scales", 3 * hw, shard_kind::qkv_w, pre, t.head_begin, t.head_end, site::qkv_in);
    add.weight(f32(ids::layer(l, ids::qkv_b), tag + "qkv.b", {3 * hw}), shard_kind::qkv_b, pre, t.head_begin, t.head_end);
    add.weight(L.lin(ids::layer(l, ids::attn_out_w), tag + "attn_out.w", {H, hw}), shard_kind::columns,
           pre + "attention.output.dense.weight", t.head_begin * L.hd(), t.head_end * L.hd());
    scales(l, ids::attn_out_s, tag + "attn_out.scales", H, shard_kind::columns, pre + "attention.output.dense.weight",
           t.head_begin * L.hd(), t.head_end * L.hd(), site::context);
    add.weight(f32(ids::layer(l, ids::attn_out_b), tag + "attn_out.b", {H}), shard_kind::whole, pre + "attention.output.dense.bias");
    add.weight(f32(ids::layer(l, ids::attn_gamma), tag + "attn_ln.gamma", {H}), shard_kind::whole, pre + "attention.output.LayerNorm.weight");
    add.weight(f32(ids::layer(l, ids::attn_beta), tag + "attn_ln.beta", {H}), shard_kind::whole, pre + "attention.output.LayerNorm.bias");
    add.weight(L.lin(ids::layer(l, ids::ffn_in_w), tag + "ffn_in.w", {fw, H}), shard_kind::rows, pre + "intermediate.dense.weight",
           t.ffn_begin, t.ffn_end);
    scales(l, ids::ffn_in_s, tag + "ffn_in.scales", fw, shard_kind::rows, pre + "intermediate.dense.weight", t.ffn_begin,
           t.ffn_end, site::ffn_in, site::ffn_act);
    add.weight(f32(ids::layer(l, ids::ffn_in_b), tag + "ffn_in.b", {fw}), shard_kind::rows, pre + "intermediate.dense.bias",
           t.ffn_begin, t.ffn_end);
    add.weight(L.lin(ids::layer(l, ids::ffn_out_w), tag + "ffn_out.w", {H, fw}), shard_kind::columns, pre + "output.dense.weight",
           t.ffn_begin, t.ffn_end);
    scales(l, ids::ffn_out_s, tag + "ffn_out.scales", H, shard_kind::columns, pre + "output.dense.weight", t.ffn_begin,
           t.ffn_end, site::ffn_act);
    add.weight(f32(ids::layer(l, ids::ffn_out_b), tag + "ffn_out.b", {H}), shard_kind::whole, pre + "output.dense.bias");
    add.weight(f32(ids::layer(l, ids::out_gamma), tag + "out_ln.gamma", {H}), shard_kind::whole, pre + "output.LayerNorm.weight");
    add.weight(f32(ids::layer(l, ids::out_beta), tag + "out_ln.beta", {H}), shard_kind::whole, pre + "output.LayerNorm.bias");
  }
  const bool head_tile = last && t.lane == 0;
  const bool embedding = L.cfg.num_labels == 0;  // a sentence-transformers model: pooling, no head weights
  if (head_tile && !embedding) {
    add.weight(L.mat(ids::pooler_w, "pooler.w", {H, H}), shard_kind::whole, "pooler.dense.weight");
    add.weight(f32(ids::pooler_b, "pooler.b", {H}), shard_kind::whole, "pooler.dense.bias");
    add.weight(L.mat(ids::cls_w, "classifier.w", {L.cfg.num_labels, H}), shard_kind::whole, "classifier.weight");
    add.weight(f32(ids::cls_b, "classifier.b", {L.cfg.num_labels}), shard_kind::whole, "classifier.bias");
  }
  // Activations at the token budget.
  if (first) {
    add.act({ids::token_ids, "token_ids", dtype::i32, {T}});
    add.act({ids::token_types, "token_types", dtype::i32, {T}});
  }
  add.act(L.mat(ids::hidden, "hidden", {T, H}));
  if (t.layer_end > t.layer_begin) {
    add.act(L.mat(ids::qkv, "qkv", {T, 3 * hw}));
    add.act(L.mat(ids::context, "context", {T, hw}));
    add.act(f32(ids::partial, "partial_sum", {T, H}));
    add.act(L.lin(ids::ffn, "ffn", {T, fw}));
  }
  if (head_tile && !embedding) add.act(f32(ids::logits, "logits", {L.max_seqs, L.cfg.num_labels}));
  if (head_tile && embedding) add.act(f32(ids::logits, "pooled", {L.max_seqs, H}));
  // Exchange: the most this tile receives in one superstep (reduce-scatter / all-gather parts
  // of the stage, or a whole micro-batch from the previous stage), reserved in tile memory as
  // the emulated hardware would.
  const int64_t W = L.p.width;
  int64_t part_rows = (T + W - 1) / W;
  // Partial sums arrive as f32, hidden rows in the model's dtype (a bf16 row is half an f32 one).
  int64_t inbound = (W - 1) * part_rows * H;
  if (t.stage > 0) inbound = std::max<int64_t>(inbound, L.dt == models::dtype::bf16 ? (T * H + 1) / 2 : T * H);
  if (inbound > 0) add.act(f32(ids::exchange_buffer, "exchange_buffer", {inbound}), "exchange");
}

std::map<uint32_t, program> build_replica(const layout& L, int r, const std::vector<tile_plan>& plans,
                                          const std::vector<std::vector<tensor_desc>>& temps) {
  program_builder b;
  const int S = L.p.stages, W = L.p.width, M = L.p.micro_batches;
  const int64_t H = L.cfg.hidden_size;
  int max_layers = 0;
  for (int s = 0; s < S; ++s) {
    auto lr = L.layers_of(s);
    max_layers = std::max<int>(max_layers, static_cast<int>(lr.end - lr.begin));
  }
  const int K = 4 * max_layers + 1;  // supersteps per pipeline clock
  const int clocks = M + S - 1;
  const float eps = L.cfg.norm_eps;
  const std::vector<uint32_t> members = detail::replica_tiles(L, r);
  b.open(members, temps, static_cast<size_t>(clocks * K));
  auto mp = [&](int m) { return models::micro_batch{static_cast<uint32_t>(m), static_cast<uint32_t>(M)}; };
  for (int c = 0; c < clocks; ++c) {
    for (int s = 0; s < S; ++s) {
      const int m = c - s;
      if (m < 0 || m >= M) continue;
      auto lr = L.layers_of(s);
      for (int w = 0; w < W; ++w) {
        const uint32_t t = L.tile_of(r, s, w);
        const tile_plan& tp = plans[t];
        const int heads = tp.head_end - tp.head_begin;
        for (int l = static_cast<int>(lr.begin); l < lr.end; ++l) {
          const size_t base = static_cast<size_t>(c * K + 4 * (l - lr.begin));
          auto& a = b.step(t, base).compute;
          if (s == 0 && l == lr.begin)
            a.push_back(make_call<kid::embed>({ids::token_ids, ids::token_types, ids::word, ids::position, ids::token_type,
                                               ids::emb_gamma, ids::emb_beta}, {ids::hidden},
                                              {mp(m), eps, L.cfg.position_pad_id()}));
          // int8: x, W, W's scales, then the bias if any.
          auto lin = [&](uint32_t w, uint32_t scales, std::optional<uint32_t> bias) {
            std::vector<uint32_t> in{ids::layer(l, w)};
            if (L.int8()) in.push_back(ids::layer(l, scales));
            if (bias) in.push_back(ids::layer(l, *bias));
            return in;
          };
          auto with_x = [](uint32_t x, std::vector<uint32_t> rest) {
            rest.insert(rest.begin(), x);
            return rest;
          };
          a.push_back(make_call<kid::linear>(with_x(ids::hidden, lin(ids::qkv_w, ids::qkv_s, ids::qkv_b)), {ids::qkv},
                                             {mp(m), models::activation::none}));
          a.push_back(make_call<kid::attention>({ids::qkv}, {ids::context},
                                                {mp(m), static_cast<uint32_t>(heads), static_cast<uint32_t>(L.hd())}));
          a.push_back(make_call<kid::linear>(with_x(ids::context, lin(ids::attn_out_w, ids::attn_out_s, std::nullopt)),
                                             {ids::partial}, {mp(m), models::activation::none}));
          const models::bias_residual_ln_params lane{mp(m), static_cast<uint32_t>(w), static_cast<uint32_t>(W), eps};
          b.step(t, base + 1).compute.push_back(make_call<kid::bias_residual_ln>(
              {ids::partial, ids::layer(l, ids::attn_out_b), ids::hidden, ids::layer(l, ids::attn_gamma), ids::layer(l, ids::attn_beta)},
              {ids::hidden}, lane));
          auto& f = b.step(t, base + 2).compute;
          f.push_back(make_call<kid::linear>(with_x(ids::hidden, lin(ids::ffn_in_w, ids::ffn_in_s, ids::ffn_in_b)), {ids::ffn},
                                             {mp(m), models::activation::gelu_erf}));
          f.push_back(make_call<kid::linear>(with_x(ids::ffn, lin(ids::ffn_out_w, ids::ffn_out_s, std::nullopt)),
                                             {ids::partial}, {mp(m), models::activation::none}));
          b.step(t, base + 3).compute.push_back(make_call<kid::bias_residual_ln>(
              {ids::partial, ids::layer(l, ids::ffn_out_b), ids::hidden, ids::layer(l, ids::out_gamma), ids::layer(l, ids::out_beta)},
              {ids::hidden}, lane));
          // Reduce-scatter the partial sums by token rows, all-gather the updated rows; the stage's
          // last layer hands its rows of the micro-batch to every lane of the next stage.
          b.layer_exchange(t, base, H, w, m, M, lanes_of(L, r, s, W),
                           l == lr.end - 1 && s + 1 < S ? lanes_of(L, r, s + 1, W) : std::vector<uint32_t>{});
        }
        if (s == S - 1 && w == 0 && L.cfg.num_labels == 0)
          b.step(t, static_cast<size_t>(c * K + K - 1)).compute.push_back(
              make_call<kid::pool>({ids::hidden}, {ids::logits}, {mp(m), L.pooling}));
        else if (s == S - 1 && w == 0)
          b.step(t, static_cast<size_t>(c * K + K - 1)).compute.push_back(
              make_call<kid::classifier>({ids::hidden, ids::pooler_w, ids::pooler_b, ids::cls_w, ids::cls_b}, {ids::logits}, {mp(m)}));
      }
    }
  }
  b.set_sync_flags(members);
  return b.progs;
}

struct layout_result : detail::laid_out {
  std::vector<weight_shard> shards;
  std::vector<std::vector<tensor_desc>> temps;
};

layout_result lay_out(const layout& L) {
  layout_result out;
  out.tiles.resize(static_cast<size_t>(L.p.tiles()));
  out.temps.resize(out.tiles.size());
  detail::for_each_place(L, [&](const tile_plan& place) {
    tile_plan& t = out.tiles[place.tile] = place;
    plan_tile(L, t, out.shards, out.temps[place.tile]);
    out.max_bytes = std::max(out.max_bytes, t.total_bytes());
  });
  return out;
}

}  // namespace

namespace detail {

result<std::vector<plan>> candidate_plans(const models::model_shape& cfg, const placement_request& req,
                                          bool lanes_need_heads) {
  if (!req.forced) {
    auto all = plans_for(cfg, req.tiles);
    if (all.empty()) return status::invalid("no plan fits " + std::to_string(req.tiles) + " tiles");
    return all;
  }
  const plan& f = *req.forced;
  if (f.tiles() != req.tiles)
    return status::invalid("--plan " + f.to_string() + " uses " + std::to_string(f.tiles()) + " tiles, but --tiles is " +
                           std::to_string(req.tiles) + "; R x S x W must equal the tile count");
  if (f.stages > cfg.num_layers)
    return status::invalid("--plan has " + std::to_string(f.stages) + " stages but the model has only " +
                           std::to_string(cfg.num_layers) + " layers");
  if (lanes_need_heads && f.width > cfg.num_heads)
    return status::invalid("--plan has width " + std::to_string(f.width) + " but the model has only " +
                           std::to_string(cfg.num_heads) + " attention heads to split");
  if (f.micro_batches < 1) return status::invalid("--plan needs at least one micro-batch");
  return std::vector<plan>{f};
}

std::vector<plan> plans_for(const models::model_shape& cfg, int n) {
  std::vector<plan> v;
  for (int r = 1; r <= n; ++r) {
    if (n % r) continue;
    for (int s = 1; s <= n / r; ++s) {
      if ((n / r) % s || s > cfg.num_layers) continue;
      const int w = n / r / s;
      if (w > cfg.num_heads) continue;
      if (s == 1) v.push_back({r, s, w, 1});
      else
        for (int m : {s, 2 * s}) v.push_back({r, s, w, m});
    }
  }
  return v;
}


std::string memory_table(const std::vector<tile_plan>& tiles, uint64_t cap) {
  bool kv = false;
  for (const auto& t : tiles) kv |= t.bytes_of("kv") > 0;
  std::ostringstream os;
  char line[320];
  std::snprintf(line, sizeof line, "%-5s %-3s %-3s %-3s %-8s %-8s %-12s %12s %12s %12s %s%12s %s\n", "tile", "rep", "stg",
                "ln", "layers", "heads", "ffn_cols", "weights", "activations", "exchange", kv ? "          kv " : "",
                "total", "fits");
  os << line;
  for (const auto& t : tiles) {
    std::string kv_col = kv ? " " + std::string(12 - std::min<size_t>(12, format_bytes(t.bytes_of("kv")).size()), ' ') +
                                  format_bytes(t.bytes_of("kv")) : "";
    std::snprintf(line, sizeof line, "%-5u %-3d %-3d %-3d %-8s %-8s %-12s %12s %12s %12s%s %12s %s\n", t.tile, t.replica,
                  t.stage, t.lane, (std::to_string(t.layer_begin) + "-" + std::to_string(t.layer_end)).c_str(),
                  (std::to_string(t.head_begin) + "-" + std::to_string(t.head_end)).c_str(),
                  (std::to_string(t.ffn_begin) + "-" + std::to_string(t.ffn_end)).c_str(),
                  format_bytes(t.bytes_of("weights")).c_str(), format_bytes(t.bytes_of("activations")).c_str(),
                  format_bytes(t.bytes_of("exchange")).c_str(), kv_col.c_str(), format_bytes(t.total_bytes()).c_str(),
                  t.total_bytes() <= cap ? "yes" : "NO");
    os << line;
  }
  return os.str();
}

}  // namespace detail

double estimate_batch_seconds(const models::bert_config& cfg, const plan& p, int tokens, const machine_model& mm) {
  const double H = cfg.hidden_size, F = cfg.intermediate_size, W = p.width, M = p.micro_batches;
  const double n = p.tiles();
  const double rate = mm.tile_flops * std::min(1.0, mm.cores / n);  // tiles beyond the cores share them
  const double micro_tokens = tokens / M;
  const double avg_len = 128;  // attention cost per token grows with the sequence length
  const double layer_flops = micro_tokens * (2 * H * (4 * H + 2 * F) + 4 * avg_len * H);
  const double layers = std::ceil(double(cfg.num_layers) / p.stages);
  double step = layers * layer_flops / W / rate;
  if (p.width > 1) {
    const double bytes = 2 * 2 * (W - 1) / W * micro_tokens * H * 4;  // two all-reduces a layer
    step += layers * (bytes / mm.link_bytes_per_s + 4 * (W - 1) * mm.message_seconds + 4 * mm.sync_seconds);
  }
  if (p.stages > 1) step += micro_tokens * H * 4 / mm.link_bytes_per_s + mm.sync_seconds;
  const double embed_classifier = micro_tokens * H * 20 / rate;
  return (M + p.stages - 1) * step + embed_classifier * M;
}

result<std::vector<float>> materialize(const models::bert_weights& w, const models::bert_config& cfg, const weight_shard& sh) {
  std::vector<float> out(sh.desc.elements());
  auto get = [&](const std::string& name) { return w.tensor(name); };
  switch (sh.kind) {
    case shard_kind::whole: {
      auto t = get(sh.source);
      if (!t) return t.error();
      if (static_cast<uint64_t>(t->numel()) != out.size())
        return status::invalid("tensor " + sh.source + " has " + std::to_string(t->numel()) + " values, the shard expects " +
                               std::to_string(out.size()));
      std::copy(t->data, t->data + out.size(), out.begin());
      break;
    }
    case shard_kind::qkv_w:
    case shard_kind::qkv_b: {
      const int64_t hd = cfg.head_dim(), H = cfg.hidden_size;
      const int64_t rows = (sh.end - sh.begin) * hd;
      const bool is_w = sh.kind == shard_kind::qkv_w;
      size_t at = 0;
      for (const char* which : {"query", "key", "value"}) {
        auto t = get(sh.source + "attention.self." + which + (is_w ? ".weight" : ".bias"));
        if (!t) return t.error();
        const int64_t width = is_w ? H : 1;
        const float* src = t->data + sh.begin * hd * width;
        std::copy(src, src + rows * width, out.begin() + static_cast<int64_t>(at));
        at += static_cast<size_t>(rows * width);
      }
      break;
    }
    case shard_kind::rows: {
      auto t = get(sh.source);
      if (!t) return t.error();
      const int64_t width = t->shape.size() == 2 ? t->shape[1] : 1;
      std::copy(t->data + sh.begin * width, t->data + sh.end * width, out.begin());
      break;
    }
    case shard_kind::columns: {
      auto t = get(sh.source);
      if (!t) return t.error();
      const int64_t rows = t->shape[0], cols = t->shape[1], w = sh.end - sh.begin;
      for (int64_t r = 0; r < rows; ++r)
        std::copy(t->data + r * cols + sh.begin, t->data + r * cols + sh.end, out.begin() + r * w);
      break;
    }
    case shard_kind::int8_scales:
      return status::invalid("shard " + sh.desc.name + " holds int8 scales: cut it from the int8 model");
  }
  return out;
}

namespace {

// w_scale of each row of a matrix shard cut as `cut` (qkv_w: its heads' query, key and value
// rows; rows: rows [begin, end); columns: every row), over the whole row of the model's tensor.
result<std::vector<float>> row_scales(const models::bert_weights& w, const models::bert_config& cfg, shard_kind cut,
                                      const std::string& source, int begin, int end) {
  std::vector<float> out;
  auto add_rows = [&](const std::string& name, int64_t r0, int64_t r1) -> status {
    auto t = w.tensor(name);
    if (!t) return t.error();
    if (t->shape.size() != 2 || r1 > t->shape[0]) return status::invalid("tensor " + name + " is not a matrix of " + std::to_string(r1) + " rows");
    for (int64_t r = r0; r < r1; ++r) out.push_back(models::int8_row_scale(t->data + r * t->shape[1], t->shape[1]));
    return ok_status();
  };
  switch (cut) {
    case shard_kind::qkv_w:
      for (const char* which : {"query", "key", "value"})
        TESSERA_RETURN_IF_ERROR(add_rows(source + "attention.self." + which + ".weight", int64_t{begin} * cfg.head_dim(),
                                         int64_t{end} * cfg.head_dim()));
      return out;
    case shard_kind::rows:
      TESSERA_RETURN_IF_ERROR(add_rows(source, begin, end));
      return out;
    case shard_kind::columns: {
      auto t = w.tensor(source);
      if (!t) return t.error();
      TESSERA_RETURN_IF_ERROR(add_rows(source, 0, t->shape.empty() ? 0 : t->shape[0]));
      return out;
    }
    default:
      return status::invalid("an int8 matrix is cut by heads, rows or columns");
  }
}

}  // namespace

result<std::vector<float>> materialize(const models::bert_model& m, const weight_shard& sh) {
  const bool int8 = sh.kind == shard_kind::int8_scales || sh.desc.type == exchange::dtype::i8;
  if (!int8) return materialize(m.weights, m.config, sh);
  if (!m.int8)
    return status::invalid("shard " + sh.desc.name + " is int8 but the model has no int8 calibration (set_dtype(model, "
                           "dtype::int8) before deploying an int8 plan)");
  if (sh.kind == shard_kind::int8_scales) {
    const auto& r = sh.scales;
    if (r.layer < 0 || r.layer >= static_cast<int>(m.int8->layers.size()) || r.x_site < 0 || r.x_site >= models::kInt8Sites ||
        r.y_site >= models::kInt8Sites)
      return status::invalid("shard " + sh.desc.name + " names layer " + std::to_string(r.layer) + " sites " +
                             std::to_string(r.x_site) + ", " + std::to_string(r.y_site));
    const auto& x = m.int8->layers[static_cast<size_t>(r.layer)].x_scale;
    auto w = row_scales(m.weights, m.config, r.cut, sh.source, sh.begin, sh.end);
    if (!w) return w.error();
    std::vector<float> out{x[static_cast<size_t>(r.x_site)], r.y_site >= 0 ? x[static_cast<size_t>(r.y_site)] : 0.0f};
    out.insert(out.end(), w->begin(), w->end());
    return out;
  }
  auto values = materialize(m.weights, m.config, sh);
  if (!values) return values.error();
  auto scales = row_scales(m.weights, m.config, sh.kind, sh.source, sh.begin, sh.end);
  if (!scales) return scales.error();
  const int64_t rows = sh.desc.shape.empty() ? 0 : sh.desc.shape[0];
  if (sh.desc.shape.size() != 2 || static_cast<int64_t>(scales->size()) != rows)
    return status::internal("int8 shard " + sh.desc.name + " has " + std::to_string(rows) + " rows and " +
                            std::to_string(scales->size()) + " row scales");
  const int64_t width = sh.desc.shape[1];
  std::vector<int8_t> q(static_cast<size_t>(width));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = values->data() + r * width;
    models::quantize_weight_row(row, width, (*scales)[static_cast<size_t>(r)], q.data());
    std::copy(q.begin(), q.end(), row);
  }
  return values;
}

result<compiled_model> compile_bert(const models::bert_config& cfg, const placement_request& req) {
  TESSERA_RETURN_IF_ERROR(cfg.validate());
  if (req.tiles <= 0) return status::invalid("--tiles must be positive");
  if (req.forced && req.forced->vocab_slices != 1)
    return status::invalid("--plan " + req.forced->to_string() + ": V (LM-head vocabulary slices) is for decoders; " +
                           cfg.name + " has no LM head to split");
  if (req.reduce == collective::all_reduce)
    return status::invalid("--collective allreduce is for decoders: " + cfg.name +
                           "'s lanes reduce by reduce-scatter + all-gather only (use rs-ag or auto)");
  if (req.token_budget < 1)
    return status::invalid("--token-budget must be positive");
  if (req.token_budget < cfg.max_sequence_length())
    return status::invalid("--token-budget " + std::to_string(req.token_budget) + " is below the longest sequence (" +
                           std::to_string(cfg.max_sequence_length()) + " tokens); raise it");
  const int max_seqs = req.max_sequences > 0 ? req.max_sequences : std::max(1, req.token_budget / 8);
  auto make_layout = [&](const plan& p) { return layout{cfg, p, req.token_budget, max_seqs, req.dtype, req.pooling}; };
  compiled_model best;
  const detail::plan_refusal words{
      "the model does not fit: the best plan needs", "on its fullest tile", "",
      "no tile count fits with this memory (the parts that are not split, such as the embedding tables, need more)"};
  TESSERA_RETURN_IF_ERROR(detail::search_plans(
      cfg, req, /*lanes_need_heads=*/false, best, words,  // a BERT lane may hold no heads
      [&](const plan& p) {
        layout_result lr = lay_out(make_layout(p));
        lr.fits = lr.max_bytes <= req.tile_memory;
        return lr;
      },
      [&](const plan& p) { return p.replicas * req.token_budget / estimate_batch_seconds(cfg, p, req.token_budget, req.machine); },
      [&](const plan& p, layout_result& lr) {
        best.tiles = std::move(lr.tiles);
        best.shards = std::move(lr.shards);
        best.estimated_batch_seconds = estimate_batch_seconds(cfg, p, req.token_budget, req.machine);
        best.programs.clear();
        for (int r = 0; r < p.replicas; ++r) best.programs.push_back(build_replica(make_layout(p), r, best.tiles, lr.temps));
      }));
  best.config = cfg;
  best.dtype = req.dtype;
  best.pooling = req.pooling;
  best.token_budget = req.token_budget;
  best.max_sequences = max_seqs;
  return best;
}

// A rate with three significant figures: a 7B decoder's 0.51 tokens/s is not printed as 0.
std::string format_rate(double per_second) {
  char buf[32];
  if (!(per_second >= 0) || !std::isfinite(per_second)) return "?";
  if (per_second >= 100) std::snprintf(buf, sizeof buf, "%.0f", per_second);
  else std::snprintf(buf, sizeof buf, "%.3g", per_second);
  return buf;
}

std::string compiled_model::describe() const {
  std::ostringstream os;
  os << "plan " << chosen.to_string() << " (replicas x stages x width = " << chosen.tiles() << " tiles), "
     << models::dtype_name(dtype) << ", token budget "
     << token_budget << ", up to " << max_sequences << " sequences a batch, " << supersteps()
     << " supersteps a " << (decoder ? "step" : "batch") << "; cost model: " << estimated_batch_seconds * 1e3
     << " ms per full " << (decoder ? "step" : "batch") << " per replica\n";
  if (decoder)
    os << "KV cache: " << kv.num_blocks << " blocks of " << kv.block_tokens << " positions per replica ("
       << int64_t{kv.num_blocks} * kv.block_tokens << " tokens in flight) in " << models::dtype_name(kv.kv_dtype)
       << ", each tile holding its layers' and kv heads' part; "
       << kv_heads_note << "\n";
  if (decoder && chosen.vocab_slices > 1) {
    os << "LM head split by vocabulary over " << chosen.vocab_slices << " tiles of each replica (replica 0: tile";
    const auto ht = head_tiles(0);
    for (size_t j = 0; j < ht.size(); ++j) {
      const auto v = vocab_slice(static_cast<int>(j));
      os << (j ? ", " : " ") << ht[j] << " ids [" << v.begin << ", " << v.end << ")";
    }
    os << "); tile " << output_tile(0) << " merges the slices' samples\n";
  }
  if (!decoder && config.num_labels == 0) {
    os << "embedding model: the head tile of each replica (tile";
    for (int r = 0; r < chosen.replicas; ++r) os << (r ? ", " : " ") << output_tile(r);
    os << ") pools the last layer's rows (" << models::pooling_name(pooling) << " pooling) into a pooled ["
       << max_sequences << ", " << config.hidden_size << "] f32 tensor: only pooled vectors go to the host\n";
  }
  if (decoder && chosen.width > 1)
    os << "lanes reduce by "
       << (chosen.reduce == collective::all_reduce
               ? "all-reduce: each lane sends its whole partial rows to the other " + std::to_string(chosen.width - 1) +
                     " and sums the " + std::to_string(chosen.width) + " in lane order (2 supersteps a layer)"
               : std::string("reduce-scatter + all-gather (4 supersteps a layer)"))
       << "\n";
  if (candidates.size() > 1) {
    os << "plans that fit (estimated tokens/s):";
    for (const auto& [p, r] : candidates) os << "  " << p.to_string() << ": " << format_rate(r);
    os << "\n";
  }
  uint64_t cap = 0;
  for (const auto& t : tiles) cap = std::max(cap, t.total_bytes());
  os << memory_table(tiles, UINT64_MAX);
  return os.str();
}

}  // namespace tessera::host
