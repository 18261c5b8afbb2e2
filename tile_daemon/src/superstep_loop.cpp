#include "tessera/tile/superstep_loop.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "tessera/common/log.hpp"

namespace tessera::tile {

using namespace tessera::exchange;
using clock_type = std::chrono::steady_clock;

namespace {
uint64_t ns_since(clock_type::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count());
}
}  // namespace

result<slice_span> resolve_slice(const slice_ref& s, tile_memory& memory, int64_t active_tokens) {
  batch_rows rows;
  rows.active_tokens = active_tokens;
  return resolve_slice(s, memory, rows);
}

result<slice_span> resolve_slice(const slice_ref& s, tile_memory& memory, const batch_rows& rows) {
  tile_tensor* t = memory.find(s.tensor_id);
  if (!t) return status::not_found("slice names tensor id " + std::to_string(s.tensor_id) + ", which tile " +
                                   std::to_string(memory.tile_id()) + " does not hold");
  const uint64_t n = t->elements();
  uint64_t begin = 0, count = 0;
  switch (s.kind) {
    case slice_kind::fixed:
      begin = s.offset;
      count = s.count;
      break;
    case slice_kind::token_rows: {
      auto m = rows.micro_rows(s.micro, s.micros);
      begin = static_cast<uint64_t>(m.begin) * s.count;
      count = static_cast<uint64_t>(m.end - m.begin) * s.count;
      break;
    }
    case slice_kind::token_part: {
      auto m = rows.micro_rows(s.micro, s.micros);
      auto r = token_partition(m.end - m.begin, s.part, s.parts);
      begin = static_cast<uint64_t>(m.begin + r.begin) * s.count;
      count = static_cast<uint64_t>(r.end - r.begin) * s.count;
      break;
    }
  }
  if (begin > n || count > n - begin)
    return status::invalid("slice [" + std::to_string(begin) + ", +" + std::to_string(count) + ") overruns tensor '" +
                           t->desc.name + "' of " + std::to_string(n) + " elements");
  return slice_span{t->data + begin * dtype_size(t->desc.type), count, t->desc.type, t};
}

superstep_runner::superstep_runner(uint32_t self, transport& t, tile_memory& memory, const kernel_registry& registry,
                                   run_limits limits)
    : self_(self), transport_(t), memory_(memory), registry_(registry), limits_(limits) {}

superstep_runner::~superstep_runner() {
  auto deadline = clock_type::now() + std::chrono::milliseconds(100);
  retire_in_flight();
  while (!retired_.empty() && clock_type::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    retire_in_flight();
  }
  if (!retired_.empty())  // leak the counters: their frames' release callbacks still decrement them
    TESSERA_LOG_WARN(retired_in_flight() << " sent slices are still queued in ZeroMQ as tile " << self_
                                         << "'s runner goes away");
  delete in_flight_;
}

void superstep_runner::retire_in_flight() {
  if (in_flight_->load(std::memory_order_acquire) != 0) {
    retired_.push_back(in_flight_);
    in_flight_ = new std::atomic<uint32_t>(0);
  }
  std::erase_if(retired_, [](std::atomic<uint32_t>* c) {
    if (c->load(std::memory_order_acquire) != 0) return false;
    delete c;
    return true;
  });
}

uint32_t superstep_runner::retired_in_flight() const {
  uint32_t n = 0;
  for (auto* c : retired_) n += c->load(std::memory_order_acquire);
  return n;
}

bool superstep_runner::check_interrupted(const std::function<bool()>& interrupted) {
  if (!interrupted) return false;
  if (wait_) {
    auto now = clock_type::now();
    if (!event_pending_ && now < next_check_) return false;
    event_pending_ = false;
    next_check_ = now + limits_.poll_tick;
  }
  return interrupted();
}

status superstep_runner::wait_sends_released(const std::function<bool()>& interrupted) {
  // ZeroMQ's I/O thread releases a frame once it has written it to the kernel (ipc/tcp), which
  // the exchange and barrier of the superstep nearly always cover: so spin briefly, then yield,
  // then sleep in growing steps; a peer that is gone keeps frames queued, hence the deadline.
  if (in_flight_->load(std::memory_order_acquire) == 0) return ok_status();
  const auto start = clock_type::now();
  const auto deadline = start + limits_.exchange_timeout;
  auto sleep = std::chrono::microseconds(20);
  for (uint32_t pass = 0; in_flight_->load(std::memory_order_acquire) != 0; ++pass) {
    if (pass < 200) continue;
    if (pass < 264) {
      std::this_thread::yield();
      continue;
    }
    auto now = clock_type::now();
    if (check_interrupted(interrupted)) return status{errc::cancelled, "run aborted by the host"};
    if (now >= deadline)
      return status::timeout("tile " + std::to_string(self_) + " waited " +
                             std::to_string(limits_.exchange_timeout.count()) + " ms for ZeroMQ to send " +
                             std::to_string(in_flight_->load()) + " slices (is a peer gone?)");
    std::this_thread::sleep_for(sleep);
    sleep = std::min<std::chrono::microseconds>(sleep * 2, std::chrono::milliseconds(1));
  }
  return ok_status();
}

void superstep_runner::accept(envelope&& e) {
  auto type = peek_type(e);
  if (!type) {
    ++bad_;
    TESSERA_LOG_WARN("dropped a bad exchange message: " << type.error().message());
    return;
  }
  key k;
  uint64_t checksum = 0;
  if (*type == msg_type::exchange_data) {
    exchange_data d;
    if (auto st = decode(e, d); !st.ok()) {
      ++bad_;
      TESSERA_LOG_WARN("dropped a bad exchange message: " << st.message());
      return;
    }
    if (d.dst_tile != self_) {
      ++bad_;
      TESSERA_LOG_WARN("dropped a slice addressed to tile " << d.dst_tile << " (this is tile " << self_ << ")");
      return;
    }
    k = {d.batch_id, d.superstep, 0, d.src_tile, d.tag};
    checksum = d.checksum;
    if (finished_any_ && d.batch_id <= finished_batch_) {
      ++stale_;
      return;
    }
  } else if (*type == msg_type::sync_token) {
    sync_token s;
    if (auto st = decode(e, s); !st.ok()) {
      ++bad_;
      TESSERA_LOG_WARN("dropped a bad sync token: " << st.message());
      return;
    }
    k = {s.batch_id, s.superstep, 1, s.src_tile, s.round};
    if (finished_any_ && s.batch_id <= finished_batch_) {
      ++stale_;
      return;
    }
  } else {
    ++bad_;
    TESSERA_LOG_WARN("dropped a " << msg_type_name(*type) << " message on the exchange socket");
    return;
  }
  if (inbox_.size() >= limits_.max_inbox) {
    ++bad_;
    return;
  }
  if (!inbox_.emplace(k, inbox_entry{std::move(e), checksum}).second) ++stale_;  // a duplicate of one not yet consumed
}

void superstep_runner::purge_finished() {
  for (auto it = inbox_.begin(); it != inbox_.end();) {
    if (std::get<0>(it->first) <= finished_batch_) {
      it = inbox_.erase(it);
      ++stale_;
    } else {
      ++it;
    }
  }
}

result<superstep_runner::inbox_entry> superstep_runner::wait_for(const key& k, const std::function<bool()>& interrupted,
                                                                 const char* what) {
  auto deadline = clock_type::now() + limits_.exchange_timeout;
  for (;;) {
    auto it = inbox_.find(k);
    if (it != inbox_.end()) {
      inbox_entry e = std::move(it->second);
      inbox_.erase(it);
      return e;
    }
    if (check_interrupted(interrupted)) return status{errc::cancelled, "run aborted by the host"};
    auto now = clock_type::now();
    if (now >= deadline)
      return status::timeout("tile " + std::to_string(self_) + " waited " +
                             std::to_string(limits_.exchange_timeout.count()) + " ms for " + what + " from tile " +
                             std::to_string(std::get<3>(k)) + " (batch " + std::to_string(std::get<0>(k)) +
                             ", superstep " + std::to_string(std::get<1>(k)) + ")");
    auto wait = std::min(limits_.poll_tick, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                                                std::chrono::milliseconds(1));
    envelope e;
    bool event = false;
    auto got = wait_ ? wait_(e, wait, event) : transport_.recv(e, wait);
    if (!got) return got.error();
    event_pending_ |= event;
    if (*got) accept(std::move(e));
  }
}

status superstep_runner::exchange_phase(const program& prog, const run_program& run, uint32_t step,
                                        superstep_counters& c, const std::function<bool()>& interrupted) {
  const superstep& s = prog.steps[step];
  std::vector<std::pair<uint32_t, envelope>> held;
  // Byte ranges this superstep's receives write: a slice sent from one of them is copied, since
  // ZeroMQ may not have read it yet when the receive lands (a swap, an in-place reduction).
  std::vector<std::pair<const std::byte*, const std::byte*>> written;
  for (const recv_op& op : s.recvs)
    if (auto dst = resolve_slice(op.dst, memory_, rows_); dst && dst->elements)
      written.emplace_back(dst->data, dst->data + dst->bytes());
  for (const send_op& op : s.sends) {
    auto src = resolve_slice(op.src, memory_, rows_);
    if (!src) return src.error().with_context("send to tile " + std::to_string(op.peer));
    const size_t bytes = src->bytes();
    exchange_data d{prog.id, run.batch_id, step, self_, op.peer, op.tag, src->elements,
                    payload_checksum(src->data, bytes)};
    c.bytes_sent += bytes;
    if (!faults_) {
      const std::byte* begin = src->data;
      const std::byte* end = src->data + bytes;
      const bool overwritten = std::any_of(written.begin(), written.end(),
                                           [&](const auto& w) { return begin < w.second && w.first < end; });
      // A tensor received in place: the frame keeps the message alive (it may be replaced later).
      TESSERA_RETURN_IF_ERROR(transport_.send(
          op.peer, encode(d, overwritten ? copy_frame(begin, bytes)
                                         : borrow_frame(begin, bytes, in_flight_, src->tensor->held))));
      continue;
    }
    // Injected faults (fault_injector.hpp): the checksum above was taken before any corruption.
    // Copies here: a corrupted frame must not write into tile memory.
    send_decision f = faults_->on_send(static_cast<int>(op.peer), bytes);
    if (f.delay.count() > 0) std::this_thread::sleep_for(f.delay);
    if (f.drop) continue;
    envelope e = encode(d, copy_frame(src->data, bytes));
    if (f.corrupt) e.payloads[0].data<unsigned char>()[bytes / 2] ^= 0x5A;
    if (f.duplicate) TESSERA_RETURN_IF_ERROR(transport_.send(op.peer, encode(d, copy_frame(src->data, bytes))));
    if (f.hold) {
      held.emplace_back(op.peer, std::move(e));
      continue;
    }
    TESSERA_RETURN_IF_ERROR(transport_.send(op.peer, std::move(e)));
  }
  // Reordered messages go out after the rest of this superstep's sends.
  for (auto& [peer, e] : held) TESSERA_RETURN_IF_ERROR(transport_.send(peer, std::move(e)));
  for (const recv_op& op : s.recvs) {
    auto dst = resolve_slice(op.dst, memory_, rows_);
    if (!dst) return dst.error().with_context("receive from tile " + std::to_string(op.peer));
    auto e = wait_for({run.batch_id, step, 0, op.peer, op.tag}, interrupted, "a slice");
    if (!e) return e.error();
    const zmq::message_t& payload = e->message.payloads[0];
    if (payload.size() != dst->bytes())
      return status::bad_message("tile " + std::to_string(op.peer) + " sent " + std::to_string(payload.size()) +
                                 " bytes for tag " + std::to_string(op.tag) + ", tile " + std::to_string(self_) +
                                 " expects " + std::to_string(dst->elements) + " elements of " +
                                 std::to_string(dtype_size(dst->type)) + " bytes");
    if (op.accumulate && dst->type != dtype::f32)
      return status::invalid("a receive accumulates only into f32 tensors (tag " + std::to_string(op.tag) + ")");
    // The header was decoded and checked in accept(); only the payload is checked here.
    if (payload_checksum(payload.data(), payload.size()) != e->checksum)
      return status::bad_message("corrupt slice from tile " + std::to_string(op.peer) + " (tag " +
                                 std::to_string(op.tag) + ", superstep " + std::to_string(step) +
                                 "): checksum mismatch");
    c.bytes_received += payload.size();
    if (!op.accumulate && e->message.private_payloads && payload.size() >= limits_.in_place_min_bytes &&
        dst->whole()) {
      // Receive in place: the message becomes the tensor's storage. Held on the heap, so its
      // bytes stay put (a very small message keeps them inside the message object).
      auto owner = std::make_shared<zmq::message_t>(std::move(e->message.payloads[0]));
      if (memory_.hold(op.dst.tensor_id, static_cast<std::byte*>(owner->data()), owner).ok()) {
        in_place_ += owner->size();
        continue;
      }
      e->message.payloads[0] = std::move(*owner);  // no room under the cap: copy it, as below
    }
    // A small message's bytes live inside the message object, not 4-byte aligned: read by memcpy.
    const auto* in = static_cast<const unsigned char*>(payload.data());
    if (op.accumulate) {
      auto* acc = reinterpret_cast<float*>(dst->data);
      for (uint64_t i = 0; i < dst->elements; ++i) {
        float v;
        std::memcpy(&v, in + i * sizeof v, sizeof v);
        acc[i] += v;
      }
    } else {
      std::memcpy(dst->data, in, payload.size());
    }
  }
  return ok_status();
}

status superstep_runner::sync_phase(const program& prog, const run_program& run, uint32_t step,
                                    const std::function<bool()>& interrupted) {
  const uint32_t n = static_cast<uint32_t>(prog.tiles.size());
  if (n <= 1) return ok_status();
  uint32_t rank = n;
  for (uint32_t i = 0; i < n; ++i)
    if (prog.tiles[i] == self_) rank = i;
  if (rank == n) return status::invalid("tile " + std::to_string(self_) + " is not a member of program " +
                                        std::to_string(prog.id));
  // Combining tree of fan-in k over ranks: rank r's children are k*r+1 .. k*r+k, its parent
  // (r-1)/k. Round 0 goes up (every child has arrived), round 1 comes down (all have arrived).
  // 2(n-1) tokens per barrier; for n <= k a central barrier at rank 0 (2 hops).
  const uint64_t k = std::max<uint32_t>(1, limits_.barrier_fan_in);
  const uint64_t first_child = k * rank + 1;
  const uint64_t last_child = std::min<uint64_t>(k * rank + k, n - 1);
  for (uint64_t c = first_child; c <= last_child; ++c) {
    auto e = wait_for({run.batch_id, step, 1, prog.tiles[c], 0}, interrupted, "the barrier");
    if (!e) return e.error();
  }
  if (rank != 0) {
    const uint32_t parent = prog.tiles[(rank - 1) / k];
    TESSERA_RETURN_IF_ERROR(transport_.send(parent, encode(sync_token{prog.id, run.batch_id, step, 0, self_})));
    auto e = wait_for({run.batch_id, step, 1, parent, 1}, interrupted, "the barrier");
    if (!e) return e.error();
  }
  for (uint64_t c = first_child; c <= last_child; ++c)
    TESSERA_RETURN_IF_ERROR(
        transport_.send(prog.tiles[c], encode(sync_token{prog.id, run.batch_id, step, 1, self_})));
  return ok_status();
}

result<std::vector<superstep_counters>> superstep_runner::run(const program& prog, const run_program& run,
                                                              const std::function<bool()>& interrupted) {
  if (finished_any_ && run.batch_id <= finished_batch_)
    return status::invalid("batch id " + std::to_string(run.batch_id) + " is not newer than the last batch " +
                           std::to_string(finished_batch_) + " on tile " + std::to_string(self_));
  std::vector<int32_t> offsets(run.seq_lengths.size() + 1, 0);
  for (size_t i = 0; i < run.seq_lengths.size(); ++i) offsets[i + 1] = offsets[i] + run.seq_lengths[i];
  rows_.active_tokens = run.active_tokens;
  rows_.seq_offsets = run.seq_lengths.empty() ? std::vector<int32_t>{} : offsets;
  kernel_context ctx{self_, run.active_tokens, run.seq_lengths, offsets, &rows_};

  std::vector<superstep_counters> counters(prog.steps.size());
  if (faults_) faults_->begin_batch();
  event_pending_ = false;
  next_check_ = {};
  retire_in_flight();  // frames of a failed earlier run do not hold up this one
  status result_status;
  for (uint32_t step = 0; step < prog.steps.size() && result_status.ok(); ++step) {
    superstep_counters& c = counters[step];
    if (step > 0) {
      // The previous superstep's slices may still be read by ZeroMQ: the compute set must not
      // write tile memory before they are released. Charged to that superstep's exchange.
      auto tw = clock_type::now();
      result_status = wait_sends_released(interrupted);
      counters[step - 1].exchange_ns += ns_since(tw);
      if (!result_status.ok()) break;
    }
    if (faults_) faults_->at_superstep(step);
    auto t0 = clock_type::now();
    for (const kernel_call& call : prog.steps[step].compute) {
      result_status = registry_.run(call, memory_, ctx);
      if (!result_status.ok()) {
        result_status = result_status.with_context("tile " + std::to_string(self_) + " superstep " + std::to_string(step));
        break;
      }
    }
    c.compute_ns = ns_since(t0);
    if (faults_) {
      faults_->after_compute(std::chrono::nanoseconds(c.compute_ns));
      c.compute_ns = ns_since(t0);
    }
    if (!result_status.ok()) break;
    auto t1 = clock_type::now();
    result_status = exchange_phase(prog, run, step, c, interrupted);
    c.exchange_ns = ns_since(t1);
    if (!result_status.ok() || !prog.steps[step].sync) continue;
    auto t2 = clock_type::now();
    result_status = sync_phase(prog, run, step, interrupted);
    c.sync_ns = ns_since(t2);
  }
  finished_batch_ = run.batch_id;
  finished_any_ = true;
  purge_finished();
  // The caller may overwrite tile memory once run() returns (outputs, next inputs). A failed
  // run does not wait (see the header): its frames are retired at the next run.
  if (result_status.ok()) {
    auto tw = clock_type::now();
    result_status = wait_sends_released(interrupted);
    if (!counters.empty()) counters.back().exchange_ns += ns_since(tw);
  }
  if (!result_status.ok()) return result_status;
  return counters;
}

}  // namespace tessera::tile
