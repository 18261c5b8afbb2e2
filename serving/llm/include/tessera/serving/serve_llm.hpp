// tessera/serving/serve_llm.hpp: serves a decoder on the OpenAI API until a stop signal: the
// continuous-batching engine over an llm_backend, the decoder's tokenizer (a Hugging Face
// folder's or a GGUF file's, else the preset of its architecture), an HTTP server. tessera-gpu --serve and
// tessera-host --serve (decoders) run it.
//
//   serving::take_stop_signals();                   // first in main(), before any thread starts
//   auto backend = ...;                              // any llm_backend (or several replicas)
//   return serving::serve_llm({.backends = {backend}, .model = "llama-tiny", .arch = architecture::llama,
//                              .program = "tessera-gpu", .listening_suffix = " gpu a100-40gb"}, lo, so);
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/backends/llm_backend.hpp"
#include "tessera/models/shape.hpp"
#include "tessera/serving/llm_tokenizer.hpp"
#include "tessera/serving/serve_options.hpp"
#include "tessera/serving/service.hpp"

namespace tessera::serving {

struct llm_serve_target {
  /// One per replica, each behind an engine of its own; an llm_router (so.routing) sends each
  /// request to one of them.
  std::vector<std::shared_ptr<backends::llm_backend>> backends;
  std::string model;                  ///< a preset name, a Hugging Face folder or a GGUF file (its tokenizer)
  models::architecture arch = models::architecture::llama;  ///< the preset tokenizer otherwise
  std::string program = "tessera";    ///< names the process in errors
  std::string listening_suffix;       ///< appended to "listening on URL model ID"
  /// The tokenizer, when the caller loaded it already (to fail before starting tiles); else
  /// serve_llm loads `model`'s (models::load_decoder_tokenizer).
  std::shared_ptr<const llm_tokenizer> tokenizer;
};

/// Puts `engine` behind `llm` (whose tokenizer and model_id are set): the chat format
/// (`chat_template` by name, else detected from the tokenizer's template, else the
/// architecture's default; a name was checked by finish_llm_options) and the /v1/models creation
/// time. A checkpoint template recognised as none of the formats is said on stderr (chat then
/// renders plain). The caller starts the engine.
void attach_engine(llm_api& llm, llm_endpoint& engine, const std::string& chat_template,
                   std::string_view architecture_chat);

/// Prints "listening on http(s)://ADDR:PORT model ID<suffix>" once the port is open, serves until
/// SIGINT/SIGTERM (streams in flight finish), then stops the engine. Returns the process's exit
/// code (2 with a message on stderr when the tokenizer or the port cannot be had). `lo` and `so`
/// must have been through finish_llm_options / finish_serve_options.
int serve_llm(const llm_serve_target& t, const llm_serve_options& lo, const serve_options& so);

}  // namespace tessera::serving
