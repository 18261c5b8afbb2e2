// The validation table: every row within its stated tolerance of the public figure.
#include <gtest/gtest.h>

#include <algorithm>

#include "tessera/timing/validation.hpp"

namespace tessera::timing {
namespace {

TEST(validation, every_row_within_tolerance) {
  auto rows = validation_table();
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_GE(rows->size(), 15u);
  for (const auto& r : *rows) {
    EXPECT_TRUE(r.within_tolerance()) << r.name << ": model " << r.model << " " << r.unit << " vs " << r.reference
                                      << " (" << r.error_percent() << "%, tolerance " << r.tolerance_percent << "%)";
    EXPECT_FALSE(r.source.empty()) << r.name;
  }
}

TEST(validation, tolerances_are_the_stated_ones) {
  auto rows = validation_table();
  ASSERT_TRUE(rows);
  int gpu = 0, ipu = 0;
  for (const auto& r : *rows) {
    if (r.name.starts_with("a100-40gb BERT")) {
      ++gpu;
      EXPECT_EQ(r.tolerance_percent, 15);
    }
    if (r.name.starts_with("ipu-c600 BERT")) {
      ++ipu;
      EXPECT_EQ(r.tolerance_percent, 25);
    }
  }
  EXPECT_EQ(gpu, 4);
  EXPECT_EQ(ipu, 1);
}

TEST(validation, byte_mlperf_lengths_have_the_published_mean) {
  auto lens = byte_mlperf_ipu_seq_lens();
  ASSERT_EQ(lens.size(), 40u);
  double mean = 0;
  for (auto l : lens) mean += double(l) / 40;
  EXPECT_NEAR(mean, 177, 1);  // int(N(172, 172)) clipped to [1, 384] has mean ~177
  EXPECT_LE(*std::max_element(lens.begin(), lens.end()), 384);
}

TEST(validation, markdown_has_a_row_per_case) {
  auto rows = validation_table();
  ASSERT_TRUE(rows);
  std::string md = validation_markdown(*rows);
  EXPECT_NE(md.find("| case |"), std::string::npos);
  EXPECT_EQ(std::count(md.begin(), md.end(), '\n'), static_cast<long>(rows->size() + 2));
}

}  // namespace
}  // namespace tessera::timing
