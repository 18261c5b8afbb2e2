// A small poplin-style planner: how a matmul is split over the tiles of a chip (private header).
//
// The [m x k] x [k x n] product is cut into mb x nb x kb blocks, one per tile; a tile receives
// its block of the left operand (activations), its block of the right operand unless it already
// holds it (stationary weights are stored once, so when mb > 1 the other copies are exchanged),
// and, when kb > 1, fp32 partial sums to reduce. The planner picks the split with the fewest
// cycles (compute + exchange + an extra sync for the reduction).
#pragma once

#include <cstdint>
#include <string>

#include "tessera/timing/dtype.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing::detail {

struct matmul_plan {
  int64_t mb = 1, nb = 1, kb = 1;  ///< splits of m, n, k
  double compute_cycles = 0;       ///< per tile, including the partial-sum reduction
  double exchange_bytes = 0;       ///< per tile received
  double total_cycles = 0;         ///< compute + exchange + extra sync, what the planner minimises
  std::string to_string() const;
};

/// Cycles of one tile multiplying [m x k] x [k x n] on its AMP unit.
double amp_cycles(double m, double n, double k, dtype t, const ipu_preset& p);

/// Best split of the product over `tiles` tiles. `right_stationary`: the right operand is a
/// weight laid out at compile time (not exchanged unless replicated across m-splits).
matmul_plan plan_matmul(int64_t m, int64_t n, int64_t k, dtype t, const ipu_preset& p, int64_t tiles,
                        bool right_stationary);

}  // namespace tessera::timing::detail
