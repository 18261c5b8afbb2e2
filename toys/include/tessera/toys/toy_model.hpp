// tessera/toys/toy_model.hpp: a deterministic stand-in for tokenizer and model, for tests and
// for measuring the HTTP front door alone (tessera-serve --model toy).
//
// toy tokenizer: lower-cases, splits on spaces and punctuation, one id per word
// (FNV-1a hash into [1000, 30522)); [CLS]=101, [SEP]=102. toy forward: logits of a sequence
// depend only on its own tokens (never on the rest of the batch or the layout), so a batched
// answer must equal toy_logits() of the sequence alone.
//
//   auto tok = make_toy_tokenizer();
//   auto b = make_toy_backend({.name = "toy0", .kind = "gpu"}, 2);
//   std::vector<float> want = toy_logits(tok->encode("hi there").value(), 2);
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/backends/thread_pool_backend.hpp"
#include "tessera/serving/tokenizer.hpp"

namespace tessera::toys {

std::shared_ptr<const serving::tokenizer> make_toy_tokenizer();

/// The toy model's logits for one sequence (num_labels values).
std::vector<float> toy_logits(const backends::sequence_input& s, int32_t num_labels);

/// A thread_pool_backend running the toy model; `per_token` of busy work per computed token
/// (padding included) imitates a model's cost.
std::shared_ptr<backends::thread_pool_backend> make_toy_backend(
    backends::backend_info info, int threads,
    std::chrono::nanoseconds per_token = std::chrono::nanoseconds(0));

}  // namespace tessera::toys
