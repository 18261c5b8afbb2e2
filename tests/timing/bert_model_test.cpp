// The BERT op list and the batch models (GPU padded, IPU packed by default).
#include <gtest/gtest.h>

#include <numeric>

#include "tessera/timing/bert_model.hpp"
#include "tessera/timing/estimator.hpp"
#include "tessera/timing/superstep.hpp"
#include "test_presets.hpp"

namespace tessera::timing {
namespace {

model_shape base() { return *models::shape_preset("bert-base"); }

TEST(bert_ops, shapes_and_parameter_count) {
  EXPECT_EQ(base().parameter_count(), 109483778);  // 109,482,240 (HF bert-base-uncased with pooler) + 2-label head
  EXPECT_EQ(models::shape_preset("bert-large")->num_layers, 24);
  auto bad = models::shape_preset("gpt-2");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("bert-base"), std::string::npos);
  model_shape odd = base();
  odd.num_heads = 7;
  EXPECT_FALSE(odd.validate().ok());
}

TEST(bert_ops, one_forward_lists_every_kernel_in_order) {
  auto ops = bert_forward_ops(base(), bert_batch::uniform(2, 128), dtype::fp16);
  ASSERT_TRUE(ops) << ops.error().to_string();
  ASSERT_EQ(ops->size(), 2u + 10 * 12 + 1);
  EXPECT_EQ((*ops)[0].kernel, "embed");
  EXPECT_EQ((*ops)[2].kernel, "linear");
  EXPECT_EQ(*(*ops)[2].get("out"), 3 * 768);
  EXPECT_EQ((*ops)[3].kernel, "attention");
  EXPECT_EQ((*ops)[3].seq_lens, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(*(*ops)[7].get("out"), 3072);
  EXPECT_EQ(ops->back().kernel, "classifier");
  EXPECT_EQ(*ops->back().get("seqs"), 2);
  EXPECT_FALSE(bert_forward_ops(base(), bert_batch::uniform(1, 600), dtype::fp16));  // > max_positions
  EXPECT_FALSE(bert_forward_ops(base(), bert_batch{}, dtype::fp16));
}

TEST(bert_ops, padding_changes_tokens_and_attention) {
  bert_batch b{{100, 20}, 0};
  EXPECT_EQ(b.computed_tokens(), 120);
  EXPECT_EQ(b.padded_to_longest().computed_tokens(), 200);
  bert_batch padded{{100, 20}, 128};
  EXPECT_EQ(padded.computed_tokens(), 256);
  EXPECT_EQ(padded.real_tokens(), 120);
  EXPECT_FALSE((bert_batch{{200}, 128}).validate().ok());
}

TEST(bert_model, gpu_flops_match_the_textbook_count) {
  auto a100 = load_gpu_preset("a100-40gb");
  ASSERT_TRUE(a100);
  auto e = model_gpu_batch(*a100, base(), bert_batch::uniform(1, 128), dtype::fp16);
  ASSERT_TRUE(e) << e.error().to_string();
  const double linear = 2.0 * 128 * 12 * (4 * 768 * 768 + 2 * 768 * 3072);
  const double attention = 4.0 * 128 * 128 * 768 * 12;
  EXPECT_NEAR(e->flops, linear + attention, (linear + attention) * 0.02);
}

TEST(bert_model, gpu_pads_to_the_longest_sequence) {
  auto a100 = load_gpu_preset("a100-40gb");
  ASSERT_TRUE(a100);
  auto mixed = model_gpu_batch_seconds(*a100, base(), bert_batch{{128, 16, 40}, 0}, dtype::fp16);
  auto full = model_gpu_batch_seconds(*a100, base(), bert_batch::uniform(3, 128), dtype::fp16);
  ASSERT_TRUE(mixed && full);
  EXPECT_DOUBLE_EQ(*mixed, *full);
}

TEST(bert_model, ipu_packing_saves_the_padding) {
  auto c600 = load_ipu_preset("ipu-c600");
  ASSERT_TRUE(c600);
  std::vector<int64_t> lens = {384, 64, 64, 32, 200, 100, 16, 300};
  auto packed = model_ipu_batch(*c600, base(), bert_batch{lens, 0}, dtype::fp16);
  auto padded = model_ipu_batch(*c600, base(), bert_batch{lens, 384}, dtype::fp16);
  ASSERT_TRUE(packed && padded) << (packed ? padded.error() : packed.error()).to_string();
  EXPECT_LT(packed->seconds, 0.6 * padded->seconds);
  EXPECT_NEAR(packed->seconds, packed->compute_s + packed->sync_s + packed->exchange_s, 1e-12);
  EXPECT_EQ(packed->supersteps, 123);
  EXPECT_EQ(packed->groups, 1);
  EXPECT_NE(packed->note.find("packed"), std::string::npos) << packed->note;
  EXPECT_NE(padded->note.find("padded to 384"), std::string::npos) << padded->note;
}

TEST(bert_model, ipu_mapping_groups_and_memory) {
  auto c600 = load_ipu_preset("ipu-c600");
  ASSERT_TRUE(c600);
  auto two = model_ipu_batch(*c600, base(), bert_batch::uniform(8, 128), dtype::fp16, {1472, 736});
  ASSERT_TRUE(two) << two.error().to_string();
  EXPECT_EQ(two->groups, 2);
  EXPECT_NE(two->note.find("2 model copies x 736 tiles"), std::string::npos) << two->note;
  // One copy of bert-large fp16 (~670 MB) does not fit on 368 tiles of 624 KiB.
  auto big = model_ipu_batch(*c600, *models::shape_preset("bert-large"), bert_batch::uniform(4, 128), dtype::fp16,
                             {1472, 368});
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code(), errc::out_of_memory);
  EXPECT_FALSE(model_ipu_batch(*c600, base(), bert_batch::uniform(1, 8), dtype::fp16, {2000, 0}));
  EXPECT_FALSE(model_ipu_batch(*c600, base(), bert_batch::uniform(1, 8), dtype::fp16, {100, 200}));
}

TEST(bert_model, bigger_batches_take_longer_but_amortise) {
  auto a100 = load_gpu_preset("a100-40gb");
  auto mk2 = load_ipu_preset("ipu-mk2");
  ASSERT_TRUE(a100 && mk2);
  double g1 = *model_gpu_batch_seconds(*a100, base(), bert_batch::uniform(1, 128), dtype::fp16);
  double g32 = *model_gpu_batch_seconds(*a100, base(), bert_batch::uniform(32, 128), dtype::fp16);
  EXPECT_GT(g32, g1);
  EXPECT_LT(g32 / 32, g1);
  double i1 = *model_ipu_batch_seconds(*mk2, base(), bert_batch::uniform(1, 128), dtype::fp16);
  double i32 = *model_ipu_batch_seconds(*mk2, base(), bert_batch::uniform(32, 128), dtype::fp16);
  EXPECT_GT(i32, i1);
  EXPECT_LT(i32 / 32, i1);
  double f32 = *model_ipu_batch_seconds(*mk2, base(), bert_batch::uniform(32, 128), dtype::fp32);
  EXPECT_GT(f32, i32);
}

// model_ipu_batch costs one encoder layer and counts it `layers` times: the same number as costing
// every superstep of bert_forward_ops one by one (the definition), for odd packed and padded batches.
TEST(bert_model, ipu_layer_reuse_equals_costing_every_superstep) {
  auto mk2 = load_ipu_preset("ipu-mk2");
  ASSERT_TRUE(mk2) << mk2.error().to_string();
  for (const bert_batch& b : {bert_batch{{7, 300, 41, 128, 5}, 0}, bert_batch{{17, 230}, 384}, bert_batch::uniform(3, 64)}) {
    for (const char* name : {"bert-base", "bert-large", "bert-tiny"}) {
      auto shape = *models::shape_preset(name);
      auto ops = bert_forward_ops(shape, b, dtype::fp16);
      ASSERT_TRUE(ops);
      double cycles = 0;
      for (const auto& q : *ops) {
        auto c = estimate_spread(q, *mk2, mk2->tiles);
        ASSERT_TRUE(c) << c.error().to_string();
        cycles += c->compute_cycles + sync_cycles(*mk2) + exchange_cycles(*mk2, c->exchange_bytes);
      }
      auto s = model_ipu_batch_seconds(*mk2, shape, b, dtype::fp16);
      ASSERT_TRUE(s) << s.error().to_string();
      EXPECT_NEAR(*s, cycles_to_seconds(*mk2, cycles), 1e-12 * *s) << name;
      auto detail = model_ipu_batch(*mk2, shape, b, dtype::fp16);
      ASSERT_TRUE(detail);
      EXPECT_EQ(detail->ops.size(), ops->size()) << name;
      EXPECT_EQ(detail->supersteps, static_cast<int64_t>(ops->size())) << name;
      EXPECT_DOUBLE_EQ(detail->seconds, *s) << name;
    }
  }
}

// The GPU seconds from one layer counted `layers` times equal estimate_gpu_ops over the whole forward,
// fused (TensorRT-like) and unfused, padded and packed.
TEST(bert_model, gpu_layer_reuse_equals_costing_every_launch) {
  auto a100 = load_gpu_preset("a100-40gb");
  ASSERT_TRUE(a100);
  for (bool fusion : {true, false}) {
    gpu_preset p = *a100;
    p.fusion = fusion;
    for (const bert_batch& b : {bert_batch{{7, 300, 41, 128, 5}, 0}, bert_batch{{17, 230}, 384}, bert_batch::uniform(3, 64)}) {
      for (const char* name : {"bert-base", "bert-large", "bert-tiny"}) {
        auto shape = *models::shape_preset(name);
        auto whole = estimate_gpu_ops(p, *bert_forward_ops(shape, b, dtype::fp16));
        ASSERT_TRUE(whole);
        auto s = model_gpu_forward_seconds(p, shape, b, dtype::fp16);
        ASSERT_TRUE(s) << s.error().to_string();
        EXPECT_NEAR(*s, whole->seconds, 1e-12 * whole->seconds) << name << " fusion " << fusion;
        auto padded = model_gpu_batch(p, shape, b, dtype::fp16);
        auto padded_s = model_gpu_batch_seconds(p, shape, b, dtype::fp16);
        ASSERT_TRUE(padded && padded_s);
        EXPECT_NEAR(*padded_s, padded->seconds, 1e-12 * padded->seconds) << name << " fusion " << fusion;
      }
    }
  }
}

TEST(bert_ops, split_parts_rebuild_the_forward) {
  auto parts = bert_forward_split(base(), bert_batch{{9, 33}, 0}, dtype::fp16);
  ASSERT_TRUE(parts);
  EXPECT_EQ(parts->layers, 12);
  EXPECT_EQ(parts->head.size(), 2u);
  EXPECT_EQ(parts->layer.size(), 10u);
  EXPECT_EQ(parts->tail.size(), 1u);
  auto ops = bert_forward_ops(base(), bert_batch{{9, 33}, 0}, dtype::fp16);
  ASSERT_TRUE(ops);
  for (size_t i = 0; i < ops->size(); ++i) {
    const kernel_query& want = i < 2 ? parts->head[i] : i + 1 == ops->size() ? parts->tail[0] : parts->layer[(i - 2) % 10];
    EXPECT_EQ((*ops)[i].to_string(), want.to_string()) << i;
  }
}

}  // namespace
}  // namespace tessera::timing
