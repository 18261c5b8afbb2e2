// tessera/host/program_timing.hpp: the modelled time of a compiled tile program on an IPU preset.
//
// The emulator's tiles report wall-clock counters; this header gives the second clock of
// docs/timing.md for the same program: every kernel_call of every superstep and tile becomes
// timing::kernel_query's (shapes from the tensors the tile holds, token counts from the rows of
// the call's micro-batch, attention with the lengths of that micro-batch's sequences), every
// send op's slice becomes bytes received by its peer, and each superstep costs
//   slowest compute + sync (when the superstep syncs) + slowest exchange
// with each emulated tile standing for its share of the chip (timing::make_tile_share).
//
//   auto mk2 = timing::load_ipu_preset("ipu-mk2");
//   auto t = time_compiled(compiled, /*replica=*/0, batch_seq_lengths, *mk2);
//   std::cout << t->share.note << ": " << t->total_seconds * 1e3 << " ms\n";
//
// Kernel mapping (tile kernel -> timing kernels; n = rows of the call's micro-batch):
//   embed             embed{tokens=n, hidden} + layer_norm{tokens=n, hidden}
//   linear            linear{tokens=n, in, out} (+ gelu{elements=n*out} when params[2] == 1;
//                     a lane with in == 0 writes only the bias: copy{elements=n*out})
//   attention         attention{heads, head_dim} with the micro-batch's sequence lengths
//   bias_residual_ln  add{elements=r*H} (bias) + add{elements=r*H} (residual) + layer_norm{tokens=r, hidden=H},
//                     r = rows of this lane's part of the micro-batch
//   classifier        classifier{seqs, hidden, labels} over the micro-batch's sequences
//   copy/add/scale    {elements = output elements}; reduce_sum{elements = input elements, outputs}
//   matmul            matmul{m, n, k} from A [m, k] and B [k, n]
// A kernel whose tensors the plan does not describe (demo programs whose inputs the host
// allocated) is listed in `unmodelled` and costs nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/exchange/protocol.hpp"
#include "tessera/host/placement.hpp"
#include "tessera/timing/kernel_query.hpp"
#include "tessera/timing/preset.hpp"
#include "tessera/timing/superstep.hpp"

namespace tessera::host {

struct program_timing_options {
  /// Compute dtype of the modelled chip. The emulator computes fp32; the IPU figures timing is
  /// fitted on are fp16, so fp16 is the default.
  timing::dtype compute = timing::dtype::fp16;
  /// Bytes of one exchanged element on the modelled chip (the emulator sends 4-byte floats;
  /// 2 models fp16 activations on the wire).
  double exchange_element_bytes = 2;
  /// How many emulated tiles stand for the chip; 0 = the tiles of the program.
  int64_t emulated_tiles = 0;
};

/// One tile in one superstep, in modelled time.
struct tile_step_timing {
  uint32_t tile = 0;
  std::vector<timing::kernel_query> queries;  ///< what was costed
  std::vector<std::string> kernels;           ///< the tile kernels of the compute set, by name
  double compute_cycles = 0;
  double bytes_received = 0;  ///< modelled bytes (exchange_element_bytes per element)
  double bytes_sent = 0;
  double exchange_cycles = 0;
};

/// One superstep of a program, in modelled time.
struct superstep_timing {
  size_t index = 0;
  bool sync = true;
  std::vector<tile_step_timing> tiles;  ///< in the program's tile order
  double compute_cycles = 0;            ///< slowest tile
  double sync_cycles = 0;               ///< 0 when the superstep does not sync
  double exchange_cycles = 0;           ///< slowest tile
  double total_cycles = 0;
  double seconds = 0;
  uint32_t slowest_compute_tile = 0;    ///< tile id
  uint32_t slowest_exchange_tile = 0;   ///< tile id
};

/// A whole program (one replica, one batch) in modelled time.
struct program_timing {
  std::string preset;
  timing::tile_share share;            ///< share.note says what each emulated tile stands for
  double clock_hz = 0;
  std::vector<superstep_timing> steps;
  double total_cycles = 0;
  double total_seconds = 0;
  std::vector<std::string> unmodelled;  ///< "tile 3 step 0: matmul (tensor 7 not in the plan)"
  /// Modelled seconds of superstep `step` on tile `tile` (compute + sync + exchange of that tile
  /// within the superstep; the superstep's own length is steps[step].seconds).
  double tile_seconds(size_t step, uint32_t tile) const;
};

/// Tensors a tile holds, by id (weights and temporaries).
using tensor_table = std::map<uint32_t, std::map<uint32_t, exchange::tensor_desc>>;  // tile -> id -> desc

/// The rows of a batch of these sequence lengths (prefix offsets), as tiles see them.
exchange::batch_rows rows_of(const std::vector<int32_t>& seq_lengths);

/// Elements a slice covers for this batch, without tile memory (the tile resolves the same).
uint64_t slice_elements(const exchange::slice_ref& s, const exchange::batch_rows& rows);

/// The timing queries of one kernel call on one tile; not_found when a tensor it needs is not in
/// `tensors` (the caller lists it as unmodelled), invalid_argument for malformed params.
result<std::vector<timing::kernel_query>> kernel_queries(const exchange::kernel_call& call,
                                                         const std::map<uint32_t, exchange::tensor_desc>& tensors,
                                                         const exchange::batch_rows& rows, timing::dtype type);

/// Models one batch of `seq_lengths` through `programs` (tile -> program, as one replica).
result<program_timing> time_program(const std::map<uint32_t, exchange::program>& programs, const tensor_table& tensors,
                                    const std::vector<int32_t>& seq_lengths, const timing::ipu_preset& preset,
                                    const program_timing_options& opt = {});

/// The tensors of a compiled model, per tile (weight shards + program temporaries).
tensor_table tensors_of(const compiled_model& c);

/// Models one batch on replica `replica` of a compiled model. Each emulated tile of the whole
/// compiled model (all replicas) stands for its share of the chip unless opt.emulated_tiles says otherwise.
result<program_timing> time_compiled(const compiled_model& c, int replica, const std::vector<int32_t>& seq_lengths,
                                     const timing::ipu_preset& preset, program_timing_options opt = {});

}  // namespace tessera::host
