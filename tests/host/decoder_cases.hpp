// What the decoder tile tests share: a decoder deployed on real tile processes, the mixed
// schedule of steps checked against decoder_model::step, and tessera-host run as a user runs it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tessera/host/tile_decoder.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/test/run_tool.hpp"

namespace tessera::test_support {

struct decoder_deployment {
  std::unique_ptr<host::tile_group> group;
  std::unique_ptr<host::tile_decoder> dec;
};

/// How a test's decoder is compiled (the plan forced).
struct decoder_tiles {
  uint64_t tile_memory = 32ull << 20;
  int kv_blocks = 48;
  models::dtype dtype = models::dtype::fp32;
  int token_budget = 96;
  int max_sequences = 8;
  host::collective reduce = host::collective::automatic;  ///< how W > 1 lanes reduce
  bool feed_tokens = false;  ///< compiled for async scheduling (placement_request::feed_tokens)
};

/// `m` compiled on `tiles` tile processes with plan `p` and deployed; empty (and a failed
/// expectation naming why) when any step fails.
inline decoder_deployment deploy_decoder(std::shared_ptr<const models::decoder_model> m, int tiles, host::plan p,
                                         const decoder_tiles& o = {}) {
  host::placement_request req;
  req.tiles = tiles;
  req.tile_memory = o.tile_memory;
  req.token_budget = o.token_budget;
  req.max_sequences = o.max_sequences;
  req.forced = p;
  req.kv_blocks = o.kv_blocks;
  req.dtype = o.dtype;
  req.reduce = o.reduce;
  req.feed_tokens = o.feed_tokens;
  auto c = host::compile_decoder(m->shape(), req);
  EXPECT_TRUE(c) << c.error().message();
  if (!c) return {};
  EXPECT_EQ(c->kv.kv_dtype, o.dtype);
  EXPECT_EQ(c->chosen.vocab_slices, p.vocab_slices);
  host::tile_group_config g;
  g.tiles = static_cast<uint32_t>(tiles);
  g.tile_memory = req.tile_memory;
  auto group = host::tile_group::start(g);
  EXPECT_TRUE(group) << group.error().to_string();
  if (!group) return {};
  auto d = host::tile_decoder::deploy(**group, std::move(*c), m);
  EXPECT_TRUE(d) << d.error().to_string();
  if (!d) return {};
  return {std::move(*group), std::move(*d)};
}

/// How far the tiles' logits were from the reference's over a mixed schedule.
struct schedule_diff {
  double worst = 0;         ///< max |tile logit - reference logit|
  double worst_scaled = 0;  ///< the same over max(1, max |reference logit|), row by row
  int steps = 0;
  bool ok = false;          ///< every step ran and every sequence finished
};

/// A schedule of mixed steps on replica `replica` of `dec` and on `m`'s own paged cache:
/// sequence i has a prompt of lengths[i], prefilled in chunks of 11 beside the others' decodes,
/// joins at step 2i and leaves after outputs[i] tokens; the next token is the argmax of the
/// reference's logits (the same for both sides). Both sides get the same block tables from one
/// pool, so freed blocks are reused by later sequences; `skip_blocks` ids are taken from the pool
/// first (blocks not 0, 1, 2, ... in order). Every step, the tiles' memory high water equals the plan.
inline schedule_diff step_mixed_schedule(const models::decoder_model& m, host::tile_decoder& dec, int replica,
                                         int skip_blocks = 0) {
  schedule_diff out;
  const auto& c = dec.compiled();
  auto cache = models::paged_kv_cache::make(m.shape(), c.kv);
  EXPECT_TRUE(cache);
  if (!cache) return out;
  EXPECT_EQ(cache->kv_dtype(), c.kv.kv_dtype);
  models::block_pool pool(c.kv.num_blocks);
  for (int i = 0; i < skip_blocks; ++i) (void)pool.allocate();
  const std::vector<int> lengths{23, 1, 40, 7, 16}, outputs{6, 9, 3, 5, 4};
  struct seq {
    std::vector<int32_t> tokens, blocks;
    int prompt = 0, computed = 0, generated = 0;
    bool done = false;
  };
  models::splitmix64 rng(11);
  std::vector<seq> seqs(lengths.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].prompt = lengths[i];
    for (int k = 0; k < lengths[i]; ++k)
      seqs[i].tokens.push_back(static_cast<int32_t>(rng.uniform(0, m.shape().vocab_size - 1)));
  }
  for (int n = 0; n < 200; ++n) {
    models::step_batch b;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto& s = seqs[i];
      if (s.done || static_cast<int>(2 * i) > n) continue;
      const int end = s.computed < s.prompt ? std::min(s.prompt, s.computed + 11) : s.computed + 1;
      while (static_cast<int>(s.blocks.size()) < c.kv.blocks_for(end)) {
        auto id = pool.allocate();
        EXPECT_TRUE(id) << "the test's pool ran dry";
        if (!id) return out;
        s.blocks.push_back(*id);
      }
      b.seqs.push_back({i, {s.tokens.begin() + s.computed, s.tokens.begin() + end}, s.computed, s.blocks, end >= s.prompt});
      who.push_back(i);
    }
    if (b.seqs.empty()) break;
    auto want = m.step(b, *cache);
    EXPECT_TRUE(want) << want.error().to_string();
    auto got = dec.step(replica, b);
    EXPECT_TRUE(got) << got.error().to_string();
    if (!want || !got) return out;
    EXPECT_EQ(got->logits.size(), want->size());
    if (got->logits.size() != want->size()) return out;
    ++out.steps;
    size_t li = 0;
    for (size_t k = 0; k < b.seqs.size(); ++k) {
      auto& s = seqs[who[k]];
      s.computed += static_cast<int>(b.seqs[k].tokens.size());
      if (!b.seqs[k].want_logits) continue;
      const auto& w = (*want)[li];
      const auto& g = got->logits[li++];
      double diff = 0, scale = 1;
      for (size_t v = 0; v < w.size(); ++v) {
        diff = std::max(diff, double(std::abs(w[v] - g[v])));
        scale = std::max(scale, double(std::abs(w[v])));
      }
      out.worst = std::max(out.worst, diff);
      out.worst_scaled = std::max(out.worst_scaled, diff / scale);
      s.tokens.push_back(static_cast<int32_t>(std::max_element(w.begin(), w.end()) - w.begin()));
      if (++s.generated == outputs[who[k]]) {
        s.done = true;
        for (int32_t id : s.blocks) EXPECT_TRUE(pool.release(id).ok());
      }
    }
    for (const auto& [t, high] : got->memory_high_water)
      EXPECT_EQ(high, c.tiles[t].total_bytes()) << "tile " << t << ": the plan and the arena disagree";
  }
  out.ok = true;
  for (const auto& s : seqs) {
    EXPECT_TRUE(s.done);
    out.ok = out.ok && s.done;
  }
  return out;
}

/// "qwen2_odd_S1W2": a gtest-safe name of a model on a plan (stages and width).
inline std::string model_plan_name(std::string model, const host::plan& p) {
  for (auto& ch : model)
    if (ch == '-') ch = '_';
  return model + "_S" + std::to_string(p.stages) + "W" + std::to_string(p.width);
}

/// tessera-host `args` as a user runs it (stdin closed, killed after `seconds`, with `env`
/// settings before it); its exit code (-1: killed or not run) and its output, stderr included.
inline int run_tessera_host(const std::string& args, std::string& out, int seconds, const std::string& env = "") {
  return run_tool(env + " timeout -k 5 " + std::to_string(seconds) + " " + tool_path("tessera-host"), args + " < /dev/null",
                  out, "2>&1");
}

/// How many times `what` stands in `text`.
inline int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace tessera::test_support
