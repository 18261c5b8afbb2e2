// An in-process backend: batch queue + worker threads. See thread_pool_backend.hpp.
#include "tessera/backends/thread_pool_backend.hpp"

#include <chrono>

#include "tessera/common/check.hpp"

namespace tessera::backends {

thread_pool_backend::thread_pool_backend(backend_info info, int threads, forward_fn forward)
    : info_(std::move(info)), forward_(std::move(forward)) {
  TESSERA_CHECK(threads >= 1) << "thread_pool_backend needs a worker thread";
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

thread_pool_backend::~thread_pool_backend() { stop(); }

void thread_pool_backend::stop() {
  auto left = jobs_.close();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  for (auto& j : left) {
    outstanding_.fetch_sub(j.tokens);
    batch_result r;
    r.batch_id = j.request.batch_id;
    r.st = status(errc::cancelled, "backend " + info_.name + " stopped");
    j.done(std::move(r));
  }
}

void thread_pool_backend::fail_next_batches(int n, status st) {
  std::lock_guard lock(fail_mu_);
  fail_next_ = n;
  fail_status_ = std::move(st);
}

void thread_pool_backend::submit(batch_request request,
                                 std::function<void(batch_result)> done) {
  int64_t tokens = 0;
  for (const auto& s : request.sequences) tokens += static_cast<int64_t>(s.token_ids.size());
  outstanding_.fetch_add(tokens);
  job j{std::move(request), std::move(done), tokens};
  if (jobs_.push(j)) return;
  outstanding_.fetch_sub(tokens);
  request = std::move(j.request);
  done = std::move(j.done);
  batch_result r;
  r.batch_id = request.batch_id;
  r.st = status(errc::cancelled, "backend " + info_.name + " stopped");
  done(std::move(r));
}

void thread_pool_backend::work() {
  while (auto next = jobs_.pop()) {
    job& j = *next;
    status injected;
    {
      std::lock_guard lock(fail_mu_);
      if (fail_next_ > 0) {
        --fail_next_;
        injected = fail_status_;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    batch_result r;
    r.batch_id = j.request.batch_id;
    if (!injected.ok()) {
      r.st = injected;
    } else {
      auto logits = forward_(j.request);
      if (logits) {
        r.logits = std::move(*logits);
        r.num_labels = info_.num_labels;
      } else {
        r.st = logits.error();
      }
    }
    r.timing.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    batches_run_.fetch_add(1);
    outstanding_.fetch_sub(j.tokens);
    j.done(std::move(r));
  }
}

}  // namespace tessera::backends
