// The kernel list (tessera/models/kernel_list.hpp) against what tiles and the timing model
// register: a kernel added to one and not the others fails here, by name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tessera/models/kernel_list.hpp"
#include "tessera/tile/kernel_registry.hpp"
#include "tessera/timing/estimator.hpp"

using namespace tessera;

namespace {

std::set<std::string> listed(bool models::kernel_traits::*flag) {
  std::set<std::string> out;
  for (const auto& k : models::all_kernels)
    if (k.*flag) out.insert(std::string(k.name));
  return out;
}

}  // namespace

TEST(KernelList, TilesRegisterExactlyTheKernelsListedAsRunningOnTiles) {
  const auto names = tile::kernel_registry::with_builtins().names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), listed(&models::kernel_traits::runs_on_tiles));
}

TEST(KernelList, TheTimingModelEstimatesExactlyTheKernelsListedWithAnEstimator) {
  const auto names = timing::estimator_registry::builtin().names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), listed(&models::kernel_traits::has_estimator));
}

TEST(KernelList, NamesAndIdsRoundTrip) {
  for (const auto& k : models::all_kernels) {
    EXPECT_EQ(models::find_kernel(k.name), k.id) << k.name;
    EXPECT_EQ(models::kernel_name(k.id), k.name);
  }
  EXPECT_FALSE(models::find_kernel("no_such_kernel").has_value());
  EXPECT_FALSE(models::find_kernel("").has_value());
}
