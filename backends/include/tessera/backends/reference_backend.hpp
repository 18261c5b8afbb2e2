// tessera/backends/reference_backend.hpp: the in-process engine over models::bert_model (the
// reference forward on a few worker threads). tessera-serve and tessera-host serve it over
// HTTP; the GPU baseline process (tessera-gpu) serves the same engine over its wire protocol.
//
//   auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
//   auto backend = make_reference_backend(model, {.name = "gpu0", .kind = "gpu", .threads = 2});
//   std::vector<float> want = reference_logits(*model, seq);   // the oracle of one sequence
//
// Layouts: packed batches run models::reference_forward; padded batches run
// models::padded_forward, padded to request.padded_length (a dummy row of that length makes the
// rectangle as wide as the batching policy asked; its logits are dropped). Forwards, packed and
// padded, run in the model's dtype (models::set_dtype).
// An embedding model (models::encoder_task::embedding) answers its pooled vectors (num_labels is
// its hidden size; not normalized), or every token's vector for a sequence asking every_token.
// Worker threads run forwards in parallel (models::reference_forward is thread-safe since its
// runtime-M matmul; tests/backends/reference_backend_test.cpp RawForwardsAreThreadSafe guards
// it); serialize_forwards makes them take turns process-wide, should that ever regress.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/backends/thread_pool_backend.hpp"
#include "tessera/models/model.hpp"

namespace tessera::backends {

struct reference_backend_options {
  std::string name = "ref0";
  std::string kind = "reference";   ///< "gpu" when it stands for the GPU baseline in routing
  int threads = 1;                  ///< worker threads (batches in parallel)
  int omp_threads = 1;              ///< oneDNN/OpenMP threads inside one forward
  int32_t token_budget = 0;         ///< advertised to the batcher (0 = none)
  int32_t max_batch_sequences = 0;  ///< advertised to the batcher (0 = none)
  bool serialize_forwards = false;  ///< take turns process-wide (a safety switch should
                                    ///< models::reference_forward regress on thread safety)
};

std::shared_ptr<thread_pool_backend> make_reference_backend(
    std::shared_ptr<const models::bert_model> model, reference_backend_options opts = {});

/// The reference logits of one sequence alone (the oracle of the serving tests).
std::vector<float> reference_logits(const models::bert_model& model, const sequence_input& s);

}  // namespace tessera::backends
