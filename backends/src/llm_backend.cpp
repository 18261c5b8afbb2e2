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
  auto left = jobs_.close();
  if (worker_.joinable()) worker_.join();
  for (auto& j : left) j.done({status(errc::cancelled, "backend " + info_.name + " stopped"), {}});
}

int64_t step_fn_backend::steps_run() const { return steps_run_.load(); }

void step_fn_backend::submit(step_batch batch, std::function<void(step_result)> done) {
  job j{std::move(batch), std::move(done)};
  if (!jobs_.push(j)) j.done({status(errc::cancelled, "backend " + info_.name + " stopped"), {}});
}

void step_fn_backend::work() {
  while (auto next = jobs_.pop()) {
    job& j = *next;
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
    steps_run_.fetch_add(1);
    j.done(std::move(r));
  }
}

}  // namespace tessera::backends
