// Routing across backends. See router.hpp.
#include "tessera/serving/router.hpp"

#include <algorithm>
#include <limits>

namespace tessera::serving {

result<routing_strategy> parse_routing_strategy(std::string_view name) {
  if (name == "least-outstanding" || name == "least_outstanding" || name == "low")
    return routing_strategy::least_outstanding;
  if (name == "hybrid" || name == "hybrid-length" || name == "hybrid_length")
    return routing_strategy::hybrid_length;
  return status::invalid("unknown routing strategy '" + std::string(name) +
                         "'; use least-outstanding or hybrid");
}

std::vector<size_t> prefer_kind_by_length(const routing_config& cfg, int32_t length, std::vector<size_t> candidates,
                                          const std::vector<std::string>& kinds) {
  if (cfg.strategy != routing_strategy::hybrid_length) return candidates;
  std::string_view want = length > cfg.long_threshold ? "tiles" : "gpu";
  std::vector<size_t> preferred;
  for (size_t i : candidates)
    if (kinds.at(i) == want) preferred.push_back(i);
  return preferred.empty() ? candidates : preferred;
}

router::router(routing_config cfg, const clock& clk, serving_metrics* metrics)
    : cfg_(cfg), clock_(clk), metrics_(metrics) {}

router::~router() { stop(); }

status router::add_backend(std::shared_ptr<backends::backend> backend, batching_config cfg) {
  if (!backend) return status::invalid("add_backend: null backend");
  if (batchers_.size() >= 64) return status::invalid("at most 64 backends behind one router");
  TESSERA_RETURN_IF_ERROR(cfg.validate().with_context("batching of " + backend->info().name));
  size_t index = batchers_.size();
  infos_.push_back(backend->info());
  kinds_.push_back(infos_.back().kind);
  batchers_.push_back(std::make_unique<batcher>(
      std::move(backend), cfg, clock_, metrics_,
      [this, index](std::vector<request_ptr> seqs, const status& st) {
        on_batch_failed(index, std::move(seqs), st);
      }));
  return ok_status();
}

void router::start() {
  for (auto& b : batchers_) b->start();
}

void router::stop() {
  // Retries may move sequences into batchers stopped earlier; those answer them with
  // `cancelled` instead of dropping them (enqueue refuses, on_batch_failed fails them).
  for (auto& b : batchers_) b->stop();
}

std::vector<size_t> router::candidates(int32_t length, uint64_t exclude_mask) const {
  std::vector<size_t> healthy_fit;
  for (size_t i = 0; i < batchers_.size(); ++i) {
    if (exclude_mask & (uint64_t{1} << i)) continue;
    if (length > batchers_[i]->config().max_sequence_length) continue;
    if (!batchers_[i]->backend().healthy()) continue;
    healthy_fit.push_back(i);
  }
  healthy_fit = prefer_kind_by_length(cfg_, length, std::move(healthy_fit), kinds_);
  // Least outstanding work first.
  std::vector<std::pair<int64_t, size_t>> load;
  for (size_t i : healthy_fit)
    load.emplace_back(batchers_[i]->backend().outstanding_tokens() + batchers_[i]->queued_tokens(),
                      i);
  std::stable_sort(load.begin(), load.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<size_t> out;
  for (auto& [w, i] : load) out.push_back(i);
  return out;
}

std::optional<size_t> router::choose(int32_t length, uint64_t exclude_mask) const {
  auto c = candidates(length, exclude_mask);
  if (c.empty()) return std::nullopt;
  return c.front();
}

status router::submit(request_ptr& r) {
  if (r->arrival == time_point{}) r->arrival = clock_.now();
  status st = submit_excluding(r, 0);
  if (st.ok() && metrics_) metrics_->sequence_count.fetch_add(1, std::memory_order_relaxed);
  return st;
}

status router::submit_excluding(request_ptr& r, uint64_t exclude_mask) {
  if (batchers_.empty()) return status::peer_failed("no backend configured");
  if (r->length() > max_sequence_length())
    return status::invalid("sequence of " + std::to_string(r->length()) +
                           " tokens is longer than any backend takes (" +
                           std::to_string(max_sequence_length()) + ")");
  auto order = candidates(r->length(), exclude_mask);
  if (order.empty())
    return status::peer_failed(exclude_mask ? "no other healthy backend to retry on"
                                            : "no healthy backend");
  status last;
  for (size_t i : order) {
    r->attempts += 1;
    r->tried_mask |= uint64_t{1} << i;
    last = batchers_[i]->enqueue(r);
    if (last.ok()) return last;
    r->attempts -= 1;
    r->tried_mask &= ~(uint64_t{1} << i);
  }
  return last;
}

void router::on_batch_failed(size_t backend_index, std::vector<request_ptr> seqs,
                             const status& st) {
  for (auto& r : seqs) {
    if (!r) continue;
    if (r->attempts < cfg_.max_attempts) {
      status retry = submit_excluding(r, r->tried_mask | (uint64_t{1} << backend_index));
      if (retry.ok()) {
        if (metrics_) metrics_->retries.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      r->fail(status(st.code(), st.message() + "; retry impossible: " + retry.message()));
      continue;
    }
    r->fail(status(st.code(), st.message() + " (after " + std::to_string(r->attempts) +
                                  " attempts)"));
  }
}

bool router::healthy() const {
  for (const auto& b : batchers_)
    if (b->backend().healthy()) return true;
  return false;
}

int32_t router::max_sequence_length() const {
  int32_t m = 0;
  for (const auto& b : batchers_) m = std::max(m, b->config().max_sequence_length);
  return m;
}

int32_t router::num_labels() const { return infos_.empty() ? 0 : infos_.front().num_labels; }

size_t router::queue_size() const {
  size_t n = 0;
  for (const auto& b : batchers_) n += b->queue_size();
  return n;
}

std::vector<gauge_sample> router::gauges() const {
  std::vector<gauge_sample> g;
  g.push_back({"tessera_queue_size", "Sequences waiting in batch queues",
               static_cast<double>(queue_size())});
  g.push_back({"te_queue_size", "Sequences waiting in batch queues (text-embeddings-inference's metric)",
               static_cast<double>(queue_size())});
  auto label = [&](size_t i) { return "{backend=\"" + infos_[i].name + "\"}"; };
  for (size_t i = 0; i < batchers_.size(); ++i)
    g.push_back({"tessera_backend_healthy" + label(i), "1 if the backend can serve",
                 batchers_[i]->backend().healthy() ? 1.0 : 0.0});
  for (size_t i = 0; i < batchers_.size(); ++i)
    g.push_back({"tessera_backend_queue_size" + label(i), "Sequences queued per backend",
                 static_cast<double>(batchers_[i]->queue_size())});
  for (size_t i = 0; i < batchers_.size(); ++i)
    g.push_back({"tessera_backend_outstanding_tokens" + label(i),
                 "Tokens submitted to the backend and not yet answered",
                 static_cast<double>(batchers_[i]->backend().outstanding_tokens())});
  for (size_t i = 0; i < batchers_.size(); ++i)
    g.push_back({"tessera_backend_inflight_batches" + label(i), "Batches at the backend",
                 static_cast<double>(batchers_[i]->inflight_batches())});
  for (size_t i = 0; i < batchers_.size(); ++i)
    g.push_back({"tessera_backend_batches" + label(i), "Batches sent to the backend",
                 static_cast<double>(batchers_[i]->batches_sent())});
  for (size_t i = 0; i < batchers_.size(); ++i)
    g.push_back({"tessera_backend_sequences" + label(i),
                 "Sequences the backend answered with logits",
                 static_cast<double>(batchers_[i]->sequences_served())});
  for (size_t i = 0; i < batchers_.size(); ++i)
    g.push_back({"tessera_backend_modelled_seconds" + label(i),
                 "Modelled seconds of the batches the backend answered, summed over its replicas",
                 batchers_[i]->modelled_seconds()});
  std::vector<std::vector<backends::replica_status>> reps;
  for (const auto& b : batchers_) reps.push_back(b->backend().replicas());
  for (size_t i = 0; i < batchers_.size(); ++i)
    for (const char* st : {"up", "recovering", "down"}) {
      double n = 0;
      for (const auto& r : reps[i]) n += r.state == st ? 1 : 0;
      g.push_back({"tessera_backend_replicas{backend=\"" + infos_[i].name + "\",state=\"" + st + "\"}",
                   "Replicas of the backend by state", n});
    }
  for (size_t i = 0; i < batchers_.size(); ++i) {
    double n = 0;
    for (const auto& r : reps[i]) n += static_cast<double>(r.recoveries);
    g.push_back({"tessera_backend_recoveries" + label(i), "Replicas brought back into rotation so far", n});
  }
  return g;
}

}  // namespace tessera::serving
