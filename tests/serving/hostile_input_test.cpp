// Hostile input against a real tessera-serve process (bert-tiny, reference backend) over real
// sockets: bad JSON, wrong types, huge and deep bodies, invalid and overlong UTF-8, NUL bytes,
// lone surrogates, KServe shape/datatype/range errors, header abuse, garbage on the socket, a
// slow client, and the http fuzz target's corpus. Each case gets a 4xx JSON error (or, where
// HTTP itself is broken, a 400 or a clean close), the process lives, and its next good answer is
// byte-identical to the one before the case.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"

using namespace tessera::test_support;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr size_t body_limit = 256 << 10;  // --max-body-bytes of the server under test

/// What came back on a raw connection.
struct raw_reply {
  unsigned status = 0;  ///< 0: no response
  std::string head, body;
  bool closed = false;     ///< the server closed (after the response, or instead of one)
  bool timed_out = false;  ///< neither a response nor a close within the time allowed
};

/// Connects, sends `bytes` (ignoring a send the server cut short), optionally half-closes, and
/// reads one response (Content-Length framed, as tessera always sends) or the close.
raw_reply exchange(uint16_t port, const std::string& bytes, bool half_close = true,
                   std::chrono::milliseconds wait = 10s) {
  raw_reply out;
  int fd = connect_loopback(port);
  if (fd < 0) {
    out.closed = true;
    return out;
  }
  for (size_t sent = 0; sent < bytes.size();) {
    ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered early (413, 400) and closed
    sent += static_cast<size_t>(n);
  }
  if (half_close) shutdown(fd, SHUT_WR);
  std::string got;
  auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      out.timed_out = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[16384];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
    auto end = got.find("\r\n\r\n");
    if (end == std::string::npos) continue;
    std::string head = got.substr(0, end);
    size_t length = 0;
    auto cl = head.find("Content-Length: ");
    if (cl != std::string::npos) length = std::stoul(head.substr(cl + 16));
    if (got.size() >= end + 4 + length) {
      out.head = head;
      out.body = got.substr(end + 4, length);
      if (head.rfind("HTTP/1.", 0) == 0 && head.size() > 12) out.status = std::stoul(head.substr(9, 3));
      break;
    }
  }
  close(fd);
  return out;
}

std::string request(const std::string& method, const std::string& target, const std::string& body,
                    const std::string& extra_headers = "") {
  return method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
std::string post(const std::string& body, const std::string& target = "/predict") {
  return request("POST", target, body);
}
std::string infer(const std::string& body) { return post(body, "/v2/models/bert-tiny/infer"); }
/// A raw request with the headers given as they are (no Content-Length added).
std::string with_headers(const std::string& head, const std::string& body = "") {
  return head + "\r\n\r\n" + body;
}

/// One hostile case: the bytes, and the statuses that are a correct answer. `or_close`: HTTP
/// itself is broken, so closing the connection without a response is correct too.
struct hostile_case {
  std::string name;
  std::string bytes;
  std::set<unsigned> statuses;
  bool or_close = false;
  std::string must_contain = "";  ///< in the error message
};

std::vector<hostile_case> all_cases() {
  const std::set<unsigned> c400{400}, c404{404}, c405{405}, c413{413}, c422{422}, c4xx{400, 413, 422};
  std::vector<hostile_case> v;
  auto add = [&](std::string name, std::string bytes, std::set<unsigned> st, bool or_close = false,
                 std::string must = "") {
    v.push_back({std::move(name), std::move(bytes), std::move(st), or_close, std::move(must)});
  };
  // Bad JSON and wrong types.
  add("not_json", post("not json at all"), c400);
  add("truncated_json", post(R"({"inputs": "abc)"), c400);
  add("empty_body", post(""), c400);
  add("top_level_array", post(R"(["a"])"), c422);
  add("inputs_number", post(R"({"inputs": 42})"), c422);
  add("inputs_null", post(R"({"inputs": null})"), c422);
  add("inputs_object", post(R"({"inputs": {"a": "b"}})"), c422);
  add("inputs_numbers_list", post(R"({"inputs": [[1, 2]]})"), c422);
  add("inputs_triple", post(R"({"inputs": [["a", "b", "c"]]})"), c422);
  add("truncate_string", post(R"({"inputs": "x", "truncate": "yes"})"), c422);
  add("raw_scores_number", post(R"({"inputs": "x", "raw_scores": 1})"), c422);
  add("empty_text", post(R"({"inputs": ""})"), c413);  // TEI: "`inputs` cannot be empty"
  add("empty_list", post(R"({"inputs": []})"), c422);
  add("more_than_a_pair", post(json{{"inputs", std::vector<std::string>(33, "a")}}.dump()), c422);
  {
    json many = {{"inputs", std::vector<std::vector<std::string>>(33, {"a"})}};
    add("too_many_inputs", post(many.dump()), c413, false, "batch size 33");
  }
  {
    std::string words;
    for (int i = 0; i < 600; ++i) words += "word ";
    add("too_long_untruncated", post(json{{"inputs", words}}.dump()), c413, false, "truncate");
  }
  // Huge and deep bodies.
  add("deep_nesting", post("{\"inputs\": " + std::string(100000, '[') + std::string(100000, ']') + "}"), c400,
      false, "nested deeper");
  add("deep_nesting_objects", post(std::string(5000, '{')), c400);
  add("body_over_limit", post("{\"inputs\": \"" + std::string(body_limit + 1000, 'a') + "\"}"), c413, true);
  add("content_length_1e18", with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000000000"),
      c413, true);
  // Invalid UTF-8 (raw bytes), NUL, lone surrogate escapes.
  add("utf8_ff_fe", post("{\"inputs\": \"\xff\xfe text\"}"), c400, false, "at byte 12");
  add("utf8_overlong_2", post("{\"inputs\": \"\xc0\xaf\"}"), c400, false, "overlong");
  add("utf8_overlong_3", post("{\"inputs\": \"\xe0\x80\xaf\"}"), c400, false, "overlong");
  add("utf8_overlong_4", post("{\"inputs\": \"\xf0\x80\x80\xaf\"}"), c400, false, "overlong");
  add("utf8_surrogate_d800", post("{\"inputs\": \"\xed\xa0\x80\"}"), c400, false, "surrogate");
  add("utf8_surrogate_dfff", post("{\"inputs\": \"a\xed\xbf\xbf\"}"), c400, false, "at byte 13");
  add("utf8_truncated_in_string", post("{\"inputs\": \"euro \xe2\x82\"}"), c400);
  add("utf8_truncated_at_end", post("{\"inputs\": \"x\"}\xe2"), c400, false, "truncated");
  add("utf8_five_byte", post("{\"inputs\": \"\xf8\x88\x80\x80\x80\"}"), c400);
  add("utf8_above_10ffff", post("{\"inputs\": \"\xf4\x90\x80\x80\"}"), c400);
  add("utf8_stray_continuation", post("{\"inputs\": \"\x80\"}"), c400);
  add("utf8_in_pair", post("{\"inputs\": [[\"q\", \"\xc3\x28\"]]}"), c400);
  add("utf8_in_batch", post("{\"inputs\": [\"ok\", \"\xfe\"]}"), c400, false, "at byte 19");
  add("utf8_tokenize", post("{\"inputs\": \"\xff\"}", "/tokenize"), c400);
  add("utf8_in_key", post("{\"\xff\": 1}"), c400);
  add("utf8_kserve_bytes",
      infer("{\"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\", \"shape\": [1], \"data\": [\"\xc0\x80\"]}]}"),
      c400);
  add("nul_raw_in_string", post(std::string("{\"inputs\": \"a\0b\"}", 17)), c400, false, "NUL byte at byte 13");
  add("nul_raw_outside", post(std::string("{\"inputs\": \"a\"}\0", 16)), c400, false, "NUL byte at byte 15");
  add("lone_high_surrogate", post(R"({"inputs": "\ud800"})"), c400, false, "surrogate");
  add("lone_low_surrogate", post(R"({"inputs": "x\udc00y"})"), c400, false, "surrogate");
  add("high_then_letter", post(R"({"inputs": "\ud800\u0041"})"), c400);
  // KServe shape, datatype and range errors.
  add("kserve_shape_overflow",
      infer(R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [4611686018427387904, 4], "data": [1, 2]}]})"),
      c400);
  add("kserve_shape_negative",
      infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1], "data": ["a"]}]})"), c400);
  add("kserve_shape_mismatch",
      infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [3], "data": ["a", "b"]}]})"), c400);
  add("kserve_shape_not_ints",
      infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": ["1"], "data": ["a"]}]})"), c400);
  add("kserve_ids_datatype",
      infer(R"({"inputs": [{"name": "input_ids", "datatype": "FP32", "shape": [1, 1], "data": [1.5]}]})"), c400);
  add("kserve_ids_1d", infer(R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [2], "data": [101, 102]}]})"),
      c400);
  add("kserve_id_out_of_range",
      infer(R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 2], "data": [101, 99999999999]}]})"),
      c400, false, "out of range");
  add("kserve_id_negative",
      infer(R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 1], "data": [-5]}]})"), c400);
  add("kserve_type_id_range",
      infer(R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 1], "data": [101]},)"
            R"({"name": "token_type_ids", "datatype": "INT64", "shape": [1, 1], "data": [7]}]})"),
      c400);
  add("kserve_mask_size",
      infer(R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 2], "data": [101, 102]},)"
            R"({"name": "attention_mask", "datatype": "INT64", "shape": [1, 1], "data": [1]}]})"),
      c400);
  add("kserve_unknown_input", infer(R"({"inputs": [{"name": "pixels", "datatype": "FP32", "data": [1]}]})"), c400);
  add("kserve_duplicate_input",
      infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}, {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["b"]}]})"),
      c400, false, "twice");
  add("kserve_bytes_numbers", infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": [1, 2]}]})"), c400);
  add("kserve_truncate_number",
      infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}], "parameters": {"truncate": 1}})"), c400);
  add("kserve_inputs_not_list", infer(R"({"inputs": {"name": "text"}})"), c400);
  add("kserve_empty_data", infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [0], "data": []}]})"), c400);
  // The binary tensor data extension: JSON, then raw tensors; the header gives the JSON's length.
  auto binary_infer = [](const std::string& json_text, const std::string& binary) {
    return request("POST", "/v2/models/bert-tiny/infer", json_text + binary,
                   "Inference-Header-Content-Length: " + std::to_string(json_text.size()) + "\r\n");
  };
  add("kserve_binary_past_end",
      binary_infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 99}}]})", "abc"),
      c400, false, "past the end");
  add("kserve_binary_header_too_big",
      request("POST", "/v2/models/bert-tiny/infer", "{}", "Inference-Header-Content-Length: 99999\r\n"), c400);
  add("kserve_binary_header_not_a_number",
      request("POST", "/v2/models/bert-tiny/infer", "{}", "Inference-Header-Content-Length: -2\r\n"), c400);
  add("kserve_binary_bytes_length_lies",
      binary_infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 6}}]})",
                   std::string("\xff\xff\xff\x7f" "ab", 6)),
      c400, false, "runs past");
  add("kserve_binary_invalid_utf8_text",
      binary_infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 6}}]})",
                   std::string("\x02\x00\x00\x00\xc0\xaf", 6)),
      c400, false, "invalid UTF-8");
  add("kserve_binary_leftover",
      binary_infer(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 5}}]})",
                   std::string("\x01\x00\x00\x00" "a" "junk", 9)),
      c400, false, "no input's binary_data_size");
  add("kserve_binary_int64_size",
      binary_infer(R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 2], "parameters": {"binary_data_size": 12}}]})",
                   std::string(12, '\x01')),
      c400);
  add("kserve_unknown_model", post("{}", "/v2/models/other/infer"), c404);
  // Methods and routes.
  add("delete_predict", request("DELETE", "/predict", ""), c405);
  add("get_predict", request("GET", "/predict", ""), c405);
  add("unknown_route", request("GET", "/nowhere", ""), c404);
  add("route_invalid_utf8", request("GET", "/v2/models/\xff\xfe/ready", ""), c404);
  // Header abuse and broken HTTP.
  add("huge_header", with_headers("GET /info HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100000, 'a')), c400, true);
  {
    std::string head = "GET /info HTTP/1.1\r\nHost: x";
    for (int i = 0; i < 2000; ++i) head += "\r\nX-H" + std::to_string(i) + ": v";
    add("many_headers", with_headers(head), c400, true);
  }
  add("content_length_letters", with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: abc", "{}"), c400, true);
  add("content_length_negative", with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: -3", "{}"), c400, true);
  add("content_length_duplicate",
      with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nContent-Length: 16", R"({"inputs": "a"})"),
      c400, true);
  add("content_length_longer_than_body", with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100", "{}"),
      c400, true);
  add("chunked_garbage",
      with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", "zz\r\n{\"inputs\"\r\n"), c400, true);
  add("chunked_huge_size",
      with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", "ffffffffffffffff\r\nx\r\n"),
      c4xx, true);
  add("chunked_unterminated",
      with_headers("POST /predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", "5\r\nabc"), c400, true);
  add("header_without_colon", with_headers("GET /info HTTP/1.1\r\nHost: x\r\nno colon here"), c400, true);
  add("header_nul", with_headers("GET /info HTTP/1.1\r\nHost: x\r\nX-A: a" + std::string(1, '\0') + "b"), c400, true);
  add("bad_http_version", with_headers("GET /info HTTP/9.9\r\nHost: x"), c400, true);
  add("no_http_version", "GET /info\r\n\r\n", c400, true);
  add("garbage_tls_hello", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) + std::string(500, '\x7f'),
      c400, true);
  {
    std::mt19937 rng(11);
    std::string noise(4096, '\0');
    for (auto& ch : noise) ch = static_cast<char>(rng());
    add("garbage_random", noise, c400, true);
  }
  return v;
}

class HostileInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One I/O thread: a slow client cannot be waited out by a second thread.
    server_ = new served_process({bin("tessera-serve"), "--model", "bert-tiny", "--port", "0", "--io-threads", "1",
                                  "--max-body-bytes", std::to_string(body_limit)});
    ASSERT_NE(server_->port(), 0) << "tessera-serve did not start: " << server_->line();
    baseline_ = good();
    ASSERT_FALSE(baseline_.empty());
  }
  static void TearDownTestSuite() {
    if (server_) {
      EXPECT_EQ(server_->stop(), 0) << "tessera-serve did not exit cleanly";
    }
    delete server_;
    server_ = nullptr;
  }
  /// The answer to one good request on a fresh connection ("" on failure).
  static std::string good() {
    http_connection c("127.0.0.1", server_->port());
    auto r = c.request("POST", "/predict", R"({"inputs": "a good question, asked politely"})");
    EXPECT_EQ(r.status, 200u) << r.body << r.error;
    return r.status == 200 ? r.body : "";
  }
  /// The server is alive and answers exactly as before.
  static void expect_unchanged(const std::string& after) {
    ASSERT_TRUE(server_->alive()) << "tessera-serve died after " << after;
    EXPECT_EQ(good(), baseline_) << "the answer changed after " << after;
  }

  static served_process* server_;
  static std::string baseline_;
};

served_process* HostileInput::server_ = nullptr;
std::string HostileInput::baseline_;

TEST_F(HostileInput, EachCaseGetsA4xxJsonErrorAndTheNextAnswerIsUnchanged) {
  auto cases = all_cases();
  std::cout << "[ hostile ] " << cases.size() << " cases\n";
  EXPECT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    raw_reply r = exchange(server_->port(), c.bytes);
    EXPECT_FALSE(r.timed_out) << c.name << ": neither an answer nor a close in 10 s";
    if (r.status == 0) {
      EXPECT_TRUE(c.or_close) << c.name << ": closed without an answer";
    } else {
      EXPECT_TRUE(c.statuses.count(r.status)) << c.name << ": status " << r.status << " " << r.body;
      EXPECT_NE(r.head.find("Content-Type: application/json"), std::string::npos) << c.name << ": " << r.head;
      auto j = json::parse(r.body, nullptr, false);
      ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_string() && j.contains("error_type"))
          << c.name << ": " << r.body;
      EXPECT_NE(j["error"].get<std::string>().find(c.must_contain), std::string::npos) << c.name << ": " << r.body;
      if (r.status == 405) {
        EXPECT_NE(r.head.find("Allow: "), std::string::npos) << c.name;
      }
    }
    expect_unchanged(c.name);
  }
}

// Special tokens written in the text used to make the tokenizer quadratic (200 KB of
// "[SEP]" held an HTTP thread for 43 s); the body limit's worth must answer in seconds.
TEST_F(HostileInput, ManySpecialTokensAnswerQuickly) {
  std::string text;
  while (text.size() + 5 < body_limit - 64) text += "[SEP]";
  auto t0 = std::chrono::steady_clock::now();
  raw_reply r = exchange(server_->port(), post(json{{"inputs", text}, {"truncate", true}}.dump(), "/predict"));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_LT(seconds, 5.0) << "tokenizing " << text.size() << " bytes of [SEP]";
  expect_unchanged("many special tokens");
}

// Slowloris: clients that send a request a byte at a time (and one that sends nothing) must not
// keep other clients from being answered, on a server with one I/O thread.
TEST_F(HostileInput, SlowClientsDoNotBlockOthers) {
  const std::string slow = post(R"({"inputs": "slowly"})");
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    int fd = connect_loopback(server_->port());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread dribble([&] {
    for (size_t i = 0; i < slow.size() && !stop; ++i) {
      for (size_t k = 1; k < fds.size(); ++k) send(fds[k], &slow[i], 1, MSG_NOSIGNAL);  // fds[0] stays silent
      std::this_thread::sleep_for(20ms);
    }
  });
  // While they dribble, others are answered at once and unchanged.
  double worst = 0;
  for (int i = 0; i < 20; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(good(), baseline_);
    worst = std::max(worst, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(50ms);
  }
  stop = true;
  dribble.join();
  EXPECT_LT(worst, 2.0) << "a good request waited " << worst << " s behind slow clients";
  for (int fd : fds) close(fd);
  expect_unchanged("slow clients");
}

// Every input in the http fuzz target's corpus (seeds and what fuzzing found), sent as raw bytes:
// no 500, no hang, no death, and the answer afterwards is unchanged.
TEST_F(HostileInput, FuzzCorpusAgainstTheRealServer) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  fs::path dir = fs::path(src ? src : TESSERA_TEST_SOURCE_DIR) / "tests/fuzz/corpus/http";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  size_t sent = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    raw_reply r = exchange(server_->port(), bytes, true, 10s);
    ++sent;
    EXPECT_FALSE(r.timed_out) << entry.path().filename();
    EXPECT_NE(r.status, 500u) << entry.path().filename() << ": " << r.body;
    ASSERT_TRUE(server_->alive()) << "tessera-serve died on " << entry.path();
  }
  std::cout << "[ hostile ] " << sent << " corpus inputs sent\n";
  EXPECT_GE(sent, 40u);
  expect_unchanged("the fuzz corpus");
}

}  // namespace
