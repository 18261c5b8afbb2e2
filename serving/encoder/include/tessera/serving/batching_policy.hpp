// tessera/serving/batching_policy.hpp: when to close a batch and what goes into it.
//
// Three policies, chosen per backend:
//   * static_padded  - fixed batch size B, every sequence padded to the model's max length, and
//                      a partial batch filled up to B rows with dummy sequences after the
//                      max queue delay (classic fixed-shape GPU serving);
//   * dynamic_padded - up to B sequences or the max queue delay, padded to the longest in the
//                      batch (Triton's dynamic batcher);
//   * token_budget   - as many sequences as fit the token budget, packed without padding;
//                      length-aware (many short sequences per batch, few long ones), and no
//                      sequence waits longer than max_age: starving ones go first.
// A policy is a pure function of the queue and the time, so it is tested on a fake clock.
//
//   auto p = make_policy(batching_config{.kind = policy_kind::token_budget, .token_budget = 2048});
//   std::vector<queued_view> q = {{.length = 30, .arrival = t0}, {.length = 300, .arrival = t0}};
//   policy_decision d = p->decide(q, t0 + std::chrono::milliseconds(3));
//   if (d.batch) submit(d.batch->take);  else sleep_until(d.wake_at);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/common/status.hpp"
#include "tessera/serving/clock.hpp"

namespace tessera::serving {

enum class policy_kind : uint8_t { static_padded, dynamic_padded, token_budget };

/// "static" | "dynamic" | "token-budget" (also "static_padded", "dynamic_padded", "packed").
result<policy_kind> parse_policy_kind(std::string_view name);
std::string_view policy_kind_name(policy_kind k);

struct batching_config {
  policy_kind kind = policy_kind::token_budget;
  int32_t max_batch_size = 32;        ///< B (static, dynamic); cap on sequences (token_budget; 0 = none)
  int32_t token_budget = 4096;        ///< tokens per packed batch; also caps padded batches if > 0
  int32_t max_sequence_length = 512;  ///< static pads to this
  duration max_queue_delay = std::chrono::milliseconds(2);  ///< wait for a fuller batch at most this long
  duration max_age = std::chrono::milliseconds(50);         ///< token_budget: starving sequences go first
  size_t max_queue_requests = 4096;   ///< queue bound; beyond it requests are refused (429)
  int max_inflight_batches = 2;       ///< batches at the backend at once; more wait in the queue

  /// Ranges sane; the message says which field to change.
  status validate() const;
};

/// What a policy sees of a queued sequence (queue order = arrival order).
struct queued_view {
  int32_t length = 0;
  time_point arrival{};
};

/// A batch to form: indices into the queue, and its layout.
struct batch_plan {
  std::vector<size_t> take;          ///< ascending queue indices
  backends::batch_layout layout = backends::batch_layout::packed;
  int32_t padded_length = 0;         ///< padded layouts only
  int32_t fill_to_sequences = 0;     ///< static: add dummy rows up to this many sequences
};

struct policy_decision {
  std::optional<batch_plan> batch;     ///< a batch to send now, or none
  std::optional<time_point> wake_at;   ///< when none: decide again at this time (none = on arrival)
};

class batching_policy {
 public:
  virtual ~batching_policy() = default;
  /// Decides on the queue (non-empty or empty) at time `now`. `flush` closes a batch
  /// regardless of delays (shutdown drains the queue).
  virtual policy_decision decide(std::span<const queued_view> queue, time_point now,
                                 bool flush = false) const = 0;
  virtual const batching_config& config() const = 0;
};

std::unique_ptr<batching_policy> make_policy(const batching_config& cfg);

}  // namespace tessera::serving
