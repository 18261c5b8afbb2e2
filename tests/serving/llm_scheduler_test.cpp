// The continuous-batching scheduler and its block manager against the toy decoder (a paged
// cache whose logits depend on the whole token prefix, toy_llm.hpp): every output must equal the
// greedy generation without a cache, so wrong block tables, lost preemptions and wrongly shared
// prefix blocks all fail. A randomized property test (seeded) mixes arrivals, lengths,
// cancellations, tiny pools, budgets and both batching modes.
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <map>
#include <random>
#include <set>

#include "tessera/serving/llm_scheduler.hpp"
#include "tessera/serving/sampling.hpp"
#include "tessera/toys/toy_llm.hpp"

namespace tessera::serving {
using namespace tessera::toys;
namespace {

// Runs plans on a toy backend synchronously.
struct harness {
  scheduler_config cfg;
  llm_scheduler sched;
  std::shared_ptr<backends::step_fn_backend> backend;
  std::map<uint64_t, std::vector<int32_t>> prompts;
  std::map<uint64_t, int32_t> max_new;
  std::map<uint64_t, std::vector<int32_t>> done;  // finished: output tokens
  std::map<uint64_t, int64_t> first_token_step;
  std::set<uint64_t> cancelled;
  int64_t steps = 0;

  harness(scheduler_config c, int32_t blocks, int32_t block_tokens)
      : cfg(c), sched(c, blocks, block_tokens),
        backend(make_toy_llm_backend({.num_blocks = blocks, .block_tokens = block_tokens})) {}

  status add(uint64_t id, std::vector<int32_t> prompt, int32_t n) {
    auto st = sched.add(id, prompt, n);
    if (st.ok()) {
      prompts[id] = std::move(prompt);
      max_new[id] = n;
    }
    return st;
  }

  step_plan step() {
    step_plan plan = sched.schedule();
    EXPECT_EQ(sched.check(), "");
    for (uint64_t id : plan.cancelled) {
      EXPECT_TRUE(cancelled.insert(id).second) << "cancelled twice: " << id;
      EXPECT_FALSE(done.count(id)) << "finished and cancelled: " << id;
    }
    if (plan.empty()) return plan;
    ++steps;
    EXPECT_LE(plan.batch.num_tokens(), cfg.token_budget);
    std::set<uint64_t> in_step;
    for (const auto& s : plan.batch.seqs) {
      EXPECT_TRUE(in_step.insert(s.seq_id).second) << "sequence twice in one step";
      EXPECT_GE(static_cast<int64_t>(s.block_table.size()) * sched.blocks().block_tokens(),
                s.start_pos + static_cast<int64_t>(s.tokens.size()));
    }
    std::promise<backends::step_result> p;
    backend->submit(plan.batch, [&](backends::step_result r) { p.set_value(std::move(r)); });
    auto r = p.get_future().get();
    EXPECT_TRUE(r.st.ok()) << r.st.to_string();
    if (!r.st.ok()) return plan;
    sched.step_done(plan);
    size_t row = 0;
    for (const auto& s : plan.batch.seqs) {
      if (!s.want_logits) continue;
      const auto& logits = r.logits.at(row++);
      int32_t t = sampler::argmax(logits);
      sched.append(s.seq_id, t);
      first_token_step.emplace(s.seq_id, steps);
      const auto& all = sched.tokens(s.seq_id);
      const auto generated = static_cast<int32_t>(all.size()) - sched.prompt_length(s.seq_id);
      if (generated == max_new.at(s.seq_id)) {
        EXPECT_FALSE(done.count(s.seq_id)) << "finished twice";
        done[s.seq_id].assign(all.begin() + sched.prompt_length(s.seq_id), all.end());
        sched.finish(s.seq_id);
      }
    }
    EXPECT_EQ(row, r.logits.size());
    return plan;
  }

  void run(int64_t max_steps = 100000) {
    while (sched.has_work() && max_steps-- > 0) step();
    EXPECT_FALSE(sched.has_work()) << "did not finish";
  }

  void expect_reference() {
    for (const auto& [id, out] : done)
      EXPECT_EQ(out, toy_llm_generate(prompts.at(id), max_new.at(id))) << "sequence " << id;
  }
};

std::vector<int32_t> ramp(int32_t n, int32_t from = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (from + i * 7) % 250;
  return v;
}

TEST(LlmScheduler, ChunkedPrefillMixesWithDecodesUnderTheBudget) {
  harness h({.token_budget = 32}, 64, 16);
  ASSERT_TRUE(h.add(1, ramp(10), 20).ok());
  h.step();  // 1's prompt in one chunk
  ASSERT_TRUE(h.add(2, ramp(100, 3), 4).ok());
  auto p = h.step();
  ASSERT_EQ(p.batch.seqs.size(), 2u);
  EXPECT_EQ(p.batch.seqs[0].tokens.size(), 1u);   // 1 decodes
  EXPECT_EQ(p.batch.seqs[1].tokens.size(), 31u);  // 2's first chunk takes what is left
  EXPECT_FALSE(p.batch.seqs[1].want_logits);
  EXPECT_EQ(p.decode_tokens, 1);
  EXPECT_EQ(p.prefill_tokens, 31);
  h.run();
  ASSERT_EQ(h.done.size(), 2u);
  h.expect_reference();
}

// A backend that lost its KV cache (a tile came back empty, step_result::kv_lost): lose_kv
// preempts every running sequence for recompute and forgets the prefix cache, so a new backend
// with an empty cache gives every sequence the reference's tokens, a later prompt sharing the
// forgotten prefix included.
TEST(LlmScheduler, LostKvIsRecomputedAndThePrefixCacheForgotten) {
  harness h({.token_budget = 48}, 64, 16);
  auto system = ramp(40, 5);
  auto a = system;
  a.push_back(1);
  ASSERT_TRUE(h.add(1, a, 30).ok());
  ASSERT_TRUE(h.add(2, ramp(25, 9), 30).ok());
  for (int i = 0; i < 6; ++i) h.step();
  ASSERT_GT(h.sched.blocks().cached_blocks(), 0);
  h.backend = make_toy_llm_backend({.num_blocks = 64, .block_tokens = 16});  // empty cache
  const auto before = h.sched.stats().preemptions;
  h.sched.lose_kv();
  EXPECT_EQ(h.sched.check(), "");
  EXPECT_EQ(h.sched.running(), 0u);
  EXPECT_EQ(h.sched.waiting(), 2u);
  EXPECT_EQ(h.sched.blocks().cached_blocks(), 0);
  EXPECT_EQ(h.sched.blocks().free_blocks(), 64);
  EXPECT_EQ(h.sched.stats().preemptions, before + 2);
  auto b = system;
  b.push_back(2);
  ASSERT_TRUE(h.add(3, b, 5).ok());
  h.run();
  ASSERT_EQ(h.done.size(), 3u);
  h.expect_reference();
}

TEST(LlmScheduler, ShortRequestGetsItsFirstTokenWhileALongOneGenerates) {
  harness h({.token_budget = 64}, 64, 16);
  ASSERT_TRUE(h.add(1, ramp(20), 200).ok());
  for (int i = 0; i < 5; ++i) h.step();
  ASSERT_TRUE(h.add(2, ramp(8, 1), 3).ok());
  h.run();
  EXPECT_EQ(h.first_token_step.at(2), 6);  // the very next step
  EXPECT_LT(h.first_token_step.at(2) + 3, h.first_token_step.at(1) + 200);
  h.expect_reference();
}

TEST(LlmScheduler, PrefixCacheComputesASharedPromptOnce) {
  harness h({.token_budget = 512}, 64, 16);
  auto system = ramp(64, 5);
  auto a = system, b = system;
  a.push_back(1);
  a.push_back(2);
  b.push_back(3);
  ASSERT_TRUE(h.add(1, a, 4).ok());
  h.run();
  ASSERT_TRUE(h.add(2, b, 4).ok());
  auto p = h.step();
  ASSERT_EQ(p.batch.seqs.size(), 1u);
  EXPECT_EQ(p.batch.seqs[0].start_pos, 64);  // four cached blocks
  EXPECT_EQ(p.batch.seqs[0].tokens.size(), 1u);
  EXPECT_EQ(h.sched.stats().prefix_hit_tokens, 64);
  h.run();
  h.expect_reference();
  // An exact repeat still computes its last token (the logits come from it).
  ASSERT_TRUE(h.add(3, system, 2).ok());
  p = h.step();
  EXPECT_EQ(p.batch.seqs[0].start_pos, 48);
  h.run();
  h.expect_reference();
  EXPECT_EQ(h.sched.blocks().used_blocks(), 0);
}

TEST(LlmScheduler, WithoutPrefixCachingEverythingIsComputed) {
  harness h({.token_budget = 512, .prefix_caching = false}, 64, 16);
  ASSERT_TRUE(h.add(1, ramp(64), 2).ok());
  h.run();
  ASSERT_TRUE(h.add(2, ramp(64), 2).ok());
  EXPECT_EQ(h.step().batch.seqs[0].start_pos, 0);
  h.run();
  EXPECT_EQ(h.sched.stats().prefix_hit_tokens, 0);
  h.expect_reference();
}

TEST(LlmScheduler, ADryPoolPreemptsByRecomputeAndLosesNothing) {
  // 8 blocks of 4 positions: each sequence needs up to 5 blocks, so two cannot run together.
  harness h({.token_budget = 16, .prefix_caching = false}, 8, 4);
  for (uint64_t i = 1; i <= 4; ++i) ASSERT_TRUE(h.add(i, ramp(6, static_cast<int32_t>(i)), 14).ok());
  h.run();
  EXPECT_GT(h.sched.stats().preemptions, 0);
  ASSERT_EQ(h.done.size(), 4u);
  h.expect_reference();
  EXPECT_EQ(h.sched.blocks().free_blocks(), 8);
}

TEST(LlmScheduler, CancellationFreesBlocksAtTheNextStep) {
  harness h({.token_budget = 64}, 32, 16);
  ASSERT_TRUE(h.add(1, ramp(40), 50).ok());
  ASSERT_TRUE(h.add(2, ramp(5), 50).ok());
  h.step();
  h.step();
  const int32_t used = h.sched.blocks().used_blocks();
  EXPECT_EQ(used, 4);  // 3 blocks for 41 positions + 1 for 6
  h.sched.cancel(1);
  EXPECT_EQ(h.sched.blocks().used_blocks(), used);  // not before the next step
  auto p = h.step();
  EXPECT_EQ(p.cancelled, std::vector<uint64_t>{1});
  EXPECT_EQ(h.sched.blocks().used_blocks(), 1);
  h.sched.cancel(2);
  h.sched.cancel(99);  // unknown: nothing
  EXPECT_TRUE(h.step().empty());
  EXPECT_EQ(h.sched.blocks().used_blocks(), 0);
  EXPECT_FALSE(h.sched.has_work());
}

TEST(LlmScheduler, StaticBatchingAdmitsABatchAndRunsItToItsLongest) {
  harness h({.mode = batching_mode::static_batch, .token_budget = 256, .static_batch_size = 2}, 64, 16);
  ASSERT_TRUE(h.add(1, ramp(5), 2).ok());
  ASSERT_TRUE(h.add(2, ramp(5, 1), 10).ok());
  ASSERT_TRUE(h.add(3, ramp(5, 2), 2).ok());
  auto p = h.step();
  EXPECT_EQ(p.batch.seqs.size(), 2u);
  h.run();
  // 3 starts only after 2, the batch's longest, has finished.
  EXPECT_GT(h.first_token_step.at(3), h.first_token_step.at(2) + 9 - 1);
  h.expect_reference();
}

// Async scheduling's order (llm_engine's async_scheduling): step t+1 is formed (step_done of step
// t, speculate() of each sequence it sampled, schedule()) before step t's tokens are appended; a
// placeholder of step t+1 is filled with the token appended for it before step t+1 runs (the tiles
// take it from step t's samples), and a sequence that ended meanwhile has its row ignored.
// `at_step[n]` runs while step n is in flight (arrivals, cancellations, a lost KV cache).
void run_speculated(harness& h, std::map<int64_t, std::function<void()>> at_step = {}) {
  step_plan cur = h.sched.schedule();
  for (int64_t n = 0; !cur.empty() && n < 10000; ++n) {
    EXPECT_EQ(h.sched.check(), "");
    for (const auto& s : cur.batch.seqs)
      for (int32_t t : s.tokens) EXPECT_NE(t, llm_scheduler::kPendingToken) << "an unfilled placeholder runs";
    std::promise<backends::step_result> p;
    h.backend->submit(cur.batch, [&](backends::step_result r) { p.set_value(std::move(r)); });
    auto r = p.get_future().get();
    EXPECT_TRUE(r.st.ok()) << r.st.to_string();
    if (!r.st.ok()) return;
    ++h.steps;
    h.sched.step_done(cur);
    std::vector<std::pair<uint64_t, size_t>> rows;
    for (const auto& s : cur.batch.seqs) {
      if (!s.want_logits) continue;
      rows.emplace_back(s.seq_id, rows.size());
      if (!h.sched.tokens(s.seq_id).empty()) h.sched.speculate(s.seq_id);  // false: its last token
    }
    bool lost = false;
    if (auto it = at_step.find(n); it != at_step.end()) {
      if (!it->second) {  // the KV cache is lost while step n runs: placeholders dropped, all recomputed
        h.sched.unspeculate();
        h.sched.lose_kv();
        h.backend = make_toy_llm_backend({.num_blocks = h.sched.blocks().total_blocks(),
                                          .block_tokens = h.sched.blocks().block_tokens()});
        lost = true;
      } else {
        it->second();
      }
    }
    step_plan next = lost ? step_plan{} : h.sched.schedule();
    for (uint64_t id : next.cancelled) EXPECT_TRUE(h.cancelled.insert(id).second);
    // Step n's answer: its tokens take their placeholders' places; finished sequences end.
    for (const auto& [id, i] : rows) {
      if (lost || h.sched.tokens(id).empty()) continue;  // lost, or cancelled meanwhile: nothing counts
      h.sched.append(id, sampler::argmax(r.logits.at(i)));
      h.first_token_step.emplace(id, h.steps);
      const auto& all = h.sched.tokens(id);
      if (static_cast<int32_t>(all.size()) - h.sched.prompt_length(id) == h.max_new.at(id)) {
        EXPECT_FALSE(h.done.count(id)) << "finished twice";
        h.done[id].assign(all.begin() + h.sched.prompt_length(id), all.end());
        h.sched.finish(id);
      }
    }
    for (auto& s : next.batch.seqs)
      for (size_t k = 0; k < s.tokens.size(); ++k)
        if (s.tokens[k] == llm_scheduler::kPendingToken) {
          const auto& all = h.sched.tokens(s.seq_id);  // empty: it ended; its row is ignored
          s.tokens[k] = all.empty() ? 0 : all.at(static_cast<size_t>(s.start_pos) + k);
        }
    // Nothing could be formed ahead (every running sequence awaited its last token): form it now.
    if (next.empty() && h.sched.has_work()) next = h.sched.schedule();
    cur = std::move(next);
  }
  EXPECT_FALSE(h.sched.has_work()) << "did not finish";
}

TEST(LlmScheduler, SpeculatedStepsGiveTheReferenceTokens) {
  for (bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    // 14 blocks of 4 positions: preemptions while steps are formed ahead.
    harness h({.token_budget = 24, .prefix_caching = caching}, 14, 4);
    auto system = ramp(9, 3);
    for (uint64_t i = 1; i <= 4; ++i) {
      auto prompt = system;
      prompt.push_back(static_cast<int32_t>(i));
      ASSERT_TRUE(h.add(i, prompt, static_cast<int32_t>(1 + 4 * i)).ok());  // 5, 9, 13, 17 tokens
    }
    run_speculated(h, {{3, [&] { ASSERT_TRUE(h.add(5, ramp(13, 1), 6).ok()); }},
                       {7, [&] { ASSERT_TRUE(h.add(6, system, 3).ok()); }},
                       {8, [&] { ASSERT_TRUE(h.add(7, ramp(2, 5), 1).ok()); }}});
    ASSERT_EQ(h.done.size(), 7u);
    h.expect_reference();
    EXPECT_EQ(h.sched.blocks().used_blocks(), 0);
    if (!caching) EXPECT_GT(h.sched.stats().preemptions, 0);
  }
}

TEST(LlmScheduler, SpeculatedStepsSurviveACancelAndALostKvCache) {
  harness h({.token_budget = 32}, 48, 8);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(h.add(i, ramp(7 + 5 * static_cast<int32_t>(i), 2), 12).ok());
  run_speculated(h, {{4, [&] { h.sched.cancel(2); }}, {6, nullptr}, {9, [&] { ASSERT_TRUE(h.add(4, ramp(3), 4).ok()); }}});
  EXPECT_EQ(h.cancelled, std::set<uint64_t>{2});
  ASSERT_EQ(h.done.size(), 3u);  // 1, 3 and 4
  h.expect_reference();
  EXPECT_EQ(h.sched.blocks().used_blocks(), 0);
}

TEST(LlmScheduler, RefusesWhatCannotFitAndBadRequests) {
  llm_scheduler s({}, 4, 16);
  EXPECT_EQ(s.add(1, ramp(60), 5).code(), errc::invalid_argument);  // 65 > 64 positions
  EXPECT_TRUE(s.add(1, ramp(60), 4).ok());
  EXPECT_EQ(s.add(1, ramp(3), 1).code(), errc::invalid_argument);  // id taken
  EXPECT_EQ(s.add(2, {}, 1).code(), errc::invalid_argument);
  EXPECT_EQ(s.add(3, ramp(3), 0).code(), errc::invalid_argument);
}

// Random arrivals, lengths, shared prefixes, cancellations, pool sizes, budgets and modes: every
// request ends exactly once (finished with its tokens equal to the reference, or cancelled), the
// budget holds at every step, and at the end every block is free again.
TEST(LlmScheduler, RandomizedPropertyTest) {
  int64_t total_preemptions = 0, total_hits = 0, total_cancelled = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int32_t block_tokens = std::vector<int32_t>{1, 2, 4, 16}[static_cast<size_t>(pick(0, 3))];
    const int32_t blocks = pick(3, 40) * (block_tokens == 1 ? 8 : 1) + 64 / block_tokens;
    scheduler_config cfg{.mode = pick(0, 3) == 0 ? batching_mode::static_batch : batching_mode::continuous,
                         .token_budget = pick(1, 80),
                         .max_running = pick(1, 12),
                         .static_batch_size = pick(1, 6),
                         .prefix_caching = pick(0, 2) != 0};
    harness h(cfg, blocks, block_tokens);
    std::vector<std::vector<int32_t>> bases{ramp(pick(1, 40), 1), ramp(pick(1, 40), 2)};
    const int n = pick(5, 30);
    int added = 0;
    uint64_t next_id = 1;
    std::vector<uint64_t> live;
    for (int guard = 0; guard < 100000 && (added < n || h.sched.has_work()); ++guard) {
      while (added < n && pick(0, 2) == 0) {
        std::vector<int32_t> prompt;
        if (pick(0, 1)) prompt = bases[static_cast<size_t>(pick(0, 1))];
        auto tail = ramp(pick(prompt.empty() ? 1 : 0, 30), pick(0, 200));
        prompt.insert(prompt.end(), tail.begin(), tail.end());
        const int32_t max_new = pick(1, 24);
        ++added;
        uint64_t id = next_id++;
        auto st = h.add(id, prompt, max_new);
        if (static_cast<int64_t>(prompt.size()) + max_new <= int64_t{blocks} * block_tokens) {
          ASSERT_TRUE(st.ok()) << st.to_string();
          live.push_back(id);
        } else {
          EXPECT_EQ(st.code(), errc::invalid_argument);
        }
      }
      if (!live.empty() && pick(0, 30) == 0) {
        uint64_t victim = live[static_cast<size_t>(pick(0, static_cast<int>(live.size()) - 1))];
        h.sched.cancel(victim);
      }
      h.step();
      if (::testing::Test::HasFailure()) FAIL() << "seed " << seed;
    }
    ASSERT_FALSE(h.sched.has_work()) << "seed " << seed << " did not finish";
    for (uint64_t id : live)
      EXPECT_EQ(h.done.count(id) + h.cancelled.count(id), 1u) << "seed " << seed << " id " << id;
    h.expect_reference();
    EXPECT_EQ(h.sched.blocks().used_blocks(), 0) << "seed " << seed;
    EXPECT_EQ(h.sched.blocks().free_blocks(), blocks) << "seed " << seed;
    EXPECT_EQ(h.sched.check(), "");
    total_preemptions += h.sched.stats().preemptions;
    total_hits += h.sched.stats().prefix_hit_tokens;
    total_cancelled += static_cast<int64_t>(h.cancelled.size());
  }
  // The random cases reached the paths they are for.
  EXPECT_GT(total_preemptions, 0);
  EXPECT_GT(total_hits, 0);
  EXPECT_GT(total_cancelled, 0);
  std::cout << "preemptions " << total_preemptions << ", prefix-cache tokens " << total_hits
            << ", cancelled " << total_cancelled << "\n";
}

}  // namespace
}  // namespace tessera::serving
