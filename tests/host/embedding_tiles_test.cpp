// Integration: an embedding model (the seeded sentence-transformers folder tiny-embed) on real
// tile processes. The head tile pools the last layer's rows with the "pool" kernel, so the host
// receives [sequences, hidden] floats; for every pooling mode and several plans they equal the
// single-process reference_embed within 1e-4 (fp32; the tile path sums in another order) and the
// float64 numpy goldens within their 1e-4 (measured 2.5e-6); bf16 tiles stay within 0.03 of the
// goldens (measured 0.018). Padded batches through the tile backend (filler sequences) give the
// goldens too. Every token's last-layer row (/embed_all: run(..., token_rows)) comes from the head
// tile packed, equal to the goldens' token rows within 1e-4 on every plan (bf16: 0.05, the bound
// for rows not averaged over tokens); through the tile backend, a padded batch mixing sequences
// that ask for them with pooled ones answers each its own rows. The one-label reranker runs the
// classifier path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "tessera/host/tile_backend.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/embedding.hpp"
#include "tessera/models/forward.hpp"
#include "../models/encoder_goldens.hpp"
#include "tile_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace tessera::test_support;

namespace {

const nlohmann::json& goldens() { return goldens_file("tiny_embed_goldens.json"); }

tile_deployment deploy(const models::bert_model& m, const case_t& c, models::dtype dt) {
  placement_request req;
  req.tiles = c.tiles;
  req.tile_memory = 64 << 20;
  req.token_budget = 640;
  req.max_sequences = 40;
  req.forced = c.p;
  req.dtype = dt;
  auto d = deploy_bert(m, req);
  EXPECT_TRUE(d.ok()) << d.error().to_string();
  if (!d.ok()) return {};
  return std::move(*d);
}

class EmbeddingOnTiles : public ::testing::TestWithParam<case_t> {};

TEST_P(EmbeddingOnTiles, PooledVectorsEqualReferenceAndGoldensForEveryMode) {
  auto loaded = models::load_encoder(models_data_dir() + "/tiny-embed");
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  double worst_ref = 0, worst_golden = 0;
  for (const auto& [name, unused] : goldens()["embed_batches"][0]["pooled"].items()) {
    models::bert_model m = *loaded;
    m.embedding.pooling = *models::pooling_from_name(name);
    auto d = deploy(m, GetParam(), models::dtype::fp32);
    ASSERT_TRUE(d.model);
    EXPECT_EQ(d.model->compiled().output_width(), m.config.hidden_size);
    EXPECT_NE(d.model->compiled().describe().find("pooled"), std::string::npos) << "the head tile's pooled tensor";
    for (const auto& e : goldens()["embed_batches"]) {
      const auto b = golden_batch(e);
      const auto want = models::reference_embed(m, b);
      for (int r = 0; r < d.model->compiled().chosen.replicas; ++r) {
        auto got = d.model->run(r, b);
        ASSERT_TRUE(got) << got.error().to_string();
        ASSERT_EQ(got->logits.size(), static_cast<size_t>(b.num_seqs() * m.config.hidden_size)) << "only pooled vectors";
        const double vs_ref = max_abs_diff(got->logits, want);
        const double vs_golden = max_abs_diff(got->logits, e["pooled"][name].get<std::vector<double>>());
        EXPECT_LT(vs_ref, 1e-4) << name << " replica " << r;
        EXPECT_LT(vs_golden, 1e-4) << name << " vs goldens";
        worst_ref = std::max(worst_ref, vs_ref);
        worst_golden = std::max(worst_golden, vs_golden);
      }
    }
  }
  // Every token's row, from each replica's head tile: all of a batch's tokens, then a prefix.
  auto d = deploy(*loaded, GetParam(), models::dtype::fp32);
  ASSERT_TRUE(d.model);
  double worst_rows = 0;
  for (const auto& e : goldens()["embed_batches"]) {
    const auto b = golden_batch(e);
    const auto want = e["tokens"].get<std::vector<double>>();
    const int64_t H = loaded->config.hidden_size;
    for (int r = 0; r < d.model->compiled().chosen.replicas; ++r) {
      auto got = d.model->run(r, b, b.num_tokens());
      ASSERT_TRUE(got) << got.error().to_string();
      EXPECT_EQ(got->logits.size(), static_cast<size_t>(b.num_seqs() * H)) << "the pooled vectors too";
      worst_rows = std::max(worst_rows, max_abs_diff(got->token_rows, want));
      auto part = d.model->run(r, b, 1);
      ASSERT_TRUE(part) << part.error().to_string();
      worst_rows = std::max(worst_rows, max_abs_diff(part->token_rows, std::vector<double>(want.begin(), want.begin() + H)));
    }
    EXPECT_FALSE(d.model->run(0, b, b.num_tokens() + 1).ok()) << "more rows than the batch has";
  }
  EXPECT_LT(worst_rows, 1e-4);
  std::cout << "[ fp32 tiles " << test_support::plan_name(GetParam()) << " ] every token's row: max |error| vs goldens "
            << worst_rows << "\n";
  std::cout << "[ fp32 tiles " << test_support::plan_name(GetParam()) << " ] every pooling mode: max |error| vs goldens "
            << worst_golden << ", vs reference_embed " << worst_ref << "\n";
}

INSTANTIATE_TEST_SUITE_P(Plans, EmbeddingOnTiles,
                         ::testing::Values(case_t{1, {1, 1, 1, 1}}, case_t{4, {1, 2, 2, 2}}, case_t{2, {2, 1, 1, 1}}),
                         case_name);

TEST(EmbeddingOnTiles, Bf16TilesStayNearTheGoldens) {
  ASSERT_TRUE(models::check_dtype_supported(models::dtype::bf16).ok());
  auto m = models::load_encoder(models_data_dir() + "/tiny-embed");
  ASSERT_TRUE(m) << m.error().to_string();
  auto d = deploy(*m, case_t{2, {1, 1, 2, 1}}, models::dtype::bf16);
  ASSERT_TRUE(d.model);
  for (const auto& e : goldens()["embed_batches"]) {
    auto got = d.model->run(0, golden_batch(e));
    ASSERT_TRUE(got) << got.error().to_string();
    const double diff = max_abs_diff(got->logits, e["pooled"]["mean"].get<std::vector<double>>());
    EXPECT_LT(diff, 0.03);
    auto rows = d.model->run(0, golden_batch(e), golden_batch(e).num_tokens());  // sent as bf16, widened on the host
    ASSERT_TRUE(rows) << rows.error().to_string();
    const double rows_diff = max_abs_diff(rows->token_rows, e["tokens"].get<std::vector<double>>());
    EXPECT_LT(rows_diff, 0.05);
    std::cout << "[ bf16 tiles ] " << e["name"].get<std::string>() << ": max |error| vs goldens " << diff
              << " (bound 0.03), every token's row " << rows_diff << " (bound 0.05)\n";
  }
}

TEST(RerankerOnTiles, ScoresEqualGoldens) {
  auto m = models::load_model(models_data_dir() + "/tiny-rerank");
  ASSERT_TRUE(m) << m.error().to_string();
  auto d = deploy(*m, case_t{2, {1, 2, 1, 1}}, models::dtype::fp32);
  ASSERT_TRUE(d.model);
  for (const auto& e : goldens()["rerank_batches"]) {
    auto got = d.model->run(0, golden_batch(e));
    ASSERT_TRUE(got) << got.error().to_string();
    EXPECT_LT(max_abs_diff(got->logits, e["scores"].get<std::vector<double>>()), 1e-4);
  }
}

}  // namespace

// Through the tile backend (what tessera-host serves from): a padded batch (filler sequences of
// [PAD] up to padded_length, run in budget-sized pieces, their vectors dropped) answers the same
// pooled vectors as the goldens; with every other sequence asking every token's vector, those get
// their token rows and the others their pooled vector, in order.
TEST(EmbeddingOnTiles, TileBackendPaddedBatchesAndEveryTokenRows) {
  auto m = models::load_encoder(models_data_dir() + "/tiny-embed");
  ASSERT_TRUE(m) << m.error().to_string();
  auto d = deploy(*m, case_t{2, {1, 2, 1, 1}}, models::dtype::fp32);
  ASSERT_TRUE(d.model);
  tile_backend backend(std::move(d.model), "tiles0");
  EXPECT_EQ(backend.info().num_labels, m->config.hidden_size);
  auto submit = [&](backends::batch_request req) {
    std::promise<backends::batch_result> p;
    auto f = p.get_future();
    backend.submit(std::move(req), [&p](backends::batch_result r) { p.set_value(std::move(r)); });
    return f.get();
  };
  for (const auto& e : goldens()["embed_batches"]) {
    const auto b = golden_batch(e);
    backends::batch_request req;
    req.layout = backends::batch_layout::padded;
    req.padded_length = b.max_seq_len();
    for (int s = 0; s < b.num_seqs(); ++s) {
      backends::sequence_input in;
      const auto at = static_cast<size_t>(b.seq_offsets[static_cast<size_t>(s)]);
      in.token_ids.assign(b.token_ids.begin() + static_cast<std::ptrdiff_t>(at),
                          b.token_ids.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(b.seq_len(s))));
      in.token_type_ids.assign(b.token_type_ids.begin() + static_cast<std::ptrdiff_t>(at),
                               b.token_type_ids.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(b.seq_len(s))));
      req.sequences.push_back(std::move(in));
    }
    auto r = submit(req);
    ASSERT_TRUE(r.st.ok()) << r.st.to_string();
    EXPECT_EQ(r.num_labels, m->config.hidden_size);
    const double diff = max_abs_diff(r.logits, e["pooled"]["mean"].get<std::vector<double>>());
    EXPECT_LT(diff, 1e-4) << e["name"];
    std::cout << "[ padded on tiles ] " << e["name"].get<std::string>() << ": max |error| " << diff << "\n";
    // Mixed: odd sequences ask for every token's row.
    const auto pooled = e["pooled"]["mean"].get<std::vector<double>>();
    const auto tokens = e["tokens"].get<std::vector<double>>();
    const size_t H = static_cast<size_t>(m->config.hidden_size);
    std::vector<double> want;
    for (int s = 0; s < b.num_seqs(); ++s) {
      const bool every = s % 2 == 1;
      req.sequences[static_cast<size_t>(s)].every_token = every;
      const size_t at = every ? static_cast<size_t>(b.seq_offsets[static_cast<size_t>(s)]) * H : static_cast<size_t>(s) * H;
      const size_t n = every ? static_cast<size_t>(b.seq_len(s)) * H : H;
      want.insert(want.end(), (every ? tokens : pooled).begin() + static_cast<std::ptrdiff_t>(at),
                  (every ? tokens : pooled).begin() + static_cast<std::ptrdiff_t>(at + n));
    }
    auto mixed = submit(req);
    ASSERT_TRUE(mixed.st.ok()) << mixed.st.to_string();
    const double mixed_diff = max_abs_diff(mixed.logits, want);
    EXPECT_LT(mixed_diff, 1e-4) << e["name"];
    std::cout << "[ padded on tiles, every other sequence's token rows ] " << e["name"].get<std::string>()
              << ": max |error| " << mixed_diff << "\n";
  }
  backend.stop();
}
