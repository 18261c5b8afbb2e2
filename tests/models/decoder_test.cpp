// Decoders (GPT-2, LLaMA): shapes and presets, config.json, seeded weights, HF folders (single,
// sharded, fp16/bf16), the block pool, and the paged-cache step against a cache-free recomputation
// (prefill chunks, mixed batches, sequences joining and leaving), errors instead of crashes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "tessera/models/batch.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/safetensors.hpp"
#include "step_oracle.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {

namespace fs = std::filesystem;
using testing::data_dir;
using testing::make_temp_dir;
using testing::read_file;
using testing::write_file;

model_shape odd_shape(const std::string& name) {
  auto s = parse_decoder_config_json(read_file(data_dir() + "/decoders/" + name + ".config.json"));
  EXPECT_TRUE(s) << name << ": " << s.error().to_string();
  s->name = name;
  return *s;
}

decoder_model odd_model(const std::string& name, uint64_t seed = 0) {
  auto m = make_seeded_decoder(odd_shape(name), seed);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::move(*m);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

std::vector<int32_t> some_tokens(int n, int vocab, uint64_t seed) {
  splitmix64 r(seed);
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(r.uniform(0, vocab - 1)));
  return v;
}

std::vector<int32_t> blocks(int first, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

const char* const kOdd[] = {"llama-odd", "gpt2-odd", "llama-tied", "qwen2-odd", "qwen2-untied", "mistral-window",
                            "llama31-rope", "qwen2-yarn"};

TEST(decoder_shape, presets_and_parameter_counts) {
  // HF's own counts: GPT2LMHeadModel (tied) 124,439,808 and 354,823,168; TinyLlama-1.1B
  // 1,100,048,384; Llama-2-7b 6,738,415,616; Meta-Llama-3-8B 8,030,261,248.
  const std::pair<const char*, int64_t> counts[] = {{"gpt2", 124439808},      {"gpt2-medium", 354823168},
                                                    {"llama-1b", 1100048384}, {"llama-2-7b", 6738415616},
                                                    {"llama-3-8b", 8030261248}};
  for (const auto& [name, n] : counts) {
    auto s = shape_preset(name);
    ASSERT_TRUE(s) << name;
    EXPECT_TRUE(s->validate().ok()) << name;
    EXPECT_TRUE(s->is_decoder());
    EXPECT_EQ(s->parameter_count(), n) << name;
  }
  auto l3 = *shape_preset("llama-3-8b");
  EXPECT_EQ(l3.num_kv_heads, 8);
  EXPECT_EQ(l3.rope_theta, 500000.0f);
  EXPECT_EQ(l3.kv_bytes_per_token(), 2 * 32 * 8 * 128 * 4);
  auto g = *shape_preset("gpt2-tiny");
  EXPECT_EQ(g.arch, architecture::gpt2);
  EXPECT_TRUE(g.tie_word_embeddings);
  EXPECT_EQ(g.eos_token_id, 50256);
  auto l = *shape_preset("llama-tiny");
  EXPECT_EQ(l.norm, norm_kind::rms_norm);
  EXPECT_EQ(l.positions, position_kind::rotary);
  EXPECT_TRUE(l.gated_mlp);
  EXPECT_EQ(l.num_heads / l.num_kv_heads, 2);
  // The timing model's BERT shapes stay as they were.
  EXPECT_EQ(shape_preset("bert-base")->parameter_count(), 109483778);
}

TEST(decoder_shape, validation_names_the_field) {
  auto s = *shape_preset("llama-tiny");
  s.num_kv_heads = 3;
  EXPECT_NE(s.validate().message().find("num_key_value_heads"), std::string::npos) << s.validate().to_string();
  s = *shape_preset("llama-tiny");
  s.hidden_size = 100;  // 4 heads do not divide 100 ...
  EXPECT_NE(s.validate().message().find("head_dim"), std::string::npos);
  s.explicit_head_dim = 16;  // ... unless head_dim is explicit
  EXPECT_TRUE(s.validate().ok()) << s.validate().to_string();
  s.explicit_head_dim = 15;
  EXPECT_NE(s.validate().message().find("even"), std::string::npos);
  s = *shape_preset("gpt2-tiny");
  s.num_kv_heads = 2;
  EXPECT_FALSE(s.validate().ok());
  s = *shape_preset("gpt2-tiny");
  s.eos_token_id = s.vocab_size;
  EXPECT_NE(s.validate().message().find("eos_token_id"), std::string::npos);
}

TEST(decoder_config, odd_shapes_parse) {
  auto l = odd_shape("llama-odd");
  EXPECT_EQ(l.head_dim(), 16);
  EXPECT_EQ(l.q_width(), 96);
  EXPECT_EQ(l.hidden_size, 100);
  EXPECT_EQ(l.num_heads / l.num_kv_heads, 3);
  EXPECT_EQ(l.rope_scaling, rope_scaling_kind::linear);
  EXPECT_EQ(l.rope_scaling_factor, 2.0f);
  EXPECT_FALSE(l.tie_word_embeddings);
  auto g = odd_shape("gpt2-odd");
  EXPECT_EQ(g.intermediate_size, 200);
  EXPECT_EQ(g.activation, activation_kind::gelu_tanh);
  EXPECT_TRUE(g.tie_word_embeddings);  // GPT-2's default
  auto t = odd_shape("llama-tied");
  EXPECT_TRUE(t.tie_word_embeddings);
  EXPECT_EQ(t.eos_token_id, 2);  // the first of a list
  // Qwen2: LLaMA's fields, biases on q, k, v (and nowhere else) from its traits row, rope_theta and
  // the tie from config.json; its sliding_window field is not applied (use_sliding_window false).
  auto q = odd_shape("qwen2-odd");
  EXPECT_EQ(q.arch, architecture::qwen2);
  EXPECT_TRUE(q.traits().qkv_bias);
  EXPECT_FALSE(q.traits().o_bias || q.traits().mlp_bias);
  EXPECT_EQ(q.rope_theta, 1e6f);
  EXPECT_TRUE(q.tie_word_embeddings);
  EXPECT_EQ(q.sliding_window, 0);
  EXPECT_FALSE(odd_shape("qwen2-untied").tie_word_embeddings);
  int biases = 0;
  for (const auto& spec : expected_decoder_tensors(q)) biases += spec.name.find(".bias") != std::string::npos;
  EXPECT_EQ(biases, 3 * q.num_layers);
  // Mistral: the window from config.json.
  auto m = odd_shape("mistral-window");
  EXPECT_EQ(m.arch, architecture::mistral);
  EXPECT_EQ(m.sliding_window, 7);
  EXPECT_FALSE(m.traits().qkv_bias);
  for (const char* name : {"llama-odd", "qwen2-odd", "qwen2-untied", "mistral-window", "gpt2-odd"}) {
    int64_t n = 0;
    for (const auto& spec : expected_decoder_tensors(odd_shape(name))) n += tensor_view{spec.shape, nullptr}.numel();
    EXPECT_EQ(odd_shape(name).parameter_count(), n) << name;
  }
}

TEST(decoder_config, qwen2_and_mistral_refusals) {
  auto refused = [](const std::string& file, const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
    auto j = nlohmann::json::parse(read_file(data_dir() + "/decoders/" + file + ".config.json"));
    edit(j);
    auto r = parse_decoder_config_json(j.dump());
    ASSERT_FALSE(r) << needle;
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().to_string();
  };
  refused("qwen2-odd", [](auto& j) { j["use_sliding_window"] = true; }, "use_sliding_window");
  refused("qwen2-odd", [](auto& j) { j["mlp_bias"] = true; }, "mlp_bias");
  refused("mistral-window", [](auto& j) { j["sliding_window"] = -3; }, "sliding_window");
  refused("mistral-window", [](auto& j) { j["sliding_window"] = "wide"; }, "sliding_window");
  refused("mistral-window", [](auto& j) { j["attention_bias"] = true; }, "attention_bias");
  // A null window is full attention.
  auto j = nlohmann::json::parse(read_file(data_dir() + "/decoders/mistral-window.config.json"));
  j["sliding_window"] = nullptr;
  auto r = parse_decoder_config_json(j.dump());
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->sliding_window, 0);
}

TEST(decoder_config, round_trip) {
  for (const char* name : kOdd) {
    const auto s = odd_shape(name);
    auto back = parse_decoder_config_json(decoder_config_json(s));
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(decoder_config_json(*back), decoder_config_json(s)) << name;
    EXPECT_EQ(back->parameter_count(), s.parameter_count());
  }
  for (const char* p : {"gpt2", "llama-3-8b"}) {
    auto s = *shape_preset(p);
    auto back = parse_decoder_config_json(decoder_config_json(s));
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->parameter_count(), s.parameter_count()) << p;
  }
}

TEST(decoder_config, errors_name_the_field) {
  const auto base = nlohmann::json::parse(read_file(data_dir() + "/decoders/llama-odd.config.json"));
  auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
    auto j = base;
    edit(j);
    auto r = parse_decoder_config_json(j.dump());
    ASSERT_FALSE(r) << needle;
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().to_string();
  };
  expect_error([](auto& j) { j.erase("hidden_size"); }, "hidden_size");
  expect_error([](auto& j) { j["num_key_value_heads"] = "two"; }, "num_key_value_heads");
  expect_error([](auto& j) { j["num_key_value_heads"] = 4; }, "num_key_value_heads");
  expect_error([](auto& j) { j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}}; }, "dynamic");
  expect_error([](auto& j) { j["rope_scaling"] = {{"type", "linear"}}; }, "rope_scaling.factor");
  expect_error([](auto& j) { j["hidden_act"] = "gelu"; }, "hidden_act");
  expect_error([](auto& j) { j["attention_bias"] = true; }, "attention_bias");
  expect_error([](auto& j) { j["head_dim"] = 15; }, "head_dim");
  expect_error([](auto& j) { j["model_type"] = "mamba"; }, "mamba");
  expect_error([](auto& j) { j.erase("model_type"); }, "model_type");
  expect_error([](auto& j) { j["eos_token_id"] = 300; }, "eos_token_id");
  EXPECT_FALSE(parse_decoder_config_json("{not json"));
  auto g = nlohmann::json::parse(read_file(data_dir() + "/decoders/gpt2-odd.config.json"));
  g["scale_attn_by_inverse_layer_idx"] = true;
  auto r = parse_decoder_config_json(g.dump());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("scale_attn_by_inverse_layer_idx"), std::string::npos);
}

// Seeded weights are a function of (shape, seed) only, bit for bit: FNV-1a of the tensors' bytes.
TEST(decoder_weights, seeded_weights_are_bit_identical) {
  auto hash = [](const decoder_model& m) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const auto& spec : expected_decoder_tensors(m.shape())) {
      const tensor_view* t = m.find(spec.name);
      const auto* b = reinterpret_cast<const unsigned char*>(t->data);
      for (int64_t i = 0; i < t->numel() * 4; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
    }
    return h;
  };
  auto a = make_preset_decoder("llama-tiny", 0), b = make_preset_decoder("llama-tiny", 0),
       c = make_preset_decoder("llama-tiny", 1), g = make_preset_decoder("gpt2-tiny", 0);
  ASSERT_TRUE(a && b && c && g);
  EXPECT_EQ(hash(*a), hash(*b));
  EXPECT_NE(hash(*a), hash(*c));
  // Recorded on the development machine: any change of the generator or the scales shows here.
  EXPECT_EQ(hash(*a), 0x8cf7204aef07eb6dull) << std::hex << hash(*a);
  EXPECT_EQ(hash(*g), 0xa9476893b515d4a7ull) << std::hex << hash(*g);
}

TEST(decoder_weights, too_big_for_memory_is_refused) {
  auto m = make_preset_decoder("llama-3-8b");
  if (m) GTEST_SKIP() << "this machine has room for 32 GB of fp32 weights";
  EXPECT_EQ(m.error().code(), errc::out_of_memory);
  EXPECT_NE(m.error().message().find("GB"), std::string::npos) << m.error().to_string();
  EXPECT_FALSE(make_preset_decoder("bert-tiny"));
}

TEST(block_pool, allocate_retain_release) {
  block_pool p(3);
  EXPECT_EQ(p.free_blocks(), 3);
  auto a = p.allocate(), b = p.allocate(), c = p.allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(std::set<int>({*a, *b, *c}).size(), 3u);
  EXPECT_FALSE(p.allocate());  // exhausted: nullopt, not a crash
  EXPECT_TRUE(p.retain(*a).ok());
  EXPECT_EQ(p.ref_count(*a), 2);
  EXPECT_TRUE(p.release(*a).ok());
  EXPECT_EQ(p.free_blocks(), 0);
  EXPECT_TRUE(p.release(*a).ok());
  EXPECT_EQ(p.free_blocks(), 1);
  EXPECT_FALSE(p.release(*a).ok());  // double release
  EXPECT_FALSE(p.retain(*a).ok());   // retain of a free block
  EXPECT_FALSE(p.retain(7).ok());
  EXPECT_FALSE(p.release(-1).ok());
  EXPECT_EQ(p.allocate(), a);
  EXPECT_EQ(p.total_blocks(), 3);
}

// Fuzz the pool against a model of it: random operations, counts and the free list agree.
TEST(block_pool, random_operations_match_a_model) {
  splitmix64 r(5);
  block_pool p(17);
  std::vector<int> refs(17, 0);
  for (int i = 0; i < 20000; ++i) {
    const int op = static_cast<int>(r.uniform(0, 2)), id = static_cast<int>(r.uniform(-1, 17));
    if (op == 0) {
      auto a = p.allocate();
      const bool any = std::count(refs.begin(), refs.end(), 0) > 0;
      ASSERT_EQ(a.has_value(), any);
      if (a) {
        ASSERT_EQ(refs[*a], 0);
        refs[*a] = 1;
      }
    } else if (op == 1) {
      const bool ok = id >= 0 && id < 17 && refs[id] > 0;
      ASSERT_EQ(p.retain(id).ok(), ok);
      if (ok) ++refs[id];
    } else {
      const bool ok = id >= 0 && id < 17 && refs[id] > 0;
      ASSERT_EQ(p.release(id).ok(), ok);
      if (ok) --refs[id];
    }
    ASSERT_EQ(p.free_blocks(), std::count(refs.begin(), refs.end(), 0));
  }
}

// Prefill then decode through the cache; every step's logits equal the cache-free recomputation of
// the whole prefix (1e-4), for the odd shapes and the small presets.
TEST(decoder_step, cached_decode_matches_full_recomputation) {
  set_num_threads(2);
  std::vector<decoder_model> models;
  for (const char* n : kOdd) models.push_back(odd_model(n));
  for (const char* p : {"gpt2-tiny", "llama-tiny"}) models.push_back(*make_preset_decoder(p));
  for (const auto& m : models) {
    const auto& c = m.shape();
    auto seq = some_tokens(9, c.vocab_size, 11);
    auto cache = paged_kv_cache::make(c, {4, 16});
    ASSERT_TRUE(cache);
    seq_step s{1, seq, 0, blocks(3, 12)};  // blocks not starting at 0
    auto r = m.step({{s}}, *cache);
    ASSERT_TRUE(r) << r.error().to_string();
    for (int n = 0; n < 16; ++n) {
      auto full = m.full_logits(seq);
      ASSERT_TRUE(full);
      ASSERT_EQ(r->size(), 1u);
      EXPECT_LT(max_abs_diff(r->front(), full->back()), 1e-4f) << c.name << " step " << n;
      const auto& l = r->front();
      const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      s.tokens = {next};
      s.start_pos = static_cast<int32_t>(seq.size());
      seq.push_back(next);
      r = m.step({{s}}, *cache);
      ASSERT_TRUE(r) << r.error().to_string();
    }
  }
}

// A prompt prefilled in chunks of 1, 2, 3, 5 or 7 tokens gives the logits of one prefill.
TEST(decoder_step, chunked_prefill_equals_one_prefill) {
  set_num_threads(2);
  for (const char* n : kOdd) {
    auto m = odd_model(n);
    const auto prompt = some_tokens(23, m.shape().vocab_size, 3);
    auto one = greedy_generate(m, prompt, {.max_tokens = 6, .block_tokens = 8, .keep_logits = true});
    ASSERT_TRUE(one) << one.error().to_string();
    for (int chunk : {1, 2, 3, 5, 7}) {
      auto g = greedy_generate(m, prompt, {.max_tokens = 6, .block_tokens = 8, .prefill_chunk = chunk, .keep_logits = true});
      ASSERT_TRUE(g) << g.error().to_string();
      ASSERT_EQ(g->logits.size(), one->logits.size());
      for (size_t i = 0; i < g->logits.size(); ++i)
        EXPECT_LT(max_abs_diff(g->logits[i], one->logits[i]), 1e-4f) << n << " chunk " << chunk << " token " << i;
      EXPECT_EQ(g->tokens, one->tokens);
    }
  }
}

// A mixed batch: sequences of different lengths, prefill chunks beside decode tokens, sequences
// joining and leaving between steps, blocks scattered in the cache. Every sequence's logits equal
// its own cache-free recomputation.
TEST(decoder_step, mixed_batches_with_joins_and_leaves) {
  set_num_threads(2);
  for (const char* n : {"llama-odd", "gpt2-odd"}) {
    auto m = odd_model(n);
    const auto& c = m.shape();
    const int bt = 4;
    auto cache = paged_kv_cache::make(c, {bt, 200});
    ASSERT_TRUE(cache);
    block_pool pool(200);
    struct live {
      uint64_t id;
      std::vector<int32_t> tokens;  // all so far
      int cached = 0;               // positions in the cache
      std::vector<int32_t> table;
      int remaining_prompt_chunks;
    };
    std::vector<live> seqs;
    splitmix64 r(9);
    uint64_t next_id = 100;
    int checked = 0;
    for (int step = 0; step < 14; ++step) {
      // Join: 0-2 new sequences with prompts of 1-30 tokens.
      for (int j = static_cast<int>(r.uniform(0, 2)); j > 0; --j)
        seqs.push_back({next_id++, some_tokens(static_cast<int>(r.uniform(1, 30)), c.vocab_size, next_id), 0, {}, 0});
      // Leave: a finished sequence frees its blocks.
      if (seqs.size() > 3 && r.uniform(0, 2) == 0) {
        const size_t k = static_cast<size_t>(r.uniform(0, static_cast<int64_t>(seqs.size()) - 1));
        for (int32_t b : seqs[k].table) ASSERT_TRUE(pool.release(b).ok());
        seqs.erase(seqs.begin() + static_cast<int64_t>(k));
      }
      step_batch batch;
      for (auto& s : seqs) {
        seq_step st;
        st.seq_id = s.id;
        st.start_pos = s.cached;
        const int pending = static_cast<int>(s.tokens.size()) - s.cached;
        const int take = pending > 1 ? std::min(pending, static_cast<int>(r.uniform(1, 12))) : 1;
        st.tokens.assign(s.tokens.begin() + s.cached, s.tokens.begin() + s.cached + take);
        while (static_cast<int>(s.table.size()) * bt < s.cached + take) {
          auto b = pool.allocate();
          ASSERT_TRUE(b);
          s.table.push_back(*b);
        }
        st.block_table = s.table;
        st.want_logits = s.cached + take == static_cast<int>(s.tokens.size());
        batch.seqs.push_back(st);
      }
      std::shuffle(batch.seqs.begin(), batch.seqs.end(), std::mt19937(static_cast<unsigned>(step)));
      auto out = m.step(batch, *cache);
      ASSERT_TRUE(out) << out.error().to_string();
      size_t k = 0;
      for (const auto& st : batch.seqs) {
        auto it = std::find_if(seqs.begin(), seqs.end(), [&](const live& l) { return l.id == st.seq_id; });
        it->cached += static_cast<int>(st.tokens.size());
        if (!st.want_logits) continue;
        ASSERT_LT(k, out->size());
        const auto& l = (*out)[k++];
        auto full = m.full_logits(it->tokens);
        ASSERT_TRUE(full);
        EXPECT_LT(max_abs_diff(l, full->back()), 1e-4f) << n << " step " << step << " seq " << st.seq_id;
        ++checked;
        it->tokens.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
      }
      EXPECT_EQ(k, out->size());
    }
    EXPECT_GT(checked, 30) << n;
  }
}

TEST(decoder_step, bad_batches_are_errors_and_leave_the_cache_alone) {
  auto m = odd_model("llama-odd");
  const auto& c = m.shape();
  auto cache = paged_kv_cache::make(c, {4, 8});
  ASSERT_TRUE(cache);
  auto before = std::vector<float>(cache->key(0, 0, 0), cache->key(0, 0, 0) + 4 * c.head_dim());
  auto expect_error = [&](seq_step s, const std::string& needle) {
    auto r = m.step({{seq_step{0, {5}, 0, {0}}, s}}, *cache);
    ASSERT_FALSE(r) << needle;
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().to_string();
    EXPECT_EQ(std::vector<float>(cache->key(0, 0, 0), cache->key(0, 0, 0) + 4 * c.head_dim()), before);
  };
  expect_error({7, {1, 2, 3, 4, 5}, 0, {1}}, "block table");   // 5 positions need 2 blocks of 4
  expect_error({7, {1}, 9, {1, 2}}, "block table");            // position 9 is in block 2
  expect_error({7, {1}, 0, {8}}, "outside the cache");
  expect_error({7, {1}, 0, {-1}}, "outside the cache");
  expect_error({7, {300}, 0, {1}}, "outside the vocabulary");
  expect_error({7, {-3}, 0, {1}}, "outside the vocabulary");
  expect_error({7, {}, 0, {1}}, "no tokens");
  expect_error({7, {1}, -1, {1}}, "negative start_pos");
  expect_error({7, {1}, 128, blocks(0, 8)}, "max_position_embeddings");
  auto other = paged_kv_cache::make(*shape_preset("llama-tiny"), {4, 8});
  auto r = m.step({{seq_step{0, {5}, 0, {0}}}}, *other);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("KV cache"), std::string::npos);
  EXPECT_TRUE(m.step({}, *cache));  // an empty batch is fine: no logits
  EXPECT_FALSE(greedy_generate(m, {}, {}));
  EXPECT_FALSE(greedy_generate(m, {1, 2}, {.max_tokens = 127}));
}

// Fuzz: random batches, valid or not (token ids, positions, block tables, empty sequences). step
// succeeds exactly when an independent check says the batch is valid, and never crashes; a valid
// batch returns one logits row per sequence that wants them.
TEST(decoder_step, random_batches_succeed_exactly_when_valid) {
  set_num_threads(1);
  auto m = odd_model("gpt2-odd");
  const auto& c = m.shape();  // vocab 300, 96 positions
  const int bt = 4, nblocks = 12;
  auto cache = paged_kv_cache::make(c, {bt, nblocks});
  ASSERT_TRUE(cache);
  splitmix64 r(77);
  int ok = 0, refused = 0;
  for (int iter = 0; iter < 400; ++iter) {
    step_batch b;
    bool valid = true;
    size_t wants = 0;
    for (int s = static_cast<int>(r.uniform(0, 3)); s > 0; --s) {
      seq_step st;
      st.seq_id = r.next();
      const int n = static_cast<int>(r.uniform(0, 6));
      for (int i = 0; i < n; ++i) st.tokens.push_back(static_cast<int32_t>(r.uniform(-2, 302)));
      st.start_pos = static_cast<int32_t>(r.uniform(-1, 97));
      for (int i = static_cast<int>(r.uniform(0, 30)); i > 0; --i)
        st.block_table.push_back(static_cast<int32_t>(r.uniform(-1, nblocks)));
      st.want_logits = r.uniform(0, 3) != 0;
      valid = valid && testing::step_entry_valid(st, c, bt, nblocks);
      wants += st.want_logits;
      b.seqs.push_back(std::move(st));
    }
    auto out = m.step(b, *cache);
    ASSERT_EQ(static_cast<bool>(out), valid) << "iteration " << iter << ": " << (out ? std::string("accepted") : out.error().to_string());
    if (out) {
      ++ok;
      ASSERT_EQ(out->size(), wants);
      for (const auto& l : *out) {
        ASSERT_EQ(static_cast<int>(l.size()), c.vocab_size);
        for (float v : l) ASSERT_TRUE(std::isfinite(v));
      }
    } else {
      ++refused;
    }
  }
  EXPECT_GT(ok, 20);
  EXPECT_GT(refused, 20);
}

// Random decoders must not hide bugs: greedy generations vary (not one repeated token).
TEST(decoder_generate, seeded_presets_generate_varied_tokens) {
  set_num_threads(2);
  for (const char* p : {"gpt2-tiny", "llama-tiny"}) {
    auto m = make_preset_decoder(p);
    ASSERT_TRUE(m);
    auto g = greedy_generate(*m, {1, 42, 99, 7, 1000}, {.max_tokens = 32});
    ASSERT_TRUE(g) << g.error().to_string();
    ASSERT_EQ(g->tokens.size(), 32u);
    EXPECT_GE(std::set<int32_t>(g->tokens.begin(), g->tokens.end()).size(), 16u) << p;
  }
  for (const char* n : kOdd) {
    auto m = odd_model(n);
    auto g = greedy_generate(m, {1, 5, 9}, {.max_tokens = 32});
    ASSERT_TRUE(g);
    EXPECT_GE(std::set<int32_t>(g->tokens.begin(), g->tokens.end()).size(), 8u) << n;
  }
}

// ---- Goldens from independent float64 implementations: plain PyTorch for GPT-2 and LLaMA
// (models/scripts/make_decoder_goldens.py, goldens.json), numpy for Qwen2 and Mistral
// (models/scripts/make_arch_goldens.py, arch_goldens.json) ----

// Logits at every prompt position within 1e-4, through the cache-free path, a token-by-token
// cached prefill and a chunked one; 32 greedy tokens equal up to the first step whose golden top-2
// margin is below 1e-3 (a tie there may go either way, and every later token follows from it).
void check_goldens(const std::string& file, size_t min_models) {
  set_num_threads(2);
  const auto g = nlohmann::json::parse(read_file(data_dir() + "/decoders/" + file));
  ASSERT_GE(g["models"].size(), min_models);
  for (const auto& [name, entry] : g["models"].items()) {
    auto m = odd_model(name, g["seed"].get<uint64_t>());
    const int V = m.shape().vocab_size;
    for (const auto& p : entry["prompts"]) {
      const auto ids = p["ids"].get<std::vector<int32_t>>();
      const auto want = p["logits"].get<std::vector<std::vector<float>>>();
      ASSERT_EQ(want.size(), ids.size());
      auto full = m.full_logits(ids);
      ASSERT_TRUE(full);
      auto cache = paged_kv_cache::make(m.shape(), {4, 16});
      ASSERT_TRUE(cache);
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(static_cast<int>(want[i].size()), V);
        EXPECT_LT(max_abs_diff((*full)[i], want[i]), 1e-4f) << name << " full, position " << i;
        auto r = m.step({{seq_step{1, {ids[i]}, static_cast<int32_t>(i), blocks(0, 16)}}}, *cache);
        ASSERT_TRUE(r) << r.error().to_string();
        EXPECT_LT(max_abs_diff(r->front(), want[i]), 1e-4f) << name << " cached, position " << i;
      }
      auto chunked = greedy_generate(m, ids, {.max_tokens = 32, .block_tokens = 16, .prefill_chunk = 6, .keep_logits = true});
      ASSERT_TRUE(chunked) << chunked.error().to_string();
      EXPECT_LT(max_abs_diff(chunked->logits.front(), want.back()), 1e-4f) << name << " chunked prefill";
      const auto tokens = p["greedy"].get<std::vector<int32_t>>();
      const auto margins = p["margins"].get<std::vector<float>>();
      ASSERT_EQ(chunked->tokens.size(), tokens.size());
      size_t compared = 0;
      for (; compared < tokens.size() && margins[compared] >= 1e-3f; ++compared)
        EXPECT_EQ(chunked->tokens[compared], tokens[compared]) << name << " greedy step " << compared;
      EXPECT_GE(compared, 16u) << name << ": most steps must be comparable";
      EXPECT_GE(std::set<int32_t>(tokens.begin(), tokens.end()).size(), 8u) << name << ": generations vary";
      // A sliding window: prompt + generation outrun it, the golden differs from full attention, and
      // the same weights without the window reproduce the full-attention golden instead.
      if (p.contains("window")) {
        const int window = p["window"].get<int>();
        EXPECT_EQ(m.shape().sliding_window, window) << name;
        EXPECT_GT(static_cast<int>(ids.size() + tokens.size()), window) << name;
        const auto full_tokens = p["greedy_full_attention"].get<std::vector<int32_t>>();
        const auto full_margins = p["margins_full_attention"].get<std::vector<float>>();
        EXPECT_NE(full_tokens, tokens) << name << ": the window must change the generation";
        model_shape no_window = m.shape();
        no_window.sliding_window = 0;
        auto unwindowed = make_seeded_decoder(no_window, g["seed"].get<uint64_t>());
        ASSERT_TRUE(unwindowed) << unwindowed.error().to_string();
        auto gen = greedy_generate(*unwindowed, ids, {.max_tokens = 32, .block_tokens = 16});
        ASSERT_TRUE(gen) << gen.error().to_string();
        size_t same = 0;
        for (; same < full_tokens.size() && full_margins[same] >= 1e-3f; ++same)
          EXPECT_EQ(gen->tokens[same], full_tokens[same]) << name << " full attention, greedy step " << same;
        EXPECT_GE(same, 8u) << name;
      }
    }
  }
}

TEST(decoder_goldens, pytorch_logits_and_greedy_tokens) { check_goldens("goldens.json", 2); }

// Qwen2 (q, k, v biases; tied and untied; rope_theta 1e6 from config.json) and Mistral (window 7).
TEST(decoder_goldens, numpy_qwen2_and_mistral_logits_and_greedy_tokens) { check_goldens("arch_goldens.json", 5); }

// Hugging Face's rope_scaling types: llama3 (Llama 3.1) and yarn parse with their fields, the
// goldens above hold for them (llama31-rope, qwen2-yarn), and the scaling is not a no-op: the same
// weights without it give other logits. dynamic is refused with its reason, as is anything unknown.
TEST(decoder_config, rope_scaling_types) {
  auto l = odd_shape("llama31-rope");
  EXPECT_EQ(l.rope_scaling, rope_scaling_kind::llama3);
  EXPECT_EQ(l.rope_scaling_factor, 8.0f);
  EXPECT_EQ(l.rope_original_max_positions, 64.0f);
  auto y = odd_shape("qwen2-yarn");
  EXPECT_EQ(y.rope_scaling, rope_scaling_kind::yarn);
  EXPECT_NEAR(y.rope_attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);  // HF's default
  EXPECT_EQ(y.rope_beta_fast, 32.0f);
  // The frequencies: llama3 keeps the highest, divides the lowest by factor; yarn likewise.
  for (const auto& s : {l, y}) {
    const auto scaled = rope_inv_freq(s.rope(), s.head_dim());
    rope_params plain = s.rope();
    plain.kind = rope_kind::none;
    const auto base = rope_inv_freq(plain, s.head_dim());
    EXPECT_DOUBLE_EQ(scaled.front(), base.front()) << s.name;
    EXPECT_NEAR(scaled.back(), base.back() / s.rope_scaling_factor, 1e-12) << s.name;
  }
  for (const char* name : {"llama31-rope", "qwen2-yarn"}) {
    auto m = odd_model(name, 0);
    model_shape unscaled = m.shape();
    unscaled.rope_scaling = rope_scaling_kind::none;
    auto u = make_seeded_decoder(unscaled, 0);
    ASSERT_TRUE(u) << u.error().to_string();
    const std::vector<int32_t> ids{1, 17, 250, 3, 99, 42, 7, 128, 200, 5, 66, 31, 2};
    auto a = m.full_logits(ids);
    auto b = u->full_logits(ids);
    ASSERT_TRUE(a && b);
    EXPECT_GT(max_abs_diff(a->back(), b->back()), 1e-3f) << name << ": the scaling changes the answer";
  }
  auto refused = [](const std::string& scaling, const std::string& needle) {
    auto j = nlohmann::json::parse(read_file(data_dir() + "/decoders/llama31-rope.config.json"));
    j["rope_scaling"] = nlohmann::json::parse(scaling);
    auto r = parse_decoder_config_json(j.dump());
    ASSERT_FALSE(r) << scaling;
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().to_string();
  };
  refused(R"({"rope_type": "dynamic", "factor": 2})", "dynamic");
  refused(R"({"rope_type": "longrope", "factor": 2})", "longrope");
  refused(R"({"rope_type": "llama3", "factor": 8})", "low_freq_factor");
  refused(R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1,
              "original_max_position_embeddings": 64})", "low_freq_factor");
  refused(R"({"rope_type": "yarn", "factor": 4, "mscale": 1})", "mscale");
  refused(R"({"rope_type": "yarn", "factor": "big"})", "factor");
  refused(R"({"rope_type": "linear", "factor": 2, "short_factor": [1]})", "short_factor");
  // What config.json said is what a saved folder says again.
  auto j = nlohmann::json::parse(decoder_config_json(l));
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  auto again = parse_decoder_config_json(j.dump());
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->rope_original_max_positions, 64.0f);
}

// ---- Hugging Face folders ----

// Writes tensors as a safetensors file with the given dtype (F32, F16 or BF16; values rounded
// toward zero for the 16-bit ones, so the expected fp32 values are exact).
uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t b = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void write_bf16_safetensors(const std::string& path, const std::map<std::string, tensor_view>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {off, off + t.numel() * 2}}};
    off += static_cast<uint64_t>(t.numel()) * 2;
  }
  std::string h = header.dump(), bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((uint64_t{h.size()} >> (8 * i)) & 0xff);
  bytes += h;
  for (const auto& [name, t] : tensors)
    for (int64_t i = 0; i < t.numel(); ++i) {
      const uint16_t v = to_bf16(t.data[i]);
      bytes.append(reinterpret_cast<const char*>(&v), 2);
    }
  write_file(path, bytes);
}

std::vector<float> last_logits(const decoder_model& m, const std::vector<int32_t>& tokens) {
  auto r = m.full_logits(tokens);
  EXPECT_TRUE(r) << r.error().to_string();
  return r->back();
}

TEST(decoder_folder, save_and_load_round_trip) {
  for (const char* n : kOdd) {
    auto m = odd_model(n, 4);
    const std::string dir = make_temp_dir("decoder-save");
    ASSERT_TRUE(save_decoder(m, dir).ok());
    auto back = load_decoder(dir);
    ASSERT_TRUE(back) << back.error().to_string();
    const auto t = some_tokens(10, m.shape().vocab_size, 2);
    EXPECT_EQ(last_logits(*back, t), last_logits(m, t)) << n;  // bit for bit
    if (m.shape().arch == architecture::gpt2) {  // HF GPT2LMHeadModel names and Conv1D [in, out]
      auto st = map_safetensors(dir + "/model.safetensors");
      ASSERT_TRUE(st);
      const auto& w = st->tensors.at("transformer.h.0.mlp.c_fc.weight");
      EXPECT_EQ(w.shape, (std::vector<int64_t>{72, 200}));
    }
    fs::remove_all(dir);
  }
}

TEST(decoder_folder, sharded_bf16_checkpoint) {
  auto m = odd_model("llama-odd", 2);
  const std::string dir = make_temp_dir("decoder-shards");
  ASSERT_TRUE(save_decoder(m, dir).ok());
  fs::remove(dir + "/model.safetensors");
  // Two bf16 shards and the index, as HF writes them; the reference: the same values in fp32.
  std::map<std::string, tensor_view> shard[2];
  std::map<std::string, tensor_view> rounded_views;
  std::vector<std::vector<float>> rounded;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  size_t i = 0;
  const auto specs = expected_decoder_tensors(m.shape());
  rounded.reserve(specs.size());
  for (const auto& spec : specs) {
    const tensor_view* t = m.find(spec.name);
    shard[i % 2][spec.name] = *t;
    index["weight_map"][spec.name] = i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    std::vector<float> v(static_cast<size_t>(t->numel()));
    for (size_t k = 0; k < v.size(); ++k) v[k] = from_bf16(to_bf16(t->data[k]));
    rounded.push_back(std::move(v));
    rounded_views[spec.name] = tensor_view{spec.shape, rounded.back().data()};
    ++i;
  }
  write_bf16_safetensors(dir + "/model-00001-of-00002.safetensors", shard[0]);
  write_bf16_safetensors(dir + "/model-00002-of-00002.safetensors", shard[1]);
  write_file(dir + "/model.safetensors.index.json", index.dump(2));
  auto loaded = load_decoder(dir);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  auto ref = decoder_model::bind(m.shape(), rounded_views, nullptr, "rounded");
  ASSERT_TRUE(ref);
  const auto t = some_tokens(7, 300, 1);
  EXPECT_EQ(last_logits(*loaded, t), last_logits(*ref, t));

  // A tensor listed in the index but absent from its shard names both files.
  index["weight_map"]["model.norm.weight"] =  // the shard that does not hold it
      shard[0].count("model.norm.weight") ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  write_file(dir + "/model.safetensors.index.json", index.dump(2));
  auto bad = load_decoder(dir);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("missing from the shard"), std::string::npos) << bad.error().to_string();
  index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write_file(dir + "/model.safetensors.index.json", index.dump(2));
  EXPECT_FALSE(load_decoder(dir));
  fs::remove_all(dir);
}

TEST(decoder_folder, errors_name_file_tensor_and_shape) {
  auto m = odd_model("gpt2-odd");
  const std::string dir = make_temp_dir("decoder-bad");
  ASSERT_TRUE(save_decoder(m, dir).ok());
  auto st = map_safetensors(dir + "/model.safetensors");
  ASSERT_TRUE(st);
  auto tensors = st->tensors;
  // Conv1D stored as Linear ([out, in]): the error names the tensor, its shape and the expected one.
  std::vector<float> wrong(72 * 200);
  tensors["transformer.h.1.mlp.c_fc.weight"] = tensor_view{{200, 72}, wrong.data()};
  // (written beside and renamed over: the views still read the mapped original)
  auto rewrite = [&] {
    ASSERT_TRUE(write_safetensors(dir + "/new.safetensors", tensors).ok());
    fs::rename(dir + "/new.safetensors", dir + "/model.safetensors");
  };
  rewrite();
  auto r = load_decoder(dir);
  ASSERT_FALSE(r);
  const std::string msg = r.error().message();
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("h.1.mlp.c_fc.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[72, 200]"), std::string::npos) << msg;
  tensors.erase("transformer.h.1.mlp.c_fc.weight");
  rewrite();
  r = load_decoder(dir);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("missing tensor \"h.1.mlp.c_fc.weight\""), std::string::npos)
      << r.error().to_string();
  fs::remove(dir + "/model.safetensors");
  r = load_decoder(dir);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("model.safetensors"), std::string::npos);
  write_file(dir + "/config.json", "{\"model_type\": \"gpt2\", \"n_embd\": 72}");
  r = load_decoder(dir);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("config.json"), std::string::npos);
  EXPECT_NE(r.error().message().find("n_layer"), std::string::npos) << r.error().to_string();
  EXPECT_FALSE(load_decoder("no-such-model"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::models
