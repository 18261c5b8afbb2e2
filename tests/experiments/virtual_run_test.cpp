// The virtual clock and the discrete-event loop: hand-computed cases, determinism, timing-only
// versus computed runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "tessera/backends/reference_backend.hpp"
#include "tessera/experiment/virtual_run.hpp"

using namespace tessera;
using namespace tessera::experiment;
using namespace std::chrono_literals;

namespace {

trace make_trace(std::vector<std::pair<double, int>> v) {
  trace t;
  for (auto [a, l] : v) t.entries.push_back({a, l});
  return t;
}

virtual_backend_spec fixed_device(serving::batching_config b, service_time_fn f, std::string kind = "gpu") {
  virtual_backend_spec s;
  s.name = kind + "0";
  s.kind = kind;
  s.batching = b;
  s.service = std::move(f);
  return s;
}

virtual_run_config one(virtual_backend_spec s) {
  virtual_run_config c;
  c.shape = *models::shape_preset("bert-base");
  c.backends.push_back(std::move(s));
  return c;
}

serving::batching_config dynamic(int b, serving::duration delay) {
  serving::batching_config c;
  c.kind = serving::policy_kind::dynamic_padded;
  c.max_batch_size = b;
  c.token_budget = 0;
  c.max_queue_delay = delay;
  c.max_inflight_batches = 1;
  return c;
}

}  // namespace

TEST(virtual_run, constant_service_one_at_a_time) {
  // 10 ms per batch of one: a FIFO single server.
  auto cfg = one(fixed_device(dynamic(1, 0ms), [](auto&, auto, auto) { return result<double>(0.010); }));
  auto r = run_virtual(make_trace({{0, 10}, {0, 10}, {0.005, 10}, {0.050, 10}}), cfg);
  ASSERT_TRUE(r) << r.error().to_string();
  const auto& q = r->requests;
  ASSERT_EQ(q.size(), 4u);
  EXPECT_DOUBLE_EQ(q[0].done_s, 0.010);
  EXPECT_DOUBLE_EQ(q[1].done_s, 0.020);
  EXPECT_DOUBLE_EQ(q[2].done_s, 0.030);
  EXPECT_DOUBLE_EQ(q[3].done_s, 0.060);
  EXPECT_DOUBLE_EQ(q[2].latency_s(), 0.025);
  EXPECT_DOUBLE_EQ(q[1].dispatch_s, 0.010);
  EXPECT_EQ(r->summary.completed, 4);
  EXPECT_EQ(r->summary.batches, 4);
  EXPECT_DOUBLE_EQ(r->summary.makespan_s, 0.060);
  EXPECT_DOUBLE_EQ(r->summary.p99_latency_s, 0.025);
}

TEST(virtual_run, queue_delay_closes_a_partial_batch) {
  // B = 4, 2 ms delay, 1 ms per sequence: two arrivals at 0 and 1 ms go together at 2 ms.
  auto cfg = one(fixed_device(dynamic(4, 2ms), [](const std::vector<int32_t>& l, auto, auto) {
    return result<double>(0.001 * static_cast<double>(l.size()));
  }));
  auto r = run_virtual(make_trace({{0, 10}, {0.001, 20}}), cfg);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->requests[0].dispatch_s, 0.002, 1e-12);
  EXPECT_NEAR(r->requests[0].done_s, 0.004, 1e-12);
  EXPECT_NEAR(r->requests[1].done_s, 0.004, 1e-12);
  ASSERT_EQ(r->batches.size(), 1u);
  EXPECT_EQ(r->batches[0].sequences, 2);
  EXPECT_EQ(r->batches[0].computed_tokens, 40);  // padded to the longest, 20
}

TEST(virtual_run, token_budget_first_fit_then_the_rest) {
  serving::batching_config b;
  b.kind = serving::policy_kind::token_budget;
  b.max_batch_size = 0;
  b.token_budget = 100;
  b.max_queue_delay = 0ms;
  b.max_inflight_batches = 1;
  std::vector<std::vector<int32_t>> seen;
  auto cfg = one(fixed_device(b, [&](const std::vector<int32_t>& l, backends::batch_layout lay, int32_t) {
    EXPECT_EQ(lay, backends::batch_layout::packed);
    seen.push_back(l);
    return result<double>(0.001 * static_cast<double>(l.size()));
  }, "tiles"));
  auto r = run_virtual(make_trace({{0, 60}, {0, 60}, {0, 30}}), cfg);
  ASSERT_TRUE(r);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<int32_t>{60, 30}));
  EXPECT_EQ(seen[1], (std::vector<int32_t>{60}));
  EXPECT_NEAR(r->requests[0].done_s, 0.002, 1e-12);
  EXPECT_NEAR(r->requests[2].done_s, 0.002, 1e-12);
  EXPECT_NEAR(r->requests[1].done_s, 0.003, 1e-12);
  EXPECT_EQ(r->requests[0].backend, "tiles0");
}

TEST(virtual_run, static_batches_are_filled_and_padded_to_the_max) {
  serving::batching_config b;
  b.kind = serving::policy_kind::static_padded;
  b.max_batch_size = 2;
  b.token_budget = 0;
  b.max_sequence_length = 512;
  b.max_queue_delay = 2ms;
  b.max_inflight_batches = 1;
  auto cfg = one(fixed_device(b, [&](const std::vector<int32_t>& l, backends::batch_layout lay, int32_t pad) {
    EXPECT_EQ(lay, backends::batch_layout::padded);
    EXPECT_EQ(pad, 512);
    EXPECT_EQ(l.size(), 2u);  // one real row and one dummy row
    return result<double>(0.005);
  }));
  auto r = run_virtual(make_trace({{0, 10}}), cfg);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->requests[0].done_s, 0.007, 1e-12);
  EXPECT_EQ(r->batches[0].computed_tokens, 1024);
  EXPECT_NEAR(r->summary.padding_share, 1.0 - 10.0 / 1024.0, 1e-12);
}

TEST(virtual_run, a_busy_device_queues_and_batches_grow) {
  // Under load the queue fills while the device is busy: later batches are bigger.
  auto cfg = one(fixed_device(dynamic(8, 0ms), [](auto&, auto, auto) { return result<double>(0.010); }));
  std::vector<std::pair<double, int>> v;
  for (int i = 0; i < 9; ++i) v.push_back({0.001 * i, 10});
  auto r = run_virtual(make_trace(v), cfg);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->batches.size(), 2u);
  EXPECT_EQ(r->batches[0].sequences, 1);  // the first alone at 0
  EXPECT_EQ(r->batches[1].sequences, 8);  // the other 8 at 10 ms
  EXPECT_NEAR(r->requests[8].done_s, 0.020, 1e-12);
}

TEST(virtual_trace, poisson_is_deterministic_and_round_trips_through_csv) {
  auto a = poisson_trace({.requests = 300, .rate = 250, .long_share = 0.4, .seed = 7});
  auto b = poisson_trace({.requests = 300, .rate = 250, .long_share = 0.4, .seed = 7});
  ASSERT_EQ(a.size(), 300u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.entries[i].arrival_s, b.entries[i].arrival_s);
    EXPECT_EQ(a.entries[i].length, b.entries[i].length);
  }
  EXPECT_NEAR(a.entries.back().arrival_s, 300.0 / 250.0, 0.25);  // about n / rate
  EXPECT_NEAR(long_share(a), 0.4, 0.08);
  auto path = std::filesystem::temp_directory_path() / "tessera-trace-test.csv";
  ASSERT_TRUE(write_trace(a, path.string()).ok());
  auto c = read_trace(path.string());
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_EQ(c->size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(c->entries[i].arrival_s, a.entries[i].arrival_s);
    EXPECT_EQ(c->entries[i].length, a.entries[i].length);
  }
  std::filesystem::remove(path);
  EXPECT_FALSE(read_trace("/nonexistent/trace.csv"));
}

namespace {

virtual_run_config preset_config(const std::string& preset, serving::batching_config b, const std::string& kind) {
  virtual_run_config c;
  c.shape = *models::shape_preset("bert-base");
  virtual_backend_spec s;
  s.name = kind + "0";
  s.kind = kind;
  s.preset = preset;
  s.batching = b;
  c.backends.push_back(s);
  return c;
}

void expect_same_modelled(const run_result& a, const run_result& b) {
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].done_s, b.requests[i].done_s) << i;        // bit-identical
    EXPECT_EQ(a.requests[i].dispatch_s, b.requests[i].dispatch_s) << i;
    EXPECT_EQ(a.requests[i].backend, b.requests[i].backend) << i;
  }
  ASSERT_EQ(a.batches.size(), b.batches.size());
  for (size_t i = 0; i < a.batches.size(); ++i) {
    EXPECT_EQ(a.batches[i].start_s, b.batches[i].start_s);
    EXPECT_EQ(a.batches[i].end_s, b.batches[i].end_s);
  }
  EXPECT_EQ(a.summary.throughput_rps, b.summary.throughput_rps);
  EXPECT_EQ(a.summary.p99_latency_s, b.summary.p99_latency_s);
}

}  // namespace

TEST(virtual_run, same_trace_and_seed_give_identical_modelled_results) {
  serving::batching_config b;
  b.kind = serving::policy_kind::token_budget;
  b.max_batch_size = 0;
  b.token_budget = 4096;
  auto cfg = preset_config("ipu-mk2", b, "tiles");
  auto t = poisson_trace({.requests = 400, .rate = 1500, .long_share = 0.4, .seed = 3});
  auto r1 = run_virtual(t, cfg);
  auto r2 = run_virtual(poisson_trace({.requests = 400, .rate = 1500, .long_share = 0.4, .seed = 3}), cfg);
  ASSERT_TRUE(r1) << r1.error().to_string();
  ASSERT_TRUE(r2);
  expect_same_modelled(*r1, *r2);
  EXPECT_EQ(r1->summary.completed, 400);
  EXPECT_GT(r1->summary.throughput_rps, 0);
  // A different seed gives a different trace and different numbers.
  auto r3 = run_virtual(poisson_trace({.requests = 400, .rate = 1500, .long_share = 0.4, .seed = 4}), cfg);
  ASSERT_TRUE(r3);
  EXPECT_NE(r1->summary.p99_latency_s, r3->summary.p99_latency_s);
}

TEST(virtual_run, computed_and_timing_only_runs_give_the_same_modelled_numbers) {
  auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
  for (auto kind : {serving::policy_kind::static_padded, serving::policy_kind::dynamic_padded,
                    serving::policy_kind::token_budget}) {
    serving::batching_config b;
    b.kind = kind;
    b.max_batch_size = kind == serving::policy_kind::token_budget ? 0 : 8;
    b.token_budget = kind == serving::policy_kind::token_budget ? 2048 : 0;
    b.max_sequence_length = 512;
    auto timing_only = preset_config("a100-40gb", b, "gpu");
    auto computed = timing_only;
    computed.backends[0].compute = backends::make_reference_backend(model, {.name = "gpu0", .kind = "gpu", .omp_threads = 2});
    computed.check_model = model;
    auto t = poisson_trace({.requests = 24, .rate = 2000, .long_share = 0.4, .seed = 11});
    auto a = run_virtual(t, timing_only);
    auto c = run_virtual(t, computed);
    ASSERT_TRUE(a) << a.error().to_string();
    ASSERT_TRUE(c) << c.error().to_string();
    expect_same_modelled(*a, *c);
    EXPECT_TRUE(c->summary.computed);
    EXPECT_FALSE(a->summary.computed);
    EXPECT_EQ(c->summary.checked, 24);
    EXPECT_LE(c->summary.max_abs_logit_error, 1e-4);
    EXPECT_GT(c->summary.compute_wall_s, 0);
  }
}

TEST(virtual_run, hybrid_sends_long_requests_to_tiles_and_short_to_the_gpu) {
  virtual_run_config c;
  c.shape = *models::shape_preset("bert-base");
  serving::batching_config packed;
  packed.kind = serving::policy_kind::token_budget;
  packed.max_batch_size = 0;
  packed.token_budget = 4096;
  c.backends.push_back({.name = "tiles0", .kind = "tiles", .preset = "ipu-mk2", .batching = packed});
  c.backends.push_back({.name = "gpu0", .kind = "gpu", .preset = "a100-40gb", .batching = dynamic(32, 2ms)});
  c.routing.strategy = serving::routing_strategy::hybrid_length;
  c.routing.long_threshold = 128;
  auto r = run_virtual(poisson_trace({.requests = 200, .rate = 1000, .long_share = 0.4}), c);
  ASSERT_TRUE(r) << r.error().to_string();
  for (const auto& q : r->requests) {
    ASSERT_TRUE(q.ok) << q.error;
    EXPECT_EQ(q.backend, q.length > 128 ? "tiles0" : "gpu0");
  }
}

TEST(virtual_run, timing_errors_are_reported) {
  auto cfg = one(fixed_device(dynamic(1, 0ms), [](auto&, auto, auto) -> result<double> {
    return status::invalid("no model for this");
  }));
  auto r = run_virtual(make_trace({{0, 10}}), cfg);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("no model for this"), std::string::npos);
  EXPECT_FALSE(run_virtual(trace{}, cfg));
}
