// tessera/exchange/protocol.hpp: the one wire protocol between the host, tiles and backends.
//
// Every message is a ZeroMQ multipart message: frame 0 is a msgpack header
//   [magic, protocol_version, msg_type, body...]
// and frames 1..n are raw tensor payloads (little-endian fp32 or int32 bytes), never msgpack
// arrays of numbers. One struct per message type below; all msgpack code is in codec.cpp,
// and decoding checks every field (see codec.hpp).
//
//   exchange::exchange_data d{.program_id = 1, .batch_id = 9, .superstep = 3, .src_tile = 0,
//                             .dst_tile = 2, .tag = 5, .elements = 4096};
//   envelope e = encode(d, std::move(payload_frame));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/kernel_params.hpp"
#include "tessera/exchange/fault_plan.hpp"

namespace tessera::exchange {

inline constexpr uint32_t protocol_magic = 0x54535241;  // "TSRA"
inline constexpr uint16_t protocol_version = 7;  // 2: slice checksums are XXH3; 3: injected fault counts; 4: bf16 tensors and slices; 5: infer_batch.compute; 6: infer_batch.every_token; 7: i8 tensors and compute

/// Hard limits: no message can make a process allocate beyond these while decoding.
inline constexpr uint32_t max_tiles = 4096;
inline constexpr uint32_t max_header_bytes = 4u << 20;        // 4 MiB of msgpack per header
inline constexpr uint32_t max_tensor_rank = 8;
inline constexpr uint64_t max_tensor_bytes = 1ull << 34;      // 16 GiB
inline constexpr uint32_t max_program_ops = 1u << 20;
inline constexpr uint32_t max_batch_sequences = 1u << 16;

/// Tile memory places every tensor at a multiple of this (AVX-512 lines) and rounds its size up
/// to it; the host's placement counts tile memory the same way.
inline constexpr uint64_t tensor_alignment = 64;

/// Message types. Values travel on the wire: append only.
enum class msg_type : uint8_t {
  register_tile = 1,    ///< tile -> host: I am tile t, incarnation i, my exchange endpoint is e
  peer_directory = 2,   ///< host -> tile: every tile's exchange endpoint
  alloc_tensor = 3,     ///< host -> tile: allocate a tensor (payload frame = its data, optional)
  free_tensors = 4,     ///< host -> tile: release tensors
  load_program = 5,     ///< host -> tile: a static BSP program
  run_program = 6,      ///< host -> tile: run a program on one batch (payload frames = inputs)
  exchange_data = 7,    ///< tile -> tile: one slice of one superstep (payload frame = the slice)
  sync_token = 8,       ///< tile -> tile: one round of the superstep barrier
  run_done = 9,         ///< tile -> host: result of a run, counters (payload frames = outputs)
  heartbeat = 10,       ///< tile -> host: alive, with memory figures; host -> tile: alive (keepalive)
  shutdown = 11,        ///< host -> tile: exit cleanly
  ack = 12,             ///< tile -> host: status of a control request
  abort_run = 13,       ///< host -> tile: stop the current run (a peer failed)
  fetch_tensor = 14,    ///< host -> tile: send a tensor back (reply: ack + payload frame)
  infer_batch = 20,     ///< host -> backend process: a tokenized batch
  infer_result = 21,    ///< backend process -> host: logits of a batch (payload frame)
};

std::string_view msg_type_name(msg_type t);

/// Element types in tile memory (append only: the value travels). bf16 is the upper half of an
/// IEEE float (models/bf16.hpp): weights and activations of a bf16 model. i8 is a signed byte: an
/// int8 BERT's Linear matrices (with their scales in f32 tensors) and its FFN activations; as
/// infer_batch.compute, the int8 encoder (models/int8_weights.hpp).
enum class dtype : uint8_t { f32 = 0, i32 = 1, bf16 = 2, i8 = 3 };
inline constexpr uint64_t dtype_size(dtype d) { return d == dtype::bf16 ? 2 : d == dtype::i8 ? 1 : 4; }

/// A tensor as named in tile memory.
struct tensor_desc {
  uint32_t id = 0;
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  uint64_t elements() const;
  uint64_t bytes() const { return elements() * dtype_size(type); }
};

/// Which part of a tensor a send or receive covers. The token kinds follow the batch being run:
/// fixed:      elements [offset, offset + count)
/// token_rows: the tensor is [token_budget, row_width] row-major; the rows of micro-batch
///             `micro` of `micros` (all rows [0, active_tokens) when micros == 1)
/// token_part: part `part` of `parts` of those rows (see token_partition())
enum class slice_kind : uint8_t { fixed = 0, token_rows = 1, token_part = 2 };

struct slice_ref {
  uint32_t tensor_id = 0;
  slice_kind kind = slice_kind::fixed;
  uint64_t offset = 0;     ///< fixed: first element
  uint64_t count = 0;      ///< fixed: elements; token_*: row width in elements
  uint32_t part = 0;       ///< token_part only
  uint32_t parts = 1;      ///< token_part only
  uint32_t micro = 0;      ///< token_*: which micro-batch
  uint32_t micros = 1;     ///< token_*: how many micro-batches the batch is cut into
};

/// Rows [begin, end) of part `part` of `parts` when `rows` rows are split as evenly as possible.
struct row_range { int64_t begin, end; };
row_range token_partition(int64_t rows, uint32_t part, uint32_t parts);

/// Cuts a batch of sequences (prefix offsets, size n + 1) into `parts` micro-batches of whole
/// sequences with balanced tokens. Returns `parts` + 1 sequence indices; micro-batch
/// k owns sequences [b[k], b[k+1]). Deterministic: host and tiles compute the same cut.
std::vector<int32_t> micro_batch_bounds(const std::vector<int32_t>& seq_offsets, uint32_t parts);

/// The rows of a batch as slices and kernels see them.
struct batch_rows {
  int64_t active_tokens = 0;
  std::vector<int32_t> seq_offsets;  ///< may be empty (then the batch is one block of rows)
  /// Rows of micro-batch `micro` of `micros`.
  row_range micro_rows(uint32_t micro, uint32_t micros) const;
  /// Sequences [begin, end) of micro-batch `micro` of `micros`.
  row_range micro_seqs(uint32_t micro, uint32_t micros) const;
};

/// One kernel invocation of a compute set. The parameters are the kernel's typed struct
/// (models/kernel_params.hpp) in wire form; make_call writes them, the codec checks them.
struct kernel_call {
  models::kernel_id kernel = models::kernel_id::copy;
  std::vector<uint32_t> inputs;     ///< tensor ids
  std::vector<uint32_t> outputs;    ///< tensor ids
  std::vector<int64_t> params;      ///< the parameter struct's integers, in field order
  std::vector<float> fparams;       ///< its reals, in field order
};

/// A call of kernel K with its parameter struct: `make_call<kernel_id::linear>(ins, outs, {{m, M}, act})`.
template <models::kernel_id K>
kernel_call make_call(std::vector<uint32_t> inputs, std::vector<uint32_t> outputs, const models::params_t<K>& p = {}) {
  auto w = models::to_wire(p);
  return {K, std::move(inputs), std::move(outputs), std::move(w.ints), std::move(w.reals)};
}

struct send_op {
  uint32_t peer = 0;
  uint32_t tag = 0;  ///< unique per (superstep, src, dst): pairs a send with its receive
  slice_ref src;
};
/// accumulate: add the received slice into dst instead of overwriting (reductions).
struct recv_op {
  uint32_t peer = 0;
  uint32_t tag = 0;
  slice_ref dst;
  bool accumulate = false;
};

/// One BSP superstep: compute set, then exchange, then sync.
struct superstep {
  std::vector<kernel_call> compute;
  std::vector<send_op> sends;
  std::vector<recv_op> recvs;
  bool sync = true;  ///< barrier with every tile of the program after the exchange
};

struct program {
  uint32_t id = 0;
  std::vector<uint32_t> tiles;            ///< the tiles that run it (barrier members)
  std::vector<tensor_desc> temporaries;   ///< allocated when the program is loaded
  std::vector<superstep> steps;
};

// ---- messages ----

struct register_tile {
  uint32_t tile_id = 0;
  uint32_t incarnation = 0;   ///< grows with every restart of the same tile id
  int32_t pid = 0;
  std::string exchange_endpoint;
  std::string hostname;
  uint64_t memory_capacity = 0;
};

struct peer_directory {
  std::vector<std::string> endpoints;  ///< index = tile id
  std::vector<uint32_t> incarnations;  ///< index = tile id
};

struct alloc_tensor {
  uint64_t request_id = 0;
  tensor_desc desc;
  bool has_data = false;  ///< a payload frame of desc.bytes() follows
  bool zero = true;       ///< zero-fill when there is no data
};

struct free_tensors {
  uint64_t request_id = 0;
  std::vector<uint32_t> ids;
};

struct load_program {
  uint64_t request_id = 0;
  program prog;
};

struct run_program {
  uint32_t program_id = 0;
  uint64_t batch_id = 0;
  std::vector<int32_t> seq_lengths;     ///< real lengths of the batch's sequences (may be empty)
  int64_t active_tokens = 0;            ///< sum of seq_lengths, or the demo's row count
  std::vector<slice_ref> inputs;        ///< one payload frame each, written before superstep 0
  std::vector<slice_ref> outputs;       ///< returned in run_done, in this order
  bool collect_counters = true;
};

/// Per-superstep counters of one tile.
struct superstep_counters {
  uint64_t compute_ns = 0;
  uint64_t exchange_ns = 0;  ///< sending, and waiting for the slices this tile expects
  uint64_t sync_ns = 0;      ///< waiting at the barrier
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

struct run_done {
  uint32_t program_id = 0;
  uint64_t batch_id = 0;
  uint32_t tile_id = 0;
  errc code = errc::ok;
  std::string message;
  std::vector<superstep_counters> counters;
  uint64_t memory_used = 0;
  uint64_t memory_high_water = 0;
  uint32_t outputs = 0;  ///< payload frames that follow
  fault_counts injected{};  ///< faults this tile injected so far (this incarnation, its --faults plan)
};

struct exchange_data {
  uint32_t program_id = 0;
  uint64_t batch_id = 0;
  uint32_t superstep = 0;
  uint32_t src_tile = 0;
  uint32_t dst_tile = 0;
  uint32_t tag = 0;
  uint64_t elements = 0;  ///< the payload frame holds elements * 4 bytes, or * 2 for a bf16 slice
                          ///< (the receiver checks the exact size against its slice's dtype)
  uint64_t checksum = 0;  ///< payload_checksum() of the frame, checked by the receiver
};

/// XXH3-64 of a payload (libxxhash): catches flipped bits and misplaced blocks in flight, not an
/// adversary (CURVE does that).
uint64_t payload_checksum(const void* data, size_t bytes);

struct sync_token {
  uint32_t program_id = 0;
  uint64_t batch_id = 0;
  uint32_t superstep = 0;
  uint32_t round = 0;
  uint32_t src_tile = 0;
};

struct heartbeat {
  uint32_t tile_id = 0;
  uint32_t incarnation = 0;
  uint64_t memory_used = 0;
  uint64_t memory_high_water = 0;
  uint64_t bad_messages = 0;  ///< messages this tile rejected so far
  /// Exchange messages this tile discarded as duplicates or from finished batches so far.
  uint64_t stale_messages = 0;
  fault_counts injected{};    ///< faults this tile injected so far (this incarnation, its --faults plan)
};

struct shutdown {
  std::string reason;
};

struct ack {
  uint64_t request_id = 0;
  uint32_t tile_id = 0;
  errc code = errc::ok;
  std::string message;
  uint32_t payloads = 0;
};

struct abort_run {
  uint32_t program_id = 0;
  uint64_t batch_id = 0;
  std::string reason;
};

struct fetch_tensor {
  uint64_t request_id = 0;
  slice_ref slice;
  int64_t active_tokens = 0;
};

/// A tokenized batch for a backend process (GPU baseline). Payload frames: token ids (i32),
/// token type ids (i32), both concatenated over sequences.
struct infer_batch {
  uint64_t batch_id = 0;
  std::vector<int32_t> seq_lengths;
  uint8_t layout = 0;          ///< backends::batch_layout
  int32_t padded_length = 0;
  /// The dtype the sender expects the forward in (f32, bf16 or i8): a backend computing in another
  /// answers invalid_argument, pings (no sequences) included, so a mismatch is found at start.
  dtype compute = dtype::f32;
  /// Embedding models: the sequences (indices, increasing) answered with every token's final
  /// hidden row (seq_lengths[i] rows) instead of their pooled vector (one row): TEI's /embed_all.
  std::vector<uint32_t> every_token;
};

/// Payload frame: logits [rows, num_labels] f32 (absent on failure): one row per sequence, or
/// seq_lengths[i] rows for a sequence infer_batch::every_token names.
struct infer_result {
  uint64_t batch_id = 0;
  errc code = errc::ok;
  std::string message;
  int32_t num_labels = 0;
  double wall_seconds = 0;
  double modelled_seconds = 0;
};

}  // namespace tessera::exchange
