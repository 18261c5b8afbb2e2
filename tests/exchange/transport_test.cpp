// The same exchange checks over the in-process fabric and real ZeroMQ sockets (ipc and tcp).
#include <gtest/gtest.h>

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
                                      copy_frame(v.data(), v.size() * 4))));
  envelope e;
  auto got = b.recv(e, 5000ms);
  ASSERT_TRUE(got && *got);
  exchange_data d;
  ASSERT_TRUE(decode(e, d));
  EXPECT_EQ(d.tag, 3u);
  EXPECT_EQ(e.payloads[0].data<float>()[999], 999.f);
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
  EXPECT_FALSE(t0->send(7, encode(sync_token{})));
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

class ZmqTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(ZmqTransport, PointToPoint) {
  zmq::context_t ctx;
  auto dir = std::filesystem::temp_directory_path() / ("tessera-tt-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto ep = [&](int i) {
    return GetParam() == "ipc" ? "ipc://" + (dir / ("t" + std::to_string(i))).string() : std::string("tcp://127.0.0.1:0");
  };
  auto a = zmq_transport::bind(ctx, 0, ep(0));
  auto b = zmq_transport::bind(ctx, 1, ep(1));
  ASSERT_TRUE(a && b);
  std::vector<std::string> eps{(*a)->endpoint(), (*b)->endpoint()};
  ASSERT_TRUE((*a)->connect_peers(eps));
  ASSERT_TRUE((*b)->connect_peers(eps));
  ping_pong(**a, **b);
  ping_pong(**b, **a);
  std::filesystem::remove_all(dir);
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
  EXPECT_FALSE((*good)->send(3, encode(sync_token{})));
}

INSTANTIATE_TEST_SUITE_P(Transports, ZmqTransport, ::testing::Values("ipc", "tcp"));
