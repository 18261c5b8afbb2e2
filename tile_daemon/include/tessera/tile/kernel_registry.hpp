// tessera/tile/kernel_registry.hpp: kernels by id (models/kernel_list.hpp), as a tile's compute
// sets call them.
//
// A kernel is a function over tensors in tile memory plus its typed parameters
// (models/kernel_params.hpp; read with kernel_args::params_as). Kernels
// know nothing of supersteps, exchange or placement (PopLibs' codelets); the registry checks
// arity when a program is loaded and the kernel checks shapes when it runs. A shape mistake in
// a program is a status (the host compiled something wrong), never an abort of the tile.
//
//   kernel_registry reg = kernel_registry::with_builtins();
//   reg.add(models::kernel_id::scale, {.min_inputs = 1}, [](const kernel_args& a) {
//     auto p = a.params_as<models::scale_params>();  if (!p) return p.error();  ...  });
//   status st = reg.run(call, memory, ctx);
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>

#include "tessera/common/status.hpp"
#include "tessera/exchange/protocol.hpp"
#include "tessera/models/kernel_list.hpp"
#include "tessera/models/kernel_params.hpp"
#include "tessera/tile/tile_memory.hpp"

namespace tessera::tile {

/// What a kernel may know of the batch being run.
struct kernel_context {
  uint32_t tile_id = 0;
  int64_t active_tokens = 0;            ///< real tokens of this batch (rows of token tensors)
  std::span<const int32_t> seq_lengths;  ///< real lengths of the batch's sequences
  std::span<const int32_t> seq_offsets;  ///< prefix sums, size seq_lengths.size() + 1
  const exchange::batch_rows* rows = nullptr;  ///< micro-batch row ranges of this batch
};

struct kernel_args {
  const kernel_context& ctx;
  std::span<tile_tensor* const> inputs;
  std::span<tile_tensor* const> outputs;
  std::span<const int64_t> params;  ///< the parameter struct in wire form (read it with params_as)
  std::span<const float> fparams;

  /// The call's parameters as the kernel's struct (checked counts and ranges).
  template <class P>
  result<P> params_as() const {
    P p;
    if (auto err = models::from_wire(p, params, fparams)) return status::invalid("parameters: " + *err);
    return p;
  }
};

using kernel_fn = std::function<status(const kernel_args&)>;

struct kernel_signature {
  size_t min_inputs = 0;
  size_t max_inputs = 64;
  size_t min_outputs = 1;
  size_t max_outputs = 1;
  /// The kernel reads and writes bf16 tensors too (it checks each tensor's dtype); a call of any
  /// other kernel on a bf16 tensor is refused with a status before it runs.
  bool bf16 = false;
  /// The same for i8 tensors (an int8 BERT's Linear matrices and FFN activations).
  bool int8 = false;
};

class kernel_registry {
 public:
  /// A registry holding copy, add, scale, reduce_sum, matmul and (bert_kernels.cpp) BERT's kernels.
  static kernel_registry with_builtins();

  /// Registers the kernel `id` of tessera's list (tessera/models/kernel_list.hpp).
  void add(models::kernel_id id, kernel_signature sig, kernel_fn fn);
  bool has(models::kernel_id id) const { return kernels_.count(id) != 0; }
  /// The registered kernels' names, in list order.
  std::vector<std::string> names() const;

  /// Checks that the kernel exists and the call's arity fits (at program load).
  status check(const exchange::kernel_call& call) const;
  /// Runs a call; tensors are looked up in `memory` by id.
  status run(const exchange::kernel_call& call, tile_memory& memory, const kernel_context& ctx) const;

 private:
  struct entry {
    kernel_signature sig;
    kernel_fn fn;
  };
  std::map<models::kernel_id, entry> kernels_;
};

/// Registers the elementary kernels (copy, add, scale, reduce_sum, matmul).
void register_basic_kernels(kernel_registry& reg);
/// Registers BERT's kernels (embed, linear, layer_norm, gelu, attention, classifier, ...).
void register_bert_kernels(kernel_registry& reg);
/// Registers the decoders' kernels (dec_embed, dec_norm, dec_attention over the paged KV cache, ...).
void register_decoder_kernels(kernel_registry& reg);

}  // namespace tessera::tile
