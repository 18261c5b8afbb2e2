// The in-process decoder backend: a step queue and one worker. See llm_backend.hpp.
#include "tessera/backends/llm_backend.hpp"

#include <chrono>
#include <exception>

namespace tessera::backends {

step_fn_backend::step_fn_backend(llm_backend_info info, step_fn step)
    : info_(std::move(info)), step_(std::move(step)) {
  worker_ = std::thread([this] { work(); });
}

step_fn_backend::~step_fn_backend() { stop(); }

void step_fn_backend::stop() {
  std::deque<job> left;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    left.swap(jobs_);
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (auto& j : left) j.done({status(errc::cancelled, "backend " + info_.name + " stopped"), {}});
}

int64_t step_fn_backend::steps_run() const {
  std::lock_guard lock(mu_);
  return steps_run_;
}

void step_fn_backend::submit(step_batch batch, std::function<void(step_result)> done) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      jobs_.push_back({std::move(batch), std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  done({status(errc::cancelled, "backend " + info_.name + " stopped"), {}});
}

void step_fn_backend::work() {
  for (;;) {
    job j;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      j = std::move(jobs_.front());
      jobs_.pop_front();
    }
    step_result r;
    auto t0 = std::chrono::steady_clock::now();
    try {
      auto out = step_(j.batch);
      if (out)
        r.logits = std::move(*out);
      else
        r.st = out.error();
    } catch (const std::exception& e) {
      r.st = status::internal(std::string("decoder step threw: ") + e.what());
    }
    r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.compute_seconds = r.wall_seconds;  // one place, nothing but compute
    {
      std::lock_guard lock(mu_);
      ++steps_run_;
    }
    j.done(std::move(r));
  }
}

}  // namespace tessera::backends
