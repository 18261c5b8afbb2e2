// All msgpack code of tessera lives here (and in wire_reader.hpp beside it).
//
// Every message and nested struct lists its fields once, in wire order, with the limits its
// decoder checks (fields() below). That one list packs a message (field_writer), checks and
// reads it (field_reader) and counts its fields (field_counter, the msgpack array length on
// the wire), so encoder, decoder and field count cannot disagree. What a field list cannot say
// (payload frames against the header, sums, cross-field rules) each decode() checks after it.
#include "tessera/exchange/codec.hpp"

#include <bit>
#include <concepts>
#include <cstring>
#include <msgpack.hpp>
#include <type_traits>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // XXH3_64bits -> the library's AVX2 / AVX-512 code, chosen at run time
#endif

#include "tessera/common/check.hpp"
#include "wire_reader.hpp"

namespace tessera::exchange {

namespace {

using packer = msgpack::packer<msgpack::sbuffer>;

// `of<T, U>`: T is U or const U (a field list serves the writer, which sees a const message,
// and the reader, which fills one).
template <class T, class U>
concept of = std::same_as<std::remove_const_t<T>, U>;

// ---- field lists: f(member, "name", decode limits...) in wire order ----

template <class F, of<tensor_desc> T>
void fields(F& f, T& d) {
  f(d.id, "tensor.id");
  f(d.name, "tensor.name", 256);
  f(d.type, "tensor.dtype", dtype::i8);
  f(d.shape, "tensor.shape", max_tensor_rank);
}

template <class F, of<slice_ref> T>
void fields(F& f, T& s) {
  f(s.tensor_id, "slice.tensor_id");
  f(s.kind, "slice.kind", slice_kind::token_part);
  f(s.offset, "slice.offset", max_tensor_bytes / 4);
  f(s.count, "slice.count", max_tensor_bytes / 4);
  f(s.part, "slice.part");
  f(s.parts, "slice.parts");
  f(s.micro, "slice.micro");
  f(s.micros, "slice.micros", 1u << 16);
}

template <class F, of<kernel_call> T>
void fields(F& f, T& k) {
  f(k.kernel, "kernel_call.kernel", static_cast<models::kernel_id>(models::all_kernels.size() - 1));
  f(k.inputs, "kernel_call.inputs", 64);
  f(k.outputs, "kernel_call.outputs", 64);
  f(k.params, "kernel_call.params", 1024);
  f(k.fparams, "kernel_call.fparams", 1024);
}

template <class F, of<send_op> T>
void fields(F& f, T& o) {
  f(o.peer, "send.peer", max_tiles - 1);
  f(o.tag, "send.tag");
  f(o.src, "send.src");
}

template <class F, of<recv_op> T>
void fields(F& f, T& o) {
  f(o.peer, "recv.peer", max_tiles - 1);
  f(o.tag, "recv.tag");
  f(o.dst, "recv.dst");
  f(o.accumulate, "recv.accumulate");
}

template <class F, of<superstep> T>
void fields(F& f, T& s) {
  f(s.compute, "superstep.compute");
  f(s.sends, "superstep.sends");
  f(s.recvs, "superstep.recvs");
  f(s.sync, "superstep.sync");
}

template <class F, of<superstep_counters> T>
void fields(F& f, T& c) {
  f(c.compute_ns, "counters.compute_ns");
  f(c.exchange_ns, "counters.exchange_ns");
  f(c.sync_ns, "counters.sync_ns");
  f(c.bytes_sent, "counters.bytes_sent");
  f(c.bytes_received, "counters.bytes_received");
}

template <class F, of<register_tile> T>
void fields(F& f, T& m) {
  f(m.tile_id, "tile_id", max_tiles - 1);
  f(m.incarnation, "incarnation");
  f(m.pid, "pid");
  f(m.exchange_endpoint, "exchange_endpoint", 512);
  f(m.hostname, "hostname", 256);
  f(m.memory_capacity, "memory_capacity");
}

template <class F, of<peer_directory> T>
void fields(F& f, T& m) {
  f(m.endpoints, "endpoints", max_tiles, 512);
  f(m.incarnations, "incarnations", max_tiles);
}

template <class F, of<alloc_tensor> T>
void fields(F& f, T& m) {
  f(m.request_id, "request_id");
  f(m.desc, "desc");
  f(m.has_data, "has_data");
  f(m.zero, "zero");
}

template <class F, of<free_tensors> T>
void fields(F& f, T& m) {
  f(m.request_id, "request_id");
  f(m.ids, "ids", 1u << 20);
}

template <class F, of<load_program> T>
void fields(F& f, T& m) {
  f(m.request_id, "request_id");
  f(m.prog.id, "program_id");
  f(m.prog.tiles, "tiles", max_tiles);
  f(m.prog.temporaries, "temporaries");
  f(m.prog.steps, "steps");
}

template <class F, of<run_program> T>
void fields(F& f, T& m) {
  f(m.program_id, "program_id");
  f(m.batch_id, "batch_id");
  f(m.seq_lengths, "seq_lengths", max_batch_sequences);
  f(m.active_tokens, "active_tokens");
  f(m.inputs, "inputs");
  f(m.outputs, "outputs");
  f(m.collect_counters, "collect_counters");
}

template <class F, of<exchange_data> T>
void fields(F& f, T& m) {
  f(m.program_id, "program_id");
  f(m.batch_id, "batch_id");
  f(m.superstep, "superstep");
  f(m.src_tile, "src_tile", max_tiles - 1);
  f(m.dst_tile, "dst_tile", max_tiles - 1);
  f(m.tag, "tag");
  f(m.elements, "elements", max_tensor_bytes / 4);
  f(m.checksum, "checksum");
}

template <class F, of<sync_token> T>
void fields(F& f, T& m) {
  f(m.program_id, "program_id");
  f(m.batch_id, "batch_id");
  f(m.superstep, "superstep");
  f(m.round, "round", 31u);
  f(m.src_tile, "src_tile", max_tiles - 1);
}

template <class F, of<run_done> T>
void fields(F& f, T& m) {
  f(m.program_id, "program_id");
  f(m.batch_id, "batch_id");
  f(m.tile_id, "tile_id", max_tiles - 1);
  f(m.code, "code", errc::internal);
  f(m.message, "message", 64 * 1024);
  f(m.counters, "counters");
  f(m.memory_used, "memory_used");
  f(m.memory_high_water, "memory_high_water");
  f(m.outputs, "outputs", 1024u);
  f(m.injected, "injected");
}

template <class F, of<heartbeat> T>
void fields(F& f, T& m) {
  f(m.tile_id, "tile_id", max_tiles - 1);
  f(m.incarnation, "incarnation");
  f(m.memory_used, "memory_used");
  f(m.memory_high_water, "memory_high_water");
  f(m.bad_messages, "bad_messages");
  f(m.stale_messages, "stale_messages");
  f(m.injected, "injected");
}

template <class F, of<shutdown> T>
void fields(F& f, T& m) {
  f(m.reason, "reason", 4096);
}

template <class F, of<ack> T>
void fields(F& f, T& m) {
  f(m.request_id, "request_id");
  f(m.tile_id, "tile_id", max_tiles - 1);
  f(m.code, "code", errc::internal);
  f(m.message, "message", 64 * 1024);
  f(m.payloads, "payloads", 1024u);
}

template <class F, of<abort_run> T>
void fields(F& f, T& m) {
  f(m.program_id, "program_id");
  f(m.batch_id, "batch_id");
  f(m.reason, "reason", 4096);
}

template <class F, of<fetch_tensor> T>
void fields(F& f, T& m) {
  f(m.request_id, "request_id");
  f(m.slice, "slice");
  f(m.active_tokens, "active_tokens");
}

template <class F, of<infer_batch> T>
void fields(F& f, T& m) {
  f(m.batch_id, "batch_id");
  f(m.seq_lengths, "seq_lengths", max_batch_sequences);
  f(m.layout, "layout", uint8_t{1});
  f(m.padded_length, "padded_length");
  f(m.compute, "compute", dtype::i8);
  f(m.every_token, "every_token", max_batch_sequences);
}

template <class F, of<infer_result> T>
void fields(F& f, T& m) {
  f(m.batch_id, "batch_id");
  f(m.code, "code", errc::internal);
  f(m.message, "message", 64 * 1024);
  f(m.num_labels, "num_labels");
  f(m.wall_seconds, "wall_seconds");
  f(m.modelled_seconds, "modelled_seconds");
}

// Which msg_type each message struct travels as.
template <class M> constexpr msg_type type_of = msg_type{};
template <> constexpr msg_type type_of<register_tile> = msg_type::register_tile;
template <> constexpr msg_type type_of<peer_directory> = msg_type::peer_directory;
template <> constexpr msg_type type_of<alloc_tensor> = msg_type::alloc_tensor;
template <> constexpr msg_type type_of<free_tensors> = msg_type::free_tensors;
template <> constexpr msg_type type_of<load_program> = msg_type::load_program;
template <> constexpr msg_type type_of<run_program> = msg_type::run_program;
template <> constexpr msg_type type_of<exchange_data> = msg_type::exchange_data;
template <> constexpr msg_type type_of<sync_token> = msg_type::sync_token;
template <> constexpr msg_type type_of<run_done> = msg_type::run_done;
template <> constexpr msg_type type_of<heartbeat> = msg_type::heartbeat;
template <> constexpr msg_type type_of<shutdown> = msg_type::shutdown;
template <> constexpr msg_type type_of<ack> = msg_type::ack;
template <> constexpr msg_type type_of<abort_run> = msg_type::abort_run;
template <> constexpr msg_type type_of<fetch_tensor> = msg_type::fetch_tensor;
template <> constexpr msg_type type_of<infer_batch> = msg_type::infer_batch;
template <> constexpr msg_type type_of<infer_result> = msg_type::infer_result;

// ---- the three readers of a field list ----

struct field_counter {
  uint32_t n = 0;
  template <class... A>
  void operator()(A&&...) {
    ++n;
  }
};

/// Fields of `x` on the wire (its msgpack array length).
template <class T>
uint32_t field_count(const T& x) {
  field_counter c;
  fields(c, x);
  return c.n;
}

// A type with a field list travels as a nested array.
template <class T>
concept wire_struct = requires(field_counter& c, const T& x) { fields(c, x); };

struct field_writer {
  packer& p;

  template <class T, class... Limits>
  void operator()(const T& v, const char*, Limits...) {
    put(v);
  }

  template <wire_struct T>
  void put(const T& x) {
    p.pack_array(field_count(x));
    fields(*this, x);
  }
  template <wire_struct T>
  void put(const std::vector<T>& xs) {
    p.pack_array(static_cast<uint32_t>(xs.size()));
    for (const auto& x : xs) put(x);
  }
  template <class E>
    requires std::is_enum_v<E>
  void put(const E& v) {
    p.pack(static_cast<uint8_t>(v));
  }
  void put(const fault_counts& c) {
    p.pack_array(static_cast<uint32_t>(c.size()));
    for (uint64_t n : c) p.pack(n);
  }
  // Reals always go out as IEEE float32/float64. msgpack-c's pack_float and pack_double
  // send a whole-valued real as an integer and, on the way, cast 2^64 to uint64_t
  // (undefined behaviour; found by the wire fuzzer).
  void put(float v) { raw_real(0xca, std::bit_cast<uint32_t>(v)); }
  void put(double v) { raw_real(0xcb, std::bit_cast<uint64_t>(v)); }
  void put(const std::vector<float>& v) {
    p.pack_array(static_cast<uint32_t>(v.size()));
    for (float x : v) put(x);
  }
  template <class T>  // integers, bools, strings and lists of them: msgpack's own
  void put(const T& v) {
    p.pack(v);
  }

 private:
  template <class U>
  void raw_real(uint8_t tag, U bits) {
    char b[1 + sizeof(U)];
    b[0] = static_cast<char>(tag);
    for (size_t i = 0; i < sizeof(U); ++i) b[1 + i] = static_cast<char>(bits >> (8 * (sizeof(U) - 1 - i)));
    out.write(b, sizeof b);
  }

 public:
  msgpack::sbuffer& out;
};

struct field_reader {
  wire_reader& r;

  template <std::unsigned_integral T>
    requires(!std::same_as<T, bool>)
  void operator()(T& v, const char* name, T max = std::numeric_limits<T>::max()) {
    v = static_cast<T>(r.u64(name, max));
  }
  void operator()(int64_t& v, const char* name) { v = r.i64(name); }
  void operator()(int32_t& v, const char* name) { v = static_cast<int32_t>(r.i64(name)); }
  void operator()(bool& v, const char* name) { v = r.boolean(name); }
  void operator()(double& v, const char* name) { v = r.f64(name); }
  void operator()(std::string& v, const char* name, uint32_t max_len) { v = r.str(name, max_len); }
  void operator()(std::vector<std::string>& v, const char* name, uint32_t max_count, uint32_t max_len) {
    v = r.str_list(name, max_count, max_len);
  }
  void operator()(std::vector<uint32_t>& v, const char* name, uint32_t max_count) { v = r.u32_list(name, max_count); }
  void operator()(std::vector<int32_t>& v, const char* name, uint32_t max_count) { v = r.i32_list(name, max_count); }
  void operator()(std::vector<int64_t>& v, const char* name, uint32_t max_count) { v = r.i64_list(name, max_count); }
  void operator()(std::vector<float>& v, const char* name, uint32_t max_count) { v = r.f32_list(name, max_count); }
  template <class E>
    requires std::is_enum_v<E>
  void operator()(E& v, const char* name, E max) {
    v = static_cast<E>(r.u8(name, static_cast<uint8_t>(max)));
  }
  // Exactly one count per fault kind this build knows (a new kind bumps protocol_version).
  void operator()(fault_counts& c, const char* name) {
    wire_reader a = r.array(name, static_cast<int64_t>(c.size()));
    for (auto& n : c) n = a.u64(name);
  }
  template <wire_struct T>
  void operator()(T& x, const char* name) {
    wire_reader a = r.array(name, field_count(x));
    field_reader inner{a};
    fields(inner, x);
    check(a, x);
  }
  template <wire_struct T>
  void operator()(std::vector<T>& xs, const char* name) {
    wire_reader a = r.array(name);
    xs.resize(a.size());
    field_reader elements{a};
    for (auto& x : xs) elements(x, name);
  }

 private:
  // Checks a field list cannot state, on nested structs.
  template <class T>
  static void check(wire_reader&, T&) {}
  static void check(wire_reader& a, tensor_desc& d) {
    uint64_t elements = 1;
    for (int64_t dim : d.shape) {
      if (dim < 0) return a.fail("tensor '" + d.name + "' has a negative dimension");
      if (dim != 0 && elements > max_tensor_bytes / 4 / static_cast<uint64_t>(dim))
        return a.fail("tensor '" + d.name + "' is larger than the protocol limit of " +
                      std::to_string(max_tensor_bytes) + " bytes");
      elements *= static_cast<uint64_t>(dim);
    }
  }
  static void check(wire_reader& a, kernel_call& k) {
    if (auto err = models::check_params(k.kernel, k.params, k.fparams))
      a.fail("kernel_call " + std::string(models::kernel_name(k.kernel)) + ": " + *err);
  }
  static void check(wire_reader& a, slice_ref& s) {
    if (s.parts == 0 || s.part >= s.parts) a.fail("slice.part must be below slice.parts (>0)");
    if (s.micros == 0 || s.micro >= s.micros) a.fail("slice.micro must be below slice.micros (>0)");
  }
};

// ---- envelopes ----

// [magic, version, type, [fields...]] in frame 0, then the payload frames.
template <class M>
envelope encode_message(const M& m, std::vector<zmq::message_t> payloads = {}) {
  msgpack::sbuffer buf;
  packer p{&buf};
  p.pack_array(4);
  p.pack(protocol_magic);
  p.pack(protocol_version);
  p.pack(static_cast<uint8_t>(type_of<M>));
  field_writer{p, buf}.put(m);
  envelope e;
  e.header = zmq::message_t(buf.data(), buf.size());
  e.payloads = std::move(payloads);
  return e;
}

// Parses frame 0 with limits, checks magic, version, type and every field of M.
template <class M>
status decode_message(const envelope& e, M& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(parse_header(e.header.data<char>(), e.header.size(), h));
  if (h.type != type_of<M>)
    return status::bad_message("expected a " + std::string(msg_type_name(type_of<M>)) + " message, got " +
                               std::string(msg_type_name(h.type)));
  wire_reader r = h.body(field_count(m));
  field_reader read{r};
  fields(read, m);
  return r.finish(msg_type_name(type_of<M>).data());
}

status expect_payloads(const envelope& e, size_t n, std::string_view what) {
  if (e.payloads.size() != n) {
    return status::bad_message(std::string(what) + ": expected " + std::to_string(n) + " payload frame(s), got " +
                               std::to_string(e.payloads.size()));
  }
  return ok_status();
}

// Decodes M and checks that no payload frame came with it.
template <class M>
status decode_plain(const envelope& e, M& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  return expect_payloads(e, 0, msg_type_name(type_of<M>));
}

std::vector<zmq::message_t> one(zmq::message_t m) {
  std::vector<zmq::message_t> v;
  v.push_back(std::move(m));
  return v;
}

}  // namespace

std::string_view msg_type_name(msg_type t) {
  switch (t) {
    case msg_type::register_tile: return "register_tile";
    case msg_type::peer_directory: return "peer_directory";
    case msg_type::alloc_tensor: return "alloc_tensor";
    case msg_type::free_tensors: return "free_tensors";
    case msg_type::load_program: return "load_program";
    case msg_type::run_program: return "run_program";
    case msg_type::exchange_data: return "exchange_data";
    case msg_type::sync_token: return "sync_token";
    case msg_type::run_done: return "run_done";
    case msg_type::heartbeat: return "heartbeat";
    case msg_type::shutdown: return "shutdown";
    case msg_type::ack: return "ack";
    case msg_type::abort_run: return "abort_run";
    case msg_type::fetch_tensor: return "fetch_tensor";
    case msg_type::infer_batch: return "infer_batch";
    case msg_type::infer_result: return "infer_result";
  }
  return "unknown";
}

uint64_t tensor_desc::elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

row_range token_partition(int64_t rows, uint32_t part, uint32_t parts) {
  int64_t base = rows / parts, extra = rows % parts;
  int64_t begin = part * base + std::min<int64_t>(part, extra);
  int64_t len = base + (static_cast<int64_t>(part) < extra ? 1 : 0);
  return {begin, begin + len};
}

std::vector<int32_t> micro_batch_bounds(const std::vector<int32_t>& offsets, uint32_t parts) {
  const int32_t n = offsets.empty() ? 0 : static_cast<int32_t>(offsets.size()) - 1;
  const int64_t total = n > 0 ? offsets[n] : 0;
  std::vector<int32_t> b(parts + 1, n);
  b[0] = 0;
  int32_t i = 0;
  for (uint32_t k = 1; k < parts; ++k) {
    // The first sequence starting at or after the k-th equal share of the tokens.
    const int64_t target = (total * k + parts / 2) / parts;
    while (i < n && offsets[i] < target) ++i;
    b[k] = std::max(b[k - 1], i);
  }
  return b;
}

row_range batch_rows::micro_seqs(uint32_t micro, uint32_t micros) const {
  if (seq_offsets.size() < 2) return {0, 0};
  auto b = micro_batch_bounds(seq_offsets, micros);
  return {b[micro], b[micro + 1]};
}

row_range batch_rows::micro_rows(uint32_t micro, uint32_t micros) const {
  if (micros <= 1) return {0, active_tokens};
  if (seq_offsets.size() < 2) return micro == 0 ? row_range{0, active_tokens} : row_range{0, 0};
  auto s = micro_seqs(micro, micros);
  return {seq_offsets[static_cast<size_t>(s.begin)], seq_offsets[static_cast<size_t>(s.end)]};
}

// XXH3 (xxHash, Debian's libxxhash): every byte's value and position feed the hash, so flipped
// bits, swapped blocks and shifted data are all caught; the result is the same on every machine
// (the vector width the library picks at run time does not change it).
uint64_t payload_checksum(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

uint64_t envelope::payload_bytes() const {
  uint64_t n = 0;
  for (const auto& p : payloads) n += p.size();
  return n;
}

zmq::message_t copy_frame(const void* data, size_t bytes) { return zmq::message_t(data, bytes); }

namespace {
// ZeroMQ calls this (from its I/O thread, or the thread that drops the last reference) when it
// is done with a borrowed frame. Release order: the caller's acquire load of 0 then also sees
// that ZeroMQ's reads of the bytes are over.
void release_borrowed(void* /*data*/, void* hint) {
  static_cast<std::atomic<uint32_t>*>(hint)->fetch_sub(1, std::memory_order_release);
}
}  // namespace

zmq::message_t borrow_frame(const void* data, size_t bytes, std::atomic<uint32_t>* in_flight) {
  TESSERA_CHECK(in_flight != nullptr) << "borrow_frame needs an in-flight counter";
  if (bytes == 0) return zmq::message_t();  // nothing to borrow
  in_flight->fetch_add(1, std::memory_order_relaxed);
  try {
    // zmq_msg_init_data takes a non-const pointer; ZeroMQ only reads through it.
    return zmq::message_t(const_cast<void*>(data), bytes, &release_borrowed, in_flight);
  } catch (const zmq::error_t& ex) {  // ENOMEM only; the callback is not called then
    in_flight->fetch_sub(1, std::memory_order_relaxed);
    TESSERA_CHECK(false) << "zmq_msg_init_data failed: " << ex.what();
    return zmq::message_t();
  }
}

namespace {
struct owned_borrow {
  std::atomic<uint32_t>* in_flight;
  std::shared_ptr<void> owner;
};
void release_owned(void* /*data*/, void* hint) {
  auto* b = static_cast<owned_borrow*>(hint);
  auto* counter = b->in_flight;
  delete b;  // drops the reference to the bytes' owner before the counter says they are free
  counter->fetch_sub(1, std::memory_order_release);
}
}  // namespace

zmq::message_t borrow_frame(const void* data, size_t bytes, std::atomic<uint32_t>* in_flight,
                            std::shared_ptr<void> owner) {
  if (!owner) return borrow_frame(data, bytes, in_flight);
  TESSERA_CHECK(in_flight != nullptr) << "borrow_frame needs an in-flight counter";
  if (bytes == 0) return zmq::message_t();
  auto* hint = new owned_borrow{in_flight, std::move(owner)};
  in_flight->fetch_add(1, std::memory_order_relaxed);
  try {
    return zmq::message_t(const_cast<void*>(data), bytes, &release_owned, hint);
  } catch (const zmq::error_t& ex) {  // ENOMEM only; the callback is not called then
    in_flight->fetch_sub(1, std::memory_order_relaxed);
    delete hint;
    TESSERA_CHECK(false) << "zmq_msg_init_data failed: " << ex.what();
    return zmq::message_t();
  }
}

status check_tile_id(uint32_t tile_id, uint32_t group_size, const char* field) {
  if (tile_id >= group_size) {
    return status::bad_message(std::string(field) + " " + std::to_string(tile_id) + " is outside the group of " +
                               std::to_string(group_size) + " tiles");
  }
  return ok_status();
}

result<msg_type> peek_type(const envelope& e) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(parse_header(e.header.data<char>(), e.header.size(), h));
  return h.type;
}

std::optional<uint64_t> peek_request_id(const envelope& e) {
  parsed_header h;
  if (!parse_header(e.header.data<char>(), e.header.size(), h).ok()) return std::nullopt;
  uint32_t field = 0;  // where the id sits in the body
  switch (h.type) {
    case msg_type::ack:
    case msg_type::infer_batch:
    case msg_type::infer_result:
      field = 0;
      break;
    case msg_type::run_done:
      field = 1;  // after program_id
      break;
    default:
      return std::nullopt;
  }
  if (h.body_obj->via.array.size <= field) return std::nullopt;
  const msgpack::object& id = h.body_obj->via.array.ptr[field];
  if (id.type != msgpack::type::POSITIVE_INTEGER) return std::nullopt;
  return id.via.u64;
}


// ---- messages without payload frames ----
envelope encode(const register_tile& m) { return encode_message(m); }
status decode(const envelope& e, register_tile& m) { return decode_plain(e, m); }

envelope encode(const peer_directory& m) { return encode_message(m); }
status decode(const envelope& e, peer_directory& m) {
  TESSERA_RETURN_IF_ERROR(decode_plain(e, m));
  if (m.endpoints.size() != m.incarnations.size() || m.endpoints.empty())
    return status::bad_message("peer_directory: endpoints and incarnations differ in count or are empty");
  return ok_status();
}

envelope encode(const free_tensors& m) { return encode_message(m); }
status decode(const envelope& e, free_tensors& m) { return decode_plain(e, m); }

envelope encode(const load_program& m) { return encode_message(m); }
status decode(const envelope& e, load_program& m) {
  TESSERA_RETURN_IF_ERROR(decode_plain(e, m));
  for (uint32_t tile : m.prog.tiles) TESSERA_RETURN_IF_ERROR(check_tile_id(tile, max_tiles, "program tile"));
  return ok_status();
}

envelope encode(const sync_token& m) { return encode_message(m); }
status decode(const envelope& e, sync_token& m) { return decode_plain(e, m); }

envelope encode(const heartbeat& m) { return encode_message(m); }
status decode(const envelope& e, heartbeat& m) { return decode_plain(e, m); }

envelope encode(const shutdown& m) { return encode_message(m); }
status decode(const envelope& e, shutdown& m) { return decode_plain(e, m); }

envelope encode(const abort_run& m) { return encode_message(m); }
status decode(const envelope& e, abort_run& m) { return decode_plain(e, m); }

envelope encode(const fetch_tensor& m) { return encode_message(m); }
status decode(const envelope& e, fetch_tensor& m) { return decode_plain(e, m); }

// ---- messages with payload frames ----

envelope encode(const alloc_tensor& m, zmq::message_t data) {
  return m.has_data ? encode_message(m, one(std::move(data))) : encode_message(m);
}
status decode(const envelope& e, alloc_tensor& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, m.has_data ? 1 : 0, "alloc_tensor"));
  if (m.has_data && e.payloads[0].size() != m.desc.bytes()) {
    return status::bad_message("alloc_tensor '" + m.desc.name + "': payload has " +
                               std::to_string(e.payloads[0].size()) + " bytes, shape needs " +
                               std::to_string(m.desc.bytes()));
  }
  return ok_status();
}

envelope encode(const run_program& m, std::vector<zmq::message_t> inputs) {
  return encode_message(m, std::move(inputs));
}
status decode(const envelope& e, run_program& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  if (m.active_tokens < 0) return status::bad_message("run_program: active_tokens is negative");
  int64_t sum = 0;
  for (int32_t len : m.seq_lengths) {
    if (len <= 0) return status::bad_message("run_program: a sequence length is not positive");
    sum += len;
  }
  if (!m.seq_lengths.empty() && sum != m.active_tokens)
    return status::bad_message("run_program: active_tokens " + std::to_string(m.active_tokens) +
                               " differs from the sum of sequence lengths " + std::to_string(sum));
  return expect_payloads(e, m.inputs.size(), "run_program");
}

envelope encode(const exchange_data& m, zmq::message_t slice) { return encode_message(m, one(std::move(slice))); }
status decode(const envelope& e, exchange_data& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, 1, "exchange_data"));
  if (e.payloads[0].size() != m.elements * 4 && e.payloads[0].size() != m.elements * 2) {
    return status::bad_message("exchange_data: payload has " + std::to_string(e.payloads[0].size()) +
                               " bytes, header says " + std::to_string(m.elements) + " elements (of 4 or 2 bytes)");
  }
  return ok_status();
}

// The header states how many payload frames follow: the frames given here, whatever m says.
envelope encode(const run_done& m, std::vector<zmq::message_t> outputs) {
  run_done h = m;
  h.outputs = static_cast<uint32_t>(outputs.size());
  return encode_message(h, std::move(outputs));
}
status decode(const envelope& e, run_done& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  return expect_payloads(e, m.outputs, "run_done");
}

envelope encode(const ack& m, std::vector<zmq::message_t> payloads) {
  ack h = m;
  h.payloads = static_cast<uint32_t>(payloads.size());
  return encode_message(h, std::move(payloads));
}
status decode(const envelope& e, ack& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  return expect_payloads(e, m.payloads, "ack");
}

envelope encode(const infer_batch& m, zmq::message_t token_ids, zmq::message_t token_types) {
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(token_ids));
  frames.push_back(std::move(token_types));
  return encode_message(m, std::move(frames));
}
status decode(const envelope& e, infer_batch& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, 2, "infer_batch"));
  uint64_t tokens = 0;
  for (int32_t len : m.seq_lengths) {
    if (len <= 0) return status::bad_message("infer_batch: a sequence length is not positive");
    tokens += static_cast<uint64_t>(len);
  }
  for (size_t i = 0; i < m.every_token.size(); ++i)
    if (m.every_token[i] >= m.seq_lengths.size() || (i > 0 && m.every_token[i] <= m.every_token[i - 1]))
      return status::bad_message("infer_batch: every_token names sequence " + std::to_string(m.every_token[i]) +
                                 " (indices must be increasing and below the " + std::to_string(m.seq_lengths.size()) +
                                 " sequences)");
  for (const auto& p : e.payloads) {
    if (p.size() != tokens * 4)
      return status::bad_message("infer_batch: a token frame has " + std::to_string(p.size()) +
                                 " bytes, the lengths need " + std::to_string(tokens * 4));
  }
  return ok_status();
}

envelope encode(const infer_result& m, zmq::message_t logits) {
  return m.code == errc::ok ? encode_message(m, one(std::move(logits))) : encode_message(m);
}
status decode(const envelope& e, infer_result& m) {
  TESSERA_RETURN_IF_ERROR(decode_message(e, m));
  if (m.num_labels < 0 || m.num_labels > 1 << 16) return status::bad_message("infer_result: num_labels out of range");
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, m.code == errc::ok ? 1 : 0, "infer_result"));
  if (m.code == errc::ok && m.num_labels > 0 && e.payloads[0].size() % (4 * m.num_labels) != 0)
    return status::bad_message("infer_result: logits frame is not a whole number of rows");
  return ok_status();
}

}  // namespace tessera::exchange
