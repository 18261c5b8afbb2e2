// libFuzzer target over the HTTP front door: the input is raw bytes off a socket. Beast parses
// them as tessera's server does (same body limit; up to 4 keep-alive requests per input), and
// each parsed request goes to service::handle, the request handler of tessera-serve and
// tessera-host, with a real router, batcher and backend behind it: bert-tiny's WordPiece
// tokenizer and the toy backend (a hash model: the whole parse/validate/tokenize/submit/reply
// path runs, at thousands of requests a second; TESSERA_FUZZ_BACKEND=reference runs bert-tiny's
// reference forward instead).
//
// The OpenAI routes (/v1/...) are served by an llm_engine over the toy decoder (toy_llm.hpp).
//
// Invariants beyond "no crash, no sanitizer report, no hang":
//  - the handler replies exactly once, within 10 s; a streamed reply closes within 10 s;
//  - never 500: a 500 means an exception reached the last-resort catch, a bug to fix;
//  - a JSON reply is valid UTF-8 and valid JSON; an error reply is {"error", "error_type"}, or on
//    /v1/ OpenAI's {"error": {"message", "type", "param", "code"}};
//  - every event of a stream is valid JSON (or [DONE], which ends it);
//  - a 405 names the allowed method.
#include <utility>  // before Asio: Boost 1.74 awaitable.hpp needs std::exchange

#include <boost/asio/buffer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>

#include "tessera/backends/reference_backend.hpp"
#include "tessera/models/model.hpp"
#include "tessera/serving/model_adapters.hpp"
#include "tessera/serving/router.hpp"
#include "tessera/serving/service.hpp"
#include "tessera/toys/toy_llm.hpp"
#include "tessera/toys/toy_model.hpp"
#include "tessera/serving/utf8.hpp"

using namespace tessera;
using namespace tessera::serving;
using namespace tessera::toys;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "http_fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

/// A router with one backend and a service over it, made once per process.
struct front_door {
  serving_metrics metrics;
  router r{routing_config{}, default_clock(), &metrics};
  std::shared_ptr<const tokenizer> tok;
  model_info info;
  service_config cfg;
  std::unique_ptr<service> svc;
  std::unique_ptr<llm_engine> llm;

  front_door() {
    auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
    tok = make_model_tokenizer(*model).value();
    info = model_info_of(*model, "bert-tiny");
    const char* which = std::getenv("TESSERA_FUZZ_BACKEND");
    std::shared_ptr<backends::thread_pool_backend> b =
        which && std::string(which) == "reference"
            ? backends::make_reference_backend(model, {.name = "ref0", .kind = "gpu"})
            : make_toy_backend({.name = "toy0", .kind = "gpu"}, 1);
    batching_config bc{.kind = policy_kind::dynamic_padded, .max_batch_size = 32,
                       .max_queue_delay = duration::zero()};
    bc.max_sequence_length = info.max_input_length;
    if (auto st = r.add_backend(b, bc); !st.ok()) fail(st.to_string());
    r.start();
    cfg.max_client_batch_size = 8;
    cfg.max_body_bytes = 64 << 10;
    svc = std::make_unique<service>(cfg, r, tok, info, metrics);
    auto llm_tok = make_byte_tokenizer();
    llm = std::make_unique<llm_engine>(llm_engine_config{}, make_toy_llm_backend({.num_blocks = 64}), llm_tok,
                                       &metrics);
    llm->start();
    svc->set_llm({.engine = llm.get(), .tokenizer = llm_tok, .model_id = "toy-llm"});
  }
};

front_door& door() {
  static front_door* d = new front_door();  // lives until exit (the fuzzer never returns)
  return *d;
}

struct reply_slot {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  http_reply reply;
};

http_reply call(front_door& d, std::string_view method, std::string_view target, std::string_view body,
                request_headers headers) {
  auto slot = std::make_shared<reply_slot>();
  d.svc->handle(method, target, body, [slot](http_reply r) {
    std::lock_guard lock(slot->mu);
    if (++slot->calls > 1) fail("the handler replied twice (status " + std::to_string(r.status) + ")");
    slot->reply = std::move(r);
    slot->cv.notify_all();
  }, headers);
  std::unique_lock lock(slot->mu);
  if (!slot->cv.wait_for(lock, std::chrono::seconds(10), [&] { return slot->calls > 0; }))
    fail("no reply within 10 s");
  return std::move(slot->reply);
}

/// The whole body of a streamed reply (it must close within 10 s).
std::string drain(reply_stream& s, const std::string& where) {
  std::string all;
  for (int i = 0; i < 10000; ++i) {
    bool closed = false;
    all += s.take(closed);
    if (closed) return all + s.take(closed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  fail(where + ": a stream still open after 10 s");
}

void check(const http_reply& r, std::string_view method, std::string_view target) {
  const std::string where = printable(method, 16) + " " + printable(target, 80);
  const std::string_view path = target.substr(0, target.find('?'));
  const bool openai = path == "/v1" || path.substr(0, 4) == "/v1/";  // as service::route sends them
  if (r.stream) {
    if (r.status != 200) fail(where + ": a stream with status " + std::to_string(r.status));
    const std::string body = drain(*r.stream, where);
    if (auto bad = find_invalid_utf8(body)) fail(where + ": stream " + bad->describe("it"));
    size_t at = 0;
    bool done = false;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      const size_t end = body.find("\n\n", at);
      if (end == std::string::npos) fail(where + ": an unterminated event");
      const std::string payload = body.substr(at + 6, end - at - 6);
      if (done) fail(where + ": an event after [DONE]");
      if (payload == "[DONE]") done = true;
      else if (nlohmann::json::parse(payload, nullptr, false).is_discarded())
        fail(where + ": an event that is not JSON: " + printable(payload));
      at = end + 2;
    }
    if (!done) fail(where + ": a stream without [DONE]");
    return;
  }
  if (r.status < 200 || r.status > 599) fail(where + ": status " + std::to_string(r.status));
  if (r.status == 500) fail(where + ": 500 (an exception reached the last resort): " + printable(r.body));
  if (auto bad = find_invalid_utf8(r.body)) fail(where + ": reply body " + bad->describe("it"));
  if (r.status == 405 && r.allow.empty()) fail(where + ": 405 without Allow");
  if (r.content_type != "application/json" || r.body.empty()) return;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded()) fail(where + ": reply is not JSON: " + printable(r.body));
  if (openai && r.status >= 400 &&
      !(j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
        j["error"]["message"].is_string() && j["error"].contains("type") && j["error"].contains("param") &&
        j["error"].contains("code")))
    fail(where + ": OpenAI error reply without error.message/type/param/code: " + printable(r.body));
  if (!openai && r.status >= 400 && !(j.is_object() && j.contains("error") && j["error"].is_string() &&
                           j.contains("error_type") && j["error_type"].is_string()))
    fail(where + ": error reply without error/error_type: " + printable(r.body));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  door();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  front_door& d = door();
  beast::flat_buffer buf;
  buf.commit(boost::asio::buffer_copy(buf.prepare(size), boost::asio::buffer(data, size)));
  for (int n = 0; n < 4 && buf.size() > 0; ++n) {
    http::request_parser<http::string_body> p;
    p.body_limit(d.cfg.max_body_bytes);
    beast::error_code ec;
    while (!p.is_done()) {
      const size_t used = p.put(buf.data(), ec);
      buf.consume(used);
      if (ec == http::error::need_more && used > 0 && buf.size() > 0) continue;
      break;
    }
    if (!p.is_done() && !ec && buf.size() == 0) {
      p.put_eof(ec);  // the client closed: a body delimited by the end of the stream ends here
    }
    // Requests Beast rejects are answered 400/413 by http_server without reaching the service.
    if (ec || !p.is_done()) return 0;
    const auto& req = p.get();
    const std::string_view method(req.method_string().data(), req.method_string().size());
    const std::string_view target(req.target().data(), req.target().size());
    const auto header_length = req["Inference-Header-Content-Length"];
    request_headers headers{std::string_view(header_length.data(), header_length.size())};
    http_reply r = call(d, method, target, req.body(), headers);
    check(r, method, target);
    if (!req.keep_alive()) break;
  }
  return 0;
}
