// exchange::channel's I/O loop when nothing happens: it wakes about once a tick. The wait before a
// tick was once truncated to whole milliseconds, so the last fraction of each millisecond polled
// with a zero timeout over and over (1,300 polls a second; 8% of a core for an idle tessera-host).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tessera/exchange/channel.hpp"

namespace tessera::exchange {
namespace {

TEST(Channel, AnIdleChannelWakesAboutOnceATick) {
  zmq::context_t ctx;
  std::atomic<int> ticks{0};
  channel::options o{.name = "idle", .type = zmq::socket_type::router, .bind = "inproc://channel-test-idle",
                     .tick = std::chrono::milliseconds(10)};
  channel::handlers h{.reply_id = [](const envelope&) { return std::optional<uint64_t>{}; },
                      .on_message = [](const channel::peer&, envelope&&) {},
                      .on_tick = [&](channel::clock::time_point) { ticks.fetch_add(1); }};
  auto ch = channel::open(ctx, o, std::move(h));
  ASSERT_TRUE(ch) << ch.error().to_string();
  (*ch)->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // started and settled
  const uint64_t w0 = (*ch)->wakeups();
  const int t0 = ticks.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const uint64_t woke = (*ch)->wakeups() - w0;
  const int ticked = ticks.load() - t0;
  (*ch)->stop();
  // 50 ticks in 500 ms on a quiet machine; a loaded one delays wakeups (fewer, never more).
  EXPECT_GE(ticked, 5) << "the tick did not run";
  // A poll that times out before the tick is due adds at most one wakeup per tick.
  EXPECT_LE(woke, 2u * static_cast<uint64_t>(ticked) + 5) << woke << " wakeups for " << ticked << " ticks";
}

}  // namespace
}  // namespace tessera::exchange
