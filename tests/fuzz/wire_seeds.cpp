// Writes the wire fuzz target's seeds: one valid message of every type (so the fuzzer starts
// from every decoder's accepting path) and the hostile shapes known to break decoders: frames
// cut short, wrong magic and version, length prefixes claiming gigabytes, deep nesting, a map
// where an array belongs, payload frames that disagree with the header.
// Usage: wire_seeds DIR   (files named seed-<what>; scripts/ci-sanitize runs it, so the seeds
// follow the protocol when it changes)
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tessera/exchange/codec.hpp"
#include "wire_frames.hpp"

using namespace tessera;
using namespace tessera::exchange;

namespace {

std::string dir;
int written = 0;

void put(const std::string& name, const std::string& bytes) {
  std::ofstream f(dir + "/seed-" + name, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::cerr << "wire_seeds: cannot write " << dir << "/seed-" << name << "\n";
    std::exit(1);
  }
  ++written;
}
void put(const std::string& name, const envelope& e) { put(name, fuzz::join_frames(e)); }

zmq::message_t floats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f - 1.0f;
  return copy_frame(v.data(), v.size() * 4);
}
zmq::message_t ints(std::vector<int32_t> v) { return copy_frame(v.data(), v.size() * 4); }

slice_ref token_slice() {
  slice_ref s;
  s.tensor_id = 3;
  s.kind = slice_kind::token_part;
  s.count = 4;
  s.part = 1;
  s.parts = 2;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: wire_seeds DIR\n";
    return 2;
  }
  dir = argv[1];
  put("register_tile", encode(register_tile{2, 1, 4242, "tcp://127.0.0.1:5555", "host-a", 1 << 20}));
  put("peer_directory", encode(peer_directory{{"tcp://127.0.0.1:1", "ipc:///tmp/t1"}, {0, 3}}));
  alloc_tensor at;
  at.request_id = 7;
  at.desc = tensor_desc{5, "w_qkv", dtype::f32, {2, 3}};
  at.has_data = true;
  put("alloc_tensor", encode(at, floats(6)));
  put("free_tensors", encode(free_tensors{8, {1, 2, 3}}));
  load_program lp;
  lp.request_id = 9;
  lp.prog.id = 1;
  lp.prog.tiles = {0, 1};
  lp.prog.temporaries = {tensor_desc{10, "tmp", dtype::i32, {4}}};
  superstep st;
  st.compute = {kernel_call{models::kernel_id::dec_norm, {1, 2}, {10}, {2, 3, 1}, {0.5f}}};
  st.sends = {send_op{1, 77, token_slice()}};
  st.recvs = {recv_op{1, 78, token_slice(), true}};
  lp.prog.steps = {st};
  put("load_program", encode(lp));
  run_program rp;
  rp.program_id = 1;
  rp.batch_id = 11;
  rp.seq_lengths = {3, 2};
  rp.active_tokens = 5;
  rp.inputs = {slice_ref{1, slice_kind::fixed, 0, 4}};
  rp.outputs = {token_slice()};
  {
    std::vector<zmq::message_t> in;
    in.push_back(floats(4));
    put("run_program", encode(rp, std::move(in)));
  }
  exchange_data xd{1, 11, 0, 0, 1, 77, 4, 0};
  {
    zmq::message_t slice = floats(4);
    xd.checksum = payload_checksum(slice.data(), slice.size());
    put("exchange_data", encode(xd, std::move(slice)));
  }
  put("sync_token", encode(sync_token{1, 11, 0, 2, 1}));
  run_done rd;
  rd.program_id = 1;
  rd.batch_id = 11;
  rd.tile_id = 1;
  rd.counters = {superstep_counters{10, 20, 30, 40, 50}};
  rd.outputs = 1;
  {
    std::vector<zmq::message_t> out;
    out.push_back(floats(2));
    put("run_done", encode(rd, std::move(out)));
  }
  run_done failed_run;
  failed_run.code = errc::peer_failed;
  failed_run.message = "tile 3 gone";
  put("run_done_failed", encode(failed_run, {}));
  put("heartbeat", encode(heartbeat{1, 2, 1000, 2000, 0}));
  put("shutdown", encode(shutdown{"bye"}));
  put("ack", encode(ack{9, 1, errc::ok, "", 0}));
  put("ack_error", encode(ack{9, 1, errc::invalid_argument, "no such tensor", 0}));
  put("abort_run", encode(abort_run{1, 11, "peer failed"}));
  put("fetch_tensor", encode(fetch_tensor{12, token_slice(), 5}));
  infer_batch ib;
  ib.batch_id = 13;
  ib.seq_lengths = {3, 2};
  ib.layout = 0;
  ib.padded_length = 3;
  put("infer_batch", encode(ib, ints({101, 7, 102, 101, 102}), ints({0, 0, 0, 0, 0})));
  ib.compute = dtype::bf16;
  put("infer_batch_bf16", encode(ib, ints({101, 7, 102, 101, 102}), ints({0, 0, 0, 0, 0})));
  infer_result ir;
  ir.batch_id = 13;
  ir.num_labels = 2;
  ir.wall_seconds = 0.001;
  put("infer_result", encode(ir, floats(4)));

  // Hostile shapes, built on a valid header.
  std::string hb = fuzz::join_frames(encode(heartbeat{1, 2, 1000, 2000, 0}));
  put("hostile_truncated_header", hb.substr(0, hb.size() / 2));
  put("hostile_empty", "");
  std::string bad_magic = hb;
  bad_magic[1] = static_cast<char>(bad_magic[1] ^ 0x5A);
  put("hostile_bad_magic", bad_magic);
  put("hostile_array32_4g", std::string("\x94\xdd\xff\xff\xff\xff", 6));  // [ array of 2^32-1 ...
  put("hostile_str32_4g", std::string("\x94\xdb\xff\xff\xff\xff" "abc", 9));
  put("hostile_bin32_4g", std::string("\xc6\xff\xff\xff\xff", 5));
  put("hostile_deep", std::string(200, '\x91'));                        // [[[[...]]]]
  put("hostile_map", std::string("\x84\x01\x02\x03\x04\x05\x06\x07\x08", 9));
  put("hostile_ext", std::string("\xc7\xff\x01", 3) + std::string(16, 'x'));
  std::string two_payloads = fuzz::join_frames(encode(at, floats(6)));
  put("hostile_payload_short", two_payloads.substr(0, two_payloads.size() - 5));
  put("hostile_extra_frame", fuzz::join_frames(encode(heartbeat{})) + std::string(fuzz::frame_separator) + "x");
  std::cout << "wire_seeds: " << written << " seeds in " << dir << "\n";
  return 0;
}
