// compile_decoder without tiles: how heads, kv heads, layers and FFN columns are cut, the KV
// cache in the memory plan, the refusal of what does not fit, and the step program's shape.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "tessera/host/placement.hpp"
#include "tessera/host/program_timing.hpp"
#include "tessera/host/tile_decoder.hpp"
#include "tessera/models/decoder.hpp"
#include "tile_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using test_support::gqa3;

namespace {

placement_request request(int tiles, std::optional<plan> p, uint64_t memory = 64ull << 20) {
  return {.tiles = tiles, .tile_memory = memory, .token_budget = 128, .max_sequences = 8, .forced = p};
}

}  // namespace

TEST(DecoderPlacement, KvHeadsSplitWhenThereAreEnoughElseReplicated) {
  auto c = compile_decoder(gqa3(), request(2, plan{1, 1, 2, 1}));
  ASSERT_TRUE(c) << c.error().message();
  // 2 kv heads on 2 lanes: each lane its kv head and that head's 3 query heads.
  EXPECT_EQ(c->tiles[0].head_begin, 0);
  EXPECT_EQ(c->tiles[0].head_end, 3);
  EXPECT_EQ(c->tiles[1].head_begin, 3);
  EXPECT_EQ(c->tiles[1].head_end, 6);
  EXPECT_NE(c->kv_heads_note.find("split"), std::string::npos);
  auto r = compile_decoder(gqa3(), request(4, plan{1, 1, 4, 1}));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_NE(r->kv_heads_note.find("replicated"), std::string::npos);
  // 6 query heads on 4 lanes: 2, 2, 1, 1; every lane holds K/V for the kv heads it reads.
  int heads = 0;
  for (const auto& t : r->tiles) heads += t.head_end - t.head_begin;
  EXPECT_EQ(heads, 6);
  for (const auto& t : r->tiles) EXPECT_GT(t.bytes_of("kv"), 0u) << "tile " << t.tile;
}

TEST(DecoderPlacement, KvCacheFillsWhatIsLeftAndIsCounted) {
  auto c = compile_decoder(gqa3(), request(1, std::nullopt, 16ull << 20));
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_TRUE(c->decoder);
  // Every tile's plan fits its memory, and the blocks are at least one longest sequence.
  for (const auto& t : c->tiles) EXPECT_LE(t.total_bytes(), 16ull << 20);
  EXPECT_GE(c->kv.num_blocks, (256 + 15) / 16);
  const uint64_t per_block = static_cast<uint64_t>(models::kv_layout::bytes_per_block(16, 3, 2, 16));
  EXPECT_GE(c->tiles[0].bytes_of("kv"), per_block * static_cast<uint64_t>(c->kv.num_blocks));
  // A forced block count is honoured.
  auto req = request(1, std::nullopt, 16ull << 20);
  req.kv_blocks = 40;
  auto f = compile_decoder(gqa3(), req);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kv.num_blocks, 40);
  EXPECT_NE(f->describe().find("40 blocks of 16 positions"), std::string::npos);
  EXPECT_NE(f->describe().find("kv"), std::string::npos);
}

TEST(DecoderPlacement, RefusesWhatDoesNotFitWithTableAndFix) {
  // llama-tiny's embedding alone is 32000 x 128 floats (15.6 MiB).
  auto s = models::shape_preset("llama-tiny");
  ASSERT_TRUE(s);
  auto c = compile_decoder(*s, request(2, std::nullopt, 8ull << 20));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), errc::out_of_memory);
  const std::string m = c.error().message();
  EXPECT_NE(m.find("--tile-memory"), std::string::npos) << m;
  EXPECT_NE(m.find("minimum KV cache"), std::string::npos) << m;
  EXPECT_NE(m.find("fits"), std::string::npos) << m;  // the table's header
  EXPECT_NE(m.find("NO"), std::string::npos) << m;
  // More KV blocks than fit: refused, naming them.
  auto req = request(1, std::nullopt, 32ull << 20);
  req.kv_blocks = 1 << 20;
  auto k = compile_decoder(*s, req);
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message().find("KV blocks asked for"), std::string::npos) << k.error().message();
}

TEST(DecoderPlacement, ForcedPlansAreChecked) {
  EXPECT_FALSE(compile_decoder(gqa3(), request(4, plan{1, 4, 1, 1})));  // 4 stages, 3 layers
  EXPECT_FALSE(compile_decoder(gqa3(), request(8, plan{1, 1, 8, 1})));  // 8 lanes, 6 heads
  EXPECT_FALSE(compile_decoder(gqa3(), request(3, plan{1, 1, 2, 1})));  // 2 tiles, --tiles 3
  auto bert = models::shape_preset("bert-tiny");
  ASSERT_TRUE(bert);
  EXPECT_FALSE(compile_decoder(*bert, request(1, std::nullopt)));
}

TEST(DecoderPlacement, StepProgramShape) {
  // 2 stages x 2 lanes, 3 micro-batches: 4 supersteps per layer of the longest stage and one for
  // the logits, per pipeline clock (reduce-scatter + all-gather), or 2 per layer and one for the
  // last layer's sum, where the rows are handed on or the logits computed (all-reduce); every
  // send has its receive in the same superstep.
  auto req = request(4, plan{1, 2, 2, 3});
  req.reduce = collective::rs_ag;
  auto rs = compile_decoder(gqa3(), req);
  ASSERT_TRUE(rs) << rs.error().message();
  EXPECT_EQ(rs->supersteps(), (3 + 2 - 1) * (4 * 2 + 1));
  EXPECT_EQ(rs->chosen.reduce, collective::rs_ag);
  req.reduce = collective::all_reduce;
  auto c = compile_decoder(gqa3(), req);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->chosen.reduce, collective::all_reduce);
  EXPECT_EQ(c->supersteps(), (3 + 2 - 1) * (2 * 2 + 1));
  for (const auto* cm : {&*rs, &*c})
  for (const auto& [tile, p] : cm->programs[0])
    for (size_t i = 0; i < p.steps.size(); ++i)
      for (const auto& s : p.steps[i].sends) {
        const auto t = tile;  // clang 14 cannot capture a structured binding
        const auto& peer = cm->programs[0].at(s.peer).steps[i].recvs;
        EXPECT_TRUE(std::any_of(peer.begin(), peer.end(), [&](const auto& r) { return r.peer == t && r.tag == s.tag; }))
            << "tile " << t << " step " << i;
      }
  // Only the last stage's lane 0 computes logits.
  const auto& progs = c->programs[0];
  int logits = 0;
  for (const auto& [t, p] : progs)
    for (const auto& st : p.steps)
      for (const auto& k : st.compute) logits += k.kernel == models::kernel_id::dec_logits;
  EXPECT_EQ(logits, 3);
}

TEST(DecoderPlacement, EveryKernelCallIsTimedOrSaysWhyNot) {
  // program_timing maps each decoder kernel to estimated kernels; dec_attention alone is left to
  // the LLM step model (its cost needs the cached context lengths) and says so.
  std::set<std::string> timed, refused;
  for (collective reduce : {collective::rs_ag, collective::all_reduce}) {
  auto req = request(4, plan{1, 2, 2, 1});
  req.reduce = reduce;
  auto c = compile_decoder(gqa3(), req);
  ASSERT_TRUE(c) << c.error().message();
  const auto tensors = tensors_of(*c);
  const auto rows = rows_of({7, 1, 1});
  for (const auto& [tile, p] : c->programs[0])
    for (const auto& st : p.steps)
      for (const auto& k : st.compute) {
        auto q = kernel_queries(k, tensors.at(tile), rows, timing::dtype::fp32);
        if (q.ok()) {
          EXPECT_FALSE(q->empty()) << models::kernel_name(k.kernel);
          timed.emplace(models::kernel_name(k.kernel));
        } else {
          EXPECT_EQ(k.kernel, models::kernel_id::dec_attention) << q.error().message();
          EXPECT_NE(q.error().message().find("LLM step model"), std::string::npos);
          refused.emplace(models::kernel_name(k.kernel));
        }
      }
  }
  EXPECT_EQ(timed, (std::set<std::string>{"dec_embed", "dec_norm", "linear", "dec_residual", "dec_reduce", "dec_multiply",
                                              "dec_logits", "dec_sample"}));
  EXPECT_EQ(refused, std::set<std::string>{"dec_attention"});
}

// --seeded-shards (scripts/llm-7b): every shard generated from the seed alone equals the shard cut
// from the whole seeded model, bit for bit, for plans that cut heads (rows), FFN columns, layers
// and replicas, and in bf16 (the host converts either the same way): LLaMA, GPT-2 (Conv1D weights
// read transposed, fused Q/K/V and their biases, learned positions, a tied head) and Qwen2 (Q/K/V
// biases, tied and untied heads).
TEST(DecoderPlacement, SeededShardsEqualShardsCutFromTheModel) {
  const std::string data = std::string(std::getenv("TESSERA_SOURCE_DIR") ? std::getenv("TESSERA_SOURCE_DIR") : TESSERA_TEST_SOURCE_DIR) +
                           "/tests/data/models/decoders/";
  for (const std::string preset : {"llama-tiny", "gpt2-tiny", "qwen2-odd.config.json", "qwen2-untied.config.json"}) {
    SCOPED_TRACE(preset);
    auto shape = preset.find(".json") == std::string::npos ? models::shape_preset(preset)
                                                          : models::load_decoder_config(data + preset);
    ASSERT_TRUE(shape) << shape.error().to_string();
    auto model = models::make_seeded_decoder(*shape, 9);
    ASSERT_TRUE(model) << model.error().to_string();
    auto cut = seeded_decoder_cutter(*shape, 9);
    ASSERT_TRUE(cut) << cut.error().to_string();
    // The config shapes have 2 kv heads: no width 4.
    const bool presetted = preset.find(".json") == std::string::npos;
    for (auto p : {plan{1, 1, 1, 1}, plan{1, 1, presetted ? 4 : 2, 1}, plan{1, 2, 2, 1}, plan{2, 1, 2, 1}})
      for (auto dt : {models::dtype::fp32, models::dtype::bf16}) {
        auto req = request(4, p, 256ull << 20);
        req.tiles = p.tiles();
        req.dtype = dt;
        auto c = compile_decoder(*shape, req);
        ASSERT_TRUE(c) << p.to_string() << ": " << c.error().message();
        std::set<shard_kind> kinds;
        for (const auto& sh : c->shards) {
          auto want = materialize(*model, sh);
          auto got = (*cut)(sh);
          ASSERT_TRUE(want && got) << sh.desc.name;
          EXPECT_EQ(*want, *got) << p.to_string() << " tile " << sh.tile << " " << sh.desc.name;
          kinds.insert(sh.kind);
        }
        if (p.width > 1) {
          EXPECT_TRUE(kinds.count(shard_kind::rows)) << p.to_string();
          EXPECT_TRUE(kinds.count(shard_kind::columns)) << p.to_string();
        }
      }
  }
  // A shard naming a tensor the model has not is refused by name.
  auto cut = seeded_decoder_cutter(*models::shape_preset("llama-tiny"), 0);
  weight_shard bogus;
  bogus.source = "layers.99.q_w";
  bogus.desc.name = "bogus";
  auto r = (*cut)(bogus);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("layers.99.q_w"), std::string::npos);
}

TEST(DecoderPlacement, TheRankingReadsBf16WeightsAtTwoBytes) {
  // A decode step at batch 1 is bound by the weights it reads: bf16 halves that time, compute the
  // same (the bf16 KV plan holds twice the blocks, the weights half the bytes).
  auto s = models::shape_preset("gpt2");
  ASSERT_TRUE(s) << s.error().to_string();
  const machine_model mm;
  for (const plan& p : {plan{1, 1, 1, 1}, plan{1, 1, 2, 1}, plan{2, 1, 1, 1}}) {
    const double fp32 = estimate_step_seconds(*s, p, 1, 1, mm);
    const double bf16 = estimate_step_seconds(*s, p, 1, 1, mm, models::dtype::bf16);
    EXPECT_LT(bf16, 0.75 * fp32) << p.to_string();
    EXPECT_EQ(estimate_step_seconds(*s, p, 1, 1, mm, models::dtype::fp32), fp32);
  }
  // compile_decoder ranks with the request's dtype: its chosen plan's estimate is the bf16 one.
  auto req = request(2, plan{1, 1, 2, 1}, 4ull << 30);
  req.dtype = models::dtype::bf16;
  req.reduce = collective::rs_ag;  // one candidate
  auto c = compile_decoder(*s, req);
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_EQ(c->candidates.size(), 1u);
  EXPECT_DOUBLE_EQ(c->candidates[0].second, c->max_sequences / estimate_step_seconds(*s, c->chosen, c->max_sequences,
                                                                                     c->max_sequences, mm, models::dtype::bf16));
}

TEST(DecoderPlacement, ThePlanListPrintsA7bModelsTokensPerSecondNotZero) {
  // llama-2-7b in bf16 on 8 tiles of 2.5 GiB, one sequence a step (scripts/llm-7b's request):
  // every plan that fits decodes under 1 token/s in the cost model, which the plan list printed
  // as "0" (the rate cut to an integer).
  auto s = models::shape_preset("llama-2-7b");
  ASSERT_TRUE(s) << s.error().to_string();
  placement_request req{.tiles = 8, .tile_memory = 2560ull << 20, .token_budget = 16, .max_sequences = 1};
  req.kv_blocks = 3;
  req.dtype = models::dtype::bf16;
  auto c = compile_decoder(*s, req);
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_GT(c->candidates.size(), 1u);
  const std::string text = c->describe();
  const auto list = text.substr(text.find("plans that fit (estimated tokens/s):"));
  const auto line = list.substr(0, list.find('\n'));
  for (const auto& [p, rate] : c->candidates) {
    EXPECT_GT(rate, 0.05) << p.to_string();
    EXPECT_LT(rate, 100) << p.to_string();
    EXPECT_NE(line.find(p.to_string() + ": " + format_rate(rate)), std::string::npos) << line;
  }
  EXPECT_EQ(line.find(": 0 "), std::string::npos) << line;
  EXPECT_EQ(format_rate(0.5123), "0.512");
  EXPECT_EQ(format_rate(12.345), "12.3");
  EXPECT_EQ(format_rate(1234.4), "1234");
  EXPECT_EQ(format_rate(0), "0");
  EXPECT_EQ(format_rate(-1), "?");
}

TEST(DecoderPlacement, TheRankingChargesTheBarrierItIsGiven) {
  // gpt2 on 2 tiles that cannot each hold the whole model (no R=2): lanes (W=2, 4 barriers a layer)
  // against a pipeline (S=2, one barrier a stage step and its bubble). A cheap barrier picks the
  // lanes, a dear one the pipeline: the ranking reads machine_model::sync_seconds (what
  // tessera-host measures on its tiles, measure_barrier) rather than a constant of its own.
  auto s = models::shape_preset("gpt2");
  ASSERT_TRUE(s);
  bool found = false;
  for (uint64_t mib : {256, 320, 384, 448, 512}) {
    auto req = request(2, std::nullopt, mib << 20);
    req.kv_blocks = 64;
    req.machine.sync_seconds = 1e-6;
    auto cheap = compile_decoder(*s, req);
    req.machine.sync_seconds = 20e-3;
    auto dear = compile_decoder(*s, req);
    if (!cheap || !dear) continue;
    bool replicas = false, lanes = false, stages = false;
    for (const auto& [p, rate] : cheap->candidates) {
      replicas |= p.replicas > 1;
      lanes |= p.width > 1;
      stages |= p.stages > 1;
    }
    if (replicas || !lanes || !stages) continue;
    found = true;
    EXPECT_EQ(cheap->chosen.width, 2) << mib << " MiB: " << cheap->describe();
    EXPECT_EQ(dear->chosen.width, 1) << mib << " MiB: " << dear->describe();
    EXPECT_EQ(dear->chosen.stages, 2) << mib << " MiB: " << dear->describe();
    // The estimates themselves: the dearer barrier adds more to the lanes' step than to the pipeline's.
    machine_model lo = req.machine, hi = req.machine;
    lo.sync_seconds = 1e-6;
    const double lanes_extra = estimate_step_seconds(*s, plan{1, 1, 2, 1}, 8, 8, hi) - estimate_step_seconds(*s, plan{1, 1, 2, 1}, 8, 8, lo);
    const double pipe_extra = estimate_step_seconds(*s, plan{1, 2, 1, 2}, 8, 8, hi) - estimate_step_seconds(*s, plan{1, 2, 1, 2}, 8, 8, lo);
    EXPECT_GT(lanes_extra, 10 * pipe_extra);
    break;
  }
  EXPECT_TRUE(found) << "no tile memory where gpt2 fits as W=2 and S=2 but not R=2";
}

// ---- How lanes reduce: reduce-scatter + all-gather or one all-reduce superstep (plan::reduce) ----

TEST(DecoderPlacement, AllReduceHalvesTheLayersSuperstepsAndHoldsItsSlots) {
  // gqa3 (3 layers) on one stage of W lanes: 4 x 3 + 1 supersteps a step (12 barriers) against
  // 2 x 3 + 1 (6 barriers); each lane holds W - 1 receive slots of [token budget, hidden] floats
  // as its exchange memory, and reduces with dec_reduce over its lanes' partial sums in lane order.
  for (int W : {2, 3}) {
    auto req = request(W, plan{1, 1, W, 1});
    req.reduce = collective::rs_ag;
    auto rs = compile_decoder(gqa3(), req);
    req.reduce = collective::all_reduce;
    auto ar = compile_decoder(gqa3(), req);
    ASSERT_TRUE(rs && ar);
    EXPECT_EQ(rs->supersteps(), 4 * 3 + 1);
    EXPECT_EQ(rs->barriers(), 4 * 3);
    EXPECT_EQ(ar->supersteps(), 2 * 3 + 1);
    EXPECT_EQ(ar->barriers(), 2 * 3);
    EXPECT_EQ(ar->chosen.to_string(), "R=1 S=1 W=" + std::to_string(W) + " M=1 all-reduce");
    EXPECT_EQ(rs->chosen.to_string(), "R=1 S=1 W=" + std::to_string(W) + " M=1");
    EXPECT_NE(ar->describe().find("lanes reduce by all-reduce"), std::string::npos) << ar->describe();
    EXPECT_NE(rs->describe().find("lanes reduce by reduce-scatter + all-gather"), std::string::npos);
    for (const auto& t : ar->tiles) {
      int slots = 0;
      for (const auto& m : t.memory)
        if (m.name.rfind("reduce_slot_", 0) == 0) {
          ++slots;
          EXPECT_EQ(m.kind, "exchange");
          EXPECT_EQ(m.bytes, 128u * 96 * 4);
        }
      EXPECT_EQ(slots, W - 1) << "tile " << t.tile;
    }
    // Lane w's dec_reduce reads lane 0's partial sums first: its own (partial) at position w, the
    // others from the slots they were received into.
    for (const auto& [tile, p] : ar->programs[0])
      for (const auto& st : p.steps)
        for (const auto& k : st.compute)
          if (k.kernel == models::kernel_id::dec_reduce) {
            ASSERT_GE(k.inputs.size(), static_cast<size_t>(W) + 1);
            for (int q = 0; q < W; ++q)
              EXPECT_EQ(k.inputs[q], q == static_cast<int>(tile) ? tensor_ids::partial
                                                                 : tensor_ids::reduce_slot(q < static_cast<int>(tile) ? q : q - 1));
          }
  }
}

TEST(DecoderPlacement, TheRankingPicksTheCollectiveByBarrierAgainstBytes) {
  // Both forms of a W > 1 plan are ranked. W = 2 sends the same bytes either way, so the all-reduce
  // (half the barriers and messages) wins at any barrier. At W = 3 it sends 2 x the rows a lane
  // against 4/3: over a slow link and a cheap barrier reduce-scatter + all-gather wins, at a dear
  // barrier the all-reduce.
  auto s = models::shape_preset("llama-tiny");
  ASSERT_TRUE(s);
  for (double barrier : {1e-6, 50e-6, 20e-3}) {
    auto req = request(2, plan{1, 1, 2, 1});
    req.machine.sync_seconds = barrier;
    auto c = compile_decoder(*s, req);
    ASSERT_TRUE(c) << c.error().message();
    EXPECT_EQ(c->chosen.reduce, collective::all_reduce) << barrier << "\n" << c->describe();
    EXPECT_EQ(c->candidates.size(), 2u);  // the same plan under both collectives
  }
  auto req = request(3, plan{1, 1, 3, 1});
  req.token_budget = 512;
  req.max_sequences = 64;
  req.machine.link_bytes_per_s = 1e7;
  req.machine.message_seconds = 1e-6;
  req.machine.sync_seconds = 1e-6;
  auto cheap = compile_decoder(*s, req);
  req.machine.sync_seconds = 20e-3;
  auto dear = compile_decoder(*s, req);
  ASSERT_TRUE(cheap && dear);
  EXPECT_EQ(cheap->chosen.reduce, collective::rs_ag) << cheap->describe();
  EXPECT_EQ(dear->chosen.reduce, collective::all_reduce) << dear->describe();
  // The estimates themselves: the all-reduce saves 2 barriers and 2 (W - 1) messages a layer,
  // and sends (W - 1) - 2 (W - 1) / W more rows a sub-layer.
  machine_model m = req.machine;
  plan ar{1, 1, 3, 1}, rs{1, 1, 3, 1};
  ar.reduce = collective::all_reduce;
  m.sync_seconds = 1e-3;
  const double saved = estimate_step_seconds(*s, rs, 8, 8, m) - estimate_step_seconds(*s, ar, 8, 8, m);
  m.sync_seconds = 2e-3;
  const double saved_dear = estimate_step_seconds(*s, rs, 8, 8, m) - estimate_step_seconds(*s, ar, 8, 8, m);
  EXPECT_NEAR(saved_dear - saved, s->num_layers * 2 * 1e-3, 1e-9);
}

TEST(DecoderPlacement, TheCollectiveIsForcedOrRefusedByName) {
  auto s = models::shape_preset("llama-tiny");
  ASSERT_TRUE(s);
  // Forced: the automatic plan's lanes (if any) and a forced plan take it; only that form is ranked.
  for (collective reduce : {collective::rs_ag, collective::all_reduce}) {
    auto req = request(2, plan{1, 1, 2, 1});
    req.reduce = reduce;
    auto c = compile_decoder(*s, req);
    ASSERT_TRUE(c) << c.error().message();
    EXPECT_EQ(c->chosen.reduce, reduce);
    EXPECT_EQ(c->candidates.size(), 1u);
  }
  // All-reduce on a forced plan without lanes: refused naming the option and W=1.
  auto req = request(2, plan{1, 2, 1, 2});
  req.reduce = collective::all_reduce;
  auto one = compile_decoder(*s, req);
  ASSERT_FALSE(one);
  EXPECT_NE(one.error().message().find("--collective allreduce"), std::string::npos) << one.error().message();
  EXPECT_NE(one.error().message().find("W=1"), std::string::npos) << one.error().message();
  // Parsing: the three names, anything else refused naming --collective and the choices.
  EXPECT_EQ(*parse_collective("allreduce"), collective::all_reduce);
  EXPECT_EQ(*parse_collective("rs-ag"), collective::rs_ag);
  EXPECT_EQ(*parse_collective("auto"), collective::automatic);
  for (const char* bad : {"ring", "all-reduce", "", "AUTO"}) {
    auto p = parse_collective(bad);
    ASSERT_FALSE(p) << bad;
    EXPECT_NE(p.error().message().find("--collective '" + std::string(bad) + "'"), std::string::npos);
    EXPECT_NE(p.error().message().find("rs-ag"), std::string::npos);
  }
  // BERT reduces by reduce-scatter + all-gather only: all-reduce is refused, not ignored.
  auto bert = models::preset_config("bert-tiny");
  ASSERT_TRUE(bert);
  placement_request b{.tiles = 2, .tile_memory = 64ull << 20, .token_budget = 512, .forced = plan{1, 1, 2, 1}};
  b.reduce = collective::all_reduce;
  auto refused = compile_bert(*bert, b);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("--collective allreduce is for decoders"), std::string::npos);
  b.reduce = collective::rs_ag;
  EXPECT_TRUE(compile_bert(*bert, b));
}
