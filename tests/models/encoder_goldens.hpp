// What the encoder goldens tests share (tests/models and the same goldens on tiles in tests/host):
// a goldens file of tests/data/models read once, a golden batch as a packed batch, and the largest
// difference from a golden.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "tessera/models/batch.hpp"

namespace tessera::test_support {

/// tests/data/models under TESSERA_SOURCE_DIR (set by ctest), or the source tree this test was built from.
inline std::string models_data_dir() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(src ? src : TESSERA_TEST_SOURCE_DIR) + "/tests/data/models";
}

/// tests/data/models/<file>, parsed once (from any thread).
inline const nlohmann::json& goldens_file(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::ifstream f(models_data_dir() + "/" + file);
    it = cache.emplace(file, nlohmann::json::parse(f)).first;
  }
  return it->second;
}

/// A goldens entry's sequences ("token_ids" cut by "lengths", with "token_type_ids" where the
/// entry has them) as one packed batch.
inline models::packed_batch golden_batch(const nlohmann::json& e) {
  models::packed_batch b;
  const auto ids = e["token_ids"].get<std::vector<int32_t>>();
  const bool typed = e.contains("token_type_ids");
  const auto types = typed ? e["token_type_ids"].get<std::vector<int32_t>>() : std::vector<int32_t>{};
  size_t at = 0;
  for (int len : e["lengths"].get<std::vector<int>>()) {
    const size_t n = static_cast<size_t>(len);
    if (typed) b.append(std::span(ids).subspan(at, n), std::span(types).subspan(at, n));
    else b.append(std::span(ids).subspan(at, n));
    at += n;
  }
  return b;
}

/// The largest |got - want|; a failed expectation unless the sizes agree.
template <class T>
double max_abs_diff(const std::vector<float>& got, const std::vector<T>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
  return worst;
}

}  // namespace tessera::test_support
