// tessera/serving/request.hpp: one tokenized sequence on its way through router, batcher and
// backend, and the single answer it gets.
//
// Every inference_request is answered exactly once through `done`: with logits, or with a
// status (overloaded, timeout, peer_failed, cancelled ...). Whoever holds the unique_ptr owns
// that duty; code that drops a request without calling done() is a bug.
//
//   auto r = std::make_unique<inference_request>();
//   r->input.token_ids = {101, 7592, 102};
//   r->done = [](sequence_outcome o) { if (o.st.ok()) use(o.logits); };
//   status st = router.submit(r);           // on failure r is still ours: answer it
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/common/status.hpp"
#include "tessera/serving/clock.hpp"

namespace tessera::serving {

/// The answer for one sequence.
struct sequence_outcome {
  status st;                    ///< not ok: no logits
  std::vector<float> logits;    ///< num_labels values
  double queue_seconds = 0;     ///< admitted -> handed to a backend
  double inference_seconds = 0; ///< handed to a backend -> answered
  std::string backend;          ///< name of the backend that answered ("" if none)
  double modelled_seconds = 0;  ///< the modelled time of the batch it ran in (0: the backend models none)
};

using completion = std::function<void(sequence_outcome)>;

/// One sequence, tokenized, with its deadline and completion.
struct inference_request {
  uint64_t id = 0;
  backends::sequence_input input;
  time_point arrival{};                 ///< when admitted (set by the router if left zero)
  time_point deadline = time_point::max();
  time_point dispatched{};              ///< when handed to a backend (set by the batcher)
  int attempts = 0;                     ///< backends that have tried it (retry bound)
  uint64_t tried_mask = 0;              ///< bit i: backend index i has tried it
  completion done;

  int32_t length() const { return static_cast<int32_t>(input.token_ids.size()); }
  /// Calls done once (later calls are ignored) and clears it.
  void finish(sequence_outcome o) {
    if (done) {
      auto d = std::move(done);
      done = nullptr;
      d(std::move(o));
    }
  }
  void fail(status st) {
    sequence_outcome o;
    o.st = std::move(st);
    finish(std::move(o));
  }
};

using request_ptr = std::unique_ptr<inference_request>;

}  // namespace tessera::serving
