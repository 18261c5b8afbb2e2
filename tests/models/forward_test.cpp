// The reference forward against Hugging Face's math (goldens from scripts/make_model_goldens.py),
// packed vs padded, presets and workloads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/models/forward.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/safetensors.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {
using testing::data_dir;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct golden_batch {
  std::string name;
  packed_batch batch;
  std::vector<float> logits;
};

std::vector<golden_batch> load_goldens() {
  const auto j = nlohmann::json::parse(testing::read_file(data_dir() + "/tiny_odd_logits.json"));
  std::vector<golden_batch> out;
  for (const auto& b : j["batches"]) {
    golden_batch g;
    g.name = b["name"];
    g.batch.token_ids = b["token_ids"].get<std::vector<int32_t>>();
    g.batch.token_type_ids = b["token_type_ids"].get<std::vector<int32_t>>();
    g.batch.seq_offsets = b["seq_offsets"].get<std::vector<int32_t>>();
    g.logits = b["logits"].get<std::vector<float>>();
    out.push_back(std::move(g));
  }
  return out;
}

TEST(forward, matches_hugging_face_on_odd_shapes) {
  set_num_threads(2);
  auto m = load_model(data_dir() + "/tiny-odd");
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->config.head_dim(), 16);
  EXPECT_EQ(m->config.num_heads, 6);
  EXPECT_EQ(m->config.intermediate_size, 200);
  EXPECT_EQ(m->config.num_labels, 3);
  EXPECT_EQ(m->config.id2label[2], "positive");
  const auto goldens = load_goldens();
  ASSERT_EQ(goldens.size(), 2u);
  for (const auto& g : goldens) {
    ASSERT_TRUE(validate_batch(m->config, g.batch).ok());
    const auto packed = reference_forward(*m, g.batch);
    EXPECT_LT(max_abs_diff(packed, g.logits), 1e-4f) << g.name;
    EXPECT_LT(max_abs_diff(padded_forward(*m, g.batch), g.logits), 1e-4f) << g.name << " padded, one batch";
    EXPECT_LT(max_abs_diff(padded_forward(*m, g.batch, 7), g.logits), 1e-4f) << g.name << " padded, batches of 7";
  }
}

TEST(forward, loads_checkpoint_without_bert_prefix) {
  auto st = map_safetensors(data_dir() + "/tiny-odd/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  std::map<std::string, tensor_view> stripped;
  for (const auto& [name, t] : st->tensors) stripped[name.rfind("bert.", 0) == 0 ? name.substr(5) : name] = t;
  const std::string dir = testing::make_temp_dir("noprefix");
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", stripped).ok());
  std::filesystem::copy_file(data_dir() + "/tiny-odd/config.json", dir + "/config.json");
  auto m = load_model(dir);
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->vocab, nullptr);
  const auto g = load_goldens()[1];
  EXPECT_LT(max_abs_diff(reference_forward(*m, g.batch), g.logits), 1e-4f);
  // Named access with or without the prefix.
  EXPECT_NE(m->weights.find("bert.encoder.layer.2.output.dense.weight"), nullptr);
  auto t = m->weights.tensor("encoder.layer.2.output.dense.weight");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{96, 200}));
  EXPECT_EQ(t->data, m->weights.layer(2).ffn_out_w);
  std::filesystem::remove_all(dir);
}

TEST(forward, packed_equals_padded_and_is_batch_independent) {
  set_num_threads(2);
  auto m = make_preset_model("bert-tiny", 3);
  ASSERT_TRUE(m);
  auto lens = seed_workload(12, 0.4, 5);
  lens.push_back(1);
  lens.push_back(512);
  const packed_batch b = synthetic_batch(lens);
  const auto packed = reference_forward(*m, b);
  EXPECT_LT(max_abs_diff(packed, padded_forward(*m, b, 4)), 1e-4f);
  for (int s : {0, 5, 13}) {
    const auto one = reference_forward(*m, b.slice(s, 1));
    for (int l = 0; l < 2; ++l) EXPECT_NEAR(one[l], packed[s * 2 + l], 1e-5);
  }
  set_num_threads(1);
  EXPECT_LT(max_abs_diff(packed, reference_forward(*m, b)), 1e-5f);
  set_num_threads(2);
}

uint64_t hash_weights(const bert_model& m) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& spec : expected_tensors(m.config)) {
    const tensor_view* t = m.weights.find(spec.name);
    const auto* bytes = reinterpret_cast<const unsigned char*>(t->data);
    for (int64_t i = 0; i < t->numel() * 4; ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  }
  return h;
}

TEST(presets, shapes_and_bit_identical_weights) {
  const struct { const char* name; int layers, hidden, heads; } want[] = {
      {"bert-tiny", 2, 128, 2}, {"bert-mini", 4, 256, 4}, {"bert-small", 4, 512, 8},
      {"bert-base", 12, 768, 12}, {"bert-large", 24, 1024, 16}};
  for (const auto& w : want) {
    auto c = preset_config(w.name);
    ASSERT_TRUE(c) << w.name;
    EXPECT_EQ(c->num_layers, w.layers);
    EXPECT_EQ(c->hidden_size, w.hidden);
    EXPECT_EQ(c->num_heads, w.heads);
    EXPECT_EQ(c->intermediate_size, 4 * w.hidden);
    EXPECT_EQ(c->vocab_size, 30522);
    EXPECT_EQ(c->max_position_embeddings, 512);
    EXPECT_EQ(c->num_labels, 2);
  }
  EXPECT_EQ(preset_config("bert-base")->parameter_count(), 109483778);  // HF BertForSequenceClassification
  auto a = make_preset_model("bert-tiny", 0), b = make_preset_model("bert-tiny", 0), c = make_preset_model("bert-tiny", 1);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(hash_weights(*a), hash_weights(*b));
  EXPECT_NE(hash_weights(*a), hash_weights(*c));
  // The same value on every machine: a change here breaks every stored preset result.
  EXPECT_EQ(hash_weights(*a), 0x8504246a6070921full) << std::hex << hash_weights(*a);
  EXPECT_FLOAT_EQ(a->weights.embeddings().ln_gamma[0], a->weights.tensor("embeddings.LayerNorm.weight")->data[0]);
}

TEST(presets, one_tensor_alone_equals_the_whole_set) {
  // Tiles generate only their own tensors: fill_preset_tensor must agree with make_preset_weights.
  auto cfg = *preset_config("bert-mini");
  auto w = make_preset_weights(cfg, 11);
  ASSERT_TRUE(w);
  for (const auto& spec : expected_tensors(cfg)) {
    if (spec.name != "encoder.layer.3.intermediate.dense.weight" && spec.name != "classifier.bias") continue;
    std::vector<float> mine(static_cast<size_t>(w->find(spec.name)->numel()));
    fill_preset_tensor(spec, 11, mine.data());
    EXPECT_EQ(0, std::memcmp(mine.data(), w->find(spec.name)->data, mine.size() * 4)) << spec.name;
  }
}

TEST(presets, unknown_preset_lists_known_names) {
  auto c = preset_config("bert-huge");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), errc::invalid_argument);
  EXPECT_NE(c.error().message().find("bert-tiny"), std::string::npos);
  EXPECT_NE(c.error().message().find("bert-large"), std::string::npos);
  auto m = load_model("bert-huge");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message().find("bert-base"), std::string::npos);
  EXPECT_TRUE(load_model("bert-mini", 4));
}

TEST(presets, save_and_load_round_trip) {
  auto m = make_preset_model("bert-tiny", 9);
  ASSERT_TRUE(m);
  const std::string dir = testing::make_temp_dir("roundtrip");
  ASSERT_TRUE(save_model(*m, dir).ok());
  auto back = load_model(dir);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(hash_weights(*m), hash_weights(*back));
  ASSERT_NE(back->vocab, nullptr);
  EXPECT_EQ(back->vocab->size(), m->vocab->size());
  const packed_batch b = synthetic_batch({5, 17});
  EXPECT_EQ(reference_forward(*m, b), reference_forward(*back, b));
  std::filesystem::remove_all(dir);
}

TEST(workload, seed_workload_is_deterministic_and_in_range) {
  const auto a = seed_workload(), b = seed_workload();
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 256u);
  int longs = 0;
  for (int L : a) {
    EXPECT_TRUE((L >= 8 && L <= 64) || (L >= 200 && L <= 512)) << L;
    longs += L >= 200;
  }
  EXPECT_GT(longs, 256 * 0.3);
  EXPECT_LT(longs, 256 * 0.5);
  EXPECT_NE(seed_workload(256, 0.4, 1), a);
  EXPECT_EQ(seed_workload(10, 0.0)[3] <= 64, true);
}

TEST(workload, validate_batch_names_the_problem) {
  auto c = *preset_config("bert-tiny");
  packed_batch b = synthetic_batch({3, 4});
  EXPECT_TRUE(validate_batch(c, b).ok());
  b.token_ids[5] = 40000;
  auto st = validate_batch(c, b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("token 5"), std::string::npos);
  EXPECT_FALSE(validate_batch(c, synthetic_batch({513})).ok());
}

}  // namespace
}  // namespace tessera::models
