// tessera/host/tile_decoder.hpp: a compiled decoder (compile_decoder) deployed on a tile group.
//
// deploy() streams each tile its shards and loads the step programs (whose temporaries hold each
// tile's part of the paged KV cache). step() runs one mixed batch (prefill chunks and decode
// tokens, models::step_batch) on a replica: the token ids go to the first stage, the step
// metadata (positions, which sequences want logits, block tables) to every tile of the replica,
// and the logits come back from the last stage. The caller owns the block ids (one block space
// of compiled().kv.num_blocks per replica), as with models::decoder_model::step.
//
//   auto compiled = compile_decoder(model->shape(), req);
//   auto dec = tile_decoder::deploy(group, *compiled, model);
//   auto out = (*dec)->step(/*replica=*/0, batch);   // out->logits[i]: [vocab]
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessera/host/placement.hpp"
#include "tessera/host/profiler.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/decoder.hpp"

namespace tessera::host {

struct tile_step_result {
  /// Per sequence with want_logits, in batch order; empty for a row sampled on the LM-head tile.
  std::vector<std::vector<float>> logits;
  /// Per logits row when some seq_step carried sample parameters: the tile's token, log-probability
  /// and alternatives (token -1: that row's logits were sent). Empty when none asked.
  std::vector<models::token_logprob> samples;
  uint64_t output_bytes = 0;     ///< logits and samples the host fetched
  double wall_seconds = 0;
  int64_t supersteps = 0;        ///< as the tiles report them (their counters), else the program's
  uint64_t bytes_exchanged = 0;  ///< sent by all tiles of the replica (slices; the step's inputs not counted)
  uint64_t input_bytes = 0;      ///< token ids and step metadata the host sent
  double busiest_compute_seconds = 0;  ///< compute time of the replica's busiest tile (all supersteps)
  double busiest_exchange_seconds = 0; ///< that tile's exchange and barrier time
  std::map<uint32_t, uint64_t> memory_high_water;  ///< per tile, reported after the step
  uint64_t batch_id = 0;
  std::map<uint32_t, std::vector<exchange::superstep_counters>> counters;  ///< tile -> per superstep (a profiler's input)
};

class tile_decoder {
 public:
  static result<std::unique_ptr<tile_decoder>> deploy(tile_group& group, compiled_model compiled,
                                                      std::shared_ptr<const models::decoder_model> model,
                                                      const std::function<void(uint64_t, uint64_t)>& progress = {});
  /// The same with every shard cut by `cut` instead of from a model in this process (e.g.
  /// seeded_decoder_cutter: each shard generated from the seed as it is streamed, so a host
  /// places a model larger than its memory); restore_tile cuts with it again.
  static result<std::unique_ptr<tile_decoder>> deploy(tile_group& group, compiled_model compiled,
                                                      const models::model_shape& shape, shard_cutter cut,
                                                      const std::function<void(uint64_t, uint64_t)>& progress = {});
  /// Runs one mixed batch on `replica`. invalid_argument for a batch over the token budget or
  /// the sequence limit, an empty sequence, a token outside the vocabulary, a position beyond
  /// max_position_embeddings or a block table too short; out_of_memory naming the replica's tiles
  /// and the KV capacity for a block outside the cache; the tile group's status when a tile fails.
  result<tile_step_result> step(int replica, const models::step_batch& batch);
  /// The same, returning at once: `done` runs exactly once, on the tile group's I/O thread (it must
  /// not block), with what step() would return. Steps submitted to a replica run on its tiles in
  /// the order submitted, so step t+1 may be sent while step t runs (async scheduling): with
  /// compiled().feeds, a token id -(j + 1) takes the token step t sampled in its logits row j.
  void submit_step(int replica, const models::step_batch& batch, std::function<void(result<tile_step_result>)> done);
  /// A tile that came back empty: shards and programs again (its KV cache starts empty: the
  /// caller recomputes the sequences that lived there).
  status restore_tile(uint32_t tile);
  std::vector<uint32_t> replica_tiles(int replica) const;
  /// A step as a profiler's batch ("decoder" backend): its sequences' token counts, and in its
  /// args the step's mix (prefill chunks and their tokens, decodes: `decode[i]` says which
  /// sequences are single decode tokens) and the KV blocks its sequences hold (distinct block
  /// ids of their tables), on every tile of the replica with the bytes they take there.
  batch_record step_record(int replica, const models::step_batch& batch, const tile_step_result& out,
                           double start_seconds, const std::vector<bool>& decode, int64_t step) const;
  const compiled_model& compiled() const { return compiled_; }
  /// The model deployed from, or nullptr when the shards were cut by a shard_cutter.
  const models::decoder_model* model() const { return model_.get(); }
  const models::model_shape& shape() const { return shape_; }
  tile_group& group() { return group_; }

 private:
  tile_decoder(tile_group& g, compiled_model c, models::model_shape shape, shard_cutter cut,
               std::shared_ptr<const models::decoder_model> m)
      : group_(g), compiled_(std::move(c)), shape_(std::move(shape)), cut_(std::move(cut)), model_(std::move(m)) {}
  status validate(int replica, const models::step_batch& batch) const;
  struct prepared;
  result<std::shared_ptr<prepared>> prepare(int replica, const models::step_batch& batch) const;
  result<tile_step_result> finish(const prepared& p, result<run_result> r) const;
  tile_group& group_;
  compiled_model compiled_;
  models::model_shape shape_;
  shard_cutter cut_;
  std::shared_ptr<const models::decoder_model> model_;
};

/// How far a decoder's logits on tiles may lie from the one-process reference's in the same dtype
/// (tessera-host --check, scripts/llm-7b; derivation and measurements in docs/models.md, "How
/// close tile logits are"), as max |tile logit - reference logit| / max(1, max |reference logit|):
///   bound = (layers + 1) x (16 x sqrt(K) x 2^-24 [+ 6 x 2^-8 in bf16])
/// K is the widest sum of a layer (max of hidden, FFN and query widths): an fp32 sum of K terms
/// taken in another order (lanes' partial sums reduced on the exchange, GEMMs cut by columns)
/// differs by ~sqrt(K) x 2^-24 of its magnitude; in bf16 the next Linear rounds its input to bf16,
/// so a reordered value can land one bf16 rounding (2^-8) away. Each layer (and the LM head) adds
/// its own to the residual stream, so the bound grows linearly with depth; the constants (16 and 6)
/// cover what later layers make of it, measured on the seeded decoders (whose sharp attention
/// amplifies most) at 2, 22 and 32 layers with about 2x to spare at the deepest.
/// The bound is capped at kLogitBoundCap = 0.4: a wrong result (a shard cut from the wrong columns)
/// differs by ~0.5 on the seeded decoders at any depth (their logits saturate there), so a larger
/// bound could not fail; where the cap binds (bf16 from ~14 layers) the check separates right from
/// wrong by less than 2x each way (docs/models.md).
/// Greedy tokens are compared up to the first near tie: a reference top-2 margin below
/// 2 x bound x max(1, max |reference logit|) may flip under that noise.
inline constexpr double kReorderAmplification = 16, kBf16RoundingAmplification = 6, kLogitBoundCap = 0.4;
struct logit_bound {
  models::dtype dtype = models::dtype::fp32;
  int depth = 0;           ///< layers + 1 (the LM head)
  int64_t reduction = 0;   ///< K
  double per_layer = 0;    ///< 16 x sqrt(K) x 2^-24, + 6 x 2^-8 in bf16
  double derived = 0;      ///< depth x per_layer
  double bound = 0;        ///< min(derived, kLogitBoundCap)
  /// "23 x (16 x sqrt(5632) x 2^-24) = 1.65e-03" (bf16: "... + 6 x 2^-8) = 5.40e-01, capped at 0.4").
  std::string to_string() const;
};
logit_bound decoder_logit_bound(const models::model_shape& shape, models::dtype dtype);
/// max |got - want| / max(1, max |want|) over the row (the rows must be of one length).
double scaled_logit_difference(const std::vector<float>& got, const std::vector<float>& want);

/// A shard_cutter for seeded decoder weights (models::fill_decoder_preset_range): each shard's
/// values generated alone from (shape, seed), equal bit for bit to materialize() of
/// make_seeded_decoder(shape, seed): LLaMA-family [out, in] rows as they are, GPT-2's Conv1D
/// weights [in, out] read transposed (Q, K and V as column ranges of c_attn), biases, learned
/// positions and tied heads (the token embedding's stream) included.
result<shard_cutter> seeded_decoder_cutter(const models::model_shape& shape, uint64_t seed);

}  // namespace tessera::host
