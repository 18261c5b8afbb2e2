// Batching policies: pure functions of (queue, now). See batching_policy.hpp.
#include "tessera/serving/batching_policy.hpp"

#include <algorithm>

namespace tessera::serving {

result<policy_kind> parse_policy_kind(std::string_view name) {
  if (name == "static" || name == "static_padded" || name == "static-padded")
    return policy_kind::static_padded;
  if (name == "dynamic" || name == "dynamic_padded" || name == "dynamic-padded")
    return policy_kind::dynamic_padded;
  if (name == "token-budget" || name == "token_budget" || name == "packed")
    return policy_kind::token_budget;
  return status::invalid("unknown batching policy '" + std::string(name) +
                         "'; use static, dynamic or token-budget");
}

std::string_view policy_kind_name(policy_kind k) {
  switch (k) {
    case policy_kind::static_padded: return "static";
    case policy_kind::dynamic_padded: return "dynamic";
    case policy_kind::token_budget: return "token-budget";
  }
  return "?";
}

status batching_config::validate() const {
  if (max_batch_size < 0) return status::invalid("max_batch_size must be >= 0");
  if (kind != policy_kind::token_budget && max_batch_size < 1)
    return status::invalid("max_batch_size must be >= 1 for padded batching; pass --max-batch-size N");
  if (token_budget < 0) return status::invalid("token_budget must be >= 0 (0 = the backend's)");
  if (max_sequence_length < 1) return status::invalid("max_sequence_length must be >= 1");
  if (max_queue_delay < duration::zero()) return status::invalid("max_queue_delay must be >= 0");
  if (max_age < duration::zero()) return status::invalid("max_age must be >= 0");
  if (max_queue_requests < 1) return status::invalid("max_queue_requests must be >= 1");
  if (max_inflight_batches < 1) return status::invalid("max_inflight_batches must be >= 1");
  return ok_status();
}

namespace {

time_point oldest_arrival(std::span<const queued_view> q) {
  time_point t = time_point::max();
  for (const auto& v : q) t = std::min(t, v.arrival);
  return t;
}

// Whether a batch goes now: a limit is reached (`full`), the queue is flushed, or its oldest
// sequence has waited max_queue_delay; if not, d.wake_at says when that wait is over.
bool batch_due(std::span<const queued_view> q, time_point now, bool full, bool flush, const batching_config& cfg,
               policy_decision& d) {
  const time_point oldest = oldest_arrival(q);
  if (full || flush || now - oldest >= cfg.max_queue_delay) return true;
  d.wake_at = oldest + cfg.max_queue_delay;
  return false;
}

// Shared by the two padded policies: the first sequences in arrival order, up to B and, when a
// token budget is set, up to budget padded tokens. `full` says a limit (not the queue) stopped it.
struct padded_take {
  std::vector<size_t> take;
  int32_t longest = 0;
  bool full = false;
};

padded_take take_padded(std::span<const queued_view> q, int32_t max_batch, int32_t budget,
                        int32_t fixed_length) {
  padded_take t;
  for (size_t i = 0; i < q.size(); ++i) {
    if (static_cast<int32_t>(t.take.size()) >= max_batch) {
      t.full = true;
      break;
    }
    int32_t longest = fixed_length > 0 ? fixed_length : std::max(t.longest, q[i].length);
    int64_t padded = static_cast<int64_t>(longest) * static_cast<int64_t>(t.take.size() + 1);
    if (budget > 0 && padded > budget && !t.take.empty()) {
      t.full = true;
      break;
    }
    t.take.push_back(i);
    t.longest = longest;
  }
  if (static_cast<int32_t>(t.take.size()) >= max_batch) t.full = true;
  return t;
}

// What both policies share: their configuration, and nothing to decide on an empty queue.
class configured_policy : public batching_policy {
 public:
  explicit configured_policy(batching_config cfg) : cfg_(std::move(cfg)) {}
  const batching_config& config() const override { return cfg_; }

  policy_decision decide(std::span<const queued_view> q, time_point now, bool flush) const final {
    policy_decision d;
    if (!q.empty()) d.batch = plan(q, now, flush, d);
    return d;
  }

 protected:
  /// The batch to send now from the non-empty queue `q`, or none (then d.wake_at may be set).
  virtual std::optional<batch_plan> plan(std::span<const queued_view> q, time_point now, bool flush,
                                         policy_decision& d) const = 0;

  batching_config cfg_;
};

class padded_policy final : public configured_policy {
 public:
  using configured_policy::configured_policy;

 protected:
  std::optional<batch_plan> plan(std::span<const queued_view> q, time_point now, bool flush,
                                 policy_decision& d) const override {
    const bool fixed = cfg_.kind == policy_kind::static_padded;
    padded_take t = take_padded(q, std::max(cfg_.max_batch_size, 1), cfg_.token_budget,
                                fixed ? cfg_.max_sequence_length : 0);
    if (!batch_due(q, now, t.full, flush, cfg_, d)) return std::nullopt;
    batch_plan p;
    p.take = std::move(t.take);
    p.layout = backends::batch_layout::padded;
    p.padded_length = t.longest;
    if (fixed) {
      // A fixed [B, max_len] shape: partial batches carry dummy rows, as a static engine would.
      int32_t rows = std::max(cfg_.max_batch_size, 1);
      if (cfg_.token_budget > 0)
        rows = std::max<int32_t>(1, std::min(rows, cfg_.token_budget / cfg_.max_sequence_length));
      p.fill_to_sequences = rows;
    }
    return p;
  }
};

class token_budget_policy final : public configured_policy {
 public:
  using configured_policy::configured_policy;

 protected:
  std::optional<batch_plan> plan(std::span<const queued_view> q, time_point now, bool flush,
                                 policy_decision& d) const override {
    const int64_t budget = cfg_.token_budget > 0 ? cfg_.token_budget : INT64_MAX;
    const size_t cap = cfg_.max_batch_size > 0 ? static_cast<size_t>(cfg_.max_batch_size) : SIZE_MAX;
    int64_t queued_tokens = 0;
    for (const auto& v : q) queued_tokens += v.length;
    if (!batch_due(q, now, queued_tokens >= budget || q.size() >= cap, flush, cfg_, d)) return std::nullopt;
    // Starving sequences first (in arrival order), then first fit in arrival order: short
    // sequences fill the gaps long ones leave, so a batch holds many short or few long ones.
    std::vector<char> taken(q.size(), 0);
    std::vector<size_t> take;
    int64_t used = 0;
    auto try_take = [&](size_t i) {
      if (taken[i] || take.size() >= cap) return;
      if (used + q[i].length > budget && !take.empty()) return;
      taken[i] = 1;
      take.push_back(i);
      used += q[i].length;
    };
    for (size_t i = 0; i < q.size(); ++i)
      if (now - q[i].arrival >= cfg_.max_age) try_take(i);
    for (size_t i = 0; i < q.size() && take.size() < cap && used < budget; ++i) try_take(i);
    std::sort(take.begin(), take.end());
    batch_plan p;
    p.take = std::move(take);
    p.layout = backends::batch_layout::packed;
    return p;
  }
};

}  // namespace

std::unique_ptr<batching_policy> make_policy(const batching_config& cfg) {
  if (cfg.kind == policy_kind::token_budget) return std::make_unique<token_budget_policy>(cfg);
  return std::make_unique<padded_policy>(cfg);
}

}  // namespace tessera::serving
