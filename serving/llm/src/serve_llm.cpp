// Serving a decoder on the OpenAI API. See serve_llm.hpp.
#include "tessera/serving/serve_llm.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "tessera/common/log.hpp"
#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/gguf_reader.hpp"
#include "tessera/serving/http_server.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/serving/llm_router.hpp"
#include "tessera/serving/model_adapters.hpp"
#include "tessera/serving/router.hpp"

namespace tessera::serving {

void attach_engine(llm_api& llm, llm_endpoint& engine, const std::string& chat_template,
                   std::string_view architecture_chat) {
  llm.engine = &engine;
  llm.chat = chat_template.empty() ? chat_format_for(llm.tokenizer->chat_template(), architecture_chat)
                                   : *chat_format_named(chat_template);
  // tessera renders the common formats itself (no Jinja): a template it does not recognise is said,
  // not silently replaced.
  if (chat_template.empty() && !llm.tokenizer->chat_template().empty() && llm.chat == chat_format::plain)
    std::cerr << "warning: the model's chat template is none of chatml, llama3, llama2, zephyr (tessera runs no "
                 "Jinja): /v1/chat/completions renders the plain format; --chat-template names another\n";
  llm.created_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int serve_llm(const llm_serve_target& t, const llm_serve_options& lo, const serve_options& so) {
  auto fail = [&](const status& st) {
    std::cerr << t.program << ": " << st.to_string() << "\n";
    return 2;
  };
  serving_metrics metrics;
  llm_api llm;
  llm.tokenizer = t.tokenizer;
  if (!llm.tokenizer) {
    auto bpe = models::load_decoder_tokenizer(t.model, models::traits_of(t.arch).tokenizer);
    if (!bpe) return fail(bpe.error());
    llm.tokenizer = make_bpe_llm_tokenizer(std::move(*bpe));
  }
  std::string id = t.model;
  while (!id.empty() && id.back() == '/') id.pop_back();
  if (auto slash = id.find_last_of('/'); slash != std::string::npos) id = id.substr(slash + 1);
  llm.model_id = id;
  if (lo.engine.async_scheduling &&
      std::none_of(t.backends.begin(), t.backends.end(), [](const auto& b) { return b->info().feeds; }))
    return fail(status::invalid("--async-scheduling on: no backend here takes a step's tokens from the last step's "
                                "samples (tessera-host's tiles do); use --async-scheduling off"));
  std::vector<std::unique_ptr<llm_engine>> engines;
  for (size_t i = 0; i < t.backends.size(); ++i) {
    llm_engine_config ec = lo.engine;
    // One step log per replica: FILE for the first, FILE.1, FILE.2, ... for the others.
    if (i > 0 && !ec.step_log.empty()) ec.step_log += "." + std::to_string(i);
    if (i > 0 && !ec.request_log.empty()) ec.request_log += "." + std::to_string(i);
    engines.push_back(std::make_unique<llm_engine>(ec, t.backends[i], llm.tokenizer, &metrics));
  }
  auto made = llm_router::make(so.routing, std::move(engines));
  if (!made) return fail(made.error());
  auto engine = std::move(*made);
  attach_engine(llm, *engine, lo.chat_template, models::traits_of(t.arch).chat_format);
  engine->start();
  router r(so.routing, default_clock(), &metrics);  // empty: the OpenAI routes use the engine
  r.start();
  model_info info;
  info.model_id = id;
  http_server server(so.server, r, nullptr, info, metrics);  // no encoder: the TEI and KServe routes say so
  server.api().set_llm(llm);
  if (auto st = server.start(); st.code() != errc::ok) {
    engine->stop();
    r.stop();
    return fail(st);
  }
  accept_graceful_stop();  // a stop signal from now on is graceful (the listening line invites one)
  std::cout << "listening on " << (so.server.tls_cert.empty() ? "http" : "https") << "://" << so.server.address
            << ":" << server.port() << " model " << id << t.listening_suffix << std::endl;
  int sig = wait_for_stop_signal();
  TESSERA_LOG_INFO("signal " << sig << ": answering what was accepted, then stopping");
  server.stop();
  engine->stop();
  r.stop();
  return 0;
}

}  // namespace tessera::serving
