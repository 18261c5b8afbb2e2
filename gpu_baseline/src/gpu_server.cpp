// The GPU baseline process: a control channel (ROUTER, one I/O thread) and the worker pool.
// See gpu_server.hpp for the protocol.
#include "tessera/gpu/gpu_server.hpp"

#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "tessera/backends/reference_backend.hpp"
#include "tessera/common/log.hpp"
#include "tessera/exchange/channel.hpp"
#include "tessera/exchange/codec.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/timing/bert_model.hpp"

namespace tessera::gpu {

namespace ex = exchange;
using clock_type = std::chrono::steady_clock;

double modelled_gpu_seconds(const timing::gpu_preset& preset, const models::bert_config& cfg,
                            timing::dtype t, const std::vector<int32_t>& lengths, int32_t pad_to) {
  if (lengths.empty()) return 0;
  timing::bert_batch b;
  b.seq_lens.assign(lengths.begin(), lengths.end());
  b.pad_to = pad_to;
  auto s = timing::model_gpu_batch_seconds(preset, cfg, b, t);
  return s ? *s : 0.0;
}

namespace {

backends::batch_request to_request(const ex::infer_batch& m, const ex::envelope& e) {
  backends::batch_request req;
  req.batch_id = m.batch_id;
  req.layout = m.layout == 1 ? backends::batch_layout::padded : backends::batch_layout::packed;
  req.padded_length = m.padded_length;
  const auto* ids = e.payloads[0].data<char>();
  const auto* types = e.payloads[1].data<char>();
  size_t offset = 0;
  req.sequences.resize(m.seq_lengths.size());
  for (size_t i = 0; i < m.seq_lengths.size(); ++i) {
    const size_t n = static_cast<size_t>(m.seq_lengths[i]);
    auto& s = req.sequences[i];
    s.token_ids.resize(n);
    s.token_type_ids.resize(n);
    std::memcpy(s.token_ids.data(), ids + offset * 4, n * 4);   // little-endian hosts only
    std::memcpy(s.token_type_ids.data(), types + offset * 4, n * 4);
    offset += n;
  }
  for (uint32_t i : m.every_token) req.sequences[i].every_token = true;  // indices checked by decode
  return req;
}

const char* wire_dtype_name(ex::dtype d) {
  switch (d) {
    case ex::dtype::f32: return "fp32";
    case ex::dtype::bf16: return "bf16";
    case ex::dtype::i32: return "i32";
    case ex::dtype::i8: return "int8";
  }
  return "?";
}

}  // namespace

struct gpu_server::impl {
  std::shared_ptr<const models::bert_model> model;
  ex::dtype compute = ex::dtype::f32;  // the model's dtype, as infer_batch.compute names it
  gpu_server_config cfg;
  timing::gpu_preset preset;
  zmq::context_t ctx{1};
  std::unique_ptr<ex::channel> ch;  // the ROUTER, owned by the channel's I/O thread
  std::shared_ptr<backends::thread_pool_backend> pool;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> bad{0};
  std::atomic<uint64_t> answered{0};
  std::atomic<int64_t> in_flight{0};

  // Floats per sequence: the logits, or an embedding model's pooled vector (pooled here, in this
  // process, by the reference backend: only [sequences, hidden] go back to the host).
  int32_t out_width = 0;
  int32_t width() const { return out_width; }  // accepted, reply not yet handed to the channel

  // Any thread: the channel sends it from its I/O thread.
  void reply(const std::string& peer, ex::envelope&& env) {
    ch->send(peer, std::move(env));
    answered.fetch_add(1);
  }

  void reply_error(const std::string& peer, uint64_t batch_id, const status& st) {
    ex::infer_result r;
    r.batch_id = batch_id;
    r.code = st.code() == errc::ok ? errc::internal : st.code();
    r.message = st.message();
    r.num_labels = width();
    reply(peer, ex::encode(r));
  }

  // I/O thread: every request from every client.
  void on_request(const std::string& peer, ex::envelope&& env) {
    auto type = ex::peek_type(env);
    if (!type) {
      bad.fetch_add(1);
      return;
    }
    if (*type == ex::msg_type::heartbeat) {
      ex::heartbeat ping;
      if (auto st = ex::decode(env, ping); !st.ok()) {
        bad.fetch_add(1);
        return;
      }
      ex::heartbeat pong;
      pong.memory_used = static_cast<uint64_t>(std::max<int64_t>(0, in_flight.load()));
      pong.bad_messages = bad.load();
      // A pong that cannot leave: the host hears silence and fails this process itself.
      (void)ch->send_now(peer, ex::encode(pong));
      return;
    }
    if (*type != ex::msg_type::infer_batch) {
      bad.fetch_add(1);
      TESSERA_LOG_WARN("unexpected " << ex::msg_type_name(*type) << " message dropped");
      return;
    }
    ex::infer_batch m;
    if (auto st = ex::decode(env, m); !st.ok()) {
      bad.fetch_add(1);
      if (auto id = ex::peek_request_id(env)) reply_error(peer, *id, st);
      return;
    }
    if (m.compute != compute) {
      reply_error(peer, m.batch_id,
                  status::invalid(std::string("this tessera-gpu computes in ") + wire_dtype_name(compute) +
                                  " and the batch asks for " + wire_dtype_name(m.compute) +
                                  ": start tessera-gpu with --dtype " + wire_dtype_name(m.compute) +
                                  " or the host with --dtype " + wire_dtype_name(compute)));
      return;
    }
    if (m.seq_lengths.empty()) {  // a ping
      ex::infer_result r;
      r.batch_id = m.batch_id;
      r.num_labels = width();
      reply(peer, ex::encode(r, zmq::message_t()));
      return;
    }
    if (draining.load()) {
      reply_error(peer, m.batch_id, status{errc::cancelled, "tessera-gpu is stopping"});
      return;
    }
    const int32_t longest = *std::max_element(m.seq_lengths.begin(), m.seq_lengths.end());
    if (m.layout == 1 && (m.padded_length < longest || m.padded_length > model->config.max_sequence_length())) {
      reply_error(peer, m.batch_id,
                  status::invalid("padded_length " + std::to_string(m.padded_length) + " is not in [" +
                                  std::to_string(longest) + ", " +
                                  std::to_string(model->config.max_sequence_length()) + "]"));
      return;
    }
    if (in_flight.load() >= static_cast<int64_t>(cfg.max_queued_batches)) {
      reply_error(peer, m.batch_id, status{errc::overloaded, "tessera-gpu queue is full"});
      return;
    }
    backends::batch_request req = to_request(m, env);
    const auto t0 = clock_type::now();
    const int32_t pad_to = m.layout == 1 ? m.padded_length : 0;
    in_flight.fetch_add(1);
    // Rows back: one per sequence, or each token's for the sequences every_token names.
    size_t rows = m.seq_lengths.size();
    for (uint32_t i : m.every_token) rows += static_cast<size_t>(m.seq_lengths[i]) - 1;
    pool->submit(std::move(req), [this, peer, t0, pad_to, rows, lengths = std::move(m.seq_lengths)](backends::batch_result r) {
      ex::infer_result out;
      out.batch_id = r.batch_id;
      out.num_labels = width();
      out.wall_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
      out.modelled_seconds = modelled_gpu_seconds(preset, model->config, cfg.timing_dtype, lengths, pad_to);
      const size_t want = rows * static_cast<size_t>(out.num_labels);
      if (r.st.ok() && r.logits.size() == want) {
        reply(peer, ex::encode(out, ex::copy_frame(r.logits.data(), r.logits.size() * 4)));
      } else {
        out.code = !r.st.ok() ? r.st.code() : errc::internal;
        out.message = !r.st.ok() ? r.st.message()
                            : "forward returned " + std::to_string(r.logits.size()) + " logits, expected " +
                                  std::to_string(want);
        reply(peer, ex::encode(out));
      }
      in_flight.fetch_sub(1);
    });
  }
};

gpu_server::gpu_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

gpu_server::~gpu_server() {
  if (impl_ && impl_->pool) impl_->pool->stop();
  if (impl_ && impl_->ch) impl_->ch->stop();
}

result<std::unique_ptr<gpu_server>> gpu_server::create(std::shared_ptr<const models::bert_model> model,
                                                        gpu_server_config cfg) {
  if (cfg.threads < 1) return status::invalid("--threads must be at least 1");
  if (cfg.omp_threads < 1) return status::invalid("--omp-threads must be at least 1");
  auto preset = timing::load_gpu_preset(cfg.preset);
  if (!preset) return preset.error();
  auto p = std::make_unique<impl>();
  p->model = std::move(model);
  p->compute = p->model->compute == models::dtype::bf16   ? ex::dtype::bf16
               : p->model->compute == models::dtype::int8 ? ex::dtype::i8
                                                          : ex::dtype::f32;
  p->cfg = cfg;
  p->preset = std::move(*preset);
  p->pool = backends::make_reference_backend(
      p->model, {.name = cfg.name, .kind = "gpu", .threads = cfg.threads, .omp_threads = cfg.omp_threads,
                 .serialize_forwards = cfg.serialize_forwards});
  p->out_width = p->pool->info().num_labels;
  impl* raw = p.get();
  ex::channel::options o;
  o.name = cfg.name;
  o.type = zmq::socket_type::router;
  o.bind = cfg.bind;
  o.tick = std::chrono::milliseconds(50);
  o.configure = [raw](zmq::socket_t& s) { ex::secure_server(raw->ctx, s); };  // CurveZMQ + ZAP when keys are loaded
  ex::channel::handlers h;
  h.on_message = [raw](const std::string& peer, ex::envelope&& e) { raw->on_request(peer, std::move(e)); };
  auto ch = ex::channel::open(p->ctx, std::move(o), std::move(h));
  if (!ch) {
    p->pool->stop();
    return status::invalid("cannot bind " + cfg.bind + ": " + ch.error().message() +
                           "; pass --bind tcp://127.0.0.1:0 or a free ipc:// path");
  }
  p->ch = std::move(*ch);
  p->ch->start();
  return std::unique_ptr<gpu_server>(new gpu_server(std::move(p)));
}

const std::string& gpu_server::endpoint() const { return impl_->ch->endpoint(); }
uint64_t gpu_server::bad_messages() const { return impl_->bad.load(); }
uint64_t gpu_server::batches_answered() const { return impl_->answered.load(); }

void gpu_server::run(const std::atomic<bool>& stop) {
  impl& s = *impl_;
  while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Refuse new batches (answered `cancelled`, so the client retries elsewhere); answer the rest.
  s.draining.store(true);
  TESSERA_LOG_INFO("stopping: answering " << s.in_flight.load() << " accepted batches");
  while (s.in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.pool->stop();
  s.ch->stop(std::chrono::milliseconds(2000));  // let the last replies leave
}

}  // namespace tessera::gpu
