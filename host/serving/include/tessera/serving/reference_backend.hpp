// tessera/serving/reference_backend.hpp: the in-process engine over models::bert_model (the
// reference forward on a few worker threads), and the adapters from tessera_models to the
// serving interfaces. The GPU baseline process serves the same engine over its wire protocol.
// Compiled only when tessera_models is part of the build (TESSERA_SERVING_HAS_MODELS).
//
//   auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
//   auto backend = make_reference_backend(model, {.name = "gpu0", .kind = "gpu", .threads = 2});
//   auto tok = make_model_tokenizer(*model).value();
//   model_info info = model_info_of(*model, "bert-tiny");
//
// Layouts: packed batches run models::reference_forward; padded batches run
// models::padded_forward, padded to request.padded_length (a dummy row of that length makes the
// rectangle as wide as the batching policy asked; its logits are dropped).
// Worker threads run forwards in parallel (models::reference_forward is thread-safe since its
// runtime-M matmul; tests/serving/reference_backend_test.cpp RawForwardsAreThreadSafe guards
// it); serialize_forwards makes them take turns process-wide, should that ever regress.
#pragma once

#include <memory>
#include <string>

#include "tessera/common/status.hpp"
#include "tessera/models/model.hpp"
#include "tessera/serving/service.hpp"
#include "tessera/serving/thread_pool_backend.hpp"
#include "tessera/serving/tokenizer.hpp"

namespace tessera::serving {

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

/// The model's WordPiece tokenizer behind the serving interface. Needs a vocab.
result<std::shared_ptr<const tokenizer>> make_model_tokenizer(const models::bert_model& model);

/// Labels, max input length and vocab size of a model, named `model_id`.
model_info model_info_of(const models::bert_model& model, std::string model_id);

/// The reference logits of one sequence alone (the oracle of the serving tests).
std::vector<float> reference_logits(const models::bert_model& model, const host::sequence_input& s);

}  // namespace tessera::serving
