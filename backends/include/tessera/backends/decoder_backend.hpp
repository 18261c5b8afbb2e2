// tessera/backends/decoder_backend.hpp: the reference llm_backend: models::decoder_model::step
// in this process, on a paged KV cache the backend owns (one worker thread; oneDNN/OpenMP threads
// inside a step). The serving scheduler owns the block ids; the cache has as many blocks, in
// kv.kv_dtype (bf16 for a bf16 model: half the bytes a block).
//
//   auto model = std::make_shared<const models::decoder_model>(models::load_decoder("llama-tiny").value());
//   auto b = make_decoder_backend(model, {.kv = {16, 512}, .omp_threads = 2});
//   if (!b) fail(b.error());      // e.g. a cache that does not fit in memory
#pragma once

#include <memory>
#include <string>

#include "tessera/backends/llm_backend.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/kv_cache.hpp"

namespace tessera::backends {

struct decoder_backend_options {
  std::string name = "ref0";
  std::string kind = "reference";
  models::kv_layout kv{16, 256};
  int omp_threads = 1;  ///< oneDNN/OpenMP threads inside one step
};

/// KV blocks of `block_tokens` positions that `bytes` hold for this model (K and V of every layer
/// and kv head in kv_dtype: a bf16 cache gets twice fp32's blocks from the same bytes).
int32_t kv_blocks_for_bytes(const models::model_shape& shape, int32_t block_tokens, int64_t bytes,
                            models::dtype kv_dtype = models::dtype::fp32);

result<std::shared_ptr<step_fn_backend>> make_decoder_backend(std::shared_ptr<const models::decoder_model> model,
                                                             decoder_backend_options opts = {});

}  // namespace tessera::backends
