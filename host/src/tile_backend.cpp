#include "tessera/host/tile_backend.hpp"

#include "tessera/common/log.hpp"

namespace tessera::host {

models::packed_batch to_packed(const batch_request& req, int* real) {
  models::packed_batch b;
  for (const auto& s : req.sequences) b.append(s.token_ids, s.token_type_ids);
  *real = b.num_seqs();
  if (req.layout == batch_layout::padded) {
    std::vector<int32_t> filler;
    for (const auto& s : req.sequences) {
      const int missing = req.padded_length - static_cast<int>(s.token_ids.size());
      if (missing <= 0) continue;
      filler.assign(static_cast<size_t>(missing), 0);  // [PAD]
      b.append(filler);
    }
  }
  return b;
}

tile_backend::tile_backend(std::unique_ptr<tile_model> model, std::string name, int max_attempts)
    : model_(std::move(model)), max_attempts_(std::max(1, max_attempts)) {
  const auto& c = model_->compiled();
  info_.name = std::move(name);
  info_.kind = "tiles";
  info_.max_sequence_length = c.config.max_position_embeddings;
  info_.token_budget = c.token_budget;
  info_.max_batch_sequences = c.max_sequences;
  info_.num_labels = c.config.num_labels;
  for (int r = 0; r < c.chosen.replicas; ++r) workers_.emplace_back([this, r] { work(r); });
}

tile_backend::~tile_backend() { stop(); }

// While a recovery runs the backend takes no new work from the router (it may go elsewhere).
bool tile_backend::healthy() const { return recovering_ == 0 && model_->group().health().is_ok(); }

void tile_backend::submit(batch_request request, std::function<void(batch_result)> done) {
  int64_t tokens = 0;
  for (const auto& s : request.sequences) tokens += static_cast<int64_t>(s.token_ids.size());
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      outstanding_ += tokens;
      jobs_.push_back({std::move(request), std::move(done), tokens});
      cv_.notify_one();
      return;
    }
  }
  batch_result r;
  r.batch_id = request.batch_id;
  r.st = status{errc::cancelled, "backend " + info_.name + " is stopping"};
  done(std::move(r));
}

void tile_backend::stop() {
  std::deque<job> left;
  {
    std::lock_guard lk(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    left.swap(jobs_);
  }
  cv_.notify_all();
  for (auto& j : left) {
    outstanding_ -= j.tokens;
    batch_result r;
    r.batch_id = j.request.batch_id;
    r.st = status{errc::cancelled, "backend " + info_.name + " stopped"};
    j.done(std::move(r));
  }
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  workers_.clear();
}

batch_result tile_backend::run(int replica, const batch_request& req) {
  batch_result out;
  for (int attempt = 1;; ++attempt) {
    out = run_once(replica, req);
    const errc code = out.st.code();
    const bool retryable = code == errc::peer_failed || code == errc::timeout || code == errc::bad_message ||
                           code == errc::cancelled;
    if (out.st || !retryable || attempt >= max_attempts_) break;
    // A tile died, stalled or sent garbage: bring failed tiles back, then run the batch again.
    TESSERA_LOG_WARN("batch " << req.batch_id << " attempt " << attempt << " failed (" << out.st.to_string()
                              << "); recovering and retrying");
    auto t0 = std::chrono::steady_clock::now();
    ++recovering_;
    auto rec = model_->recover();
    --recovering_;
    last_recovery_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++recoveries_;
    if (!rec) {
      out.st = rec.error().with_context("recovering after " + out.st.message());
      break;
    }
  }
  return out;
}

batch_result tile_backend::run_once(int replica, const batch_request& req) {
  batch_result out;
  out.batch_id = req.batch_id;
  out.num_labels = info_.num_labels;
  int real = 0;
  models::packed_batch b = to_packed(req, &real);
  // Filler sequences can push a padded batch past the budget: run it in budget-sized pieces.
  std::vector<float> logits;
  int first = 0;
  while (first < b.num_seqs()) {
    int count = 0;
    int64_t tokens = 0;
    while (first + count < b.num_seqs() && count < model_->compiled().max_sequences &&
           tokens + b.seq_len(first + count) <= model_->compiled().token_budget)
      tokens += b.seq_len(first + count++);
    if (count == 0) {
      out.st = status::invalid("a sequence is longer than the token budget");
      return out;
    }
    auto r = model_->run(replica, b.slice(first, count));
    if (!r) {
      out.st = r.error();
      return out;
    }
    logits.insert(logits.end(), r->logits.begin(), r->logits.end());
    out.timing.wall_seconds += r->wall_seconds;
    out.timing.supersteps += r->supersteps;
    out.timing.bytes_exchanged += static_cast<int64_t>(r->bytes_exchanged);
    first += count;
  }
  logits.resize(static_cast<size_t>(real) * static_cast<size_t>(info_.num_labels));
  out.logits = std::move(logits);
  return out;
}

void tile_backend::work(int replica) {
  for (;;) {
    job j;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      j = std::move(jobs_.front());
      jobs_.pop_front();
    }
    batch_result r = run(replica, j.request);
    outstanding_ -= j.tokens;
    if (!r.st) TESSERA_LOG_WARN("batch " << j.request.batch_id << " failed on replica " << replica << ": " << r.st.to_string());
    j.done(std::move(r));
  }
}

}  // namespace tessera::host
