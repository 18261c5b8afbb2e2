// A computed virtual run on a real tile group (local tessera-tile processes): logits checked
// against the reference forward, modelled times equal to a timing-only replay.
#include <gtest/gtest.h>

#include "tessera/experiment/compute.hpp"

using namespace tessera;
using namespace tessera::experiment;

TEST(experiment_tiles, computed_on_tile_processes_matches_reference_and_replay) {
  compute_options co;
  co.model = "bert-tiny";
  co.tiles = 2;
  auto pool = compute_pool::start(co);
  ASSERT_TRUE(pool) << pool.error().to_string();
  experiment_options o;
  o.saturation_requests = 100;
  o.latency_requests = 100;
  o.computed_requests = 16;
  o.long_shares = {0.4};
  o.configs = {"tiles-packed", "tiles-static"};
  auto rows = run_seed_experiment(o, (*pool)->provider(), (*pool)->model());
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 2u);
  for (const auto& r : *rows) {
    EXPECT_EQ(r.computed, 16) << r.config;
    EXPECT_EQ(r.compute_note, "tiles") << r.config;
    EXPECT_TRUE(r.modelled_match) << r.config;
    EXPECT_LE(r.max_logit_error, 1e-4) << r.config;
  }
}
