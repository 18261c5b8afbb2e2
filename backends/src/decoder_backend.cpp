// The reference decoder backend. See decoder_backend.hpp.
#include "tessera/backends/decoder_backend.hpp"

#include "tessera/models/kernels.hpp"

namespace tessera::backends {

int32_t kv_blocks_for_bytes(const models::model_shape& shape, int32_t block_tokens, int64_t bytes,
                            models::dtype kv_dtype) {
  return models::kv_layout::blocks_in(bytes, block_tokens, shape.num_layers, shape.num_kv_heads, shape.head_dim(),
                                      kv_dtype);
}

result<std::shared_ptr<step_fn_backend>> make_decoder_backend(std::shared_ptr<const models::decoder_model> model,
                                                             decoder_backend_options o) {
  TESSERA_RETURN_IF_ERROR(o.kv.validate());
  auto cache = models::paged_kv_cache::make(model->shape(), o.kv);
  if (!cache) return cache.error();
  auto kv = std::make_shared<models::paged_kv_cache>(std::move(*cache));
  llm_backend_info info{.name = o.name, .kind = o.kind, .block_tokens = o.kv.block_tokens,
                        .num_blocks = o.kv.num_blocks, .vocab_size = model->shape().vocab_size,
                        .max_positions = model->shape().max_position_embeddings};
  const int omp = std::max(1, o.omp_threads);
  bool threads_set = false;
  auto step = [model, kv, omp, threads_set](const step_batch& batch) mutable {
    if (!threads_set) {  // the worker thread's OpenMP setting (a per-thread ICV)
      models::set_num_threads(omp);
      threads_set = true;
    }
    return model->step(batch, *kv);
  };
  return std::make_shared<step_fn_backend>(info, std::move(step));
}

}  // namespace tessera::backends
