// The batcher: queue, policy rounds, submission, answers. See batcher.hpp.
#include "tessera/serving/batcher.hpp"

#include <algorithm>

#include "tessera/common/check.hpp"

namespace tessera::serving {

const clock& default_clock() {
  static const steady_clock_source c;
  return c;
}

batcher::batcher(std::shared_ptr<backends::backend> backend, batching_config cfg, const clock& clk,
                 serving_metrics* metrics, failure_handler on_failure)
    : backend_(std::move(backend)), cfg_(std::move(cfg)), clock_(clk), metrics_(metrics),
      on_failure_(std::move(on_failure)) {
  TESSERA_CHECK(backend_) << "batcher needs a backend";
  backends::backend_info info = backend_->info();
  backend_name_ = info.name;
  if (info.max_sequence_length > 0)
    cfg_.max_sequence_length = std::min(cfg_.max_sequence_length, info.max_sequence_length);
  if (info.max_batch_sequences > 0)
    cfg_.max_batch_size = cfg_.max_batch_size > 0
                              ? std::min(cfg_.max_batch_size, info.max_batch_sequences)
                              : info.max_batch_sequences;
  if (cfg_.token_budget == 0) cfg_.token_budget = info.token_budget;
  if (cfg_.kind == policy_kind::token_budget && cfg_.token_budget == 0)
    cfg_.token_budget = std::max(cfg_.max_batch_size, 1) * cfg_.max_sequence_length;
  policy_ = make_policy(cfg_);
}

batcher::~batcher() { stop(); }

status batcher::enqueue(request_ptr& r) {
  TESSERA_CHECK(r) << "enqueue of a null request";
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return status(errc::cancelled, "server is shutting down");
    if (queue_.size() >= cfg_.max_queue_requests)
      return status(errc::overloaded, "queue of backend " + backend_name_ + " is full (" +
                                          std::to_string(cfg_.max_queue_requests) +
                                          " sequences); retry later");
    if (r->arrival == time_point{}) r->arrival = clock_.now();
    queued_tokens_ += r->length();
    queue_.push_back(std::move(r));
    dirty_ = true;
    // While the backend has all the batches it may have, the next answer wakes the thread;
    // waking it per arrival would only cost a context switch per request.
    wake = inflight_ < cfg_.max_inflight_batches;
  }
  if (wake) cv_.notify_one();
  return ok_status();
}

void batcher::start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { run(); });
}

void batcher::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dirty_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    return;
  }
  // Never started: drain synchronously.
  std::unique_lock lock(mu_);
  while (!queue_.empty() || inflight_ > 0) {
    lock.unlock();
    poll(true);
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return dirty_; });
    dirty_ = false;
  }
}

std::optional<time_point> batcher::poll(bool flush) {
  std::vector<request_ptr> expired;
  std::vector<pending_batch> batches;
  std::optional<time_point> wake;
  const time_point now = clock_.now();
  {
    std::lock_guard lock(mu_);
    flush = flush || stopping_;
    // Deadlines first: an expired sequence never reaches a backend.
    time_point next_deadline = time_point::max();
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->deadline <= now) {
        queued_tokens_ -= (*it)->length();
        expired.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        next_deadline = std::min(next_deadline, (*it)->deadline);
        ++it;
      }
    }
    std::vector<queued_view> views;
    while (!queue_.empty() && inflight_ < cfg_.max_inflight_batches) {
      views.clear();
      views.reserve(queue_.size());
      for (const auto& r : queue_) views.push_back({r->length(), r->arrival});
      policy_decision d = policy_->decide(views, now, flush);
      if (!d.batch) {
        wake = d.wake_at;
        break;
      }
      const batch_plan& plan = *d.batch;
      TESSERA_CHECK(!plan.take.empty()) << "policy closed an empty batch";
      pending_batch pb;
      pb.sequences = std::make_shared<std::vector<request_ptr>>();
      pb.request.batch_id = next_batch_id_++;
      pb.request.layout = plan.layout;
      pb.request.padded_length = plan.padded_length;
      int64_t real_tokens = 0;
      // Move the chosen ones out, back to front so indices stay valid.
      std::vector<request_ptr> chosen(plan.take.size());
      for (size_t k = plan.take.size(); k-- > 0;) {
        size_t i = plan.take[k];
        chosen[k] = std::move(queue_[i]);
        queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
      }
      for (auto& r : chosen) {
        real_tokens += r->length();
        r->dispatched = now;
        pb.request.sequences.push_back(r->input);
        pb.sequences->push_back(std::move(r));
      }
      queued_tokens_ -= real_tokens;
      // Static batches keep their fixed shape: dummy rows ([PAD]) after the real ones.
      while (static_cast<int32_t>(pb.request.sequences.size()) < plan.fill_to_sequences)
        pb.request.sequences.push_back({{0}, {}});
      if (metrics_) {
        int64_t rows = static_cast<int64_t>(pb.request.sequences.size());
        int64_t computed = plan.layout == backends::batch_layout::padded
                               ? rows * plan.padded_length
                               : real_tokens;
        metrics_->batch_count.fetch_add(1, std::memory_order_relaxed);
        metrics_->batch_size.observe(static_cast<double>(pb.sequences->size()));
        metrics_->batch_tokens.observe(static_cast<double>(real_tokens));
        metrics_->tei.batch_next_size.observe(static_cast<double>(pb.sequences->size()));
        metrics_->tei.batch_next_tokens.observe(static_cast<double>(real_tokens));
        metrics_->batch_tokens_total.fetch_add(real_tokens, std::memory_order_relaxed);
        metrics_->padding_tokens.fetch_add(std::max<int64_t>(0, computed - real_tokens),
                                           std::memory_order_relaxed);
      }
      ++inflight_;
      batches_sent_.fetch_add(1, std::memory_order_relaxed);
      batches.push_back(std::move(pb));
    }
    if (next_deadline != time_point::max() && !queue_.empty())
      wake = wake ? std::min(*wake, next_deadline) : next_deadline;
  }
  for (auto& r : expired) {
    if (metrics_) metrics_->queue_duration.observe(to_seconds(now - r->arrival));
    r->fail(status::timeout("request deadline passed after " +
                            std::to_string(to_seconds(now - r->arrival)) +
                            " s in the queue of backend " + backend_name_))
        ;
  }
  // Submit outside the lock: a backend may answer synchronously.
  for (auto& pb : batches) {
    auto seqs = pb.sequences;
    backend_->submit(std::move(pb.request), [this, seqs, now](backends::batch_result r) {
      on_batch_done(seqs, std::move(r), now);
    });
  }
  return wake;
}

void batcher::on_batch_done(std::shared_ptr<std::vector<request_ptr>> seqs, backends::batch_result r,
                            time_point dispatched) {
  const time_point now = clock_.now();
  const size_t n = seqs->size();
  if (metrics_ && r.st.ok()) {
    if (r.timing.wall_seconds > 0) metrics_->batch_wall_duration.observe(r.timing.wall_seconds);
    if (r.timing.modelled_seconds > 0)
      metrics_->batch_modelled_duration.observe(r.timing.modelled_seconds);
  }
  if (r.st.ok()) modelled_seconds_.fetch_add(r.timing.modelled_seconds, std::memory_order_relaxed);
  // Rows per sequence: one, or every token's for a sequence asking every_token (embedding models).
  size_t rows = 0;
  for (const auto& req : *seqs) rows += req->input.every_token ? req->input.token_ids.size() : 1;
  if (r.st.ok() && r.num_labels > 0 && r.logits.size() >= rows * static_cast<size_t>(r.num_labels)) {
    const size_t labels = static_cast<size_t>(r.num_labels);
    sequences_served_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    size_t row = 0;
    for (size_t i = 0; i < n; ++i) {
      auto& req = (*seqs)[i];
      const size_t own = req->input.every_token ? req->input.token_ids.size() : 1;
      sequence_outcome o;
      o.logits.assign(r.logits.begin() + static_cast<std::ptrdiff_t>(row * labels),
                      r.logits.begin() + static_cast<std::ptrdiff_t>((row + own) * labels));
      row += own;
      o.queue_seconds = to_seconds(dispatched - req->arrival);
      o.inference_seconds = to_seconds(now - dispatched);
      o.backend = backend_name_;
      o.modelled_seconds = r.timing.modelled_seconds;
      if (metrics_) {
        metrics_->queue_duration.observe(o.queue_seconds);
        metrics_->inference_duration.observe(o.inference_seconds);
      }
      req->finish(std::move(o));
    }
  } else {
    status st = r.st.ok() ? status::internal("backend " + backend_name_ + " answered " +
                                        std::to_string(r.logits.size()) + " values for " +
                                        std::to_string(n) + " sequences (" + std::to_string(rows) +
                                        " rows of " + std::to_string(r.num_labels) + " expected)")
                     : r.st.with_context("backend " + backend_name_);
    if (metrics_) metrics_->batch_failures.fetch_add(1, std::memory_order_relaxed);
    if (on_failure_) {
      on_failure_(std::move(*seqs), st);
    } else {
      for (auto& req : *seqs) req->fail(st);
    }
  }
  std::lock_guard lock(mu_);
  --inflight_;
  dirty_ = true;
  cv_.notify_all();  // under the lock: stop() may destroy us right after it sees inflight_ == 0
}

void batcher::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    dirty_ = false;
    lock.unlock();
    std::optional<time_point> wake = poll();
    lock.lock();
    if (stopping_ && queue_.empty() && inflight_ == 0) break;
    if (dirty_) continue;
    if (wake) {
      // Wake times are on our clock; wait on the steady clock for the same span.
      auto span = *wake - clock_.now();
      cv_.wait_for(lock, std::max(span, duration::zero()), [&] { return dirty_; });
    } else {
      cv_.wait(lock, [&] { return dirty_; });
    }
  }
}

size_t batcher::queue_size() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

int64_t batcher::queued_tokens() const {
  std::lock_guard lock(mu_);
  return queued_tokens_;
}

int batcher::inflight_batches() const {
  std::lock_guard lock(mu_);
  return inflight_;
}

}  // namespace tessera::serving
