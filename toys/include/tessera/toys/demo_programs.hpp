// tessera/toys/demo_programs.hpp: small BSP programs that exercise compute, exchange and sync
// on a tile group: a distributed matmul split three ways, and an all-reduce.
//
//   auto d = make_matmul_demo(matmul_split::rows, /*tiles=*/4, 256, 128, 64, /*seed=*/1);
//   group.alloc_many(d.allocations);  group.load(d.programs);
//   auto r = group.run(d.batch);      // r->outputs -> assemble_matmul(d, r->outputs) == A x B
#pragma once

#include <map>
#include <vector>

#include "tessera/exchange/protocol.hpp"
#include "tessera/host/tile_group.hpp"

namespace tessera::toys {

enum class matmul_split {
  rows,     ///< A's rows over tiles; B on every tile; each tile returns its rows of C
  columns,  ///< B's columns over tiles; A on every tile; each tile returns its columns of C
  inner,    ///< the inner dimension over tiles; partial products summed by an all-reduce
};

struct demo_program {
  std::map<uint32_t, exchange::program> programs;
  std::vector<host::tile_group::alloc_request> allocations;
  host::batch_spec batch;
  /// Owns the data the allocations and inputs point into.
  std::vector<std::vector<float>> storage;
  int64_t m = 0, k = 0, n = 0;
  matmul_split split = matmul_split::rows;
  std::vector<float> a, b;  ///< the full operands, row-major
};

/// C[M,N] = A[M,K] x B[K,N] over `tiles` tiles (sizes need not divide evenly; a tile may get 0 rows).
demo_program make_matmul_demo(matmul_split split, uint32_t tiles, int64_t m, int64_t k, int64_t n, uint64_t seed);
/// C assembled from the run's outputs, [M,N] row-major.
std::vector<float> assemble_matmul(const demo_program& d, const std::vector<std::vector<float>>& outputs);
/// Every tile holds x_t (`elements` floats); afterwards every tile holds sum_t x_t.
/// The run returns each tile's result as one output.
demo_program make_allreduce_demo(uint32_t tiles, int64_t elements, uint64_t seed);
/// The all-reduce's inputs, x[t] for each tile.
std::vector<std::vector<float>> allreduce_inputs(const demo_program& d);

/// Largest |C - A x B| of an assembled C against a plain double-precision single-process product.
double matmul_reference_error(const demo_program& d, const std::vector<float>& c);
/// Largest |out - sum of the inputs| over every tile's all-reduce output.
double allreduce_reference_error(const demo_program& d, const std::vector<std::vector<float>>& outputs);

/// Deterministic values in [-1, 1) (splitmix64).
std::vector<float> demo_values(size_t n, uint64_t seed);

}  // namespace tessera::toys
