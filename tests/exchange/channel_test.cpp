// exchange::channel's I/O loop when nothing happens: it wakes about once a tick. The wait before a
// tick was once truncated to whole milliseconds, so the last fraction of each millisecond polled
// with a zero timeout over and over (1,300 polls a second; 8% of a core for an idle tessera-host).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <mutex>
#include <vector>

#include "tessera/exchange/channel.hpp"
#include "tessera/exchange/zmq_transport.hpp"

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

// A peer whose TCP connection closes is reported by on_disconnect (the socket monitor) within a
// fraction of a second, by the routing id it last sent under; a peer that stays connected but
// silent is not (its silence is the owner's heartbeat deadline, not a disconnect).
TEST(Channel, AClosedConnectionIsReportedByItsPeerAndASilentOneIsNot) {
  zmq::context_t ctx;
  std::mutex mu;
  std::vector<std::pair<channel::peer, channel::clock::time_point>> closed;
  std::atomic<int> heard{0};
  channel::options o{.name = "monitored", .type = zmq::socket_type::router, .bind = "tcp://127.0.0.1:0"};
  channel::handlers h{.reply_id = [](const envelope&) { return std::optional<uint64_t>{}; },
                      .on_message = [&](const channel::peer&, envelope&&) { heard.fetch_add(1); },
                      .on_tick = [](channel::clock::time_point) {},
                      .on_disconnect = [&](const channel::peer& p) {
                        std::lock_guard lk(mu);
                        closed.push_back({p, channel::clock::now()});
                      }};
  auto ch = channel::open(ctx, o, std::move(h));
  ASSERT_TRUE(ch) << ch.error().to_string();
  (*ch)->start();
  auto dealer = [&](const std::string& id) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::routing_id, id);
    s->set(zmq::sockopt::linger, 0);
    s->connect((*ch)->endpoint());
    EXPECT_TRUE(send_envelope(*s, encode(heartbeat{.tile_id = 1})));
    return s;
  };
  auto a = dealer("tile-a"), b = dealer("tile-b");
  for (int i = 0; i < 500 && heard.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(heard.load(), 2) << "the channel did not hear both peers";
  const auto t0 = channel::clock::now();
  a->close();
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard lk(mu);
      if (!closed.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // b, silent meanwhile, must not show up
  (*ch)->stop();
  std::lock_guard lk(mu);
  ASSERT_EQ(closed.size(), 1u) << "expected exactly tile-a's close";
  EXPECT_EQ(closed[0].first, "tile-a");
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(closed[0].second - t0).count();
  EXPECT_LT(ms, 500) << "a closed connection was reported after " << ms << " ms";
  b->close();
}

}  // namespace
}  // namespace tessera::exchange
