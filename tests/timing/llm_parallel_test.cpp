// GPU systems with tensor and pipeline parallelism (llm_system.hpp), decoder shapes from a Hugging
// Face config.json (resolve_decoder_shape), and tessera-llm-timing compare (a 70B model on 8
// tensor-parallel GPUs beside a 64-IPU pod at the same SLO, with the held-out multi-GPU error).
// The expected figures are computed here by hand from the presets' numbers, not by the model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tessera/models/decoder_config.hpp"
#include "tessera/timing/llm_compare.hpp"
#include "tessera/timing/llm_system.hpp"
#include "tessera/timing/llm_validation.hpp"
#include "tessera/test/run_tool.hpp"

#include <unistd.h>

namespace tessera::timing {
namespace {

decoder_dims dims_of(const char* preset) { return *decoder_dims_of(*models::shape_preset(preset)); }
llm_system build(const std::string& spec, const decoder_dims& d) {
  auto s = make_llm_system(spec, d);
  EXPECT_TRUE(s) << spec << ": " << s.error().to_string();
  return s ? *s : llm_system{};
}
llm_step_batch decodes(int64_t n, int64_t context) {
  llm_step_batch b;
  b.decode_contexts.assign(size_t(n), context);
  return b;
}
std::string source_dir() {
  const char* s = std::getenv("TESSERA_SOURCE_DIR");
  return s != nullptr && *s != '\0' ? s : TESSERA_TEST_SOURCE_DIR;
}
std::string tool() { return test_support::tool_path("tessera-llm-timing"); }
int run(const std::string& args, std::string& out) { return test_support::run_tool(tool(), args, out, "2>&1"); }

TEST(llm_parallel, llama_2_70b_preset_matches_hf) {
  auto s = models::shape_preset("llama-2-70b");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->parameter_count(), 68976648192);  // meta-llama/Llama-2-70b-hf
  const auto d = dims_of("llama-2-70b");
  EXPECT_EQ(d.kv_heads, 8);
  EXPECT_EQ(d.kv_bytes_per_token(), 2.0 * 80 * 8 * 128 * 2);  // 320 KiB: GQA
}

// tp=1 (and pp=1, gpus=1 spelled out) is today's single GPU, step for step.
TEST(llm_parallel, tp1_is_the_single_gpu) {
  const auto d = dims_of("llama-2-7b");
  const auto one = build("a100-40gb", d);
  for (const char* spec : {"a100-40gb:tp=1", "a100-40gb:tp=1:pp=1", "a100-40gb:gpus=1:tp=1:pp=1"}) {
    const auto s = build(spec, d);
    EXPECT_EQ(s.replicas, 1) << spec;
    EXPECT_DOUBLE_EQ(s.kv_capacity_bytes, one.kv_capacity_bytes) << spec;
    for (auto b : {decodes(1, 512), decodes(64, 1000)}) {
      auto a = model_llm_step(one, d, b), c = model_llm_step(s, d, b);
      ASSERT_TRUE(a && c);
      EXPECT_DOUBLE_EQ(a->seconds, c->seconds) << spec;
      EXPECT_EQ(c->link_s, 0) << spec;
    }
  }
  // gpus=4 at tp=1: four independent replicas, as before issue 28.
  const auto four = build("a100-40gb:gpus=4", d);
  EXPECT_EQ(four.replicas, 4);
  EXPECT_EQ(four.chips, 4);
  EXPECT_DOUBLE_EQ(model_llm_step(four, d, decodes(8, 512))->seconds, model_llm_step(one, d, decodes(8, 512))->seconds);
}

// The all-reduce term is the ring formula with the preset's NVLink figures, twice per layer.
TEST(llm_parallel, allreduce_is_the_ring_formula) {
  const auto d = dims_of("llama-2-70b");
  const double bw = 450e9, base = 6.6e-6, hop = 0.6e-6;  // h100-sxm.json llm.nvlink_*, collective_base_latency_s
  for (int64_t n : {2, 4, 8}) {
    const auto s = build("h100-sxm:tp=" + std::to_string(n), d);
    EXPECT_EQ(s.tensor_parallel, n);
    EXPECT_EQ(s.collectives_per_layer, 2);
    for (double bytes : {16384.0, 1e6, 64e6}) {
      const double want = base + 2.0 * double(n - 1) * hop + 2.0 * double(n - 1) / double(n) * bytes / bw;
      EXPECT_NEAR(allreduce_seconds(s, bytes), want, want * 1e-12) << n << " " << bytes;
    }
    for (int64_t b : {1, 64}) {
      auto t = model_llm_step(s, d, decodes(b, 512));
      ASSERT_TRUE(t);
      const double act = double(b) * 8192 * 2;  // T x hidden x fp16
      EXPECT_NEAR(t->link_s, 80.0 * 2.0 * allreduce_seconds(s, act), 1e-15) << n << " " << b;
    }
  }
  // The bandwidth term: 2(n-1)/n of the bytes; large messages approach 2x the bytes over the link.
  const auto s8 = build("h100-sxm:tp=8", d);
  const auto s2 = build("h100-sxm:tp=2", d);
  const double big = 1e9;
  EXPECT_NEAR((allreduce_seconds(s8, big) - base - 14 * hop) / (allreduce_seconds(s2, big) - base - 2 * hop), 1.75, 1e-9);
  // A hand-built system that all-reduces without a link rate is refused, not silently free.
  auto broken = s8;
  broken.collective_bytes_per_s = 0;
  auto refused = model_llm_step(broken, d, decodes(1, 512));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("no link bandwidth"), std::string::npos) << refused.error().message();
  // tp=1 has no collective.
  EXPECT_EQ(allreduce_seconds(build("h100-sxm", dims_of("llama-2-7b")), big), 0);
}

// Weights and KV split over the TP ranks: the replica's rates are tp x a GPU's, its KV pool the GPUs'
// memory left after their share of the weights; fewer K/V heads than ranks are replicated.
TEST(llm_parallel, tp_splits_weights_and_kv_heads) {
  const auto d = dims_of("llama-2-70b");
  const double usable = 80e9 * 0.9, hbm = 3.35e12 * 0.8, peak = 989.4e12 * 0.701;
  const auto s = build("h100-sxm:tp=8", d);
  EXPECT_EQ(s.chips, 8);
  EXPECT_EQ(s.replicas, 1);
  EXPECT_NEAR(s.flops_per_s, 8 * peak, 8 * peak * 1e-12);
  EXPECT_NEAR(s.weight_bytes_per_s, 8 * hbm, 1);
  EXPECT_NEAR(s.kv_bytes_per_s, 8 * hbm, 1);  // 8 K/V heads over 8 ranks: one each
  EXPECT_NEAR(s.kv_capacity_bytes, 8 * (usable - d.resident_bytes() / 8), 1e3);
  // The GEMM weight stream of a decode is 1/8 of one GPU's: P e / (8 B).
  auto t = model_llm_step(s, d, decodes(1, 512));
  ASSERT_TRUE(t);
  EXPECT_NEAR(t->gemm_memory_s, 80.0 * double(d.layer_linear_params()) * 2 / (8 * hbm), 1e-12);
  // 16 ranks over 8 K/V heads: each rank keeps one head, so half the KV rate and capacity is duplication.
  auto gqa = d;
  gqa.heads = 64;
  const auto s16 = build("h100-sxm:tp=16", gqa);
  EXPECT_NEAR(s16.kv_bytes_per_s, 16 * hbm * 0.5, 1);
  EXPECT_NEAR(s16.kv_capacity_bytes, 16 * (usable - d.resident_bytes() / 16) * 0.5, 1e3);
  // gpus = replicas x tp x pp: two tp=8 replicas on 16 GPUs.
  const auto two = build("h100-sxm:gpus=16:tp=8", d);
  EXPECT_EQ(two.replicas, 2);
  EXPECT_EQ(two.chips, 16);
  EXPECT_DOUBLE_EQ(two.tdp_watts, 16 * 700.0);
  EXPECT_DOUBLE_EQ(*two.price_usd, 16 * 27500.0);
}

TEST(llm_parallel, bad_parallel_specs_are_refused_by_name) {
  const auto d = dims_of("llama-2-70b");
  auto expect = [&](const std::string& spec, errc code, const std::string& says) {
    auto s = make_llm_system(spec, d);
    ASSERT_FALSE(s) << spec;
    EXPECT_EQ(s.error().code(), code) << spec << ": " << s.error().to_string();
    EXPECT_NE(s.error().message().find(says), std::string::npos) << spec << ": " << s.error().message();
  };
  expect("h100-sxm:tp=3", errc::invalid_argument, "does not divide llama-2-70b's 64 attention heads");
  expect("h100-sxm:pp=3", errc::invalid_argument, "does not divide llama-2-70b's 80 layers");
  expect("h100-sxm:gpus=6:tp=4", errc::invalid_argument, "not a multiple of tp x pp = 4");
  expect("h100-sxm:tp=0", errc::invalid_argument, "tp=0 is not a positive integer");
  expect("h100-sxm:tp=x", errc::invalid_argument, "tp=x is not a positive integer");
  expect("h100-sxm:chips=8", errc::invalid_argument, "key 'chips' does not apply to a GPU system");
  expect("ipu-mk2:chips=8:tp=2", errc::invalid_argument, "key 'tp' does not apply to a IPU system");
  // 138 GB of fp16 weights: not on one 80 GB GPU, nor on two 40 GB ones.
  expect("a100-80gb", errc::out_of_memory, "llama-2-70b needs 138");
  expect("a100-40gb:tp=2", errc::out_of_memory, "2 x a100-40gb hold 72");
  EXPECT_TRUE(make_llm_system("a100-80gb:tp=2", d));
}

// Pipeline parallelism: pp stages of layers / pp layers, pp micro-batch replicas per KV pool, pp-1
// NVLink sends per step; a single micro-batch leaves (pp-1)/pp of the stages idle (the bubble).
TEST(llm_parallel, pipeline_stages_and_the_bubble) {
  const auto d = dims_of("llama-2-70b");
  const auto s = build("a100-80gb:tp=2:pp=4", d);
  EXPECT_EQ(s.chips, 8);
  EXPECT_EQ(s.pipeline_stages, 4);
  EXPECT_EQ(s.replicas, 4);           // 1 pipeline x 4 micro-batches
  EXPECT_EQ(s.replicas_per_pool, 4);  // sharing one KV pool
  EXPECT_EQ(s.hops, 3);
  EXPECT_NEAR(s.kv_capacity_bytes, 8 * (80e9 * 0.9 - d.resident_bytes() / 8), 1e3);
  // One micro-batch's step: the tp=2 group's step through all layers + 3 sends of T x hidden fp16.
  const auto tp2 = build("a100-80gb:tp=2", d);
  for (int64_t b : {1, 32}) {
    auto a = model_llm_step(tp2, d, decodes(b, 512)), p = model_llm_step(s, d, decodes(b, 512));
    ASSERT_TRUE(a && p);
    const double send = double(b) * 8192 * 2 / 300e9 + 6.6e-6 + 0.6e-6;
    EXPECT_NEAR(p->seconds - a->seconds, 3 * send, 1e-12) << b;
  }
  // GPipe's schedule: m micro-batches through S stages take (m + S - 1) stage times.
  EXPECT_DOUBLE_EQ(pipeline_pass_seconds(4.0, 4, 1), 4.0);   // one micro-batch: the whole pass, 3/4 idle
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 1), 0.75);
  EXPECT_DOUBLE_EQ(pipeline_pass_seconds(4.0, 4, 4), 7.0);   // 4 micro-batches: 7 stage times of 1 s
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 4), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(1, 5), 0.0);     // no pipeline, no bubble
  EXPECT_NEAR(pipeline_bubble_fraction(8, 1000), 7.0 / 1007.0, 1e-15);
  // In serving, the bubble is the idle micro-batch replicas: one request alone gets no speed-up
  // from the stages (its TPOT is a whole pass), while many requests keep every stage busy.
  schedule_options o;
  auto alone = simulate_llm_serving(s, d, {{0.0, 64, 32}}, o);
  ASSERT_TRUE(alone) << alone.error().to_string();
  auto pass = model_llm_step(s, d, decodes(1, 80));
  EXPECT_NEAR(alone->tpot_p50_s, pass->seconds, 0.05 * pass->seconds);
  std::vector<llm_request> many;
  for (int i = 0; i < 4; ++i) many.push_back({0.0, 64, 32});
  auto busy = simulate_llm_serving(s, d, many, o);
  ASSERT_TRUE(busy);
  EXPECT_GT(busy->tokens_per_s, 3.5 * alone->tokens_per_s);
}

// --model path/to/config.json: any decoder shape through models' own parser.
TEST(llm_parallel, config_json_shapes_and_clear_refusals) {
  const std::string dir = source_dir() + "/tests/data/configs/llama-2-70b";
  for (const std::string& path : {dir, dir + "/", dir + "/config.json"}) {
    auto s = resolve_decoder_shape(path);
    ASSERT_TRUE(s) << path << ": " << s.error().to_string();
    EXPECT_EQ(s->name, "llama-2-70b") << path;
    EXPECT_EQ(s->parameter_count(), 68976648192) << path;
    const auto d = *decoder_dims_of(*s);
    const auto p = dims_of("llama-2-70b");
    EXPECT_EQ(d.layers, p.layers);
    EXPECT_EQ(d.hidden, p.hidden);
    EXPECT_EQ(d.heads, p.heads);
    EXPECT_EQ(d.kv_heads, p.kv_heads);
    EXPECT_EQ(d.intermediate, p.intermediate);
    EXPECT_EQ(d.vocab, p.vocab);
    EXPECT_EQ(d.tied_embeddings, p.tied_embeddings);
    EXPECT_DOUBLE_EQ(model_llm_step(build("h100-sxm:tp=8", d), d, decodes(16, 900))->seconds,
                     model_llm_step(build("h100-sxm:tp=8", p), p, decodes(16, 900))->seconds);
  }
  const auto tmp = std::filesystem::temp_directory_path() / ("tessera_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(tmp / name) << text;
    return (tmp / name).string();
  };
  // Tied embeddings (as Llama-3.2-1B): the LM head is the embedding, stored once.
  const std::string tied = write("tied.json",
                                 R"({"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                                     "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
                                     "tie_word_embeddings": true, "rope_theta": 500000.0,
                                     "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  auto t = resolve_decoder_shape(tied);
  ASSERT_TRUE(t) << t.error().to_string();
  auto td = *decoder_dims_of(*t);
  EXPECT_TRUE(td.tied_embeddings);
  EXPECT_EQ(td.kv_heads, 8);
  EXPECT_DOUBLE_EQ(td.resident_bytes(), td.weight_bytes());
  EXPECT_EQ(t->name, "tied.json");
  auto refused = [&](const std::string& arg, errc code, const std::string& says) {
    auto s = resolve_decoder_shape(arg);
    ASSERT_FALSE(s) << arg;
    EXPECT_EQ(s.error().code(), code) << arg << ": " << s.error().to_string();
    EXPECT_NE(s.error().message().find(says), std::string::npos) << arg << ": " << s.error().message();
  };
  refused((tmp / "missing.json").string(), errc::not_found, "missing.json: cannot read");
  refused(tmp.string(), errc::not_found, "config.json: cannot read");  // a folder without one
  refused(write("bad.json", "{\"model_type\": \"llama\", "), errc::invalid_argument, "bad.json: not valid JSON");
  refused(write("notype.json", "{\"hidden_size\": 8}"), errc::invalid_argument, "notype.json: missing field \"model_type\"");
  refused(write("str.json", R"({"model_type": "llama", "hidden_size": "big"})"), errc::invalid_argument,
          "field \"hidden_size\" must be an integer");
  refused(write("bert.json", R"({"model_type": "bert", "hidden_size": 768})"), errc::unsupported,
          "model_type \"bert\" is not a supported decoder");
  refused(write("heads.json", R"({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3, "num_hidden_layers": 2,
                                  "intermediate_size": 64, "vocab_size": 10})"),
          errc::invalid_argument, "heads.json");
  refused("no-such-model", errc::invalid_argument, "not a shape preset");
  std::filesystem::remove_all(tmp);
}

// The must-show: llama-2-70b on 8 tensor-parallel H100s beside a 64-IPU pod at the same SLO, with the
// held-out multi-GPU error; the tool prints what the library computes.
TEST(llm_tool, compare_prints_70b_on_8_gpus_beside_the_ipu_pod) {
  if (tool().empty() || !std::filesystem::exists(tool())) GTEST_FAIL() << "tessera-llm-timing not built (TESSERA_BIN_DIR)";
  llm_compare_options o;
  o.requests = 60;
  o.systems = {"h100-sxm:tp=8", "ipu-mk2:chips=64", "ipu-mk2:chips=64:weights=streaming"};
  auto rep = run_llm_compare(o);
  ASSERT_TRUE(rep) << rep.error().to_string();
  ASSERT_EQ(rep->rows.size(), 3u);
  EXPECT_TRUE(rep->rows[0].refused.empty());
  EXPECT_GT(rep->rows[0].tokens_per_s, 0);
  EXPECT_EQ(rep->rows[0].chips, 8);
  EXPECT_NE(rep->rows[1].refused.find("needs 138"), std::string::npos) << rep->rows[1].refused;  // 138 GB in SRAM: no
  EXPECT_TRUE(rep->rows[2].refused.empty());
  ASSERT_TRUE(rep->multi_gpu);
  EXPECT_EQ(rep->multi_gpu->rows.size(), 12u);
  for (const auto& r : rep->multi_gpu->rows) EXPECT_TRUE(llm_anchor_family(r.anchor).ends_with("multi-GPU")) << r.anchor.id;

  std::string out;
  ASSERT_EQ(run("compare --compare-requests 60 --systems h100-sxm:tp=8,ipu-mk2:chips=64,ipu-mk2:chips=64:weights=streaming", out), 0)
      << out;
  EXPECT_EQ(out, llm_compare_markdown(*rep, o));
  EXPECT_NE(out.find("llama-2-70b (69.0B parameters)"), std::string::npos) << out;
  EXPECT_NE(out.find("| h100-sxm:tp=8 | 8 | 8 x h100-sxm, 1 replica(s) of tensor parallel 8"), std::string::npos) << out;
  EXPECT_NE(out.find("| ipu-mk2:chips=64 | - | does not fit:"), std::string::npos) << out;
  EXPECT_NE(out.find("multi-GPU held-out error: 12 rows"), std::string::npos) << out;
  for (const auto& r : rep->multi_gpu->rows) EXPECT_NE(out.find("| " + r.anchor.id + " |"), std::string::npos) << r.anchor.id;
  // The same shape from its config.json gives the same figures (the name aside).
  std::string from_cfg;
  ASSERT_EQ(run("compare --no-held-out --compare-requests 60 --systems h100-sxm:tp=8 --model " + source_dir() +
                    "/tests/data/configs/llama-2-70b",
                from_cfg),
            0)
      << from_cfg;
  const auto row = out.substr(out.find("| h100-sxm:tp=8 |"), out.find('\n', out.find("| h100-sxm:tp=8 |")) - out.find("| h100-sxm:tp=8 |"));
  EXPECT_NE(from_cfg.find(row), std::string::npos) << from_cfg << "\nwant: " << row;
  EXPECT_EQ(from_cfg.find("Held-out"), std::string::npos);
  // Mistakes are refused by name.
  EXPECT_EQ(run("compare --systems h100-sxm:tp=3", out), 2);
  EXPECT_NE(out.find("does not divide"), std::string::npos) << out;
  EXPECT_EQ(run("compare --rate 3", out), 2);
  EXPECT_NE(out.find("--rate does not apply to compare"), std::string::npos) << out;
  EXPECT_EQ(run("compare --compare-requests 2", out), 2);
  EXPECT_EQ(run("step --model /nonexistent/config.json", out), 2);
  EXPECT_NE(out.find("/nonexistent/config.json: cannot read"), std::string::npos) << out;
  EXPECT_EQ(run("step --system h100-sxm:tp=8 --model llama-2-70b --decode 8x512", out), 0) << out;
  EXPECT_NE(out.find("llama-2-70b on h100-sxm:tp=8"), std::string::npos) << out;
}

// The figures docs/timing.md quotes for the default comparison (seed 42, 400 requests per run).
TEST(llm_parallel, compare_figures_docs_timing_md_states) {
  llm_compare_options o;
  auto r = run_llm_compare(o);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->rows.size(), 5u);
  const auto& h100 = r->rows[0];
  EXPECT_EQ(h100.system, "h100-sxm:tp=8");
  EXPECT_NEAR(h100.tokens_per_s, 4090, 0.5);
  EXPECT_NEAR(h100.single_decode_ms, 12.28, 0.005);
  EXPECT_NEAR(h100.at_slo.report.tpot_p99_s * 1e3, 15.9, 0.05);
  EXPECT_NEAR(h100.usd_per_mtok, 1.21, 0.005);
  EXPECT_NEAR(r->rows[1].tokens_per_s, 2666, 0.5);
  EXPECT_NE(r->rows[2].refused.find("needs 138 GB of weights in SRAM"), std::string::npos);
  EXPECT_EQ(r->rows[3].tokens_per_s, 0);  // misses the SLO at any load
  EXPECT_NEAR(r->rows[3].single_decode_ms, 107.71, 0.005);
  EXPECT_NEAR(r->rows[4].tokens_per_s, 15429, 0.5);
  EXPECT_NEAR(r->rows[4].ipu_parity_usd, 2972, 0.5);
  ASSERT_TRUE(r->multi_gpu);
  EXPECT_NEAR(r->multi_gpu->mean_abs_error_percent, 49.8, 0.05);
  EXPECT_NEAR(r->multi_gpu->max_abs_error_percent, 163.8, 0.05);
}

}  // namespace
}  // namespace tessera::timing
