// Serving flags and signals. See serve_options.hpp.
#include "tessera/serving/serve_options.hpp"

#include <pthread.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <csignal>

#include "tessera/common/log.hpp"
#include "tessera/serving/access.hpp"
#include "tls_context.hpp"

namespace tessera::serving {

namespace po = boost::program_options;

namespace {

// The API key, TLS files and the loopback rule.
status finish_access_options(serve_options& so) {
  auto& sc = so.server;
  if (!so.api_key_file.empty()) {
    if (!sc.api_key.empty()) return status::invalid("pass --api-key or --api-key-file, not both");
    auto key = read_api_key_file(so.api_key_file);
    if (!key) return key.error();
    sc.api_key = std::move(*key);
  } else if (!sc.api_key.empty()) {
    TESSERA_RETURN_IF_ERROR(validate_api_key(sc.api_key).with_context("--api-key"));
  }
  if (sc.tls_cert.empty() != sc.tls_key.empty())
    return status::invalid("--tls-cert and --tls-key go together: pass both (PEM files) or neither");
  if (!sc.tls_cert.empty()) TESSERA_RETURN_IF_ERROR(check_tls_files(sc.tls_cert, sc.tls_key));
  if (so.insecure || is_loopback_address(sc.address)) return ok_status();
  std::string missing;
  if (sc.api_key.empty()) missing = "--api-key-file FILE (or --api-key KEY)";
  if (sc.tls_cert.empty())
    missing += std::string(missing.empty() ? "" : " and ") + "--tls-cert FILE --tls-key FILE";
  if (missing.empty()) return ok_status();
  return status::invalid("--address " + sc.address +
                         " serves other machines: add " + missing +
                         ", or pass --insecure to serve it unauthenticated in clear text on a "
                         "trusted network");
}

}  // namespace

void add_serve_options(po::options_description& opts, serve_options& so) {
  opts.add_options()
      ("address", po::value(&so.server.address)->default_value(so.server.address),
       "HTTP bind address; off loopback (e.g. 0.0.0.0) it needs --api-key and --tls-cert/--tls-key, "
       "or --insecure")
      ("port", po::value(&so.port)->default_value(so.port), "HTTP port (0 = any free port, printed)")
      ("io-threads", po::value(&so.server.io_threads)->default_value(so.server.io_threads),
       "threads running the HTTP io_context")
      ("batching", po::value(&so.batching_name)->default_value(so.batching_name),
       "static (fixed B, padded to max length) | dynamic (up to B or the delay, padded to the "
       "longest) | token-budget (packed, no padding)")
      ("gpu-batching", po::value(&so.gpu_batching_name)->default_value(""),
       "policy for backends of kind gpu (default: --batching)")
      ("tiles-batching", po::value(&so.tiles_batching_name)->default_value(""),
       "policy for backends of kind tiles (default: --batching)")
      ("max-batch-size", po::value(&so.batching.max_batch_size)->default_value(so.batching.max_batch_size),
       "B: sequences per batch (token-budget: a cap, 0 = none)")
      ("token-budget", po::value(&so.batching.token_budget)->default_value(so.batching.token_budget),
       "tokens per batch (0 = the backend's); caps padded batches too")
      ("max-queue-delay-ms", po::value(&so.max_queue_delay_ms)->default_value(so.max_queue_delay_ms),
       "wait at most this long for a fuller batch")
      ("max-age-ms", po::value(&so.max_age_ms)->default_value(so.max_age_ms),
       "token-budget: sequences older than this go first (no starvation)")
      ("max-queue", po::value(&so.batching.max_queue_requests)->default_value(so.batching.max_queue_requests),
       "sequences queued per backend before 429")
      ("max-inflight-batches",
       po::value(&so.batching.max_inflight_batches)->default_value(so.batching.max_inflight_batches),
       "batches at a backend at once")
      ("routing", po::value(&so.routing_name)->default_value(so.routing_name),
       "least-outstanding | hybrid (long -> tiles, short -> gpu)")
      ("long-threshold", po::value(&so.routing.long_threshold)->default_value(so.routing.long_threshold),
       "hybrid: sequences longer than this many tokens go to tiles")
      ("max-client-batch-size",
       po::value(&so.server.api.max_client_batch_size)->default_value(so.server.api.max_client_batch_size),
       "inputs per request (413 beyond, as TEI)")
      ("timeout-ms", po::value(&so.timeout_ms)->default_value(so.timeout_ms),
       "per-request deadline (504 when it passes in the queue; 0 = none)")
      ("answer-grace-ms", po::value(&so.answer_grace_ms)->default_value(so.answer_grace_ms),
       "a request a stalled backend has not answered by deadline + this is answered 504")
      ("max-body-bytes", po::value(&so.server.api.max_body_bytes)->default_value(so.server.api.max_body_bytes),
       "request body limit (413 beyond)")
      ("journal", po::value(&so.server.journal),
       "request journal file: after a crash, the restarted host reports in /info what the previous "
       "process accepted and never answered")
      ("auto-truncate", po::bool_switch(&so.server.api.auto_truncate),
       "truncate long inputs unless a request says \"truncate\": false")
      ("api-key", po::value(&so.server.api_key),
       "require 'Authorization: Bearer KEY' on every route but the health probes (/health, /ping, "
       "GET /, KServe's) and /metrics (401 without it); visible to ps, prefer --api-key-file")
      ("api-key-file", po::value(&so.api_key_file), "read the API key from FILE (one line)")
      ("tls-cert", po::value(&so.server.tls_cert), "serve HTTPS (TLS 1.2+) with this PEM certificate chain")
      ("tls-key", po::value(&so.server.tls_key), "the PEM private key of --tls-cert")
      ("insecure", po::bool_switch(&so.insecure),
       "allow plain sockets off loopback: the HTTP port without the API key and TLS (and, in "
       "tessera-host, the control socket and --gpu-endpoint without --keys); only on a trusted network");
}

void add_llm_options(po::options_description& opts, llm_serve_options& lo) {
  opts.add_options()
      ("kv-blocks", po::value(&lo.kv_blocks)->default_value(lo.kv_blocks),
       "decoder: KV cache blocks (0 = as many as --kv-memory-mb holds)")
      ("kv-memory-mb", po::value(&lo.kv_memory_mb)->default_value(lo.kv_memory_mb),
       "decoder: KV cache size when --kv-blocks is 0")
      ("kv-block-tokens", po::value(&lo.block_tokens)->default_value(lo.block_tokens),
       "decoder: positions per KV block")
      ("llm-batching", po::value(&lo.batching_name)->default_value(lo.batching_name),
       "decoder: continuous (iteration-level) | static (a batch admitted together runs until its "
       "longest sequence ends)")
      ("step-token-budget", po::value(&lo.step_token_budget)->default_value(lo.step_token_budget),
       "decoder: tokens per step (prefill chunks + decodes)")
      ("max-running", po::value(&lo.max_running)->default_value(lo.max_running),
       "decoder: sequences holding KV blocks at once")
      ("static-batch-size", po::value(&lo.static_batch_size)->default_value(lo.static_batch_size),
       "decoder, --llm-batching static: sequences admitted together")
      ("no-prefix-caching", po::bool_switch(&lo.no_prefix_caching),
       "decoder: compute every prompt in full (no sharing of cached prompt blocks)")
      ("chat-template", po::value(&lo.chat_template)->default_value(lo.chat_template),
       "decoder: chat format (plain, chatml, llama3, llama2, zephyr); default: recognised from the "
       "checkpoint's tokenizer_config.json, else plain")
      ("max-llm-queue", po::value(&lo.max_queued)->default_value(lo.max_queued),
       "decoder: requests waiting or running; more are answered 429")
      ("llm-request-log", po::value(&lo.request_log),
       "decoder: write one CSV line per finished request to FILE (tokens, finish reason, TTFT and "
       "end-to-end seconds on the wall clock and on a modelled device's clock)")
      ("async-scheduling", po::value(&lo.async_scheduling)->default_value(lo.async_scheduling),
       "decoder on tiles: on (step t+1 is formed and sent while step t runs, its tokens taken on the tiles "
       "from step t's samples; the same outputs) or off (each step waits for the last one's tokens)")
      ("llm-step-log", po::value(&lo.step_log),
       "decoder: write one CSV line per engine step to FILE (tokens of prefill and decode, sequences, "
       "time scheduling, in the backend and after it, running/waiting, KV blocks)");
}

status finish_llm_options(llm_serve_options& lo) {
  auto& sc = lo.engine.scheduler;
  if (lo.batching_name == "continuous")
    sc.mode = batching_mode::continuous;
  else if (lo.batching_name == "static")
    sc.mode = batching_mode::static_batch;
  else
    return status::invalid("--llm-batching must be continuous or static, not '" + lo.batching_name + "'");
  if (lo.block_tokens < 1 || lo.block_tokens > 1024) return status::invalid("--kv-block-tokens must be 1..1024");
  if (lo.kv_blocks < 0) return status::invalid("--kv-blocks must be >= 0");
  if (!(lo.kv_memory_mb > 0)) return status::invalid("--kv-memory-mb must be > 0");
  if (lo.step_token_budget < 1) return status::invalid("--step-token-budget must be >= 1");
  if (lo.max_running < 1) return status::invalid("--max-running must be >= 1");
  if (lo.static_batch_size < 1) return status::invalid("--static-batch-size must be >= 1");
  if (lo.max_queued < 1) return status::invalid("--max-llm-queue must be >= 1");
  if (!lo.chat_template.empty() && !chat_format_named(lo.chat_template))
    return status::invalid("--chat-template must be plain, chatml, llama3, llama2 or zephyr, not '" +
                           lo.chat_template + "'");
  if (lo.async_scheduling != "on" && lo.async_scheduling != "off")
    return status::invalid("--async-scheduling must be on or off, not '" + lo.async_scheduling + "'");
  lo.engine.async_scheduling = lo.async_scheduling == "on";
  sc.token_budget = lo.step_token_budget;
  sc.max_running = lo.max_running;
  sc.static_batch_size = lo.static_batch_size;
  sc.prefix_caching = !lo.no_prefix_caching;
  lo.engine.max_queued = lo.max_queued;
  for (const auto& [flag, path] : {std::pair{"--llm-step-log", lo.step_log}, std::pair{"--llm-request-log", lo.request_log}}) {
    if (path.empty()) continue;
    std::ofstream probe(path, std::ios::app);
    if (!probe) return status::invalid(std::string(flag) + ": cannot write " + path);
  }
  lo.engine.step_log = lo.step_log;
  lo.engine.request_log = lo.request_log;
  return ok_status();
}

status finish_serve_options(serve_options& so) {
  auto policy = parse_policy_kind(so.batching_name);
  if (!policy) return policy.error();
  so.batching.kind = *policy;
  auto strategy = parse_routing_strategy(so.routing_name);
  if (!strategy) return strategy.error();
  so.routing.strategy = *strategy;
  if (so.port < 0 || so.port > 65535) return status::invalid("--port must be in 0..65535");
  so.server.port = static_cast<uint16_t>(so.port);
  if (so.server.io_threads < 1) return status::invalid("--io-threads must be >= 1");
  if (so.max_queue_delay_ms < 0 || so.max_age_ms < 0 || so.timeout_ms < 0 || so.answer_grace_ms < 0)
    return status::invalid(
        "--max-queue-delay-ms, --max-age-ms, --timeout-ms and --answer-grace-ms must be >= 0");
  auto us = [](double ms) { return std::chrono::microseconds(static_cast<int64_t>(ms * 1000)); };
  so.batching.max_queue_delay = us(so.max_queue_delay_ms);
  so.batching.max_age = us(so.max_age_ms);
  so.server.api.request_timeout = us(so.timeout_ms);
  so.server.api.answer_grace = us(so.answer_grace_ms);
  if (so.server.api.max_client_batch_size < 1)
    return status::invalid("--max-client-batch-size must be >= 1");
  if (so.server.api.max_body_bytes < 64) return status::invalid("--max-body-bytes must be >= 64");
  if (so.routing.long_threshold < 0) return status::invalid("--long-threshold must be >= 0");
  TESSERA_RETURN_IF_ERROR(so.batching.validate());
  TESSERA_RETURN_IF_ERROR(finish_access_options(so));
  auto per_kind = [&](const std::string& name, batching_config& out) -> status {
    out = so.batching;
    if (name.empty()) return ok_status();
    auto k = parse_policy_kind(name);
    if (!k) return k.error();
    out.kind = *k;
    return out.validate();
  };
  TESSERA_RETURN_IF_ERROR(per_kind(so.gpu_batching_name, so.gpu_batching));
  return per_kind(so.tiles_batching_name, so.tiles_batching);
}

namespace {
sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}
}  // namespace

namespace {
// The state shared by the signal thread and wait_for_stop_signal.
struct stop_state {
  std::mutex m;
  std::condition_variable cv;
  bool waiting = false;  // accept_graceful_stop has been called: a signal now means "stop gracefully"
  int first = 0;         // the signal that began the graceful stop
  std::chrono::steady_clock::time_point first_at;
};
stop_state& state() {
  static stop_state s;
  return s;
}

// Ends the process by `sig`'s default action, as if no one had blocked it.
[[noreturn]] void die_by(int sig) {
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  std::_Exit(128 + sig);  // not reached: the default action of SIGINT and SIGTERM ends the process
}

// A repeat of the stop signal within this time is the same request (GNU timeout sends SIGTERM
// to its child and again to its process group; a shell's kill may reach a process group too).
// Later, it is a user asking again: the process stops at once.
constexpr auto same_request = std::chrono::seconds(2);
}  // namespace

void take_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t s = stop_signals();
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
    std::thread([s] {
      for (;;) {
        int sig = 0;
        if (sigwait(&s, &sig) != 0) continue;
        auto& st = state();
        std::unique_lock lock(st.m);
        if (!st.waiting) die_by(sig);  // not serving yet: nothing accepted to answer
        auto now = std::chrono::steady_clock::now();
        if (st.first == 0) {
          st.first = sig;
          st.first_at = now;
          st.cv.notify_all();
        } else if (now - st.first_at >= same_request) {
          TESSERA_LOG_WARN("signal " << sig << " again while stopping: stopping now, unanswered requests are lost");
          die_by(sig);
        }
      }
    }).detach();
  });
}

void accept_graceful_stop() {
  take_stop_signals();
  auto& st = state();
  std::lock_guard lock(st.m);
  st.waiting = true;
}

int wait_for_stop_signal() {
  accept_graceful_stop();
  auto& st = state();
  std::unique_lock lock(st.m);
  st.cv.wait(lock, [&] { return st.first != 0; });
  return st.first;
}

}  // namespace tessera::serving
