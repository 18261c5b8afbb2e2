// tessera/host/placement.hpp: compiles BERT onto N tiles as static bulk-synchronous programs.
//
// A plan is replicas x pipeline stages x tensor-parallel width (R x S x W = N). Tile
// r*S*W + s*W + w is replica r, stage s, lane w. Within a stage, lane w holds attention heads
// [h0, h1) and FFN columns [f0, f1) of each of the stage's layers (Megatron-style: QKV and FFN-in
// split by output, attention-out and FFN-out split by input), so each sub-layer ends in a
// partial sum that the exchange reduces: a reduce-scatter by token rows, bias + residual +
// LayerNorm on the tile's own rows, then an all-gather. Stages hand the hidden state of a
// micro-batch to the next stage; with M micro-batches, stage s works on micro-batch c - s in
// pipeline clock c, so stages overlap. The program is shaped for a token budget T (as on the
// emulated hardware) but every kernel and slice follows the real tokens of the batch.
//
// Placement knows nothing of sockets: it produces programs, tensor shards and a memory plan.
//
//   auto cfg = models::preset_config("bert-base");
//   placement_request req{.tiles = 8, .tile_memory = 512 << 20, .token_budget = 4096};
//   auto compiled = compile_bert(*cfg, req);            // automatic plan, or req.plan = {2, 1, 4}
//   if (!compiled) std::cerr << compiled.error().message();   // includes the memory table
//   std::cout << compiled->describe();
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/exchange/protocol.hpp"
#include "tessera/models/bf16.hpp"
#include "tessera/models/config.hpp"
#include "tessera/models/embedding.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/kv_cache.hpp"
#include "tessera/models/model.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::host {

/// How the lanes of a stage (W > 1) combine a sub-layer's partial sums (decoders; BERT: rs_ag).
///   rs_ag       reduce-scatter by token rows, bias + residual on the lane's own rows, all-gather:
///               2 supersteps a sub-layer, 2 (W - 1) / W of the rows sent by each lane
///   all_reduce  every lane sends its whole partial rows to the W - 1 others and sums the W itself,
///               in lane order 0..W-1 (every lane holds bit-identical rows): 1 superstep a
///               sub-layer, (W - 1) x the rows sent by each lane
///   automatic   (placement_request only) the ranking's choice by estimated cost, per plan
enum class collective : uint8_t { rs_ag, all_reduce, automatic };
/// "rs-ag", "allreduce", "auto".
const char* collective_name(collective c);
/// Parses --collective: "allreduce", "rs-ag" or "auto"; anything else is refused by name.
result<collective> parse_collective(const std::string& text);

struct plan {
  int replicas = 1;
  int stages = 1;
  int width = 1;
  int micro_batches = 1;  ///< per batch; > 1 only matters with stages > 1
  /// Decoders: tiles of a replica holding a slice of the LM head's vocabulary rows (V, a
  /// vocab-parallel LM head; 1: the last stage's lane 0 holds all of it). See compile_decoder.
  int vocab_slices = 1;
  /// Decoders with width > 1: how the lanes reduce (rs_ag or all_reduce; see collective).
  collective reduce = collective::rs_ag;
  int tiles() const { return replicas * stages * width; }
  /// "R=2 S=1 W=4 M=1", " V=2" when the LM head is split, " all-reduce" when W > 1 lanes all-reduce.
  std::string to_string() const;
};
/// Parses "R,S,W", "R,S,W,M" or "R,S,W,M,V".
result<plan> parse_plan(const std::string& text);

/// What the cost model assumes about the machine the tiles run on.
struct machine_model {
  double tile_flops = 60e9;          ///< fp32 FLOP/s of one tile with a core to itself
  int cores = 2;                     ///< tiles beyond this many share cores
  double link_bytes_per_s = 2e9;     ///< exchange bandwidth per tile
  double sync_seconds = 150e-6;      ///< one superstep barrier
  double message_seconds = 30e-6;    ///< fixed cost of one exchange message
  /// This machine: cores from the OS, the rest as measured here (see docs/placement.md).
  static machine_model this_machine();
};

struct placement_request {
  int tiles = 1;
  uint64_t tile_memory = 256ull << 20;
  int token_budget = 4096;  ///< tokens per packed batch
  int max_sequences = 0;    ///< sequences per batch; 0 = token_budget / 8
  std::optional<plan> forced;  ///< --plan; else the cheapest plan that fits
  /// Decoders: positions per KV block, and blocks per replica (0 = as many as fit, up to
  /// 65536 tokens in flight; never fewer than one sequence of max_position_embeddings).
  int kv_block_tokens = 16;
  int kv_blocks = 0;
  machine_model machine = machine_model::this_machine();
  /// BERT: bf16 holds the matrices (embedding tables, Linear weights) and the activations
  /// (hidden, qkv, context, ffn) as bf16, 2 bytes an element in the memory plan, and sends hidden
  /// rows over the exchange as bf16; partial sums, biases and gains stay f32. int8 holds the
  /// encoder's Linear matrices and the FFN activation as i8 (1 byte an element) with each
  /// matrix's f32 scales [2 + rows] beside it; everything else, the exchange included, stays f32
  /// (models/int8_weights.hpp). Decoders: fp32 or bf16.
  models::dtype dtype = models::dtype::fp32;
  /// BERT embedding models (config num_labels 0): how the head tile pools the last layer's rows
  /// (a "pool" kernel there), so only [sequences, hidden] floats go to the host.
  models::pooling_mode pooling = models::pooling_mode::cls;
  /// Decoders: how lanes reduce (--collective): automatic ranks both forms of every W > 1 plan;
  /// rs_ag or all_reduce forces it (all_reduce with a forced W = 1 plan is refused). BERT: rs_ag
  /// (all_reduce is refused).
  collective reduce = collective::automatic;
  /// Decoders, async scheduling (--async-scheduling on): a step's token ids may name a row of the
  /// previous step's samples (-(row + 1)), taken on the tiles: the out tile sends its sampled ids to
  /// the first stage at the end of every step (dec_next_ids), and the first stage puts them in
  /// place before the embedding (dec_feed). Needs the LM head whole (V = 1).
  bool feed_tokens = false;
};

/// One row of a tile's memory plan.
struct memory_item {
  std::string name;
  std::string kind;  ///< "weights", "activations", "exchange"
  uint64_t bytes = 0;  ///< as the tile arena will hold it (rounded to its alignment)
};

struct tile_plan {
  uint32_t tile = 0;
  int replica = 0, stage = 0, lane = 0;
  int layer_begin = 0, layer_end = 0;
  int head_begin = 0, head_end = 0;
  int ffn_begin = 0, ffn_end = 0;
  std::vector<memory_item> memory;
  uint64_t total_bytes() const;
  uint64_t bytes_of(const std::string& kind) const;
};

/// How a shard is cut from the model's (Hugging Face layout) weights.
enum class shard_kind {
  whole,       ///< the tensor `source` as it is
  qkv_w,       ///< rows [begin, end) * head_dim of query, key and value weights, stacked
  qkv_b,       ///< the same of their biases
  columns,     ///< columns [begin, end) of `source` ([out, in] -> [out, end - begin])
  rows,        ///< rows [begin, end) of `source`
  /// An int8 matrix's scales, f32 [2 + rows]: its input's and its output's static scales (0: an
  /// fp32 output), then w_scale of each of its rows over the whole row of `source` (cut as
  /// int8_scales_ref::cut, so a column shard's rows keep the unsplit weight's scales).
  int8_scales,
};

/// A weight shard to stream to one tile: which tensor id, and how to cut it from the model.
struct weight_shard {
  uint32_t tile = 0;
  exchange::tensor_desc desc;
  shard_kind kind = shard_kind::whole;
  std::string source;          ///< HF tensor name (for qkv: the layer prefix "encoder.layer.N.")
  int begin = 0, end = 0;      ///< head range (qkv) or row / column range
  /// int8_scales: how its matrix is cut, and the calibrated scales (models::int8_site) of its
  /// layer's input and output (-1: none).
  struct int8_scales_ref {
    shard_kind cut = shard_kind::whole;
    int layer = 0, x_site = -1, y_site = -1;
  } scales;
};

/// The shard's data, desc.elements() floats, cut from the model's weights (a bf16 shard is
/// converted as it is streamed: stream_shards, tile_model.hpp).
result<std::vector<float>> materialize(const models::bert_weights& w, const models::bert_config& cfg,
                                       const weight_shard& shard);

/// The same from a model that may be int8: an i8 shard (an encoder Linear matrix of an int8
/// plan) is quantized as models::int8_weight::pack quantizes the whole matrix (each row with its
/// whole row's w_scale; values returned as floats holding the integers), an int8_scales shard
/// reads the model's calibration (model.int8: set_dtype(model, dtype::int8) first, else
/// invalid_argument); any other shard is the fp32 cut above.
result<std::vector<float>> materialize(const models::bert_model& model, const weight_shard& shard);

/// A decoder shard's data, cut from the model's weights in the kernels' layout (source names the
/// tensor as "token_embedding", "position_embedding", "final_norm_w", "final_norm_b", "lm_head"
/// or "layers.<l>.<q_w|q_b|...|down_b>").
result<std::vector<float>> materialize(const models::decoder_model& m, const weight_shard& shard);

struct compiled_model {
  models::bert_config config;
  models::dtype dtype = models::dtype::fp32;  ///< of the matrices and activations (placement_request)
  models::pooling_mode pooling = models::pooling_mode::cls;  ///< embedding models (placement_request)
  plan chosen;
  int token_budget = 0;
  int max_sequences = 0;
  std::vector<tile_plan> tiles;
  /// Per replica: tile id -> program.
  std::vector<std::map<uint32_t, exchange::program>> programs;
  std::vector<weight_shard> shards;
  double estimated_batch_seconds = 0;   ///< the cost model's time for one full batch on a replica
  std::vector<std::pair<plan, double>> candidates;  ///< plans that fit, with estimated tokens/s
  uint32_t program_id = 1;
  /// Decoders (compile_decoder): the step program's KV cache and its per-step metadata.
  bool decoder = false;
  models::kv_layout kv;
  int max_blocks_per_seq = 0;     ///< block table entries the step metadata holds per sequence
  int64_t meta_elements = 0;      ///< int32 capacity of the step metadata tensor
  int64_t sample_elements = 0;    ///< int32 capacity of the sample tensor (models/token_sampling.hpp)
  bool feeds = false;             ///< placement_request::feed_tokens: steps may take the last step's samples
  std::string kv_heads_note;      ///< how kv heads are cut across lanes (split or replicated)

  /// Tiles of replica r, stage s (lanes in order).
  std::vector<uint32_t> stage_tiles(int replica, int stage) const;
  /// Floats per sequence in the output: num_labels (logits), or hidden_size for an embedding
  /// model (its pooled vectors).
  int output_width() const;
  /// The tile that computes the logits (or pooled vectors) of replica r.
  uint32_t output_tile(int replica) const;
  /// Decoders: the tiles holding the LM head's vocabulary slices of replica r, slice 0 (the output
  /// tile) first, and slice j's vocabulary rows.
  std::vector<uint32_t> head_tiles(int replica) const;
  exchange::row_range vocab_slice(int slice) const;
  /// Supersteps one batch takes.
  int supersteps() const;
  /// Of those, the ones that end in a barrier (some tile of the replica exchanges in them).
  int barriers() const;
  /// The plan, the per-tile memory table and the cost estimate, for people.
  std::string describe() const;
};

/// A rate for people (the plan list's tokens/s): three significant figures below 100 (0.512,
/// 12.3), whole numbers from 100; "?" for a rate that is not a finite non-negative number.
std::string format_rate(double per_second);

/// Tensor ids in tile memory (the same on every tile that holds the tensor).
namespace tensor_ids {
inline constexpr uint32_t token_ids = 1, token_types = 2, hidden = 3, qkv = 4, context = 5, partial = 6, ffn = 7,
                          logits = 8, exchange_buffer = 9;
inline constexpr uint32_t word = 20, position = 21, token_type = 22, emb_gamma = 23, emb_beta = 24;
inline constexpr uint32_t pooler_w = 30, pooler_b = 31, cls_w = 32, cls_b = 33;
/// Per-layer weights: layer_base + 16 * layer + one of the offsets below.
inline constexpr uint32_t layer_base = 100;
inline constexpr uint32_t qkv_w = 0, qkv_b = 1, attn_out_w = 2, attn_out_b = 3, attn_gamma = 4, attn_beta = 5,
                          ffn_in_w = 6, ffn_in_b = 7, ffn_out_w = 8, ffn_out_b = 9, out_gamma = 10, out_beta = 11;
/// An int8 plan's scales of each Linear matrix (shard_kind::int8_scales).
inline constexpr uint32_t qkv_s = 12, attn_out_s = 13, ffn_in_s = 14, ffn_out_s = 15;
inline uint32_t layer(int l, uint32_t what) { return layer_base + 16 * static_cast<uint32_t>(l) + what; }

/// Decoders (token_ids, context, partial, hidden, logits and exchange_buffer as above).
/// step_meta (int32): [num_seqs, stride, then per sequence: start_pos, want_logits, blocks,
/// block_table[stride]]: the step's positions and block tables, sent with every step.
inline constexpr uint32_t step_meta = 10, normed = 11, dec_q = 12, dec_k = 13, dec_v = 14, dec_up = 15, dec_gate = 16,
                          kv_keys = 17, kv_values = 18, last_rows = 19;
inline constexpr uint32_t final_norm_w = 25, final_norm_b = 26, lm_head = 27;
/// The LM-head tile's sampling: the step's sample tensor in (int32, models::sample_writer's layout),
/// one models::kSampleRecord int32 record per logits row out.
inline constexpr uint32_t sample_params = 34, samples = 35;
/// A vocab-parallel LM head: each slice tile's records of its part of every row (int32
/// [rows, kSliceRecord]; [V, rows, kSliceRecord] on the out tile, which merges them).
inline constexpr uint32_t sample_parts = 36;
/// Async scheduling (placement_request::feed_tokens): the ids the out tile sampled last step
/// (int32 [max_seqs], -1 where it sampled none), on the out tile and the first stage's tiles.
inline constexpr uint32_t next_ids = 37;
inline constexpr uint32_t dec_layer_base = 100000;
inline constexpr uint32_t norm1_w = 0, norm1_b = 1, q_w = 2, q_b = 3, k_w = 4, k_b = 5, v_w = 6, v_b = 7, o_w = 8,
                          o_b = 9, norm2_w = 10, norm2_b = 11, gate_w = 12, up_w = 13, up_b = 14, down_w = 15,
                          down_b = 16;
inline uint32_t dec_layer(int l, uint32_t what) { return dec_layer_base + 32 * static_cast<uint32_t>(l) + what; }
/// An all-reduce's receive slots (plan::reduce all_reduce): lane w holds W - 1 [T, hidden] tensors,
/// slot j the partial sums of lane j < w ? j : j + 1.
inline constexpr uint32_t reduce_slot_base = 40;
inline constexpr int max_reduce_slots = 60;  ///< ids 40..99: an all-reduce of at most 61 lanes
inline uint32_t reduce_slot(int j) { return reduce_slot_base + static_cast<uint32_t>(j); }
}  // namespace tensor_ids

/// Compiles; fails before anything is sent when a tile would not fit, with the per-tile table
/// and the smallest tile count or per-tile memory that would fit.
result<compiled_model> compile_bert(const models::bert_config& cfg, const placement_request& req);

/// Compiles a decoder (GPT-2, LLaMA) into one BSP step program per tile: a mixed batch of prefill
/// chunks and decode tokens per run, its positions and block tables in the step metadata, each
/// tile's KV cache (its layers, its lanes' kv heads) in its memory. Within a stage, lane w holds
/// query heads and FFN columns as for BERT; kv heads are split across lanes when there are at
/// least as many as lanes (lane w: kv heads [k0, k1), query heads [k0, k1) x group), otherwise
/// every lane holds the kv heads its query heads read (replicated). The memory plan adds the KV
/// cache: blocks per replica = what the fullest tile can hold after weights and activations
/// (capped, see placement_request::kv_blocks); a plan whose tiles cannot hold the weights and one
/// sequence of max_position_embeddings is refused with the per-tile table and the fix.
/// A plan with V = vocab_slices > 1 cuts the LM head by vocabulary rows over V tiles of each
/// replica (the last stage's lanes first, then earlier stages' tiles): the out tile sends its
/// normed last rows to the others, each computes its slice's logits and samples its part of each
/// row (models::write_slice_record), and the out tile merges the parts into the rows' tokens and
/// log-probabilities (models::merge_slice_records), one superstep more. The automatic plan takes,
/// per candidate, the smallest V whose tiles fit (V = 1 when the whole head fits).
/// Lanes (W > 1) reduce by reduce-scatter + all-gather (4 supersteps a layer) or by all-reduce
/// (2 a layer, and one more where a stage hands its rows on: plan::reduce; the W - 1 receive
/// slots in each lane's memory plan); with placement_request::reduce automatic both forms of each
/// W > 1 plan are ranked, the all-reduce first (the other must be 2% faster to replace it).
result<compiled_model> compile_decoder(const models::model_shape& shape, const placement_request& req);

/// The cost model's estimate of one decoder step of `tokens` tokens over `seqs` sequences, its
/// Linear matrices and LM head read at 2 bytes a weight in bf16 (`weights`), 4 in fp32.
double estimate_step_seconds(const models::model_shape& shape, const plan& p, int tokens, int seqs,
                             const machine_model& m, models::dtype weights = models::dtype::fp32);

/// The cost model's estimate of one batch of `tokens` tokens on one replica of `p`.
double estimate_batch_seconds(const models::bert_config& cfg, const plan& p, int tokens, const machine_model& m);

}  // namespace tessera::host
