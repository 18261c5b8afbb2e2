#include "tessera/host/tile_model.hpp"

#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tessera::host {

using namespace tessera::exchange;
namespace ids = tensor_ids;

result<std::unique_ptr<tile_model>> tile_model::deploy(tile_group& group, compiled_model compiled,
                                                       const models::bert_model& model,
                                                       const std::function<void(uint64_t, uint64_t)>& progress) {
  if (static_cast<uint32_t>(compiled.chosen.tiles()) != group.size())
    return status::invalid("the plan needs " + std::to_string(compiled.chosen.tiles()) + " tiles, the group has " +
                           std::to_string(group.size()));
  uint64_t total = 0, done = 0;
  for (const auto& s : compiled.shards) total += s.desc.bytes();
  auto cut = [&](const weight_shard& s) { return materialize(model, s); };
  for (uint32_t t = 0; t < group.size(); ++t)
    TESSERA_RETURN_IF_ERROR(stream_shards(group, compiled, t, cut, done, progress, total));
  for (const auto& programs : compiled.programs) TESSERA_RETURN_IF_ERROR(group.load(programs));
  return std::unique_ptr<tile_model>(new tile_model(group, std::move(compiled), model));
}

std::string ranking_barrier::describe() const {
  char buf[200];
  if (measured)
    std::snprintf(buf, sizeof buf,
                  "barrier %.1f us a superstep, measured on these %u tiles (median of %d empty supersteps; the constant "
                  "was %.0f us)",
                  seconds * 1e6, tiles, supersteps, given * 1e6);
  else
    std::snprintf(buf, sizeof buf, "barrier %.1f us a superstep, given (not measured)", seconds * 1e6);
  return buf;
}

result<ranked_start> start_ranked(const placement_request& req, tile_group_config group, const plan_compiler& compile,
                                  bool measure) {
  auto compiled = compile(req);
  if (!compiled) return compiled.error();
  group.tiles = static_cast<uint32_t>(req.tiles);
  group.tile_memory = req.tile_memory;
  auto started = tile_group::start(group);
  if (!started) return started.error().with_context("starting " + std::to_string(req.tiles) + " tiles");
  ranked_start r;
  r.group = std::move(*started);  // stopped by its destructor on the failures below
  r.barrier.seconds = r.barrier.given = req.machine.sync_seconds;
  if (measure) {
    auto probe = measure_barrier(*r.group);
    if (!probe) return probe.error();
    placement_request at = req;
    at.machine.sync_seconds = probe->seconds;
    compiled = compile(at);
    if (!compiled) return compiled.error().with_context("ranked with the measured barrier");
    r.barrier = {probe->seconds, true, req.machine.sync_seconds, probe->supersteps, probe->tiles};
  }
  r.compiled = std::move(*compiled);
  return r;
}

result<tile_deployment> deploy_bert(const models::bert_model& model, const placement_request& req,
                                    tile_group_config group, const deploy_hooks& hooks) {
  placement_request with_pooling = req;
  if (model.task == models::encoder_task::embedding) with_pooling.pooling = model.embedding.pooling;
  auto started = start_ranked(
      with_pooling, group, [&](const placement_request& r) { return compile_bert(model.config, r); },
      hooks.measure_barrier);
  if (!started.ok()) return started.error();
  if (hooks.compiled) hooks.compiled(started->compiled);
  tile_deployment d;
  d.group = std::move(started->group);
  d.barrier = started->barrier;
  auto deployed = tile_model::deploy(*d.group, std::move(started->compiled), model, hooks.progress);
  if (!deployed.ok()) return deployed.error().with_context("deploying the model on the tile group");
  d.model = std::move(*deployed);
  return d;
}

status stream_shards(tile_group& group, const compiled_model& compiled, uint32_t t, const shard_cutter& cut,
                     uint64_t& done, const std::function<void(uint64_t, uint64_t)>& progress, uint64_t total) {
  // Materialise a tile's shards a group at a time, send them, drop them: the host never holds a
  // second model, nor a whole tile's part of it (a 7B model's tile holds 2 GiB: streamed in
  // groups of at most kGroupBytes, the host's peak is a group and its frames in flight). A bf16
  // shard is converted here, once, and sent at 2 bytes an element; an i8 one at 1.
  constexpr uint64_t kGroupBytes = 256ull << 20;
  std::vector<std::vector<float>> data;
  std::vector<std::vector<models::bfloat16>> halves;
  std::vector<std::vector<int8_t>> bytes;
  std::vector<tile_group::alloc_request> reqs;
  uint64_t held = 0;
  auto flush = [&]() -> status {
    const uint64_t before = done;
    status st = group.alloc_many(reqs, [&](uint64_t sent, uint64_t) {
      done = before + sent;
      if (progress) progress(done, total);
    });
    reqs.clear();
    data.clear();
    halves.clear();
    bytes.clear();
    held = 0;
    return st;
  };
  for (const auto& s : compiled.shards) {
    if (s.tile != t) continue;
    auto d = cut(s);
    if (!d) return d.error().with_context("cutting " + s.desc.name + " for tile " + std::to_string(t));
    if (d->size() != s.desc.elements())
      return status::internal("shard " + s.desc.name + " cut to " + std::to_string(d->size()) + " values, its tensor holds " +
                              std::to_string(s.desc.elements()));
    if (s.desc.type == exchange::dtype::bf16) {
      halves.emplace_back(d->size());
      models::to_bf16(d->data(), static_cast<int64_t>(d->size()), halves.back().data());
      reqs.push_back({t, s.desc, halves.back().data()});
    } else if (s.desc.type == exchange::dtype::i8) {  // the cut holds the integers (materialize)
      auto& q = bytes.emplace_back(d->size());
      for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>((*d)[i]);
      reqs.push_back({t, s.desc, q.data()});
    } else {
      data.push_back(std::move(*d));
      reqs.push_back({t, s.desc, data.back().data()});
    }
    held += s.desc.bytes();
    if (held >= kGroupBytes) TESSERA_RETURN_IF_ERROR(flush());
  }
  return reqs.empty() ? ok_status() : flush();
}

status restore_shards_and_programs(tile_group& group, const compiled_model& compiled, uint32_t tile,
                                   const shard_cutter& cut) {
  uint64_t done = 0;
  status streamed = stream_shards(group, compiled, tile, cut, done, {}, 0);
#if defined(__GLIBC__)
  // The shards were cut on the supervisor's thread, in its own malloc arena, which glibc keeps
  // when they are freed: the host's RSS doubled (bert-mini: 66 -> 137 MiB) after the first
  // recovery and stayed there (scripts/soak). Give the pages back.
  malloc_trim(0);
#endif
  TESSERA_RETURN_IF_ERROR(streamed);
  for (const auto& programs : compiled.programs) {
    auto it = programs.find(tile);
    if (it != programs.end()) TESSERA_RETURN_IF_ERROR(group.load({{tile, it->second}}));
  }
  return ok_status();
}

status tile_model::restore_tile(uint32_t tile) {
  return restore_shards_and_programs(group_, compiled_, tile,
                                     [this](const weight_shard& s) { return materialize(model_, s); });
}

std::vector<uint32_t> tile_model::replica_tiles(int replica) const {
  std::vector<uint32_t> out;
  for (int s = 0; s < compiled_.chosen.stages; ++s)
    for (uint32_t t : compiled_.stage_tiles(replica, s)) out.push_back(t);
  return out;
}

result<tile_batch_result> tile_model::run(int replica, const models::packed_batch& batch, int64_t token_rows) {
  const auto& c = compiled_;
  if (replica < 0 || replica >= c.chosen.replicas)
    return status::invalid("replica " + std::to_string(replica) + " does not exist");
  if (batch.num_seqs() == 0) return status::invalid("the batch is empty");
  if (batch.num_tokens() > c.token_budget)
    return status::invalid("the batch has " + std::to_string(batch.num_tokens()) + " tokens, over the token budget " +
                           std::to_string(c.token_budget));
  if (batch.num_seqs() > c.max_sequences)
    return status::invalid("the batch has " + std::to_string(batch.num_seqs()) + " sequences, over the limit " +
                           std::to_string(c.max_sequences));
  TESSERA_RETURN_IF_ERROR(models::validate_batch(c.config, batch));
  batch_spec spec;
  spec.program_id = 1;
  spec.tiles = replica_tiles(replica);
  for (int i = 0; i < batch.num_seqs(); ++i) spec.seq_lengths.push_back(batch.seq_len(i));
  spec.active_tokens = batch.num_tokens();
  const size_t bytes = static_cast<size_t>(batch.num_tokens()) * 4;
  for (uint32_t t : c.stage_tiles(replica, 0)) {
    spec.inputs.push_back({t, {ids::token_ids, slice_kind::token_rows, 0, 1}, batch.token_ids.data(), bytes});
    spec.inputs.push_back({t, {ids::token_types, slice_kind::token_rows, 0, 1}, batch.token_type_ids.data(), bytes});
  }
  const uint64_t logits = static_cast<uint64_t>(batch.num_seqs()) * static_cast<uint64_t>(c.output_width());
  spec.outputs.push_back({c.output_tile(replica), {ids::logits, slice_kind::fixed, 0, logits}});
  // Every token's last-layer row: the head tile holds all of them (the stage's last all-gather),
  // rows [0, token_rows) of its hidden tensor, in the model's dtype.
  const uint64_t H = static_cast<uint64_t>(c.config.hidden_size);
  if (token_rows < 0 || token_rows > batch.num_tokens())
    return status::invalid("token_rows " + std::to_string(token_rows) + " is not in [0, " +
                           std::to_string(batch.num_tokens()) + "]");
  if (token_rows > 0)
    spec.outputs.push_back({c.output_tile(replica), {ids::hidden, slice_kind::fixed, 0, static_cast<uint64_t>(token_rows) * H},
                            c.dtype == models::dtype::bf16 ? exchange::dtype::bf16 : exchange::dtype::f32});
  auto r = group_.run(spec);
  if (!r) return r.error();
  tile_batch_result out;
  out.logits = std::move(r->outputs[0]);
  if (token_rows > 0) {
    out.token_rows = std::move(r->outputs[1]);
    if (out.token_rows.size() != static_cast<size_t>(token_rows) * H)
      return status::bad_message("the head tile sent " + std::to_string(out.token_rows.size()) + " token values, " +
                                 std::to_string(token_rows) + " tokens need " +
                                 std::to_string(static_cast<uint64_t>(token_rows) * H));
  }
  out.wall_seconds = r->wall_seconds;
  out.supersteps = c.supersteps();
  for (const auto& [t, cs] : r->counters)
    for (const auto& s : cs) out.bytes_exchanged += s.bytes_sent;
  out.memory_high_water = r->memory_high_water;
  out.counters = std::move(r->counters);
  return out;
}

}  // namespace tessera::host
