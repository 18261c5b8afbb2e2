// tessera/serving/llm_router.hpp: decoder serving across replicas. Each replica (a tile group's
// replica, an in-process GPU-style decoder) has its own llm_engine: its scheduler, its paged KV
// blocks, its continuous batching. The router sends each new request to one of them, where it stays
// (its K/V live there):
//
//   * among the healthy replicas whose context fits prompt + max_tokens;
//   * routing hybrid (--routing hybrid): the kind preferred for the prompt's length, by BERT's rule
//     (prefer_kind_by_length in router.hpp: longer than --long-threshold tokens -> "tiles", else
//     "gpu"; a fallback to the others when that kind has none);
//   * the replica with the most free KV blocks, counting the blocks its queued prompts (submitted,
//     not yet scheduled) will take as taken, so that a burst arriving between two steps spreads;
//     ties: the fewest queued prompt tokens, then the lower index;
//   * a replica bringing a failed tile back (recovering) only when no other fits;
//   * a replica that refuses (its queue is full) passes the request to the next.
//
//   std::vector<std::unique_ptr<llm_engine>> engines = ...;   // one per replica
//   llm_router r(so.routing, std::move(engines));
//   r.start();
//   auto id = r.submit(req);   // a router id: r.cancel(*id)
//   r.stop();
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tessera/serving/llm_engine.hpp"
#include "tessera/serving/router.hpp"

namespace tessera::serving {

class llm_router final : public llm_endpoint {
 public:
  /// invalid_argument for no engines or more than 64.
  static result<std::unique_ptr<llm_router>> make(routing_config cfg, std::vector<std::unique_ptr<llm_engine>> engines);
  ~llm_router() override;

  void start();
  /// Stops every engine (unfinished requests end "cancelled"). Idempotent.
  void stop();

  /// Routes the request as the header says. peer_failed when no replica is healthy; otherwise
  /// the chosen engine's answer (invalid_argument for a request no replica's context holds).
  result<uint64_t> submit(llm_request r) override;
  void cancel(uint64_t id) override;
  bool healthy() const override;
  int64_t max_context() const override;
  /// tessera_llm_replica_*{replica,kind}: KV blocks used, free and total, queued prompt tokens,
  /// running and waiting requests, requests routed there, health.
  std::vector<gauge_sample> gauges() const override;
  /// /info's "llm_replicas": the routing and each replica's kind, KV blocks and queue.
  nlohmann::json describe() const override;

  /// The replicas in the order a request of `prompt_tokens` (needing `context` positions) would
  /// try them now.
  std::vector<size_t> order(int32_t prompt_tokens, int64_t context) const;
  size_t size() const { return engines_.size(); }
  llm_engine& engine(size_t i) { return *engines_.at(i); }
  int64_t routed(size_t i) const { return routed_.at(i)->load(); }

 private:
  llm_router(routing_config cfg, std::vector<std::unique_ptr<llm_engine>> engines);
  struct placed {
    size_t replica = 0;
    uint64_t engine_id = 0;  // 0 until the engine's submit returned
    bool cancel = false;     // cancelled before the engine's id was known
  };
  void forget(uint64_t id);

  routing_config cfg_;
  std::vector<std::unique_ptr<llm_engine>> engines_;
  std::vector<std::string> kinds_;
  std::vector<std::unique_ptr<std::atomic<int64_t>>> routed_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, placed> placed_;
  uint64_t next_id_ = 1;
};

}  // namespace tessera::serving
