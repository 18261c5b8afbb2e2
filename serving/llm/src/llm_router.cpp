// Decoder requests across replicas. See llm_router.hpp.
#include "tessera/serving/llm_router.hpp"

#include <algorithm>
#include <tuple>

namespace tessera::serving {

result<std::unique_ptr<llm_router>> llm_router::make(routing_config cfg, std::vector<std::unique_ptr<llm_engine>> engines) {
  if (engines.empty()) return status::invalid("an LLM router needs at least one engine");
  if (engines.size() > 64) return status::invalid("at most 64 decoder replicas behind one router");
  for (const auto& e : engines)
    if (!e) return status::invalid("an LLM router was given a null engine");
  return std::unique_ptr<llm_router>(new llm_router(cfg, std::move(engines)));
}

llm_router::llm_router(routing_config cfg, std::vector<std::unique_ptr<llm_engine>> engines)
    : cfg_(cfg), engines_(std::move(engines)) {
  for (const auto& e : engines_) {
    kinds_.push_back(e->backend_info().kind);
    routed_.push_back(std::make_unique<std::atomic<int64_t>>(0));
  }
}

llm_router::~llm_router() { stop(); }

void llm_router::start() {
  for (auto& e : engines_) e->start();
}

void llm_router::stop() {
  for (auto& e : engines_) e->stop();
}

std::vector<size_t> llm_router::order(int32_t prompt_tokens, int64_t context) const {
  std::vector<size_t> fit;
  for (size_t i = 0; i < engines_.size(); ++i)
    if (engines_[i]->healthy() && engines_[i]->max_context() >= context) fit.push_back(i);
  fit = prefer_kind_by_length(cfg_, prompt_tokens, std::move(fit), kinds_);
  // (recovering last; free blocks not promised to queued prompts, descending; queued tokens; index)
  std::vector<std::tuple<bool, int64_t, int64_t, size_t>> keyed;
  for (size_t i : fit) {
    const llm_load l = engines_[i]->load();
    const int64_t bt = std::max(1, engines_[i]->backend_info().block_tokens);
    const int64_t promised = (l.queued_tokens + bt - 1) / bt;
    keyed.emplace_back(engines_[i]->recovering(), -(l.kv_free - promised), l.queued_tokens, i);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<size_t> out;
  for (const auto& k : keyed) out.push_back(std::get<3>(k));
  return out;
}

result<uint64_t> llm_router::submit(llm_request r) {
  const int64_t context = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  auto candidates = order(static_cast<int32_t>(r.prompt.size()), context);
  if (candidates.empty()) {
    // No healthy replica holds it: the healthy one with the longest context says why (its
    // context-length message), else there is none.
    std::optional<size_t> widest;
    for (size_t i = 0; i < engines_.size(); ++i)
      if (engines_[i]->healthy() && (!widest || engines_[i]->max_context() > engines_[*widest]->max_context())) widest = i;
    if (!widest) return status::peer_failed("no decoder replica is healthy");
    candidates.push_back(*widest);
  }
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
  }
  auto user = std::move(r.on_event);
  // Each of the n choices ends with its own finished event: the request is done after the last.
  r.on_event = [this, id, user = std::move(user), left = std::max(r.n, 1)](llm_event ev) mutable {
    const bool last = ev.finished && --left == 0;
    if (user) user(std::move(ev));
    if (last) forget(id);
  };
  status last;
  for (size_t k = 0; k < candidates.size(); ++k) {
    const size_t i = candidates[k];
    {
      std::lock_guard lock(mu_);
      placed_[id] = placed{.replica = i};
    }
    auto got = engines_[i]->submit(k + 1 < candidates.size() ? r : std::move(r));
    if (got) {
      routed_[i]->fetch_add(1);
      bool cancel = false;
      {
        std::lock_guard lock(mu_);
        auto it = placed_.find(id);
        if (it != placed_.end()) {  // else it finished already
          it->second.engine_id = *got;
          cancel = it->second.cancel;
        }
      }
      if (cancel) engines_[i]->cancel(*got);
      return id;
    }
    {
      std::lock_guard lock(mu_);
      placed_.erase(id);
    }
    last = got.error();
    if (last.code() != errc::overloaded) break;  // the request's own fault, or the server stopping
  }
  return last;
}

void llm_router::forget(uint64_t id) {
  std::lock_guard lock(mu_);
  placed_.erase(id);
}

void llm_router::cancel(uint64_t id) {
  size_t replica = 0;
  uint64_t engine_id = 0;
  {
    std::lock_guard lock(mu_);
    auto it = placed_.find(id);
    if (it == placed_.end()) return;
    if (it->second.engine_id == 0) {
      it->second.cancel = true;  // submit() cancels it once the engine's id is known
      return;
    }
    replica = it->second.replica;
    engine_id = it->second.engine_id;
  }
  engines_[replica]->cancel(engine_id);
}

bool llm_router::healthy() const {
  for (const auto& e : engines_)
    if (e->healthy()) return true;
  return false;
}

int64_t llm_router::max_context() const {
  int64_t m = 0;
  for (const auto& e : engines_) m = std::max(m, e->max_context());
  return m;
}

std::vector<gauge_sample> llm_router::gauges() const {
  std::vector<llm_load> loads;
  for (const auto& e : engines_) loads.push_back(e->load());
  std::vector<gauge_sample> g;
  auto each = [&](const std::string& name, const std::string& help, auto value) {
    for (size_t i = 0; i < engines_.size(); ++i)
      g.push_back({name + "{replica=\"" + engines_[i]->backend_info().name + "\",kind=\"" + kinds_[i] + "\"}", help,
                   static_cast<double>(value(i))});
  };
  each("tessera_llm_replica_healthy", "1 if the decoder replica can serve",
       [&](size_t i) { return engines_[i]->healthy() ? 1 : 0; });
  each("tessera_llm_replica_kv_blocks_total", "KV blocks of the replica's cache", [&](size_t i) { return loads[i].kv_total; });
  each("tessera_llm_replica_kv_blocks_used", "KV blocks the replica's sequences hold", [&](size_t i) { return loads[i].kv_used; });
  each("tessera_llm_replica_kv_blocks_free", "KV blocks of the replica free or evictable from its prefix cache",
       [&](size_t i) { return loads[i].kv_free; });
  each("tessera_llm_replica_queued_tokens", "Prompt tokens of requests routed to the replica and not yet scheduled",
       [&](size_t i) { return loads[i].queued_tokens; });
  each("tessera_llm_replica_requests_running", "Requests holding the replica's KV blocks",
       [&](size_t i) { return loads[i].running; });
  each("tessera_llm_replica_requests_waiting", "Requests waiting for the replica's KV blocks",
       [&](size_t i) { return loads[i].waiting; });
  each("tessera_llm_replica_routed_requests", "Requests the router sent to the replica so far",
       [&](size_t i) { return routed_[i]->load(); });
  return g;
}

nlohmann::json llm_router::describe() const {
  nlohmann::json replicas = nlohmann::json::array();
  for (size_t i = 0; i < engines_.size(); ++i) {
    const llm_load l = engines_[i]->load();
    const auto& info = engines_[i]->backend_info();
    replicas.push_back({{"name", info.name},
                        {"kind", info.kind},
                        {"healthy", engines_[i]->healthy()},
                        {"recovering", engines_[i]->recovering()},
                        {"block_tokens", info.block_tokens},
                        {"kv_blocks_total", l.kv_total},
                        {"kv_blocks_used", l.kv_used},
                        {"kv_blocks_free", l.kv_free},
                        {"kv_blocks_cached", l.kv_cached},
                        {"queued_tokens", l.queued_tokens},
                        {"requests_running", l.running},
                        {"requests_waiting", l.waiting},
                        {"routed_requests", routed_[i]->load()},
                        {"max_context", engines_[i]->max_context()}});
  }
  return {{"routing", cfg_.strategy == routing_strategy::hybrid_length ? "hybrid" : "most-free-kv"},
          {"long_threshold", cfg_.long_threshold},
          {"replicas", replicas}};
}

}  // namespace tessera::serving
