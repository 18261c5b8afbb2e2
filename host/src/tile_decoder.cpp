#include "tessera/host/tile_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "tessera/host/tile_model.hpp"
#include "tessera/models/step_meta.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::host {

using namespace tessera::exchange;
namespace ids = tensor_ids;

result<std::unique_ptr<tile_decoder>> tile_decoder::deploy(tile_group& group, compiled_model compiled,
                                                           std::shared_ptr<const models::decoder_model> model,
                                                           const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!model) return status::invalid("tile_decoder::deploy: no model");
  const models::decoder_model* m = model.get();
  auto dec = deploy(group, std::move(compiled), model->shape(),
                    [m](const weight_shard& s) { return materialize(*m, s); }, progress);
  if (dec) (*dec)->model_ = std::move(model);
  return dec;
}

result<std::unique_ptr<tile_decoder>> tile_decoder::deploy(tile_group& group, compiled_model compiled,
                                                           const models::model_shape& shape, shard_cutter cut,
                                                           const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!compiled.decoder) return status::invalid("tile_decoder::deploy takes a compiled decoder (compile_decoder)");
  if (!cut) return status::invalid("tile_decoder::deploy: no shard cutter");
  if (static_cast<uint32_t>(compiled.chosen.tiles()) != group.size())
    return status::invalid("the plan needs " + std::to_string(compiled.chosen.tiles()) + " tiles, the group has " +
                           std::to_string(group.size()));
  uint64_t total = 0, done = 0;
  for (const auto& s : compiled.shards) total += s.desc.bytes();
  for (uint32_t t = 0; t < group.size(); ++t)
    TESSERA_RETURN_IF_ERROR(stream_shards(group, compiled, t, cut, done, progress, total));
  for (const auto& programs : compiled.programs) TESSERA_RETURN_IF_ERROR(group.load(programs));
  return std::unique_ptr<tile_decoder>(new tile_decoder(group, std::move(compiled), shape, std::move(cut), nullptr));
}

logit_bound decoder_logit_bound(const models::model_shape& shape, models::dtype dtype) {
  logit_bound b;
  b.dtype = dtype;
  b.depth = shape.num_layers + 1;
  b.reduction = std::max<int64_t>({shape.hidden_size, shape.intermediate_size, shape.q_width()});
  b.per_layer = kReorderAmplification * std::sqrt(double(b.reduction)) * 0x1p-24 +
                (dtype == models::dtype::bf16 ? kBf16RoundingAmplification * 0x1p-8 : 0.0);
  b.derived = b.depth * b.per_layer;
  b.bound = std::min(b.derived, kLogitBoundCap);
  return b;
}

std::string logit_bound::to_string() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d x (%g x sqrt(%lld) x 2^-24%s) = %.2e%s", depth, kReorderAmplification,
                static_cast<long long>(reduction),
                dtype == models::dtype::bf16 ? (" + " + std::to_string(int(kBf16RoundingAmplification)) + " x 2^-8").c_str() : "",
                derived, derived > bound ? (", capped at " + std::to_string(kLogitBoundCap).substr(0, 3)).c_str() : "");
  return buf;
}

double scaled_logit_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 1;
  const size_t n = std::min(got.size(), want.size());
  for (size_t v = 0; v < n; ++v) {
    diff = std::max(diff, std::abs(double(got[v]) - double(want[v])));
    scale = std::max(scale, std::abs(double(want[v])));
  }
  if (got.size() != want.size()) return INFINITY;
  return diff / scale;
}

status tile_decoder::restore_tile(uint32_t tile) { return restore_shards_and_programs(group_, compiled_, tile, cut_); }

result<shard_cutter> seeded_decoder_cutter(const models::model_shape& shape, uint64_t seed) {
  TESSERA_RETURN_IF_ERROR(shape.validate());
  if (!shape.is_decoder()) return status::invalid(shape.name + " is not a decoder");
  // The HF tensors whose seeded streams the kernels' tensors (materialize) read.
  std::map<std::string, models::tensor_spec> hf;
  for (auto& s : models::expected_decoder_tensors(shape)) hf[s.name] = s;
  // Where element (r, c) of a kernel tensor [rows, cols] lies in its HF tensor's stream: off + r rs + c cs.
  // LLaMA's tensors are the kernels' own layout (rs = cols, cs = 1); GPT-2's Conv1D weights [in, out]
  // are read transposed (rs = 1, cs = out), Q, K and V as column ranges of c_attn (and its bias).
  struct source {
    std::string name;
    int64_t rows = 0, cols = 1, off = 0, rs = 1, cs = 1;
  };
  const bool gpt2 = shape.traits().conv1d_weights, tied = shape.tie_word_embeddings;
  const int64_t H = shape.hidden_size, F = shape.intermediate_size, qw = shape.q_width(), kvw = shape.kv_width();
  const int64_t V = shape.vocab_size, P = shape.max_position_embeddings, layers = shape.num_layers;
  // By value: the cutter outlives `shape` (ASan: stack-use-after-scope when it held a reference).
  auto locate = [=](const std::string& name) -> source {
    auto plain = [](std::string n, int64_t rows, int64_t cols) { return source{std::move(n), rows, cols, 0, cols, 1}; };
    const std::string embd = gpt2 ? "wte.weight" : "model.embed_tokens.weight";
    if (name == "token_embedding") return plain(embd, V, H);
    if (name == "position_embedding" && gpt2) return plain("wpe.weight", P, H);
    if (name == "final_norm_w") return plain(gpt2 ? "ln_f.weight" : "model.norm.weight", H, 1);
    if (name == "final_norm_b" && gpt2) return plain("ln_f.bias", H, 1);
    if (name == "lm_head") return plain(tied ? embd : "lm_head.weight", V, H);
    int l = -1;
    char what[32] = {0};
    if (std::sscanf(name.c_str(), "layers.%d.%31s", &l, what) != 2 || l < 0 || l >= layers) return {};
    const std::string k = what;
    if (gpt2) {
      const std::string p = "h." + std::to_string(l) + ".";
      const int64_t qkv = qw + 2 * kvw;
      if (k == "norm1_w") return plain(p + "ln_1.weight", H, 1);
      if (k == "norm1_b") return plain(p + "ln_1.bias", H, 1);
      if (k == "norm2_w") return plain(p + "ln_2.weight", H, 1);
      if (k == "norm2_b") return plain(p + "ln_2.bias", H, 1);
      if (k == "q_w") return {p + "attn.c_attn.weight", qw, H, 0, 1, qkv};
      if (k == "k_w") return {p + "attn.c_attn.weight", kvw, H, qw, 1, qkv};
      if (k == "v_w") return {p + "attn.c_attn.weight", kvw, H, qw + kvw, 1, qkv};
      if (k == "q_b") return {p + "attn.c_attn.bias", qw, 1, 0, 1, 1};
      if (k == "k_b") return {p + "attn.c_attn.bias", kvw, 1, qw, 1, 1};
      if (k == "v_b") return {p + "attn.c_attn.bias", kvw, 1, qw + kvw, 1, 1};
      if (k == "o_w") return {p + "attn.c_proj.weight", H, qw, 0, 1, H};
      if (k == "o_b") return plain(p + "attn.c_proj.bias", H, 1);
      if (k == "up_w") return {p + "mlp.c_fc.weight", F, H, 0, 1, F};
      if (k == "up_b") return plain(p + "mlp.c_fc.bias", F, 1);
      if (k == "down_w") return {p + "mlp.c_proj.weight", H, F, 0, 1, H};
      if (k == "down_b") return plain(p + "mlp.c_proj.bias", H, 1);
      return {};
    }
    static const std::map<std::string, std::pair<std::string, int>> part = {  // HF part, shape code
        {"norm1_w", {"input_layernorm.weight", 0}}, {"norm2_w", {"post_attention_layernorm.weight", 0}},
        {"q_w", {"self_attn.q_proj.weight", 1}},    {"q_b", {"self_attn.q_proj.bias", 2}},
        {"k_w", {"self_attn.k_proj.weight", 3}},    {"k_b", {"self_attn.k_proj.bias", 4}},
        {"v_w", {"self_attn.v_proj.weight", 3}},    {"v_b", {"self_attn.v_proj.bias", 4}},
        {"o_w", {"self_attn.o_proj.weight", 5}},    {"o_b", {"self_attn.o_proj.bias", 0}},
        {"gate_w", {"mlp.gate_proj.weight", 6}},    {"up_w", {"mlp.up_proj.weight", 6}},
        {"up_b", {"mlp.up_proj.bias", 7}},          {"down_w", {"mlp.down_proj.weight", 8}},
        {"down_b", {"mlp.down_proj.bias", 0}}};
    auto it = part.find(k);
    if (it == part.end()) return {};
    const std::pair<int64_t, int64_t> dims[] = {{H, 1}, {qw, H}, {qw, 1}, {kvw, H}, {kvw, 1}, {H, qw}, {F, H}, {F, 1}, {H, F}};
    const auto [rows, cols] = dims[it->second.second];
    return plain("model.layers." + std::to_string(l) + "." + it->second.first, rows, cols);
  };
  return shard_cutter([hf = std::move(hf), locate, seed](const weight_shard& sh) -> result<std::vector<float>> {
    const source s = locate(sh.source);
    auto it = hf.find(s.name);
    if (it == hf.end()) return status::not_found("the seeded decoder has no tensor '" + sh.source + "'");
    const models::tensor_spec& spec = it->second;
    std::vector<float> out(sh.desc.elements());
    const int64_t n = static_cast<int64_t>(out.size());
    int64_t r0 = 0, r1 = s.rows, c0 = 0, c1 = s.cols;
    switch (sh.kind) {
      case shard_kind::whole:
        if (s.rows * s.cols != n)
          return status::invalid("tensor " + sh.source + " has " + std::to_string(s.rows * s.cols) +
                                 " values, the shard expects " + std::to_string(n));
        break;
      case shard_kind::rows:
        if (sh.begin < 0 || sh.end > s.rows || (sh.end - sh.begin) * s.cols != n)
          return status::invalid("rows [" + std::to_string(sh.begin) + ", " + std::to_string(sh.end) + ") of " +
                                 sh.source + " do not make the shard " + sh.desc.name);
        r0 = sh.begin;
        r1 = sh.end;
        break;
      case shard_kind::columns:
        if (sh.begin < 0 || sh.end > s.cols || s.rows * (sh.end - sh.begin) != n)
          return status::invalid("columns [" + std::to_string(sh.begin) + ", " + std::to_string(sh.end) + ") of " +
                                 sh.source + " do not make the shard " + sh.desc.name);
        c0 = sh.begin;
        c1 = sh.end;
        break;
      default:
        return status::internal("shard kind not used by decoders for " + sh.source);
    }
    const int64_t wd = c1 - c0, ht = r1 - r0;
    if (s.cs == 1) {  // each kernel row's columns are consecutive in the stream
      for (int64_t r = r0; r < r1; ++r) models::fill_decoder_preset_range(spec, seed, s.off + r * s.rs + c0, wd, out.data() + (r - r0) * wd);
    } else {  // transposed: each kernel column's rows are consecutive
      std::vector<float> col(static_cast<size_t>(ht));
      for (int64_t c = c0; c < c1; ++c) {
        models::fill_decoder_preset_range(spec, seed, s.off + c * s.cs + r0, ht, col.data());
        for (int64_t r = 0; r < ht; ++r) out[static_cast<size_t>(r * wd + (c - c0))] = col[static_cast<size_t>(r)];
      }
    }
    return out;
  });
}

batch_record tile_decoder::step_record(int replica, const models::step_batch& batch, const tile_step_result& out,
                                       double start_seconds, const std::vector<bool>& decode, int64_t step) const {
  batch_record rec{"decoder", replica, out.batch_id, {}, start_seconds, out.wall_seconds, out.counters,
                   out.memory_high_water};
  int64_t prefill_chunks = 0, prefill_tokens = 0, decodes = 0;
  std::set<int32_t> blocks;
  for (size_t k = 0; k < batch.seqs.size(); ++k) {
    const auto& st = batch.seqs[k];
    rec.seq_lengths.push_back(static_cast<int32_t>(st.tokens.size()));
    const bool d = k < decode.size() && decode[k];
    decodes += d ? 1 : 0;
    prefill_chunks += d ? 0 : 1;
    prefill_tokens += d ? 0 : static_cast<int64_t>(st.tokens.size());
    blocks.insert(st.block_table.begin(), st.block_table.end());
  }
  const auto used = static_cast<uint64_t>(blocks.size());
  nlohmann::json per_tile = nlohmann::json::object();
  for (uint32_t t : replica_tiles(replica)) {
    const uint64_t kv = compiled_.tiles[t].bytes_of("kv");
    per_tile[std::to_string(t)] = {{"kv_blocks", used},
                                   {"kv_bytes", kv / static_cast<uint64_t>(compiled_.kv.num_blocks) * used}};
  }
  rec.args = {{"step", step}, {"prefill_chunks", prefill_chunks}, {"prefill_tokens", prefill_tokens}, {"decodes", decodes},
              {"kv_blocks_used", used}, {"kv_blocks_total", compiled_.kv.num_blocks}, {"tiles", per_tile}};
  return rec;
}

std::vector<uint32_t> tile_decoder::replica_tiles(int replica) const {
  std::vector<uint32_t> out;
  for (int s = 0; s < compiled_.chosen.stages; ++s)
    for (uint32_t t : compiled_.stage_tiles(replica, s)) out.push_back(t);
  return out;
}

status tile_decoder::validate(int replica, const models::step_batch& batch) const {
  const auto& c = compiled_;
  const models::model_shape& shape = shape_;
  if (replica < 0 || replica >= c.chosen.replicas) return status::invalid("replica " + std::to_string(replica) + " does not exist");
  if (batch.seqs.empty()) return status::invalid("the step is empty");
  if (static_cast<int>(batch.seqs.size()) > c.max_sequences)
    return status::invalid("the step has " + std::to_string(batch.seqs.size()) + " sequences, over the limit " +
                           std::to_string(c.max_sequences));
  if (batch.num_tokens() > c.token_budget)
    return status::invalid("the step has " + std::to_string(batch.num_tokens()) + " tokens, over the token budget " +
                           std::to_string(c.token_budget));
  const int bt = c.kv.block_tokens;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const auto& s = batch.seqs[i];
    const std::string where = "sequence " + std::to_string(s.seq_id) + " (step entry " + std::to_string(i) + ")";
    const bool fed = std::any_of(s.tokens.begin(), s.tokens.end(), [](int32_t t) { return t < 0; });
    if (fed) {
      // -(j + 1): the token the previous step sampled in its row j (dec_feed on the first stage).
      if (!c.feeds)
        return status::invalid(where + ": token id " + std::to_string(*std::min_element(s.tokens.begin(), s.tokens.end())) +
                               " is negative (a row of the previous step's samples needs a decoder compiled for "
                               "async scheduling)");
      for (int32_t t : s.tokens)
        if (t < 0 && -int64_t{t} > c.max_sequences)
          return status::invalid(where + ": token id " + std::to_string(t) + " names sample row " + std::to_string(-int64_t{t} - 1) +
                                 "; a step has at most " + std::to_string(c.max_sequences) + " rows");
      models::seq_step plain = s;
      for (auto& t : plain.tokens) t = std::max(t, 0);
      TESSERA_RETURN_IF_ERROR(models::check_step_entry(plain, shape, where));
    } else {
      TESSERA_RETURN_IF_ERROR(models::check_step_entry(s, shape, where));
    }
    if (s.sample) {
      if (!s.want_logits) return status::invalid(where + ": sample parameters on a sequence that wants no logits");
      if (auto st = models::check_sample_params(*s.sample, shape.vocab_size); !st.ok()) return st.with_context(where);
    }
    const int64_t end = int64_t{s.start_pos} + static_cast<int64_t>(s.tokens.size());
    const int64_t need = (end + bt - 1) / bt;
    if (static_cast<int64_t>(s.block_table.size()) < need)
      return status::invalid(where + ": block table has " + std::to_string(s.block_table.size()) + " blocks of " +
                             std::to_string(bt) + " positions but positions up to " + std::to_string(end - 1) + " need " +
                             std::to_string(need));
    for (int64_t b = 0; b < need; ++b) {
      const int32_t id = s.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= c.kv.num_blocks) {
        std::string tiles;
        for (uint32_t t : replica_tiles(replica)) tiles += (tiles.empty() ? "" : ", ") + std::to_string(t);
        return status::out_of_memory(where + ": block_table[" + std::to_string(b) + "] = " + std::to_string(id) +
                                     " is outside the KV cache of replica " + std::to_string(replica) + " (tiles " + tiles +
                                     "), which holds " + std::to_string(c.kv.num_blocks) + " blocks of " +
                                     std::to_string(bt) + " positions (" + std::to_string(int64_t{c.kv.num_blocks} * bt) +
                                     " tokens in flight; raise --tile-memory or --kv-blocks)");
      }
    }
  }
  return ok_status();
}

// A step ready to run: the batch_spec (its inputs point into the vectors here) and what reading
// its answer needs.
struct tile_decoder::prepared {
  batch_spec spec;
  std::vector<int32_t> tokens, meta, sample_in;
  int want = 0, sampled = 0;
  bool logits_out = false;
  std::vector<uint32_t> heads;
  uint32_t head = 0;
  size_t tbytes = 0, mbytes = 0, sbytes = 0;
};

result<std::shared_ptr<tile_decoder::prepared>> tile_decoder::prepare(int replica, const models::step_batch& batch) const {
  TESSERA_RETURN_IF_ERROR(validate(replica, batch));
  const auto& c = compiled_;
  auto p = std::make_shared<prepared>();
  // Token ids of the packed rows, and the step metadata (placement.hpp: tensor_ids::step_meta).
  std::vector<int32_t>& tokens = p->tokens;
  models::step_meta_writer meta_w(c.max_blocks_per_seq);
  int& want = p->want;
  batch_spec& spec = p->spec;
  spec.program_id = 1;
  spec.tiles = replica_tiles(replica);
  for (const auto& s : batch.seqs) {
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    spec.seq_lengths.push_back(static_cast<int32_t>(s.tokens.size()));
    const int64_t used = (int64_t{s.start_pos} + static_cast<int64_t>(s.tokens.size()) + c.kv.block_tokens - 1) /
                         c.kv.block_tokens;
    meta_w.add(s.start_pos, s.want_logits, std::span<const int32_t>(s.block_table.data(), static_cast<size_t>(used)));
    want += s.want_logits ? 1 : 0;
  }
  p->meta = meta_w.data();
  const std::vector<int32_t>& meta = p->meta;
  // Rows sampled on the LM-head tile answer a record; the others (no sample parameters, or
  // parameters past the tensor's room) their logits row.
  // A split LM head samples on the tiles only the rows whose draw merges exactly from the slices
  // (models::split_samplable); the others' logits are gathered here from the slices.
  models::sample_writer sample_w(c.sample_elements);
  int& sampled = p->sampled;
  const bool split = c.chosen.vocab_slices > 1;
  const bool asked = std::any_of(batch.seqs.begin(), batch.seqs.end(), [](const auto& s) { return s.sample.has_value(); });
  for (const auto& s : batch.seqs) {
    if (!asked || !s.want_logits) continue;
    if (!s.sample || (split && !models::split_samplable(*s.sample, c.config.vocab_size))) sample_w.add_logits();
    else if (sample_w.add(*s.sample)) ++sampled;
  }
  if (sample_w.rows() > 0 && sampled == 0) sample_w = models::sample_writer(c.sample_elements);  // all logits: as without
  p->sample_in = sample_w.data();
  const std::vector<int32_t>& sample_in = p->sample_in;
  spec.active_tokens = static_cast<int64_t>(tokens.size());
  p->tbytes = tokens.size() * 4, p->mbytes = meta.size() * 4, p->sbytes = sample_in.size() * 4;
  const size_t tbytes = p->tbytes, mbytes = p->mbytes, sbytes = p->sbytes;
  for (uint32_t t : c.stage_tiles(replica, 0))
    spec.inputs.push_back({t, {ids::token_ids, slice_kind::token_rows, 0, 1}, tokens.data(), tbytes});
  for (uint32_t t : spec.tiles) spec.inputs.push_back({t, {ids::step_meta, slice_kind::fixed, 0, meta.size()}, meta.data(), mbytes});
  p->head = c.output_tile(replica);
  p->heads = c.head_tiles(replica);  // slice j's tile (head first)
  const uint32_t head = p->head;
  const std::vector<uint32_t>& heads = p->heads;
  if (c.sample_elements > 0)
    for (uint32_t t : heads)
      spec.inputs.push_back({t, {ids::sample_params, slice_kind::fixed, 0, sample_in.size()}, sample_in.data(), sbytes});
  p->logits_out = want > sampled;
  const bool logits_out = p->logits_out;
  if (logits_out)
    for (size_t j = 0; j < heads.size(); ++j) {
      const auto v = c.vocab_slice(static_cast<int>(j));
      spec.outputs.push_back({heads[j], {ids::logits, slice_kind::fixed, 0, want * static_cast<uint64_t>(v.end - v.begin)}});
    }
  if (sampled > 0) spec.outputs.push_back({head, {ids::samples, slice_kind::fixed, 0, want * static_cast<uint64_t>(models::kSampleRecord)}});
  return p;
}

result<tile_step_result> tile_decoder::finish(const prepared& p, result<run_result> r) const {
  if (!r) return r.error();
  const auto& c = compiled_;
  const uint64_t vocab = static_cast<uint64_t>(c.config.vocab_size);
  const int want = p.want, sampled = p.sampled;
  const bool logits_out = p.logits_out;
  const std::vector<uint32_t>& heads = p.heads;
  tile_step_result out;
  if (sampled > 0) {
    const auto& flat = r->outputs[logits_out ? heads.size() : 0];
    if (flat.size() < static_cast<size_t>(want) * models::kSampleRecord)
      return status::bad_message("the LM-head tile answered " + std::to_string(flat.size()) + " sample values for " +
                                 std::to_string(want) + " rows");
    const auto* recs = reinterpret_cast<const int32_t*>(flat.data());
    for (int i = 0; i < want; ++i) {
      out.samples.push_back(models::read_sample_record(recs + static_cast<int64_t>(i) * models::kSampleRecord));
      const int32_t t = out.samples.back().token;
      if (t >= c.config.vocab_size || (t < 0 && !logits_out))
        return status::bad_message("the LM-head tile sampled token " + std::to_string(t) + " for row " + std::to_string(i));
    }
    out.output_bytes += flat.size() * 4;
  }
  if (logits_out) {
    for (size_t j = 0; j < heads.size(); ++j) {
      const auto v = c.vocab_slice(static_cast<int>(j));
      if (r->outputs[j].size() < static_cast<size_t>(want) * static_cast<size_t>(v.end - v.begin))
        return status::bad_message("LM-head tile " + std::to_string(heads[j]) + " answered " + std::to_string(r->outputs[j].size()) +
                                   " logits for " + std::to_string(want) + " rows of " + std::to_string(v.end - v.begin));
    }
    for (int i = 0; i < want; ++i) {
      if (sampled > 0 && out.samples[static_cast<size_t>(i)].token >= 0) {
        out.logits.emplace_back();  // sampled on the tile
        continue;
      }
      auto& row = out.logits.emplace_back();
      row.reserve(vocab);
      for (size_t j = 0; j < heads.size(); ++j) {  // the slices' columns in vocabulary order
        const auto v = c.vocab_slice(static_cast<int>(j));
        const auto n = static_cast<int64_t>(v.end - v.begin);
        const auto& flat = r->outputs[j];
        row.insert(row.end(), flat.begin() + i * n, flat.begin() + (i + 1) * n);
      }
    }
    for (size_t j = 0; j < heads.size(); ++j) out.output_bytes += r->outputs[j].size() * 4;
  }
  out.wall_seconds = r->wall_seconds;
  // The supersteps the tiles report running (each tile's counters, one a superstep); the
  // program's count when the run collected none.
  out.supersteps = r->counters.empty() ? c.supersteps() : 0;
  for (const auto& [t, cs] : r->counters) out.supersteps = std::max(out.supersteps, static_cast<int64_t>(cs.size()));
  for (const auto& [t, cs] : r->counters) {
    uint64_t compute = 0, wait = 0;
    for (const auto& s : cs) {
      out.bytes_exchanged += s.bytes_sent;
      compute += s.compute_ns;
      wait += s.exchange_ns + s.sync_ns;
    }
    if (compute * 1e-9 > out.busiest_compute_seconds) {
      out.busiest_compute_seconds = compute * 1e-9;
      out.busiest_exchange_seconds = wait * 1e-9;
    }
  }
  out.memory_high_water = r->memory_high_water;
  out.batch_id = r->batch_id;
  out.counters = r->counters;
  out.input_bytes = p.tbytes * c.chosen.width + p.mbytes * p.spec.tiles.size() + (c.sample_elements > 0 ? p.sbytes * heads.size() : 0);
  return out;
}

result<tile_step_result> tile_decoder::step(int replica, const models::step_batch& batch) {
  auto p = prepare(replica, batch);
  if (!p) return p.error();
  return finish(**p, group_.run((*p)->spec));
}

void tile_decoder::submit_step(int replica, const models::step_batch& batch,
                               std::function<void(result<tile_step_result>)> done) {
  auto p = prepare(replica, batch);
  if (!p) return done(p.error());
  // The group copies the inputs as it sends them; `pending` keeps what reading the answer needs.
  std::shared_ptr<prepared> pending = std::move(*p);
  group_.submit(pending->spec, [this, pending, done = std::move(done)](result<run_result> r) {
    done(finish(*pending, std::move(r)));
  });
}

}  // namespace tessera::host
