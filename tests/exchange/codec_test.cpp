// Codec round trips for every message type, and every way decoding must refuse a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <msgpack.hpp>

#include "tessera/exchange/codec.hpp"

using namespace tessera;
using namespace tessera::exchange;

namespace {

zmq::message_t floats(std::vector<float> v) { return zmq::message_t(v.data(), v.size() * 4); }

// Re-packs a header from an arbitrary msgpack value.
template <class T>
envelope raw_header(const T& value, std::vector<zmq::message_t> payloads = {}) {
  msgpack::sbuffer b;
  msgpack::pack(b, value);
  envelope e;
  e.header = zmq::message_t(b.data(), b.size());
  e.payloads = std::move(payloads);
  return e;
}


program sample_program() {
  program p;
  p.id = 7;
  p.tiles = {0, 1, 2};
  p.temporaries.push_back({5, "scratch", dtype::f32, {128, 64}});
  superstep s;
  s.compute.push_back({models::kernel_id::dec_norm, {1, 2}, {5}, {1, 3, 1}, {0.5f}});
  s.sends.push_back({1, 9, {5, slice_kind::token_part, 0, 64, 1, 3}});
  s.recvs.push_back({2, 4, {5, slice_kind::fixed, 16, 32, 0, 1}, true});
  s.sync = false;
  p.steps.push_back(s);
  p.steps.push_back(superstep{});
  return p;
}

}  // namespace

TEST(Codec, RegisterRoundTrip) {
  register_tile m{3, 2, 4242, "ipc:///tmp/x/tile-3.sock", "node7", 1 << 20};
  register_tile out;
  ASSERT_TRUE(decode(encode(m), out).ok());
  EXPECT_EQ(out.tile_id, 3u);
  EXPECT_EQ(out.incarnation, 2u);
  EXPECT_EQ(out.pid, 4242);
  EXPECT_EQ(out.exchange_endpoint, m.exchange_endpoint);
  EXPECT_EQ(out.hostname, "node7");
  EXPECT_EQ(out.memory_capacity, 1u << 20);
}

TEST(Codec, ProgramRoundTripKeepsEveryField) {
  load_program m{11, sample_program()};
  load_program out;
  ASSERT_TRUE(decode(encode(m), out).ok());
  EXPECT_EQ(out.request_id, 11u);
  ASSERT_EQ(out.prog.steps.size(), 2u);
  EXPECT_EQ(out.prog.tiles, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(out.prog.temporaries[0].shape, (std::vector<int64_t>{128, 64}));
  const auto& s = out.prog.steps[0];
  EXPECT_EQ(s.compute[0].kernel, models::kernel_id::dec_norm);
  EXPECT_EQ(s.compute[0].params, (std::vector<int64_t>{1, 3, 1}));
  EXPECT_FLOAT_EQ(s.compute[0].fparams[0], 0.5f);
  EXPECT_EQ(s.sends[0].src.kind, slice_kind::token_part);
  EXPECT_EQ(s.sends[0].src.parts, 3u);
  EXPECT_EQ(s.recvs[0].dst.offset, 16u);
  EXPECT_TRUE(s.recvs[0].accumulate);
  EXPECT_FALSE(s.sync);
  EXPECT_TRUE(out.prog.steps[1].sync);
}

// Reals keep their exact bits, whole-valued ones included (2^64 once hit undefined
// behaviour in msgpack-c's integer shortcut); a real beyond float's range is refused.
TEST(Codec, RealsKeepTheirBitsAndOutOfRangeIsRefused) {
  load_program m{12, sample_program()};
  const float edge[] = {0x1p64f, -0x1p63f, 0x1p63f, 3.0f, -0.0f, std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()};
  // One scale call per value (scale's parameters are one real, its factor).
  m.prog.steps[0].compute.clear();
  for (float x : edge) m.prog.steps[0].compute.push_back(make_call<models::kernel_id::scale>({1}, {2}, {x}));
  load_program out;
  ASSERT_TRUE(decode(encode(m), out).ok());
  const auto& got = out.prog.steps[0].compute;
  ASSERT_EQ(got.size(), std::size(edge));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i].fparams.at(0)), std::bit_cast<uint32_t>(edge[i])) << "index " << i;

  // The same header with one fparam re-written as a float64 of 1e300.
  envelope e = encode(m);
  std::string h(e.header.data<char>(), e.header.size());
  std::string f32(5, '\0');
  f32[0] = static_cast<char>(0xca);
  uint32_t bits = std::bit_cast<uint32_t>(3.0f);
  for (int i = 0; i < 4; ++i) f32[1 + i] = static_cast<char>(bits >> (24 - 8 * i));
  size_t at = h.find(f32);
  ASSERT_NE(at, std::string::npos);
  std::string f64(9, '\0');
  f64[0] = static_cast<char>(0xcb);
  uint64_t big = std::bit_cast<uint64_t>(1e300);
  for (int i = 0; i < 8; ++i) f64[1 + i] = static_cast<char>(big >> (56 - 8 * i));
  h.replace(at, 5, f64);
  e.header = zmq::message_t(h.data(), h.size());
  auto st = decode(e, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("beyond float's range"), std::string::npos) << st.message();
}

TEST(Codec, ExchangeDataCarriesRawPayload) {
  std::vector<float> v{1.f, -2.f, 3.5f};
  exchange_data m{1, 99, 4, 0, 2, 17, 3};
  envelope e = encode(m, floats(v));
  ASSERT_EQ(e.payloads.size(), 1u);
  EXPECT_EQ(e.payloads[0].size(), 12u);
  exchange_data out;
  ASSERT_TRUE(decode(e, out).ok());
  EXPECT_EQ(out.batch_id, 99u);
  EXPECT_EQ(out.tag, 17u);
  EXPECT_EQ(std::memcmp(e.payloads[0].data(), v.data(), 12), 0);
}

TEST(Codec, RunAndRunDoneRoundTrip) {
  run_program m{3, 12, {5, 7}, 12, {{1, slice_kind::token_rows, 0, 8, 0, 1}}, {{2, slice_kind::fixed, 0, 4, 0, 1}}, true};
  std::vector<zmq::message_t> in;
  in.push_back(floats(std::vector<float>(96, 1.f)));
  run_program out;
  ASSERT_TRUE(decode(encode(m, std::move(in)), out).ok());
  EXPECT_EQ(out.seq_lengths, (std::vector<int32_t>{5, 7}));
  EXPECT_EQ(out.inputs[0].kind, slice_kind::token_rows);

  run_done d{3, 12, 1, errc::timeout, "slow", {{1, 2, 3, 4, 5}}, 100, 200, 1};
  std::vector<zmq::message_t> outs;
  outs.push_back(floats({1.f}));
  run_done dout;
  ASSERT_TRUE(decode(encode(d, std::move(outs)), dout).ok());
  EXPECT_EQ(dout.code, errc::timeout);
  EXPECT_EQ(dout.message, "slow");
  EXPECT_EQ(dout.counters[0].bytes_received, 5u);
  EXPECT_EQ(dout.memory_high_water, 200u);
  EXPECT_EQ(dout.injected, fault_counts{});
}

// Injected fault counts ride in heartbeats and run replies: every kind's count comes back, and a
// list of the wrong length or with a non-integer count is refused naming the field.
TEST(Codec, InjectedFaultCountsRoundTripAndAreChecked) {
  fault_counts c{};
  for (size_t k = 0; k < c.size(); ++k) c[k] = 1000 * k + 7;
  c[static_cast<size_t>(fault_kind::corrupt)] = std::numeric_limits<uint64_t>::max();
  heartbeat h{2, 1, 10, 20, 3, 9, c};
  heartbeat hout;
  ASSERT_TRUE(decode(encode(h), hout).ok());
  EXPECT_EQ(hout.stale_messages, 9u);
  EXPECT_EQ(hout.injected, c);
  run_done d{3, 12, 1, errc::ok, "", {}, 100, 200, 0, c};
  run_done dout;
  ASSERT_TRUE(decode(encode(d, {}), dout).ok());
  EXPECT_EQ(dout.injected, c);
  EXPECT_EQ(describe_fault_counts(c).substr(0, 8), "kill 7, ");
  EXPECT_EQ(describe_fault_counts(fault_counts{}), "none");

  const auto hb = [](auto injected) {
    return raw_header(std::make_tuple(protocol_magic, protocol_version, uint8_t(msg_type::heartbeat),
                                      std::make_tuple(1, 0, 2, 3, 4, 5, injected)));
  };
  heartbeat out;
  EXPECT_TRUE(decode(hb(std::vector<uint64_t>(fault_kind_count, 5)), out).ok());
  EXPECT_EQ(out.injected[3], 5u);
  for (size_t n : {size_t{0}, fault_kind_count - 1, fault_kind_count + 1}) {
    auto st = decode(hb(std::vector<uint64_t>(n, 1)), out);
    EXPECT_EQ(st.code(), errc::bad_message) << n;
    EXPECT_NE(st.message().find("injected"), std::string::npos) << st.message();
  }
  std::vector<int64_t> negative(fault_kind_count, 1);
  negative[4] = -1;
  EXPECT_FALSE(decode(hb(negative), out).ok());
  EXPECT_FALSE(decode(hb(std::string("drop 3")), out).ok());
  // The count list is required: a heartbeat of protocol 2's five fields is refused.
  EXPECT_FALSE(decode(raw_header(std::make_tuple(protocol_magic, protocol_version, uint8_t(msg_type::heartbeat),
                                                 std::make_tuple(1, 0, 2, 3, 4))),
                      out).ok());
  EXPECT_FALSE(decode(raw_header(std::make_tuple(protocol_magic, protocol_version, uint8_t(msg_type::heartbeat),
                                                 std::make_tuple(1, 0, 2, 3, 4, std::vector<int>(fault_kind_count)))),
                      out).ok());
}

TEST(Codec, SmallMessagesRoundTrip) {
  heartbeat h{2, 1, 10, 20, 3};
  heartbeat hout;
  ASSERT_TRUE(decode(encode(h), hout).ok());
  EXPECT_EQ(hout.bad_messages, 3u);
  sync_token s{1, 2, 3, 4, 5};
  sync_token sout;
  ASSERT_TRUE(decode(encode(s), sout).ok());
  EXPECT_EQ(sout.round, 4u);
  ack a{77, 1, errc::out_of_memory, "full"};
  ack aout;
  ASSERT_TRUE(decode(encode(a), aout).ok());
  EXPECT_EQ(aout.code, errc::out_of_memory);
  peer_directory pd{{"a", "b"}, {0, 1}};
  peer_directory pdout;
  ASSERT_TRUE(decode(encode(pd), pdout).ok());
  EXPECT_EQ(pdout.endpoints[1], "b");
  infer_batch ib{5, {2, 1}, 1, 4, dtype::bf16};
  std::vector<int32_t> ids{1, 2, 3}, types{0, 0, 0};
  infer_batch ibout;
  ASSERT_TRUE(decode(encode(ib, zmq::message_t(ids.data(), 12), zmq::message_t(types.data(), 12)), ibout).ok());
  EXPECT_EQ(ibout.padded_length, 4);
  EXPECT_EQ(ibout.compute, dtype::bf16);
  EXPECT_TRUE(ibout.every_token.empty());
  // every_token: sequence indices, increasing, each below the sequence count; anything else is refused.
  ib.every_token = {1};
  ASSERT_TRUE(decode(encode(ib, zmq::message_t(ids.data(), 12), zmq::message_t(types.data(), 12)), ibout).ok());
  EXPECT_EQ(ibout.every_token, std::vector<uint32_t>{1});
  for (std::vector<uint32_t> bad : {std::vector<uint32_t>{2}, std::vector<uint32_t>{1, 0}, std::vector<uint32_t>{0, 0}}) {
    ib.every_token = bad;
    const status st = decode(encode(ib, zmq::message_t(ids.data(), 12), zmq::message_t(types.data(), 12)), ibout);
    EXPECT_EQ(st.code(), errc::bad_message);
    EXPECT_NE(st.message().find("every_token"), std::string::npos) << st.message();
  }
  infer_result ir{5, errc::ok, "", 2, 0.5, 0.25};
  infer_result irout;
  ASSERT_TRUE(decode(encode(ir, floats({1, 2, 3, 4})), irout).ok());
  EXPECT_DOUBLE_EQ(irout.modelled_seconds, 0.25);
  alloc_tensor at{9, {4, "w", dtype::f32, {2, 2}}, true, false};
  alloc_tensor atout;
  ASSERT_TRUE(decode(encode(at, floats({1, 2, 3, 4})), atout).ok());
  EXPECT_EQ(atout.desc.name, "w");
}

// ---- every decode error ----

TEST(CodecErrors, EmptyHeader) {
  envelope e;
  EXPECT_EQ(peek_type(e).error().code(), errc::bad_message);
}

TEST(CodecErrors, NotMsgpack) {
  envelope e;
  const char junk[] = "\xc1\xc1\xc1 garbage";
  e.header = zmq::message_t(junk, sizeof junk);
  auto t = peek_type(e);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), errc::bad_message);
}

TEST(CodecErrors, TruncatedHeader) {
  envelope good = encode(register_tile{1, 0, 1, "ipc:///x", "h", 100});
  envelope e;
  e.header = zmq::message_t(good.header.data(), good.header.size() - 3);
  register_tile out;
  auto st = decode(e, out);
  EXPECT_EQ(st.code(), errc::bad_message) << st.to_string();
}

TEST(CodecErrors, TrailingBytes) {
  envelope good = encode(exchange::shutdown{"x"});
  std::string h(good.header.data<char>(), good.header.size());
  h += "zz";
  envelope e;
  e.header = zmq::message_t(h.data(), h.size());
  EXPECT_FALSE(peek_type(e));
}

TEST(CodecErrors, BadMagicVersionAndType) {
  auto magic = raw_header(std::make_tuple(0x1234u, protocol_version, 11, std::vector<int>{}));
  EXPECT_NE(peek_type(magic).error().message().find("magic"), std::string::npos);
  auto version = raw_header(std::make_tuple(protocol_magic, 99, 11, std::vector<int>{}));
  EXPECT_NE(peek_type(version).error().message().find("version"), std::string::npos);
  auto type = raw_header(std::make_tuple(protocol_magic, protocol_version, 200, std::vector<int>{}));
  EXPECT_NE(peek_type(type).error().message().find("type"), std::string::npos);
}

TEST(CodecErrors, WrongTypeForDecoder) {
  heartbeat out;
  auto st = decode(encode(exchange::shutdown{"bye"}), out);
  EXPECT_EQ(st.code(), errc::bad_message);
  EXPECT_NE(st.message().find("expected a heartbeat"), std::string::npos);
}

TEST(CodecErrors, WrongFieldTypeAndCount) {
  // heartbeat body with a string where an integer belongs.
  auto e = raw_header(std::make_tuple(protocol_magic, protocol_version, uint8_t(msg_type::heartbeat),
                                      std::make_tuple(std::string("x"), 1, 2, 3, 4, 5, std::vector<int>(fault_kind_count))));
  heartbeat out;
  auto st = decode(e, out);
  EXPECT_EQ(st.code(), errc::bad_message);
  EXPECT_NE(st.message().find("tile_id"), std::string::npos) << st.message();
  auto short_body = raw_header(std::make_tuple(protocol_magic, protocol_version, uint8_t(msg_type::heartbeat),
                                               std::make_tuple(1, 2)));
  EXPECT_FALSE(decode(short_body, out).ok());
}

TEST(CodecErrors, PayloadLengthMustMatchShape) {
  exchange_data m{1, 1, 0, 0, 1, 0, 4};
  envelope e = encode(m, floats({1, 2, 3}));  // 3 floats, header claims 4
  exchange_data out;
  auto st = decode(e, out);
  EXPECT_EQ(st.code(), errc::bad_message);
  EXPECT_NE(st.message().find("payload"), std::string::npos);

  alloc_tensor at{1, {4, "w", dtype::f32, {3, 3}}, true, false};
  alloc_tensor atout;
  EXPECT_FALSE(decode(encode(at, floats({1, 2})), atout).ok());
}

TEST(CodecErrors, MissingOrExtraPayloadFrames) {
  envelope e = encode(exchange_data{1, 1, 0, 0, 1, 0, 1}, floats({1}));
  e.payloads.clear();
  exchange_data out;
  EXPECT_FALSE(decode(e, out).ok());
  envelope s = encode(sync_token{1, 1, 0, 0, 0});
  s.payloads.push_back(floats({1}));
  sync_token sout;
  EXPECT_FALSE(decode(s, sout).ok());
}

TEST(CodecErrors, HugeTensorIsRefusedBeforeAllocating) {
  alloc_tensor at{1, {4, "big", dtype::f32, {1ll << 30, 1ll << 30}}, false, true};
  alloc_tensor out;
  auto st = decode(encode(at), out);
  EXPECT_EQ(st.code(), errc::bad_message);
  EXPECT_NE(st.message().find("limit"), std::string::npos) << st.message();
  alloc_tensor neg{1, {4, "neg", dtype::f32, {-1, 4}}, false, true};
  EXPECT_FALSE(decode(encode(neg), out).ok());
}

TEST(CodecErrors, TileIdsOutOfRange) {
  register_tile m{max_tiles + 5, 0, 1, "x", "h", 1};
  register_tile out;
  EXPECT_FALSE(decode(encode(m), out).ok());
  EXPECT_FALSE(check_tile_id(4, 4, "peer").ok());
  EXPECT_TRUE(check_tile_id(3, 4, "peer").ok());
}

TEST(CodecErrors, BatchLengthsMustAddUp) {
  run_program m{1, 1, {3, 4}, 8, {}, {}, false};
  run_program out;
  auto st = decode(encode(m, {}), out);
  EXPECT_EQ(st.code(), errc::bad_message);
  EXPECT_NE(st.message().find("active_tokens"), std::string::npos);
  run_program zero{1, 1, {3, 0}, 3, {}, {}, false};
  EXPECT_FALSE(decode(encode(zero, {}), out).ok());
}

TEST(CodecErrors, SliceWithBadPartIsRefused) {
  load_program m{1, sample_program()};
  m.prog.steps[0].sends[0].src.part = 5;  // part >= parts
  load_program out;
  EXPECT_FALSE(decode(encode(m), out).ok());
}

TEST(CodecErrors, OversizedHeaderIsRefused) {
  std::string big(max_header_bytes + 10, 'x');
  envelope e;
  e.header = zmq::message_t(big.data(), big.size());
  auto t = peek_type(e);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("exceeds"), std::string::npos);
}

TEST(CodecErrors, DeepNestingAndLongStringsAreRefused) {
  // 20 levels of nested arrays exceed the parser's depth limit.
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> p(&b);
  for (int i = 0; i < 20; ++i) p.pack_array(1);
  p.pack(1);
  envelope e;
  e.header = zmq::message_t(b.data(), b.size());
  EXPECT_FALSE(peek_type(e));
  register_tile m{1, 0, 1, std::string(600, 'e'), "h", 1};  // endpoint > 512 bytes
  register_tile out;
  EXPECT_FALSE(decode(encode(m), out).ok());
}

TEST(CodecErrors, FuzzedHeadersNeverCrash) {
  envelope good = encode(load_program{1, sample_program()});
  std::string h(good.header.data<char>(), good.header.size());
  uint64_t x = 12345;
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string m = h;
    for (int f = 0; f < 3; ++f) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      m[(x >> 33) % m.size()] = static_cast<char>(x >> 56);
    }
    envelope e;
    e.header = zmq::message_t(m.data(), m.size());
    load_program out;
    if (!decode(e, out).ok()) ++rejected;
  }
  EXPECT_GT(rejected, 0);
}

TEST(Partition, CoversAllRowsEvenly) {
  for (int64_t rows : {0, 1, 7, 100}) {
    for (uint32_t parts : {1u, 3u, 8u}) {
      int64_t next = 0;
      for (uint32_t p = 0; p < parts; ++p) {
        auto r = token_partition(rows, p, parts);
        EXPECT_EQ(r.begin, next);
        EXPECT_LE(r.end - r.begin, rows / parts + 1);
        next = r.end;
      }
      EXPECT_EQ(next, rows);
    }
  }
}

TEST(Checksum, CatchesFlipsAndSwaps) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.5f;
  const uint64_t base = payload_checksum(v.data(), v.size() * 4);
  EXPECT_EQ(base, payload_checksum(v.data(), v.size() * 4));
  auto* bytes = reinterpret_cast<unsigned char*>(v.data());
  for (size_t at : {size_t{0}, size_t{17}, size_t{2001}, size_t{3999}}) {
    bytes[at] ^= 0x04;
    EXPECT_NE(payload_checksum(v.data(), v.size() * 4), base) << at;
    bytes[at] ^= 0x04;
  }
  std::swap(v[0], v[8]);  // two words trade places within one 64-byte block
  EXPECT_NE(payload_checksum(v.data(), v.size() * 4), base);
  std::swap(v[0], v[8]);
  EXPECT_EQ(payload_checksum(v.data(), v.size() * 4), base);
  EXPECT_NE(payload_checksum(v.data(), 12), payload_checksum(v.data(), 16));
}

// Whole 64-byte blocks trading places (a lane-sum checksum cannot see these: every lane adds the
// same words, only in another order), next to each other and far apart, in a 1 MiB slice.
TEST(Checksum, CatchesSwappedBlocks) {
  constexpr size_t block = 64, bytes = 1 << 20;
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  const uint64_t base = payload_checksum(v.data(), bytes);
  auto swap_blocks = [&](size_t a, size_t b) {
    std::swap_ranges(v.begin() + a * block, v.begin() + (a + 1) * block, v.begin() + b * block);
  };
  const size_t last = bytes / block - 1;
  for (auto [a, b] : {std::pair<size_t, size_t>{0, 1}, {7, 8}, {0, last}, {3, last - 5}, {100, 9000}}) {
    swap_blocks(a, b);
    EXPECT_NE(payload_checksum(v.data(), bytes), base) << "blocks " << a << " and " << b;
    swap_blocks(a, b);
    ASSERT_EQ(payload_checksum(v.data(), bytes), base);
  }
  // Whole 1 KiB stripes swapped, and a rotation by one block: data in the wrong place.
  std::swap_ranges(v.begin(), v.begin() + 1024, v.begin() + 4096);
  EXPECT_NE(payload_checksum(v.data(), bytes), base);
  std::swap_ranges(v.begin(), v.begin() + 1024, v.begin() + 4096);
  std::rotate(v.begin(), v.begin() + block, v.end());
  EXPECT_NE(payload_checksum(v.data(), bytes), base);
}

// Kernel calls travel as an id and the parameter struct's field list (models/kernel_params.hpp):
// the decoder refuses an unknown id and parameters that do not fit the kernel's struct, naming
// the kernel; a call written from the struct reads back field for field.
TEST(Codec, KernelCallsAreTypedOnTheWire) {
  using models::kernel_id;
  models::dec_attention_params att{{1, 4}};
  att.layer = 2, att.q0 = 4, att.q1 = 8, att.k0 = 1, att.k1 = 2, att.head_dim = 64, att.group = 4;
  att.rotary = true, att.window = 4096, att.rope.theta = 500000.f, att.rope.kind = models::rope_kind::llama3, att.rope.factor = 8.f;
  auto with = [](kernel_call c) {
    program p;
    p.id = 1;
    p.tiles = {0};
    superstep s;
    s.compute.push_back(std::move(c));
    p.steps.push_back(s);
    return load_program{3, p};
  };
  load_program out;
  ASSERT_TRUE(decode(encode(with(make_call<kernel_id::dec_attention>({1, 2, 3, 4, 5, 6}, {7}, att))), out).ok());
  const kernel_call& c = out.prog.steps[0].compute[0];
  EXPECT_EQ(c.kernel, kernel_id::dec_attention);
  models::dec_attention_params back;
  ASSERT_FALSE(models::from_wire(back, c.params, c.fparams).has_value());
  EXPECT_EQ(back.micro, 1u);
  EXPECT_EQ(back.micros, 4u);
  EXPECT_EQ(back.q1, 8u);
  EXPECT_EQ(back.group, 4u);
  EXPECT_TRUE(back.rotary);
  EXPECT_EQ(back.window, 4096u);
  EXPECT_FLOAT_EQ(back.rope.theta, 500000.f);
  EXPECT_EQ(back.rope.kind, models::rope_kind::llama3);
  EXPECT_FLOAT_EQ(back.rope.factor, 8.f);

  struct bad_case {
    kernel_call call;
    std::string says;
  };
  const std::vector<bad_case> bad{
      {{kernel_id::dec_attention, {1}, {2}, {1, 4}, {1.f, 1.f}}, "dec_attention"},   // too few integers
      {{kernel_id::scale, {1}, {2}, {}, {}}, "scale"},                                // the factor is missing
      {{kernel_id::matmul, {1, 2}, {3}, {2}, {}}, "accumulate"},                      // a boolean that is 2
      {{kernel_id::linear, {1, 2}, {3}, {0, 1, 9}, {}}, "activation"},                // no activation 9
      {{kernel_id::dec_norm, {1, 2}, {3}, {0, -1, 1}, {1e-5f}}, "micros"},           // a negative count
      {{static_cast<kernel_id>(200), {1}, {2}, {}, {}}, "kernel"},                    // an id beyond the list
  };
  for (const auto& b : bad) {
    status st = decode(encode(with(b.call)), out);
    EXPECT_FALSE(st.ok()) << b.says;
    EXPECT_NE(st.message().find(b.says), std::string::npos) << st.to_string();
  }
}
