// The GPU baseline process: io thread (ROUTER + inproc reply queue) and the worker pool.
// See gpu_server.hpp for the protocol.
#include "tessera/gpu/gpu_server.hpp"

#include <msgpack.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "tessera/common/log.hpp"
#include "tessera/exchange/codec.hpp"
#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/serving/reference_backend.hpp"
#include "tessera/timing/bert_model.hpp"

namespace tessera::gpu {

namespace ex = exchange;
using clock_type = std::chrono::steady_clock;

double modelled_gpu_seconds(const timing::gpu_preset& preset, const models::bert_config& cfg,
                            timing::dtype t, const std::vector<int32_t>& lengths, int32_t pad_to) {
  if (lengths.empty()) return 0;
  timing::bert_shape shape;
  shape.name = "served";
  shape.layers = cfg.num_layers;
  shape.hidden = cfg.hidden_size;
  shape.heads = cfg.num_heads;
  shape.ffn = cfg.intermediate_size;
  shape.labels = cfg.num_labels;
  shape.vocab = cfg.vocab_size;
  shape.max_positions = cfg.max_position_embeddings;
  timing::bert_batch b;
  b.seq_lens.assign(lengths.begin(), lengths.end());
  b.pad_to = pad_to;
  auto s = timing::model_gpu_batch_seconds(preset, shape, b, t);
  return s ? *s : 0.0;
}

namespace {

// The batch id of a message that failed validation, if frame 0 is a well-formed header of an
// infer_batch whose first body field is an unsigned integer. Parsed with tight limits.
std::optional<uint64_t> readable_batch_id(const ex::envelope& e) {
  try {
    if (e.header.size() == 0 || e.header.size() > ex::max_header_bytes) return std::nullopt;
    msgpack::unpack_limit limit(16, 16, 4096, 4096, 16, 8);
    auto oh = msgpack::unpack(e.header.data<char>(), e.header.size(), nullptr, nullptr, limit);
    const msgpack::object& o = oh.get();
    if (o.type != msgpack::type::ARRAY || o.via.array.size != 4) return std::nullopt;
    const auto* f = o.via.array.ptr;
    if (f[0].type != msgpack::type::POSITIVE_INTEGER || f[0].via.u64 != ex::protocol_magic) return std::nullopt;
    if (f[2].type != msgpack::type::POSITIVE_INTEGER ||
        f[2].via.u64 != static_cast<uint64_t>(ex::msg_type::infer_batch))
      return std::nullopt;
    if (f[3].type != msgpack::type::ARRAY || f[3].via.array.size < 1) return std::nullopt;
    const auto& id = f[3].via.array.ptr[0];
    if (id.type != msgpack::type::POSITIVE_INTEGER) return std::nullopt;
    return id.via.u64;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

host::batch_request to_request(const ex::infer_batch& m, const ex::envelope& e) {
  host::batch_request req;
  req.batch_id = m.batch_id;
  req.layout = m.layout == 1 ? host::batch_layout::padded : host::batch_layout::packed;
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
  return req;
}

}  // namespace

struct gpu_server::impl {
  std::shared_ptr<const models::bert_model> model;
  gpu_server_config cfg;
  timing::gpu_preset preset;
  zmq::context_t ctx{1};
  zmq::socket_t front{ctx, zmq::socket_type::router};
  zmq::socket_t replies_in{ctx, zmq::socket_type::pull};
  std::mutex replies_out_mu;  // workers share one PUSH (a zmq socket used under a mutex)
  zmq::socket_t replies_out{ctx, zmq::socket_type::push};
  std::string endpoint;
  std::shared_ptr<serving::thread_pool_backend> pool;
  std::atomic<uint64_t> bad{0};
  std::atomic<uint64_t> answered{0};
  std::atomic<int64_t> in_flight{0};  // accepted, reply not yet sent by the io thread

  // Worker side: hand a reply (routing identity + envelope) to the io thread.
  void post_reply(zmq::message_t identity, ex::envelope&& env) {
    std::lock_guard lock(replies_out_mu);
    replies_out.send(identity, zmq::send_flags::sndmore);
    ex::send_envelope(replies_out, std::move(env));
  }

  void send_front(zmq::message_t& identity, ex::envelope&& env) {
    try {
      front.send(identity, zmq::send_flags::sndmore);
      ex::send_envelope(front, std::move(env));
    } catch (const zmq::error_t& err) {
      TESSERA_LOG_WARN("reply dropped: " << err.what());
    }
  }

  void reply_error(zmq::message_t& identity, uint64_t batch_id, const status& st) {
    ex::infer_result r;
    r.batch_id = batch_id;
    r.code = st.code() == errc::ok ? errc::internal : st.code();
    r.message = st.message();
    r.num_labels = model->config.num_labels;
    send_front(identity, ex::encode(r));
    answered.fetch_add(1);
  }

  void on_request(zmq::message_t identity, ex::envelope env) {
    auto type = ex::peek_type(env);
    if (!type) {
      bad.fetch_add(1);
      return;
    }
    if (*type == ex::msg_type::heartbeat) {
      ex::heartbeat ping;
      if (auto st = ex::decode(env, ping); !st) {
        bad.fetch_add(1);
        return;
      }
      ex::heartbeat pong;
      pong.memory_used = static_cast<uint64_t>(std::max<int64_t>(0, in_flight.load()));
      pong.bad_messages = bad.load();
      send_front(identity, ex::encode(pong));
      return;
    }
    if (*type != ex::msg_type::infer_batch) {
      bad.fetch_add(1);
      TESSERA_LOG_WARN("unexpected " << ex::msg_type_name(*type) << " message dropped");
      return;
    }
    ex::infer_batch m;
    if (auto st = ex::decode(env, m); !st) {
      bad.fetch_add(1);
      if (auto id = readable_batch_id(env)) reply_error(identity, *id, st);
      return;
    }
    if (m.seq_lengths.empty()) {  // a ping
      ex::infer_result r;
      r.batch_id = m.batch_id;
      r.num_labels = model->config.num_labels;
      send_front(identity, ex::encode(r, zmq::message_t()));
      return;
    }
    const int32_t longest = *std::max_element(m.seq_lengths.begin(), m.seq_lengths.end());
    if (m.layout == 1 && (m.padded_length < longest || m.padded_length > model->config.max_position_embeddings)) {
      reply_error(identity, m.batch_id,
                  status::invalid("padded_length " + std::to_string(m.padded_length) + " is not in [" +
                                  std::to_string(longest) + ", " +
                                  std::to_string(model->config.max_position_embeddings) + "]"));
      return;
    }
    if (in_flight.load() >= static_cast<int64_t>(cfg.max_queued_batches)) {
      reply_error(identity, m.batch_id, status{errc::overloaded, "tessera-gpu queue is full"});
      return;
    }
    host::batch_request req = to_request(m, env);
    const auto t0 = clock_type::now();
    const int32_t pad_to = m.layout == 1 ? m.padded_length : 0;
    in_flight.fetch_add(1);
    auto id = std::make_shared<zmq::message_t>(std::move(identity));
    pool->submit(std::move(req), [this, id, t0, pad_to, lengths = std::move(m.seq_lengths)](host::batch_result r) {
      ex::infer_result out;
      out.batch_id = r.batch_id;
      out.num_labels = model->config.num_labels;
      out.wall_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
      out.modelled_seconds = modelled_gpu_seconds(preset, model->config, cfg.dtype, lengths, pad_to);
      if (r.st) {
        const size_t want = lengths.size() * static_cast<size_t>(out.num_labels);
        if (r.logits.size() != want) {
          out.code = errc::internal;
          out.message = "forward returned " + std::to_string(r.logits.size()) + " logits, expected " +
                        std::to_string(want);
          post_reply(std::move(*id), ex::encode(out));
        } else {
          post_reply(std::move(*id), ex::encode(out, ex::copy_frame(r.logits.data(), r.logits.size() * 4)));
        }
      } else {
        out.code = r.st.code() == errc::ok ? errc::internal : r.st.code();
        out.message = r.st.message();
        post_reply(std::move(*id), ex::encode(out));
      }
    });
  }

  // Moves every reply the workers posted to the ROUTER.
  void drain_replies() {
    while (true) {
      ex::envelope env;
      std::vector<zmq::message_t> prefix;
      result<bool> got = false;
      try {
        got = ex::recv_envelope(replies_in, env, &prefix, 1, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t&) {
        return;
      }
      if (!got || !*got) return;
      send_front(prefix[0], std::move(env));
      in_flight.fetch_sub(1);
      answered.fetch_add(1);
    }
  }

  void read_front() {
    for (int i = 0; i < 256; ++i) {  // bounded, so replies are never starved
      ex::envelope env;
      std::vector<zmq::message_t> prefix;
      result<bool> got = false;
      try {
        got = ex::recv_envelope(front, env, &prefix, 1, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& err) {
        TESSERA_LOG_WARN("receive failed: " << err.what());
        return;
      }
      if (!got) {
        bad.fetch_add(1);
        continue;
      }
      if (!*got) return;
      if (prefix.empty()) {
        bad.fetch_add(1);
        continue;
      }
      on_request(std::move(prefix[0]), std::move(env));
    }
  }
};

gpu_server::gpu_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

gpu_server::~gpu_server() {
  if (impl_ && impl_->pool) impl_->pool->stop();
}

result<std::unique_ptr<gpu_server>> gpu_server::create(std::shared_ptr<const models::bert_model> model,
                                                        gpu_server_config cfg) {
  if (cfg.threads < 1) return status::invalid("--threads must be at least 1");
  if (cfg.omp_threads < 1) return status::invalid("--omp-threads must be at least 1");
  auto preset = timing::load_gpu_preset(cfg.preset);
  if (!preset) return preset.error();
  auto p = std::make_unique<impl>();
  p->model = std::move(model);
  p->cfg = cfg;
  p->preset = std::move(*preset);
  try {
    ex::apply_socket_defaults(p->front);
    p->front.bind(cfg.bind);
    p->endpoint = p->front.get(zmq::sockopt::last_endpoint);
    const std::string inproc = "inproc://gpu-replies";
    p->replies_in.set(zmq::sockopt::rcvhwm, 0);
    p->replies_in.bind(inproc);
    p->replies_out.set(zmq::sockopt::sndhwm, 0);
    p->replies_out.connect(inproc);
  } catch (const zmq::error_t& err) {
    return status::invalid("cannot bind " + cfg.bind + ": " + err.what() +
                           "; pass --bind tcp://127.0.0.1:0 or a free ipc:// path");
  }
  p->pool = serving::make_reference_backend(
      p->model, {.name = cfg.name, .kind = "gpu", .threads = cfg.threads, .omp_threads = cfg.omp_threads,
                 .serialize_forwards = cfg.serialize_forwards});
  return std::unique_ptr<gpu_server>(new gpu_server(std::move(p)));
}

const std::string& gpu_server::endpoint() const { return impl_->endpoint; }
uint64_t gpu_server::bad_messages() const { return impl_->bad.load(); }
uint64_t gpu_server::batches_answered() const { return impl_->answered.load(); }

void gpu_server::run(const std::atomic<bool>& stop) {
  impl& s = *impl_;
  while (!stop.load()) {
    zmq::pollitem_t items[] = {{s.front.handle(), 0, ZMQ_POLLIN, 0}, {s.replies_in.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(50));
    } catch (const zmq::error_t& err) {
      if (err.num() == EINTR) continue;
      TESSERA_LOG_ERROR("poll failed: " << err.what());
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) s.drain_replies();
    if (items[0].revents & ZMQ_POLLIN) s.read_front();
  }
  // Stop reading requests; answer what was accepted.
  TESSERA_LOG_INFO("stopping: answering " << s.in_flight.load() << " accepted batches");
  while (s.in_flight.load() > 0) {
    zmq::pollitem_t items[] = {{s.replies_in.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(50));
    } catch (const zmq::error_t&) {
    }
    s.drain_replies();
  }
  s.pool->stop();
  s.front.set(zmq::sockopt::linger, 2000);  // let the last replies leave
  s.front.close();
}

}  // namespace tessera::gpu
