// tessera/backends/gpu_llm.hpp: the GPU baseline serving a decoder (tessera-gpu --serve). One process
// holds the model and its paged KV cache in one shared memory, as a GPU does, and runs each
// scheduler step with the reference decoder (models::decoder_model::step); every step is also
// costed on a GPU preset by the LLM step model (timing/llm_step.hpp: weight and KV bytes against
// HBM bandwidth, FLOPs against the sustained rate, launches), which the engine sums into its
// modelled clock (TTFT, inter-token and end-to-end latency on both clocks). Static and continuous
// batching are the engine's (--llm-batching), over the same backend.
//
//   auto model = std::make_shared<const models::decoder_model>(*models::load_decoder("llama-tiny"));
//   auto b = make_gpu_llm_backend(model, {.system = "a100-40gb", .kv = {16, 4096}});
//   // (*b)->submit(batch, done): done's step_result carries wall_seconds and modelled_seconds
#pragma once

#include <memory>
#include <string>

#include "tessera/backends/llm_backend.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/kv_cache.hpp"
#include "tessera/timing/llm_step.hpp"

namespace tessera::backends {

struct gpu_llm_options {
  std::string name = "gpu0";
  std::string system = "a100-40gb";  ///< an LLM system spec of the timing model (timing/llm_system.hpp)
  models::kv_layout kv{16, 4096};
  int omp_threads = 1;               ///< oneDNN/OpenMP threads inside one step
};

/// The step model's view of one scheduler step: decodes (one token with its context) and prompt
/// chunks (tokens, context, whether the chunk ends its prompt).
timing::llm_step_batch step_shape(const models::step_batch& b);

/// Errors: a system spec the timing model cannot build for this decoder, a KV cache that does not fit.
result<std::shared_ptr<llm_backend>> make_gpu_llm_backend(std::shared_ptr<const models::decoder_model> model,
                                                                    gpu_llm_options opts = {});

}  // namespace tessera::backends
