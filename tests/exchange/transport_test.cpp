// The same exchange checks over the in-process fabric and real ZeroMQ sockets (ipc and tcp).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tessera/exchange/inproc_transport.hpp"
#include "tessera/exchange/zmq_transport.hpp"

using namespace tessera;
using namespace tessera::exchange;
using namespace std::chrono_literals;

namespace {

void ping_pong(transport& a, transport& b) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  ASSERT_TRUE(a.send(b.self(), encode(exchange_data{1, 1, 0, a.self(), b.self(), 3, v.size()},
                                      copy_frame(v.data(), v.size() * 4))).ok());
  envelope e;
  auto got = b.recv(e, 5000ms);
  ASSERT_TRUE(got && *got);
  exchange_data d;
  ASSERT_TRUE(decode(e, d).ok());
  EXPECT_EQ(d.tag, 3u);
  // A received frame may start at any address (UBSan: misaligned float): copy, do not cast.
  float last = 0;
  std::memcpy(&last, e.payloads[0].data<char>() + 999 * 4, 4);
  EXPECT_EQ(last, 999.f);
  EXPECT_EQ(b.bytes_received(), 4000u);
  // Nothing else is queued: a short wait times out.
  auto none = b.recv(e, 10ms);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

}  // namespace

TEST(Inproc, DeliversToTheRightMailbox) {
  inproc_fabric f(3);
  auto t0 = f.endpoint(0), t2 = f.endpoint(2);
  ping_pong(*t0, *t2);
  EXPECT_FALSE(t0->send(7, encode(sync_token{})).ok());
}

TEST(Inproc, CloseWakesReceivers) {
  inproc_fabric f(2);
  auto t1 = f.endpoint(1);
  std::thread closer([&] {
    std::this_thread::sleep_for(20ms);
    f.close();
  });
  envelope e;
  auto r = t1->recv(e, 5000ms);
  closer.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::cancelled);
}

namespace {

// Tiles 0 and 1 as zmq_transports bound on ipc (in a folder of their own) or tcp (loopback, any
// port), each connected to both.
struct zmq_pair {
  explicit zmq_pair(const std::string& scheme) {
    static int made = 0;
    dir = std::filesystem::temp_directory_path() /
          ("tessera-tt-" + std::to_string(getpid()) + "-" + std::to_string(made++));
    std::filesystem::create_directories(dir);
    auto ep = [&](int i) {
      return scheme == "ipc" ? "ipc://" + (dir / ("t" + std::to_string(i))).string() : std::string("tcp://127.0.0.1:0");
    };
    auto ra = zmq_transport::bind(ctx, 0, ep(0));
    auto rb = zmq_transport::bind(ctx, 1, ep(1));
    if (!ra || !rb) return;
    a = std::move(*ra);
    b = std::move(*rb);
    std::vector<std::string> eps{a->endpoint(), b->endpoint()};
    connected = a->connect_peers(eps).ok() && b->connect_peers(eps).ok();
  }
  ~zmq_pair() { std::filesystem::remove_all(dir); }

  zmq::context_t ctx;  // outlives the transports (declared first)
  std::filesystem::path dir;
  std::unique_ptr<zmq_transport> a, b;
  bool connected = false;
};

}  // namespace

class ZmqTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(ZmqTransport, PointToPoint) {
  zmq_pair z(GetParam());
  ASSERT_TRUE(z.connected);
  ping_pong(*z.a, *z.b);
  ping_pong(*z.b, *z.a);
  // A message to itself loops back in the process (no socket to its own PULL).
  ASSERT_TRUE(z.a->send(0, encode(sync_token{1, 2, 3, 0, 0})).ok());
  envelope e;
  auto got = z.a->recv(e, 0ms);
  ASSERT_TRUE(got && *got);
  sync_token s;
  ASSERT_TRUE(decode(e, s).ok());
  EXPECT_EQ(s.superstep, 3u);
}

// ZeroMQ releases a borrowed frame once its I/O thread has written it: in_flight returns to 0
// while the receiver has not read the message yet, and changing the source after that does
// not change what arrives.
TEST_P(ZmqTransport, BorrowedFrameIsReleasedAfterTheWriteAndArrivesIntact) {
  std::atomic<uint32_t> in_flight{0};  // outlives the context (declared first)
  zmq_pair z(GetParam());
  ASSERT_TRUE(z.connected);
  auto& a = z.a;
  auto& b = z.b;
  const size_t n = 1 << 18;  // 1 MiB: larger than ZeroMQ's batches, written straight from the source
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(i % 4093);
  for (int m = 0; m < 3; ++m)
    ASSERT_TRUE(a->send(1, encode(exchange_data{1, 1, uint32_t(m), 0, 1, 3, n}, borrow_frame(v.data(), n * 4, &in_flight))).ok());
  EXPECT_EQ(a->bytes_sent(), 3 * n * 4);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (in_flight.load() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(in_flight.load(), 0u) << "ZeroMQ did not release the borrowed frames";
  std::fill(v.begin(), v.end(), -1.f);  // allowed now: nothing refers to v any more
  for (int m = 0; m < 3; ++m) {
    envelope e;
    auto got = b->recv(e, 5000ms);
    ASSERT_TRUE(got && *got);
    exchange_data d;
    ASSERT_TRUE(decode(e, d).ok());
    EXPECT_EQ(d.superstep, uint32_t(m));
    const float* p = e.payloads[0].data<float>();
    for (size_t i = 0; i < n; i += 997) ASSERT_EQ(p[i], float(i % 4093)) << i;
    EXPECT_EQ(p[n - 1], float((n - 1) % 4093));
  }
}

TEST(BorrowFrame, CallbackFiresWhenTheLastReferenceGoesInProcess) {
  std::atomic<uint32_t> in_flight{0};
  std::vector<float> v{1, 2, 3, 4};
  inproc_fabric f(2);
  auto t0 = f.endpoint(0), t1 = f.endpoint(1);
  {
    zmq::message_t m = borrow_frame(v.data(), 16, &in_flight);
    EXPECT_EQ(in_flight.load(), 1u);
    EXPECT_EQ(m.data(), static_cast<void*>(v.data()));  // no copy
    zmq::message_t moved = std::move(m);
    EXPECT_EQ(in_flight.load(), 1u);
  }
  EXPECT_EQ(in_flight.load(), 0u);
  ASSERT_TRUE(t0->send(1, encode(exchange_data{1, 1, 0, 0, 1, 3, 4}, borrow_frame(v.data(), 16, &in_flight))).ok());
  EXPECT_EQ(in_flight.load(), 1u);  // in the mailbox: still referenced
  {
    envelope e;
    auto got = t1->recv(e, 1000ms);
    ASSERT_TRUE(got && *got);
    EXPECT_EQ(e.payloads[0].data<float>()[3], 4.f);
    EXPECT_EQ(in_flight.load(), 1u);
  }
  EXPECT_EQ(in_flight.load(), 0u);
  EXPECT_EQ(borrow_frame(v.data(), 0, &in_flight).size(), 0u);  // nothing to borrow
  EXPECT_EQ(in_flight.load(), 0u);
}

TEST(BorrowFrame, QueuedFramesAreReleasedWhenTheSocketCloses) {
  std::atomic<uint32_t> in_flight{0};
  std::vector<float> v(1024, 2.f);
  {
    zmq::context_t ctx;
    auto a = zmq_transport::bind(ctx, 0, "tcp://127.0.0.1:0");
    ASSERT_TRUE(a);
    // Tile 1's endpoint has nobody listening: the frames stay queued in the PUSH socket.
    ASSERT_TRUE((*a)->connect_peers({(*a)->endpoint(), "tcp://127.0.0.1:1"}).ok());
    for (int m = 0; m < 4; ++m)
      ASSERT_TRUE((*a)->send(1, encode(exchange_data{1, 1, uint32_t(m), 0, 1, 3, 1024}, borrow_frame(v.data(), 4096, &in_flight))).ok());
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(in_flight.load(), 4u);
  }  // linger 0: closing drops them
  EXPECT_EQ(in_flight.load(), 0u);
}

TEST(ZmqTransportErrors, ForeignMessageIsABadMessageNotACrash) {
  zmq::context_t ctx;
  auto a = zmq_transport::bind(ctx, 0, "tcp://127.0.0.1:0");
  ASSERT_TRUE(a);
  zmq::socket_t intruder(ctx, zmq::socket_type::push);
  intruder.connect((*a)->endpoint());
  intruder.send(zmq::str_buffer("not a tessera message"), zmq::send_flags::none);
  envelope e;
  auto got = (*a)->recv(e, 5000ms);
  ASSERT_TRUE(got && *got);  // it arrives as an envelope...
  EXPECT_FALSE(peek_type(e));  // ...that does not decode
}

TEST(ZmqTransportErrors, BindFailureIsAStatus) {
  zmq::context_t ctx;
  auto a = zmq_transport::bind(ctx, 0, "ipc:///nonexistent-dir/for/sure/x.sock");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code(), errc::io_error);
  auto good = zmq_transport::bind(ctx, 0, "tcp://127.0.0.1:0");
  ASSERT_TRUE(good);
  EXPECT_FALSE((*good)->send(3, encode(sync_token{})).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, ZmqTransport, ::testing::Values("ipc", "tcp"));
