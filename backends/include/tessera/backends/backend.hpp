// tessera/backends/backend.hpp: what the serving side (HTTP, batcher, router) sees of a place
// that runs model forwards: a tile group or a GPU baseline process (host/), or an in-process
// engine (thread_pool_backend.hpp). A library of its own, so that serving and the places that
// run forwards both depend on it and not on each other.
//
// A backend takes whole batches (already tokenized, already formed by a batching policy) and
// answers each batch exactly once through its callback, with a status and, on success, one
// logits row per sequence. Callbacks may run on any thread of the backend.
//
//   backend& b = ...;
//   batch_request req{.batch_id = 7, .sequences = {{{101, 2023, 102}, {}}}};
//   b.submit(std::move(req), [](batch_result r) { if (r.st.ok()) use(r.logits); });
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::backends {

/// One tokenized sequence ([CLS] ... [SEP] already added). Empty token_type_ids means all zero.
struct sequence_input {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> token_type_ids;
  /// Embedding models only: answer every token's final hidden state (token_ids.size() rows of
  /// num_labels values) instead of the pooled vector (one row). A backend that cannot must fail
  /// the batch, never answer one row (the batcher checks the count).
  bool every_token = false;
};

/// How the batch should be laid out by the backend (set by the batching policy).
enum class batch_layout : uint8_t {
  packed = 0,  ///< tokens concatenated, no padding (token-budget packing)
  padded = 1,  ///< padded to `padded_length` (>= the longest sequence); padding is computed
};

struct batch_request {
  uint64_t batch_id = 0;
  std::vector<sequence_input> sequences;
  batch_layout layout = batch_layout::packed;
  int32_t padded_length = 0;  ///< only for batch_layout::padded
};

/// Times of one batch, both clocks.
struct batch_timing {
  double wall_seconds = 0;      ///< measured on the backend, submit to answer
  double modelled_seconds = 0;  ///< the emulated hardware's time from the timing model (0 if off)
  int64_t supersteps = 0;       ///< tile groups only
  int64_t bytes_exchanged = 0;  ///< tile groups only
};

struct batch_result {
  uint64_t batch_id = 0;
  status st;                  ///< not ok: no logits; the caller retries elsewhere or fails requests
  int32_t num_labels = 0;
  /// [rows, num_labels], row-major: one row per sequence (a classifier's logits, an embedding
  /// model's pooled vector), or token_ids.size() rows for a sequence asking every_token.
  std::vector<float> logits;
  batch_timing timing;
};

/// Static facts the batcher and router need.
struct backend_info {
  std::string name;              ///< e.g. "tiles0", "gpu0"
  std::string kind;              ///< "tiles" | "gpu" | "reference"
  int32_t max_sequence_length = 512;
  int32_t token_budget = 0;      ///< tokens per packed batch (tile groups); 0 = no token limit
  int32_t max_batch_sequences = 0;  ///< 0 = no limit
  int32_t num_labels = 2;        ///< an embedding model's: its hidden size (the vector's width)
};

/// One independently routable part of a backend (a tile replica, a GPU process).
struct replica_status {
  int index = 0;
  std::string state;   ///< "up", "down" (failed, waiting to be brought back) or "recovering"
  std::string detail;  ///< why it is down, which tiles; empty when up
  std::vector<uint32_t> tiles;
  std::vector<int64_t> pids;           ///< the processes serving it now (0: none running)
  std::vector<uint32_t> incarnations;  ///< per tile: restarts so far
  int64_t recoveries = 0;
  double last_recovery_seconds = 0;  ///< from detection to back in rotation
};

/// Any place that runs forwards. Implementations are thread-safe.
class backend {
 public:
  virtual ~backend() = default;
  virtual backend_info info() const = 0;
  /// Queues a batch. `done` is called exactly once, also on failure or shutdown.
  virtual void submit(batch_request request, std::function<void(batch_result)> done) = 0;
  /// Tokens submitted and not yet answered (for least-outstanding-work routing).
  virtual int64_t outstanding_tokens() const = 0;
  /// False while the backend cannot serve (every replica down, a process gone).
  virtual bool healthy() const = 0;
  /// The backend's replicas and their state (empty: the backend has no replicas to report).
  virtual std::vector<replica_status> replicas() const { return {}; }
};

}  // namespace tessera::backends
