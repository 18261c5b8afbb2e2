// What the tile tests share: a plan on N tiles as a test parameter (and its name), the odd
// Hugging Face checkpoint, and the odd GQA decoder shape.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tessera/host/placement.hpp"
#include "tessera/models/shape.hpp"

namespace tessera::test_support {

/// A plan forced on `tiles` tile processes.
struct case_t {
  int tiles;
  host::plan p;
};

/// "N4_R1S2W2M4": a gtest-safe name of a case.
inline std::string plan_name(const case_t& c) {
  const host::plan& p = c.p;
  return "N" + std::to_string(c.tiles) + "_R" + std::to_string(p.replicas) + "S" + std::to_string(p.stages) + "W" +
         std::to_string(p.width) + "M" + std::to_string(p.micro_batches);
}
inline std::string case_name(const ::testing::TestParamInfo<case_t>& info) { return plan_name(info.param); }

/// tests/data/models/tiny-odd: 6 heads of 16, FFN 200, 3 labels, 3 layers.
inline std::string odd_checkpoint() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(src ? src : TESSERA_TEST_SOURCE_DIR) + "/tests/data/models/tiny-odd";
}

/// llama-tiny cut odd: 3 layers, 6 query heads over 2 kv heads (GQA), FFN 200, vocabulary 500.
inline models::model_shape gqa3() {
  auto s = models::shape_preset("llama-tiny");
  EXPECT_TRUE(s);
  s->num_layers = 3;
  s->hidden_size = 96;
  s->num_heads = 6;
  s->num_kv_heads = 2;
  s->intermediate_size = 200;
  s->vocab_size = 500;
  s->max_position_embeddings = 256;
  return *s;
}

}  // namespace tessera::test_support
