// All msgpack code of tessera lives here (and in wire_reader.hpp beside it).
#include "tessera/exchange/codec.hpp"

#include <cstring>
#include <msgpack.hpp>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // XXH3_64bits -> the library's AVX2 / AVX-512 code, chosen at run time
#endif

#include "tessera/common/check.hpp"
#include "wire_reader.hpp"

namespace tessera::exchange {

namespace {

using packer = msgpack::packer<msgpack::sbuffer>;

// ---- encoding of nested types ----

void put(packer& p, const tensor_desc& d) {
  p.pack_array(4);
  p.pack(d.id);
  p.pack(d.name);
  p.pack(static_cast<uint8_t>(d.type));
  p.pack(d.shape);
}

void put(packer& p, const slice_ref& s) {
  p.pack_array(8);
  p.pack(s.tensor_id);
  p.pack(static_cast<uint8_t>(s.kind));
  p.pack(s.offset);
  p.pack(s.count);
  p.pack(s.part);
  p.pack(s.parts);
  p.pack(s.micro);
  p.pack(s.micros);
}

void put(packer& p, const kernel_call& k) {
  p.pack_array(5);
  p.pack(k.kernel);
  p.pack(k.inputs);
  p.pack(k.outputs);
  p.pack(k.params);
  p.pack(k.fparams);
}

void put(packer& p, const superstep& s) {
  p.pack_array(4);
  p.pack_array(static_cast<uint32_t>(s.compute.size()));
  for (const auto& k : s.compute) put(p, k);
  p.pack_array(static_cast<uint32_t>(s.sends.size()));
  for (const auto& o : s.sends) {
    p.pack_array(3);
    p.pack(o.peer);
    p.pack(o.tag);
    put(p, o.src);
  }
  p.pack_array(static_cast<uint32_t>(s.recvs.size()));
  for (const auto& o : s.recvs) {
    p.pack_array(4);
    p.pack(o.peer);
    p.pack(o.tag);
    put(p, o.dst);
    p.pack(o.accumulate);
  }
  p.pack(s.sync);
}

void put(packer& p, const superstep_counters& c) {
  p.pack_array(5);
  p.pack(c.compute_ns);
  p.pack(c.exchange_ns);
  p.pack(c.sync_ns);
  p.pack(c.bytes_sent);
  p.pack(c.bytes_received);
}

void put(packer& p, const fault_counts& c) {
  p.pack_array(static_cast<uint32_t>(c.size()));
  for (uint64_t n : c) p.pack(n);
}

// ---- decoding of nested types ----

// Exactly one count per fault kind this build knows (a new kind bumps protocol_version).
void get(wire_reader& r, fault_counts& c) {
  wire_reader a = r.array("injected", static_cast<int64_t>(fault_kind_count));
  for (size_t k = 0; k < c.size(); ++k) c[k] = a.u64("injected count");
}

void get(wire_reader& r, tensor_desc& d) {
  wire_reader a = r.array("tensor", 4);
  d.id = a.u32("tensor.id");
  d.name = a.str("tensor.name", 256);
  uint8_t t = a.u8("tensor.dtype");
  if (t > static_cast<uint8_t>(dtype::i32)) a.fail("tensor.dtype " + std::to_string(t) + " is unknown");
  d.type = static_cast<dtype>(t);
  d.shape = a.i64_list("tensor.shape", max_tensor_rank);
  uint64_t elements = 1;
  for (int64_t dim : d.shape) {
    if (dim < 0) {
      a.fail("tensor '" + d.name + "' has a negative dimension");
      break;
    }
    if (dim != 0 && elements > max_tensor_bytes / 4 / static_cast<uint64_t>(dim)) {
      a.fail("tensor '" + d.name + "' is larger than the protocol limit of " +
             std::to_string(max_tensor_bytes) + " bytes");
      break;
    }
    elements *= static_cast<uint64_t>(dim);
  }
}

void get(wire_reader& r, slice_ref& s) {
  wire_reader a = r.array("slice", 8);
  s.tensor_id = a.u32("slice.tensor_id");
  uint8_t k = a.u8("slice.kind");
  if (k > static_cast<uint8_t>(slice_kind::token_part)) a.fail("slice.kind " + std::to_string(k) + " is unknown");
  s.kind = static_cast<slice_kind>(k);
  s.offset = a.u64("slice.offset", max_tensor_bytes / 4);
  s.count = a.u64("slice.count", max_tensor_bytes / 4);
  s.part = a.u32("slice.part");
  s.parts = a.u32("slice.parts");
  s.micro = a.u32("slice.micro");
  s.micros = a.u32("slice.micros", 1u << 16);
  if (s.parts == 0 || s.part >= s.parts) a.fail("slice.part must be below slice.parts (>0)");
  if (s.micros == 0 || s.micro >= s.micros) a.fail("slice.micro must be below slice.micros (>0)");
}

void get(wire_reader& r, kernel_call& k) {
  wire_reader a = r.array("kernel_call", 5);
  k.kernel = a.str("kernel_call.kernel", 64);
  k.inputs = a.u32_list("kernel_call.inputs", 64);
  k.outputs = a.u32_list("kernel_call.outputs", 64);
  k.params = a.i64_list("kernel_call.params", 1024);
  k.fparams = a.f32_list("kernel_call.fparams", 1024);
}

void get(wire_reader& r, superstep& s) {
  wire_reader a = r.array("superstep", 4);
  wire_reader c = a.array("superstep.compute");
  s.compute.resize(c.size());
  for (auto& k : s.compute) get(c, k);
  wire_reader snd = a.array("superstep.sends");
  s.sends.resize(snd.size());
  for (auto& o : s.sends) {
    wire_reader x = snd.array("send", 3);
    o.peer = x.u32("send.peer", max_tiles - 1);
    o.tag = x.u32("send.tag");
    get(x, o.src);
  }
  wire_reader rcv = a.array("superstep.recvs");
  s.recvs.resize(rcv.size());
  for (auto& o : s.recvs) {
    wire_reader x = rcv.array("recv", 4);
    o.peer = x.u32("recv.peer", max_tiles - 1);
    o.tag = x.u32("recv.tag");
    get(x, o.dst);
    o.accumulate = x.boolean("recv.accumulate");
  }
  s.sync = a.boolean("superstep.sync");
}

void get(wire_reader& r, superstep_counters& c) {
  wire_reader a = r.array("counters", 5);
  c.compute_ns = a.u64("counters.compute_ns");
  c.exchange_ns = a.u64("counters.exchange_ns");
  c.sync_ns = a.u64("counters.sync_ns");
  c.bytes_sent = a.u64("counters.bytes_sent");
  c.bytes_received = a.u64("counters.bytes_received");
}

// ---- envelope framing ----

// Starts a header: [magic, version, type, body(array of n)].
struct header_builder {
  msgpack::sbuffer buf;
  packer p{&buf};
  header_builder(msg_type t, uint32_t body_fields) {
    p.pack_array(4);
    p.pack(protocol_magic);
    p.pack(protocol_version);
    p.pack(static_cast<uint8_t>(t));
    p.pack_array(body_fields);
  }
  envelope finish(std::vector<zmq::message_t> payloads = {}) {
    envelope e;
    e.header = zmq::message_t(buf.data(), buf.size());
    e.payloads = std::move(payloads);
    return e;
  }
};

// Parses frame 0 with limits and returns the body reader; checks magic, version and type.
status open_body(const envelope& e, msg_type expected, parsed_header& out) {
  TESSERA_RETURN_IF_ERROR(parse_header(e.header.data<char>(), e.header.size(), out));
  if (out.type != expected) {
    return status::bad_message("expected a " + std::string(msg_type_name(expected)) + " message, got " +
                               std::string(msg_type_name(out.type)));
  }
  return status::ok();
}

status expect_payloads(const envelope& e, size_t n, std::string_view what) {
  if (e.payloads.size() != n) {
    return status::bad_message(std::string(what) + ": expected " + std::to_string(n) + " payload frame(s), got " +
                               std::to_string(e.payloads.size()));
  }
  return status::ok();
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

status check_tile_id(uint32_t tile_id, uint32_t group_size, const char* field) {
  if (tile_id >= group_size) {
    return status::bad_message(std::string(field) + " " + std::to_string(tile_id) + " is outside the group of " +
                               std::to_string(group_size) + " tiles");
  }
  return status::ok();
}

result<msg_type> peek_type(const envelope& e) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(parse_header(e.header.data<char>(), e.header.size(), h));
  return h.type;
}

std::optional<uint64_t> peek_request_id(const envelope& e) {
  parsed_header h;
  if (!parse_header(e.header.data<char>(), e.header.size(), h)) return std::nullopt;
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

// ---- register_tile ----
envelope encode(const register_tile& m) {
  header_builder h(msg_type::register_tile, 6);
  h.p.pack(m.tile_id);
  h.p.pack(m.incarnation);
  h.p.pack(m.pid);
  h.p.pack(m.exchange_endpoint);
  h.p.pack(m.hostname);
  h.p.pack(m.memory_capacity);
  return h.finish();
}
status decode(const envelope& e, register_tile& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::register_tile, h));
  wire_reader r = h.body(6);
  m.tile_id = r.u32("tile_id", max_tiles - 1);
  m.incarnation = r.u32("incarnation");
  m.pid = static_cast<int32_t>(r.i64("pid"));
  m.exchange_endpoint = r.str("exchange_endpoint", 512);
  m.hostname = r.str("hostname", 256);
  m.memory_capacity = r.u64("memory_capacity");
  TESSERA_RETURN_IF_ERROR(r.finish("register_tile"));
  return expect_payloads(e, 0, "register_tile");
}

// ---- peer_directory ----
envelope encode(const peer_directory& m) {
  header_builder h(msg_type::peer_directory, 2);
  h.p.pack(m.endpoints);
  h.p.pack(m.incarnations);
  return h.finish();
}
status decode(const envelope& e, peer_directory& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::peer_directory, h));
  wire_reader r = h.body(2);
  m.endpoints = r.str_list("endpoints", max_tiles, 512);
  m.incarnations = r.u32_list("incarnations", max_tiles);
  TESSERA_RETURN_IF_ERROR(r.finish("peer_directory"));
  if (m.endpoints.size() != m.incarnations.size() || m.endpoints.empty())
    return status::bad_message("peer_directory: endpoints and incarnations differ in count or are empty");
  return expect_payloads(e, 0, "peer_directory");
}

// ---- alloc_tensor ----
envelope encode(const alloc_tensor& m, zmq::message_t data) {
  header_builder h(msg_type::alloc_tensor, 4);
  h.p.pack(m.request_id);
  put(h.p, m.desc);
  h.p.pack(m.has_data);
  h.p.pack(m.zero);
  if (m.has_data) return h.finish(one(std::move(data)));
  return h.finish();
}
status decode(const envelope& e, alloc_tensor& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::alloc_tensor, h));
  wire_reader r = h.body(4);
  m.request_id = r.u64("request_id");
  get(r, m.desc);
  m.has_data = r.boolean("has_data");
  m.zero = r.boolean("zero");
  TESSERA_RETURN_IF_ERROR(r.finish("alloc_tensor"));
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, m.has_data ? 1 : 0, "alloc_tensor"));
  if (m.has_data && e.payloads[0].size() != m.desc.bytes()) {
    return status::bad_message("alloc_tensor '" + m.desc.name + "': payload has " +
                               std::to_string(e.payloads[0].size()) + " bytes, shape needs " +
                               std::to_string(m.desc.bytes()));
  }
  return status::ok();
}

// ---- free_tensors ----
envelope encode(const free_tensors& m) {
  header_builder h(msg_type::free_tensors, 2);
  h.p.pack(m.request_id);
  h.p.pack(m.ids);
  return h.finish();
}
status decode(const envelope& e, free_tensors& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::free_tensors, h));
  wire_reader r = h.body(2);
  m.request_id = r.u64("request_id");
  m.ids = r.u32_list("ids", 1u << 20);
  TESSERA_RETURN_IF_ERROR(r.finish("free_tensors"));
  return expect_payloads(e, 0, "free_tensors");
}

// ---- load_program ----
envelope encode(const load_program& m) {
  header_builder h(msg_type::load_program, 5);
  h.p.pack(m.request_id);
  h.p.pack(m.prog.id);
  h.p.pack(m.prog.tiles);
  h.p.pack_array(static_cast<uint32_t>(m.prog.temporaries.size()));
  for (const auto& t : m.prog.temporaries) put(h.p, t);
  h.p.pack_array(static_cast<uint32_t>(m.prog.steps.size()));
  for (const auto& s : m.prog.steps) put(h.p, s);
  return h.finish();
}
status decode(const envelope& e, load_program& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::load_program, h));
  wire_reader r = h.body(5);
  m.request_id = r.u64("request_id");
  m.prog.id = r.u32("program_id");
  m.prog.tiles = r.u32_list("tiles", max_tiles);
  wire_reader t = r.array("temporaries");
  m.prog.temporaries.resize(t.size());
  for (auto& d : m.prog.temporaries) get(t, d);
  wire_reader s = r.array("steps");
  m.prog.steps.resize(s.size());
  for (auto& st : m.prog.steps) get(s, st);
  TESSERA_RETURN_IF_ERROR(r.finish("load_program"));
  for (uint32_t tile : m.prog.tiles) TESSERA_RETURN_IF_ERROR(check_tile_id(tile, max_tiles, "program tile"));
  return expect_payloads(e, 0, "load_program");
}

// ---- run_program ----
envelope encode(const run_program& m, std::vector<zmq::message_t> inputs) {
  header_builder h(msg_type::run_program, 7);
  h.p.pack(m.program_id);
  h.p.pack(m.batch_id);
  h.p.pack(m.seq_lengths);
  h.p.pack(m.active_tokens);
  h.p.pack_array(static_cast<uint32_t>(m.inputs.size()));
  for (const auto& s : m.inputs) put(h.p, s);
  h.p.pack_array(static_cast<uint32_t>(m.outputs.size()));
  for (const auto& s : m.outputs) put(h.p, s);
  h.p.pack(m.collect_counters);
  return h.finish(std::move(inputs));
}
status decode(const envelope& e, run_program& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::run_program, h));
  wire_reader r = h.body(7);
  m.program_id = r.u32("program_id");
  m.batch_id = r.u64("batch_id");
  m.seq_lengths = r.i32_list("seq_lengths", max_batch_sequences);
  m.active_tokens = r.i64("active_tokens");
  wire_reader in = r.array("inputs");
  m.inputs.resize(in.size());
  for (auto& s : m.inputs) get(in, s);
  wire_reader out = r.array("outputs");
  m.outputs.resize(out.size());
  for (auto& s : m.outputs) get(out, s);
  m.collect_counters = r.boolean("collect_counters");
  TESSERA_RETURN_IF_ERROR(r.finish("run_program"));
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

// ---- exchange_data ----
envelope encode(const exchange_data& m, zmq::message_t slice) {
  header_builder h(msg_type::exchange_data, 8);
  h.p.pack(m.program_id);
  h.p.pack(m.batch_id);
  h.p.pack(m.superstep);
  h.p.pack(m.src_tile);
  h.p.pack(m.dst_tile);
  h.p.pack(m.tag);
  h.p.pack(m.elements);
  h.p.pack(m.checksum);
  return h.finish(one(std::move(slice)));
}
status decode(const envelope& e, exchange_data& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::exchange_data, h));
  wire_reader r = h.body(8);
  m.program_id = r.u32("program_id");
  m.batch_id = r.u64("batch_id");
  m.superstep = r.u32("superstep");
  m.src_tile = r.u32("src_tile", max_tiles - 1);
  m.dst_tile = r.u32("dst_tile", max_tiles - 1);
  m.tag = r.u32("tag");
  m.elements = r.u64("elements", max_tensor_bytes / 4);
  m.checksum = r.u64("checksum");
  TESSERA_RETURN_IF_ERROR(r.finish("exchange_data"));
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, 1, "exchange_data"));
  if (e.payloads[0].size() != m.elements * 4) {
    return status::bad_message("exchange_data: payload has " + std::to_string(e.payloads[0].size()) +
                               " bytes, header says " + std::to_string(m.elements) + " elements");
  }
  return status::ok();
}

// ---- sync_token ----
envelope encode(const sync_token& m) {
  header_builder h(msg_type::sync_token, 5);
  h.p.pack(m.program_id);
  h.p.pack(m.batch_id);
  h.p.pack(m.superstep);
  h.p.pack(m.round);
  h.p.pack(m.src_tile);
  return h.finish();
}
status decode(const envelope& e, sync_token& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::sync_token, h));
  wire_reader r = h.body(5);
  m.program_id = r.u32("program_id");
  m.batch_id = r.u64("batch_id");
  m.superstep = r.u32("superstep");
  m.round = r.u32("round", 31);
  m.src_tile = r.u32("src_tile", max_tiles - 1);
  TESSERA_RETURN_IF_ERROR(r.finish("sync_token"));
  return expect_payloads(e, 0, "sync_token");
}

// ---- run_done ----
envelope encode(const run_done& m, std::vector<zmq::message_t> outputs) {
  header_builder h(msg_type::run_done, 10);
  h.p.pack(m.program_id);
  h.p.pack(m.batch_id);
  h.p.pack(m.tile_id);
  h.p.pack(static_cast<uint8_t>(m.code));
  h.p.pack(m.message);
  h.p.pack_array(static_cast<uint32_t>(m.counters.size()));
  for (const auto& c : m.counters) put(h.p, c);
  h.p.pack(m.memory_used);
  h.p.pack(m.memory_high_water);
  h.p.pack(static_cast<uint32_t>(outputs.size()));
  put(h.p, m.injected);
  return h.finish(std::move(outputs));
}
status decode(const envelope& e, run_done& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::run_done, h));
  wire_reader r = h.body(10);
  m.program_id = r.u32("program_id");
  m.batch_id = r.u64("batch_id");
  m.tile_id = r.u32("tile_id", max_tiles - 1);
  m.code = static_cast<errc>(r.u8("code", static_cast<uint8_t>(errc::internal)));
  m.message = r.str("message", 64 * 1024);
  wire_reader c = r.array("counters");
  m.counters.resize(c.size());
  for (auto& x : m.counters) get(c, x);
  m.memory_used = r.u64("memory_used");
  m.memory_high_water = r.u64("memory_high_water");
  m.outputs = r.u32("outputs", 1024);
  get(r, m.injected);
  TESSERA_RETURN_IF_ERROR(r.finish("run_done"));
  return expect_payloads(e, m.outputs, "run_done");
}

// ---- heartbeat ----
envelope encode(const heartbeat& m) {
  header_builder h(msg_type::heartbeat, 7);
  h.p.pack(m.tile_id);
  h.p.pack(m.incarnation);
  h.p.pack(m.memory_used);
  h.p.pack(m.memory_high_water);
  h.p.pack(m.bad_messages);
  h.p.pack(m.stale_messages);
  put(h.p, m.injected);
  return h.finish();
}
status decode(const envelope& e, heartbeat& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::heartbeat, h));
  wire_reader r = h.body(7);
  m.tile_id = r.u32("tile_id", max_tiles - 1);
  m.incarnation = r.u32("incarnation");
  m.memory_used = r.u64("memory_used");
  m.memory_high_water = r.u64("memory_high_water");
  m.bad_messages = r.u64("bad_messages");
  m.stale_messages = r.u64("stale_messages");
  get(r, m.injected);
  TESSERA_RETURN_IF_ERROR(r.finish("heartbeat"));
  return expect_payloads(e, 0, "heartbeat");
}

// ---- shutdown ----
envelope encode(const shutdown& m) {
  header_builder h(msg_type::shutdown, 1);
  h.p.pack(m.reason);
  return h.finish();
}
status decode(const envelope& e, shutdown& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::shutdown, h));
  wire_reader r = h.body(1);
  m.reason = r.str("reason", 4096);
  TESSERA_RETURN_IF_ERROR(r.finish("shutdown"));
  return expect_payloads(e, 0, "shutdown");
}

// ---- ack ----
envelope encode(const ack& m, std::vector<zmq::message_t> payloads) {
  header_builder h(msg_type::ack, 5);
  h.p.pack(m.request_id);
  h.p.pack(m.tile_id);
  h.p.pack(static_cast<uint8_t>(m.code));
  h.p.pack(m.message);
  h.p.pack(static_cast<uint32_t>(payloads.size()));
  return h.finish(std::move(payloads));
}
status decode(const envelope& e, ack& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::ack, h));
  wire_reader r = h.body(5);
  m.request_id = r.u64("request_id");
  m.tile_id = r.u32("tile_id", max_tiles - 1);
  m.code = static_cast<errc>(r.u8("code", static_cast<uint8_t>(errc::internal)));
  m.message = r.str("message", 64 * 1024);
  m.payloads = r.u32("payloads", 1024);
  TESSERA_RETURN_IF_ERROR(r.finish("ack"));
  return expect_payloads(e, m.payloads, "ack");
}

// ---- abort_run ----
envelope encode(const abort_run& m) {
  header_builder h(msg_type::abort_run, 3);
  h.p.pack(m.program_id);
  h.p.pack(m.batch_id);
  h.p.pack(m.reason);
  return h.finish();
}
status decode(const envelope& e, abort_run& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::abort_run, h));
  wire_reader r = h.body(3);
  m.program_id = r.u32("program_id");
  m.batch_id = r.u64("batch_id");
  m.reason = r.str("reason", 4096);
  TESSERA_RETURN_IF_ERROR(r.finish("abort_run"));
  return expect_payloads(e, 0, "abort_run");
}

// ---- fetch_tensor ----
envelope encode(const fetch_tensor& m) {
  header_builder h(msg_type::fetch_tensor, 3);
  h.p.pack(m.request_id);
  put(h.p, m.slice);
  h.p.pack(m.active_tokens);
  return h.finish();
}
status decode(const envelope& e, fetch_tensor& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::fetch_tensor, h));
  wire_reader r = h.body(3);
  m.request_id = r.u64("request_id");
  get(r, m.slice);
  m.active_tokens = r.i64("active_tokens");
  TESSERA_RETURN_IF_ERROR(r.finish("fetch_tensor"));
  return expect_payloads(e, 0, "fetch_tensor");
}

// ---- infer_batch ----
envelope encode(const infer_batch& m, zmq::message_t token_ids, zmq::message_t token_types) {
  header_builder h(msg_type::infer_batch, 4);
  h.p.pack(m.batch_id);
  h.p.pack(m.seq_lengths);
  h.p.pack(m.layout);
  h.p.pack(m.padded_length);
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(token_ids));
  frames.push_back(std::move(token_types));
  return h.finish(std::move(frames));
}
status decode(const envelope& e, infer_batch& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::infer_batch, h));
  wire_reader r = h.body(4);
  m.batch_id = r.u64("batch_id");
  m.seq_lengths = r.i32_list("seq_lengths", max_batch_sequences);
  m.layout = r.u8("layout", 1);
  m.padded_length = static_cast<int32_t>(r.i64("padded_length"));
  TESSERA_RETURN_IF_ERROR(r.finish("infer_batch"));
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, 2, "infer_batch"));
  uint64_t tokens = 0;
  for (int32_t len : m.seq_lengths) {
    if (len <= 0) return status::bad_message("infer_batch: a sequence length is not positive");
    tokens += static_cast<uint64_t>(len);
  }
  for (const auto& p : e.payloads) {
    if (p.size() != tokens * 4)
      return status::bad_message("infer_batch: a token frame has " + std::to_string(p.size()) +
                                 " bytes, the lengths need " + std::to_string(tokens * 4));
  }
  return status::ok();
}

// ---- infer_result ----
envelope encode(const infer_result& m, zmq::message_t logits) {
  header_builder h(msg_type::infer_result, 6);
  h.p.pack(m.batch_id);
  h.p.pack(static_cast<uint8_t>(m.code));
  h.p.pack(m.message);
  h.p.pack(m.num_labels);
  h.p.pack(m.wall_seconds);
  h.p.pack(m.modelled_seconds);
  if (m.code == errc::ok) return h.finish(one(std::move(logits)));
  return h.finish();
}
status decode(const envelope& e, infer_result& m) {
  parsed_header h;
  TESSERA_RETURN_IF_ERROR(open_body(e, msg_type::infer_result, h));
  wire_reader r = h.body(6);
  m.batch_id = r.u64("batch_id");
  m.code = static_cast<errc>(r.u8("code", static_cast<uint8_t>(errc::internal)));
  m.message = r.str("message", 64 * 1024);
  m.num_labels = static_cast<int32_t>(r.i64("num_labels"));
  m.wall_seconds = r.f64("wall_seconds");
  m.modelled_seconds = r.f64("modelled_seconds");
  TESSERA_RETURN_IF_ERROR(r.finish("infer_result"));
  if (m.num_labels < 0 || m.num_labels > 1 << 16) return status::bad_message("infer_result: num_labels out of range");
  TESSERA_RETURN_IF_ERROR(expect_payloads(e, m.code == errc::ok ? 1 : 0, "infer_result"));
  if (m.code == errc::ok && m.num_labels > 0 && e.payloads[0].size() % (4 * m.num_labels) != 0)
    return status::bad_message("infer_result: logits frame is not a whole number of rows");
  return status::ok();
}

}  // namespace tessera::exchange
