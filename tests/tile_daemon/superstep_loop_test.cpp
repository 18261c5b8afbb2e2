// The superstep loop over the in-process fabric: N tiles as threads, the same programs the
// integration tests run over real processes; and over real ipc sockets, where slices are
// received in place.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tessera/exchange/fault_plan.hpp"
#include "tessera/exchange/inproc_transport.hpp"
#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/toys/demo_programs.hpp"
#include "tessera/tile/superstep_loop.hpp"

using namespace tessera;
using namespace tessera::tile;
using namespace tessera::toys;
using namespace std::chrono_literals;

namespace {

// Runs a demo on `tiles` threads; returns the outputs in batch order.
std::vector<std::vector<float>> run_inproc(const toys::demo_program& d, uint32_t tiles, uint64_t batch_id = 1,
                                           std::vector<status>* statuses = nullptr) {
  exchange::inproc_fabric fabric(tiles);
  kernel_registry reg = kernel_registry::with_builtins();
  std::vector<std::vector<float>> outputs(d.batch.outputs.size());
  std::vector<status> st(tiles);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < tiles; ++t) {
    threads.emplace_back([&, t] {
      tile_memory mem(t, 16 << 20);
      auto tr = fabric.endpoint(t);
      for (const auto& a : d.allocations)
        if (a.tile == t) {
          auto x = mem.allocate(a.desc);
          std::memcpy((*x)->data, a.data, a.desc.bytes());
        }
      const auto& prog = d.programs.at(t);
      for (const auto& tmp : prog.temporaries) EXPECT_TRUE(mem.allocate(tmp).ok()) << tmp.name;
      for (const auto& in : d.batch.inputs)
        if (in.tile == t) std::memcpy(resolve_slice(in.dst, mem, 0)->data, in.data, in.bytes);
      exchange::run_program run{prog.id, batch_id, {}, d.batch.active_tokens, {}, {}, true};
      superstep_runner runner(t, *tr, mem, reg, {.exchange_timeout = 5000ms, .poll_tick = 10ms});
      auto r = runner.run(prog, run, {});
      st[t] = r ? ok_status() : r.error();
      for (size_t j = 0; j < d.batch.outputs.size(); ++j)
        if (d.batch.outputs[j].tile == t) {
          auto s = resolve_slice(d.batch.outputs[j].src, mem, 0);
          const auto* f = reinterpret_cast<const float*>(s->data);
          outputs[j].assign(f, f + s->elements);
        }
    });
  }
  for (auto& th : threads) th.join();
  if (statuses) *statuses = st;
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
  return outputs;
}


}  // namespace

TEST(SuperstepLoop, MatmulSplitsEqualReferenceInProcess) {
  for (auto split : {toys::matmul_split::rows, toys::matmul_split::columns, toys::matmul_split::inner}) {
    for (uint32_t tiles : {1u, 3u, 5u}) {
      auto d = toys::make_matmul_demo(split, tiles, 29, 17, 13, 3);
      auto out = run_inproc(d, tiles);
      // fp32 sums of 17 products of values in [-1,1): 1e-5 is far above rounding, far below a wrong slice.
      EXPECT_LT(toys::matmul_reference_error(d, toys::assemble_matmul(d, out)), 1e-5) << int(split) << " on " << tiles;
    }
  }
}

TEST(SuperstepLoop, AllReduceEqualsSum) {
  const uint32_t tiles = 4;
  auto d = toys::make_allreduce_demo(tiles, 103, 9);
  auto out = run_inproc(d, tiles);
  auto xs = toys::allreduce_inputs(d);
  for (size_t i = 0; i < 103; ++i) {
    double s = 0;
    for (auto& x : xs) s += x[i];
    for (uint32_t t = 0; t < tiles; ++t) ASSERT_NEAR(out[t][i], s, 1e-6);
  }
}

namespace {

// Tile 1 of an in-process pair: tensor 1 ("x", 4 floats) in its memory, and program 1 (tiles 0
// and 1) whose one superstep receives x from tile 0 under tag 7.
struct receiving_tile {
  explicit receiving_tile(bool sync) {
    EXPECT_TRUE(mem.allocate({1, "x", exchange::dtype::f32, {4}}));
    p.id = 1;
    p.tiles = {0, 1};
    exchange::superstep s;
    s.recvs.push_back({0, 7, {1, exchange::slice_kind::fixed, 0, 4, 0, 1}, false});
    s.sync = sync;
    p.steps.push_back(s);
  }
  exchange::inproc_fabric fabric{2};
  std::unique_ptr<exchange::transport> t0 = fabric.endpoint(0), t1 = fabric.endpoint(1);
  tile_memory mem{1, 1 << 16};
  kernel_registry reg = kernel_registry::with_builtins();
  exchange::program p;
};

}  // namespace

TEST(SuperstepLoop, EarlyStaleAndDuplicateMessagesAreHandled) {
  receiving_tile tile(/*sync=*/false);
  auto& [fabric, t0, t1, mem, reg, p] = tile;
  superstep_runner runner(1, *t1, mem, reg, {.exchange_timeout = 2000ms, .poll_tick = 5ms});
  std::vector<float> v{1, 2, 3, 4}, w{9, 9, 9, 9};
  // A message for a later batch arrives first, then the one for this batch, then a duplicate.
  ASSERT_TRUE(t0->send(1, exchange::encode(exchange::exchange_data{1, 6, 0, 0, 1, 7, 4, exchange::payload_checksum(w.data(), 16)}, exchange::copy_frame(w.data(), 16))).ok());
  ASSERT_TRUE(t0->send(1, exchange::encode(exchange::exchange_data{1, 5, 0, 0, 1, 7, 4, exchange::payload_checksum(v.data(), 16)}, exchange::copy_frame(v.data(), 16))).ok());
  ASSERT_TRUE(t0->send(1, exchange::encode(exchange::exchange_data{1, 5, 0, 0, 1, 7, 4, exchange::payload_checksum(w.data(), 16)}, exchange::copy_frame(w.data(), 16))).ok());
  ASSERT_TRUE(runner.run(p, {1, 5, {}, 0, {}, {}, true}, {}).ok());
  EXPECT_EQ(mem.find(1)->f32()[3], 4.f);  // batch 5's data, not batch 6's
  ASSERT_TRUE(runner.run(p, {1, 6, {}, 0, {}, {}, true}, {}).ok());
  EXPECT_EQ(mem.find(1)->f32()[3], 9.f);  // the early message was kept for batch 6
  // A message for an old batch is dropped as stale.
  ASSERT_TRUE(t0->send(1, exchange::encode(exchange::exchange_data{1, 2, 0, 0, 1, 7, 4, exchange::payload_checksum(v.data(), 16)}, exchange::copy_frame(v.data(), 16))).ok());
  exchange::envelope e;
  if (auto got = t1->recv(e, 100ms); got && *got) runner.accept(std::move(e));
  EXPECT_GE(runner.dropped_stale(), 1u);
  // Old batch ids are refused outright.
  EXPECT_FALSE(runner.run(p, {1, 4, {}, 0, {}, {}, true}, {}).ok());
}

TEST(SuperstepLoop, MissingPeerTimesOutWithNames) {
  receiving_tile tile(/*sync=*/true);  // tile 0 never sends
  auto& [fabric, t0, t1, mem, reg, p] = tile;
  superstep_runner runner(1, *t1, mem, reg, {.exchange_timeout = 100ms, .poll_tick = 5ms});
  auto r = runner.run(p, {1, 1, {}, 0, {}, {}, true}, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::timeout);
  EXPECT_NE(r.error().message().find("from tile 0"), std::string::npos) << r.error().message();
  // An interrupt stops a waiting run quickly.
  auto r2 = runner.run(p, {1, 2, {}, 0, {}, {}, true}, [] { return true; });
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code(), errc::cancelled);
}

TEST(SuperstepLoop, TokenSlicesFollowActiveTokens) {
  tile_memory mem(0, 1 << 16);
  ASSERT_TRUE(mem.allocate({1, "h", exchange::dtype::f32, {10, 4}}));
  auto rows = resolve_slice({1, exchange::slice_kind::token_rows, 0, 4, 0, 1}, mem, 7);
  ASSERT_TRUE(rows);
  EXPECT_EQ(rows->elements, 28u);
  auto part = resolve_slice({1, exchange::slice_kind::token_part, 0, 4, 2, 3}, mem, 7);
  ASSERT_TRUE(part);
  EXPECT_EQ(part->elements, 8u);  // rows 5..6 of 7
  EXPECT_EQ(part->data, reinterpret_cast<std::byte*>(mem.find(1)->f32() + 20));
  // bf16 tensors: 2-byte elements.
  ASSERT_TRUE(mem.allocate({2, "h16", exchange::dtype::bf16, {10, 4}}));
  auto half = resolve_slice({2, exchange::slice_kind::token_part, 0, 4, 2, 3}, mem, 7);
  ASSERT_TRUE(half);
  EXPECT_EQ(half->elements, 8u);
  EXPECT_EQ(half->bytes(), 16u);
  EXPECT_EQ(half->data, mem.find(2)->data + 40);
  EXPECT_EQ(mem.find(2)->bytes, 128u);  // 80 bytes rounded up to the arena's 64-byte lines
  EXPECT_FALSE(resolve_slice({1, exchange::slice_kind::token_rows, 0, 4, 0, 1}, mem, 11));  // over the budget
  EXPECT_FALSE(resolve_slice({1, exchange::slice_kind::fixed, 38, 4, 0, 1}, mem, 0));
}

namespace {

// Forwards to an in-process endpoint and counts the sync tokens sent.
class counting_transport final : public exchange::transport {
 public:
  counting_transport(std::unique_ptr<exchange::transport> t, std::atomic<uint64_t>& tokens)
      : t_(std::move(t)), tokens_(tokens) {}
  uint32_t self() const override { return t_->self(); }
  status send(uint32_t peer, exchange::envelope&& e) override {
    if (auto type = exchange::peek_type(e); type && *type == exchange::msg_type::sync_token) ++tokens_;
    return t_->send(peer, std::move(e));
  }
  result<bool> recv(exchange::envelope& out, std::chrono::milliseconds timeout) override { return t_->recv(out, timeout); }
  uint64_t bytes_sent() const override { return t_->bytes_sent(); }
  uint64_t bytes_received() const override { return t_->bytes_received(); }

 private:
  std::unique_ptr<exchange::transport> t_;
  std::atomic<uint64_t>& tokens_;
};

}  // namespace

// The combining-tree barrier: for every group size and fan-in, no tile starts superstep s + 1
// (leaves barrier s) before every tile has finished superstep s's compute set (arrived), and a
// barrier costs 2(n - 1) tokens, not n * ceil(log2 n).
TEST(SuperstepLoop, TreeBarrierHoldsEveryTileUntilAllArrived) {
  const uint32_t steps = 4;
  for (uint32_t fan_in : {16u, 2u, 3u}) {
    for (uint32_t n = 1; n <= 17; ++n) {
      exchange::inproc_fabric fabric(n);
      std::vector<std::atomic<uint32_t>> arrived(steps);
      std::atomic<uint32_t> early{0};
      std::atomic<uint64_t> tokens{0};
      kernel_registry reg = kernel_registry::with_builtins();
      // The test's "arrive" kernel stands in for scale (the registry holds kernels of the list only).
      reg.add(models::kernel_id::scale, {.min_inputs = 0, .max_inputs = 0, .min_outputs = 0, .max_outputs = 0},
              [&](const kernel_args& a) {
                const auto s = static_cast<uint32_t>(a.params_as<models::scale_params>()->factor);
                if (s > 0 && arrived[s - 1].load() != n) ++early;  // left barrier s - 1 too soon
                // Stagger the tiles so some arrive late.
                if ((a.ctx.tile_id * 7 + s) % 5 == 0) std::this_thread::sleep_for(2ms);
                ++arrived[s];
                return ok_status();
              });
      exchange::program p;
      p.id = 1;
      for (uint32_t t = 0; t < n; ++t) p.tiles.push_back(n - 1 - t);  // ranks are not tile ids
      for (uint32_t s = 0; s < steps; ++s) {
        exchange::superstep st;
        st.compute.push_back(exchange::make_call<models::kernel_id::scale>({}, {}, {float(s)}));
        p.steps.push_back(st);
      }
      std::vector<status> st(n);
      std::vector<std::thread> threads;
      for (uint32_t t = 0; t < n; ++t)
        threads.emplace_back([&, t] {
          tile_memory mem(t, 1 << 16);
          counting_transport tr(fabric.endpoint(t), tokens);
          superstep_runner runner(t, tr, mem, reg, {.exchange_timeout = 10000ms, .poll_tick = 5ms, .barrier_fan_in = fan_in});
          auto r = runner.run(p, {1, 1, {}, 0, {}, {}, false}, {});
          st[t] = r ? ok_status() : r.error();
          if (arrived[steps - 1].load() != n) ++early;  // left the last barrier too soon
        });
      for (auto& th : threads) th.join();
      for (uint32_t t = 0; t < n; ++t) ASSERT_TRUE(st[t].ok()) << "tile " << t << " of " << n << ": " << st[t].to_string();
      EXPECT_EQ(early.load(), 0u) << n << " tiles, fan-in " << fan_in;
      EXPECT_EQ(tokens.load(), uint64_t(steps) * 2 * (n - 1)) << n << " tiles, fan-in " << fan_in;
    }
  }
}

// Two tiles swap the same slice in one superstep: the sent slice is overwritten by the receive,
// so it must go out as a copy; a slice that nothing overwrites goes out borrowed and is
// released (every frame consumed) by the time run() returns.
TEST(SuperstepLoop, SwapInPlaceSendsTheOldValues) {
  exchange::inproc_fabric fabric(2);
  kernel_registry reg = kernel_registry::with_builtins();
  std::vector<std::vector<float>> x(2), y(2);
  std::vector<uint32_t> left(2, 99);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      tile_memory mem(t, 1 << 16);
      auto tr = fabric.endpoint(t);
      auto a = mem.allocate({1, "x", exchange::dtype::f32, {8}});
      auto b = mem.allocate({2, "y", exchange::dtype::f32, {8}});
      auto c = mem.allocate({3, "z", exchange::dtype::f32, {8}});
      ASSERT_TRUE(a && b && c);
      for (int i = 0; i < 8; ++i) (*a)->f32()[i] = float(t * 100 + i), (*b)->f32()[i] = 1, (*c)->f32()[i] = float(t * 10 + i);
      exchange::program p;
      p.id = 1;
      p.tiles = {0, 1};
      exchange::superstep s;
      const uint32_t peer = 1 - t;
      s.sends.push_back({peer, 1, {1, exchange::slice_kind::fixed, 0, 8, 0, 1}});  // x -> peer's x: copied
      s.sends.push_back({peer, 2, {3, exchange::slice_kind::fixed, 0, 8, 0, 1}});  // z -> peer's y: borrowed
      s.recvs.push_back({peer, 1, {1, exchange::slice_kind::fixed, 0, 8, 0, 1}, false});
      s.recvs.push_back({peer, 2, {2, exchange::slice_kind::fixed, 0, 8, 0, 1}, true});
      p.steps.push_back(s);
      superstep_runner runner(t, *tr, mem, reg, {.exchange_timeout = 5000ms, .poll_tick = 5ms});
      ASSERT_TRUE(runner.run(p, {1, 1, {}, 0, {}, {}, true}, {}).ok());
      left[t] = runner.in_flight();
      x[t].assign((*a)->f32(), (*a)->f32() + 8);
      y[t].assign((*b)->f32(), (*b)->f32() + 8);
    });
  for (auto& th : threads) th.join();
  for (uint32_t t = 0; t < 2; ++t) {
    EXPECT_EQ(left[t], 0u);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(x[t][i], float((1 - t) * 100 + i)) << "tile " << t;  // the peer's x before the swap
      EXPECT_EQ(y[t][i], 1 + float((1 - t) * 10 + i)) << "tile " << t;
    }
  }
}

// With a wait function (the daemon's poll of exchange + control), `interrupted` runs only after
// an event or once per poll_tick, and an event makes it run at once.
TEST(SuperstepLoop, WaitFunctionLimitsInterruptChecks) {
  exchange::inproc_fabric fabric(2);
  auto t1 = fabric.endpoint(1);
  tile_memory mem(1, 1 << 16);
  ASSERT_TRUE(mem.allocate({1, "x", exchange::dtype::f32, {4}}));
  kernel_registry reg = kernel_registry::with_builtins();
  superstep_runner runner(1, *t1, mem, reg, {.exchange_timeout = 300ms, .poll_tick = 50ms});
  int waits = 0;
  runner.set_wait([&](exchange::envelope& out, std::chrono::milliseconds, bool& event) -> result<bool> {
    ++waits;
    event = false;
    std::this_thread::sleep_for(1ms);  // a short wait: many passes per tick
    return t1->recv(out, 0ms);
  });
  exchange::program p;
  p.id = 1;
  p.tiles = {0, 1};
  exchange::superstep s;
  s.recvs.push_back({0, 7, {1, exchange::slice_kind::fixed, 0, 4, 0, 1}, false});
  p.steps.push_back(s);
  int checks = 0;
  auto r = runner.run(p, {1, 1, {}, 0, {}, {}, true}, [&] { return ++checks, false; });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::timeout);
  EXPECT_GT(waits, 20);
  EXPECT_LE(checks, 300 / 50 + 2) << waits << " waits";
  // A long tick: only the event can make the check come soon.
  superstep_runner slow(1, *t1, mem, reg, {.exchange_timeout = 60000ms, .poll_tick = 30000ms});
  waits = 0;
  slow.set_wait([&](exchange::envelope& out, std::chrono::milliseconds, bool& event) -> result<bool> {
    event = ++waits == 5;  // e.g. the control socket got abort_run
    std::this_thread::sleep_for(1ms);
    return t1->recv(out, 0ms);
  });
  checks = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto r2 = slow.run(p, {1, 2, {}, 0, {}, {}, true}, [&] { return ++checks > 1; });  // the first check is at once
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code(), errc::cancelled);
  EXPECT_EQ(checks, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10000ms);  // a third of the tick: a loaded machine is slow, not that slow
}

namespace {

// Two tiles as threads over real ipc sockets (exchange::zmq_transport: the payloads a tile
// receives are ZeroMQ's own, so whole slices are received in place). Each tile holds a, b, c of
// `n` floats and runs, for two batches (b written from outside between them):
//   s0: send a -> peer's b (whole: in place)
//   s1: c = a + b (reads the held b); send b (borrowed from the held message) -> peer's a[0, n/2)
//   s2: b = 3 * b (a kernel writes the held b); send c -> peer's b (whole: the held b replaced),
//       send b -> peer's c, accumulated (+=)
//   s3: a = b + c; barrier
// Returns each tile's a, b, c after each batch, bit for bit, and its run statuses.
struct ipc_pair_result {
  std::vector<std::vector<std::byte>> memory[2];  // per tile: per batch, a|b|c
  status statuses[2];
  uint64_t in_place[2] = {0, 0};
  uint64_t stale[2] = {0, 0};
};

ipc_pair_result run_ipc_pair(uint64_t in_place_min_bytes, uint64_t capacity, const std::string& faults_json = "",
                             std::chrono::milliseconds timeout = 10000ms) {
  constexpr int64_t n = 4096;  // 16 KiB slices
  char tmpl[] = "/tmp/tessera-inplace-XXXXXX";
  EXPECT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::vector<std::string> endpoints{"ipc://" + dir + "/t0.sock", "ipc://" + dir + "/t1.sock"};
  zmq::context_t ctx(1);
  std::unique_ptr<exchange::zmq_transport> tr[2];
  for (uint32_t t = 0; t < 2; ++t) {
    auto b = exchange::zmq_transport::bind(ctx, t, endpoints[t]);
    EXPECT_TRUE(b) << b.error().to_string();
    tr[t] = std::move(*b);
  }
  for (auto& t : tr) EXPECT_TRUE(t->connect_peers(endpoints).ok());
  exchange::fault_plan plan;
  if (!faults_json.empty()) {
    auto p = exchange::parse_fault_plan(faults_json);
    EXPECT_TRUE(p) << p.error().to_string();
    plan = *p;
  }
  kernel_registry reg = kernel_registry::with_builtins();
  ipc_pair_result out;
  std::atomic<bool> failed{false};
  auto whole = [](uint32_t id) { return exchange::slice_ref{id, exchange::slice_kind::fixed, 0, n, 0, 1}; };
  auto call = [](models::kernel_id k, std::vector<uint32_t> in, uint32_t o, std::vector<float> f = {}) {
    exchange::kernel_call c;
    c.kernel = k;
    c.inputs = std::move(in);
    c.outputs = {o};
    c.fparams = std::move(f);
    return c;
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      const uint32_t peer = 1 - t;
      tile_memory mem(t, capacity);
      for (uint32_t id = 1; id <= 3; ++id)
        ASSERT_TRUE(mem.allocate({id, std::string(1, char('a' + id - 1)), exchange::dtype::f32, {n}}));
      for (int64_t i = 0; i < n; ++i) mem.find(1)->f32()[i] = float(t * 1000) + float(i) * 0.37f;
      exchange::program p;
      p.id = 1;
      p.tiles = {0, 1};
      p.steps.resize(4);
      p.steps[0].sends.push_back({peer, 1, whole(1)});
      p.steps[0].recvs.push_back({peer, 1, whole(2), false});
      p.steps[1].compute.push_back(call(models::kernel_id::add, {1, 2}, 3));
      p.steps[1].sends.push_back({peer, 2, {2, exchange::slice_kind::fixed, 0, n / 2, 0, 1}});
      p.steps[1].recvs.push_back({peer, 2, {1, exchange::slice_kind::fixed, 0, n / 2, 0, 1}, false});
      p.steps[2].compute.push_back(call(models::kernel_id::scale, {2}, 2, {3.f}));
      p.steps[2].sends.push_back({peer, 3, whole(3)});
      p.steps[2].sends.push_back({peer, 4, whole(2)});
      p.steps[2].recvs.push_back({peer, 3, whole(2), false});
      p.steps[2].recvs.push_back({peer, 4, whole(3), true});
      p.steps[3].compute.push_back(call(models::kernel_id::add, {2, 3}, 1));
      for (auto& s : p.steps) s.sync = false;
      p.steps[3].sync = true;
      fault_injector faults(plan.for_tile(int(t)), int(t), 0);
      superstep_runner runner(t, *tr[t], mem, reg,
                              {.exchange_timeout = timeout, .poll_tick = 5ms, .in_place_min_bytes = in_place_min_bytes});
      if (faults.active()) runner.set_faults(&faults);
      for (uint64_t batch = 1; batch <= 2; ++batch) {
        if (batch == 2)  // the daemon writes inputs through the same pointer, held or not
          for (int64_t i = 0; i < n; ++i) mem.find(2)->f32()[i] += float(i % 7);
        auto r = runner.run(p, {1, batch, {}, 0, {}, {}, true}, [&] { return failed.load(); });
        if (!r) {
          out.statuses[t] = r.error();
          failed = true;
          break;
        }
        std::vector<std::byte> bytes;
        for (uint32_t id = 1; id <= 3; ++id)
          bytes.insert(bytes.end(), mem.find(id)->data, mem.find(id)->data + mem.find(id)->desc.bytes());
        out.memory[t].push_back(std::move(bytes));
      }
      out.in_place[t] = runner.received_in_place();
      out.stale[t] = runner.dropped_stale();
      EXPECT_LE(mem.used() + mem.held_bytes(), mem.capacity());
    });
  for (auto& th : threads) th.join();
  for (auto& t : tr) t.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return out;
}

}  // namespace

// Receiving in place gives the same bytes as copying into the arena, superstep after superstep
// and across batches: a held slice read by a kernel, written by a kernel, sent on, replaced by a
// later receive, accumulated into and partly overwritten. Under a cap with no room beside the
// arena, every slice is copied, with the same result.
TEST(SuperstepLoop, ReceiveInPlaceEqualsCopyBitForBit) {
  constexpr uint64_t slice = 4096 * 4, roomy = 1 << 20, tight = 3 * slice;
  auto copied = run_ipc_pair(UINT64_MAX, roomy);
  auto in_place = run_ipc_pair(4096, roomy);
  auto capped = run_ipc_pair(4096, tight);
  for (uint32_t t = 0; t < 2; ++t) {
    ASSERT_TRUE(copied.statuses[t].ok()) << copied.statuses[t].to_string();
    ASSERT_TRUE(in_place.statuses[t].ok()) << in_place.statuses[t].to_string();
    ASSERT_TRUE(capped.statuses[t].ok()) << capped.statuses[t].to_string();
    ASSERT_EQ(copied.memory[t].size(), 2u);
    EXPECT_TRUE(copied.memory[t] == in_place.memory[t]) << "tile " << t;
    EXPECT_TRUE(copied.memory[t] == capped.memory[t]) << "tile " << t;
    EXPECT_FALSE(copied.memory[t][0] == copied.memory[t][1]) << "batch 2 changed nothing";
    EXPECT_EQ(copied.in_place[t], 0u);
    EXPECT_EQ(in_place.in_place[t], 2 * 2 * slice) << "tile " << t;  // s0 and s2's whole b, two batches
    EXPECT_EQ(capped.in_place[t], 0u);
  }
  // The values are the program's: on tile 0 after batch 1, a[i] = b[i] + c[i] (s3).
  const auto* f = reinterpret_cast<const float*>(in_place.memory[0][0].data());
  for (int64_t i = 0; i < 4096; i += 511) EXPECT_EQ(f[i], f[4096 + i] + f[2 * 4096 + i]) << i;
}

// Faults injected at the sender are still caught when the receiver keeps slices in place: a
// corrupt slice fails the checksum before it becomes a tensor, a dropped one times out naming
// its sender, a duplicate is dropped as stale with results unchanged.
TEST(SuperstepLoop, ReceiveInPlaceStillCatchesInjectedFaults) {
  auto clean = run_ipc_pair(4096, 1 << 20);
  ASSERT_TRUE(clean.statuses[1].ok()) << clean.statuses[1].to_string();

  auto corrupt = run_ipc_pair(4096, 1 << 20, R"({"faults": [{"kind": "corrupt", "fraction": 1, "tile": 0}]})");
  EXPECT_EQ(corrupt.statuses[1].code(), errc::bad_message) << corrupt.statuses[1].to_string();
  EXPECT_NE(corrupt.statuses[1].message().find("checksum mismatch"), std::string::npos);
  EXPECT_EQ(corrupt.in_place[1], 0u);  // the first slice was corrupt: nothing kept

  auto dup = run_ipc_pair(4096, 1 << 20, R"({"faults": [{"kind": "duplicate", "fraction": 1, "tile": 0}]})");
  for (uint32_t t = 0; t < 2; ++t) {
    ASSERT_TRUE(dup.statuses[t].ok()) << dup.statuses[t].to_string();
    EXPECT_TRUE(dup.memory[t] == clean.memory[t]) << "tile " << t;
  }
  EXPECT_GT(dup.stale[1], 0u);
  EXPECT_GT(dup.in_place[1], 0u);

  // Tile 1 waits for tile 0's first slice, tile 0 for tile 1's second: one times out naming the
  // other, which is then stopped.
  auto drop = run_ipc_pair(4096, 1 << 20, R"({"faults": [{"kind": "drop", "fraction": 1, "tile": 0}]})", 500ms);
  const int timed_out = drop.statuses[0].code() == errc::timeout ? 0 : 1;
  ASSERT_EQ(drop.statuses[timed_out].code(), errc::timeout) << drop.statuses[timed_out].to_string();
  EXPECT_NE(drop.statuses[timed_out].message().find("from tile " + std::to_string(1 - timed_out)), std::string::npos)
      << drop.statuses[timed_out].to_string();
  EXPECT_FALSE(drop.statuses[1 - timed_out].ok());
  EXPECT_TRUE(drop.memory[1].empty());
}
