// Integration: RoBERTa / XLM-R on real tile processes against the float64 numpy goldens of
// scripts/make_roberta_goldens.py within their 1e-4: tiny-roberta-cls's logits (positions from
// pad_token_id + 1 in the tile embed kernel, pad tokens inside sequences included; the RoBERTa head
// as pooler + classifier), tiny-xlmr-embed's mean-pooled vectors (pooled on the head tile) and
// tiny-xlmr-rerank's scores, on two plans (one tile; 4 tiles with stages and lanes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/host/tile_model.hpp"
#include "tessera/models/embedding.hpp"
#include "tessera/models/forward.hpp"
#include "../models/encoder_goldens.hpp"
#include "tile_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace tessera::test_support;

namespace {

const nlohmann::json& goldens() { return goldens_file("tiny_roberta_goldens.json"); }

class RobertaOnTiles : public ::testing::TestWithParam<case_t> {};

TEST_P(RobertaOnTiles, ClassifierEmbeddingAndRerankerEqualTheGoldens) {
  struct target {
    const char* folder;
    const char* batches;
    const char* key;
  };
  double worst = 0;
  for (const target& t : {target{"tiny-roberta-cls", "classifier_batches", "logits"},
                          target{"tiny-xlmr-embed", "embed_batches", "mean"},
                          target{"tiny-xlmr-rerank", "rerank_batches", "scores"}}) {
    SCOPED_TRACE(t.folder);
    auto m = models::load_encoder(models_data_dir() + "/" + t.folder);
    ASSERT_TRUE(m) << m.error().to_string();
    placement_request req;
    req.tiles = GetParam().tiles;
    req.tile_memory = 64 << 20;
    req.token_budget = 640;
    req.max_sequences = 40;
    req.forced = GetParam().p;
    auto d = deploy_bert(*m, req);
    ASSERT_TRUE(d.ok()) << d.error().to_string();
    for (const auto& e : goldens()[t.batches]) {
      const auto b = golden_batch(e);
      for (int r = 0; r < d->model->compiled().chosen.replicas; ++r) {
        auto got = d->model->run(r, b);
        ASSERT_TRUE(got) << got.error().to_string();
        const double diff = max_abs_diff(got->logits, e[t.key].get<std::vector<double>>());
        EXPECT_LT(diff, 1e-4) << e["name"] << " replica " << r;
        worst = std::max(worst, diff);
      }
    }
  }
  std::cout << "[ roberta tiles " << test_support::plan_name(GetParam()) << " ] max |error| vs float64 goldens " << worst
            << "\n";
}

INSTANTIATE_TEST_SUITE_P(Plans, RobertaOnTiles, ::testing::Values(case_t{1, {1, 1, 1, 1}}, case_t{4, {1, 2, 2, 2}}),
                         case_name);

}  // namespace
