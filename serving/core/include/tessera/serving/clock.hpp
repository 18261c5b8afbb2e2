// tessera/serving/clock.hpp: the time source of batchers and routers, injectable so that batching
// policies run on a fake clock in tests (and, later, on modelled device time).
//
//   tessera::serving::manual_clock clk;            // starts at time_point{} + 1 h
//   batcher b(backend, cfg, clk, ...);
//   clk.advance(std::chrono::milliseconds(5));
//   b.poll();                                      // decisions see the advanced time
#pragma once

#include <atomic>
#include <chrono>

namespace tessera::serving {

using steady = std::chrono::steady_clock;
using time_point = steady::time_point;
using duration = steady::duration;

/// Seconds as a double, for metrics and reports.
inline double to_seconds(duration d) { return std::chrono::duration<double>(d).count(); }

/// A source of "now". Implementations are thread-safe.
class clock {
 public:
  virtual ~clock() = default;
  virtual time_point now() const = 0;
};

/// The process's steady clock.
class steady_clock_source final : public clock {
 public:
  time_point now() const override { return steady::now(); }
};

/// The shared steady clock instance (lives for the whole process).
const clock& default_clock();

/// A clock that moves only when told to (tests, trace replay on a virtual clock).
class manual_clock final : public clock {
 public:
  manual_clock() : now_ns_(std::chrono::hours(1) / std::chrono::nanoseconds(1)) {}
  time_point now() const override {
    return time_point(std::chrono::nanoseconds(now_ns_.load(std::memory_order_acquire)));
  }
  /// Moves time forward by `d`.
  void advance(duration d) {
    now_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                      std::memory_order_acq_rel);
  }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace tessera::serving
