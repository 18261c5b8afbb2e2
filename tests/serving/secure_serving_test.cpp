// The HTTP port off loopback, tested from the user's side: tessera-serve and tessera-host as
// processes, with curl and wrk (clients someone else wrote) and raw sockets. The API key (401
// without it, 200 with it, the probes open), TLS (a client that trusts the test CA gets answers,
// one that does not is refused, plain HTTP and stalled handshakes neither crash nor block the
// server), and the refusal to serve another machine without both unless --insecure.
//
// The certificates are made at test time with openssl's command line: a throwaway CA and a server
// certificate for 127.0.0.1 and localhost, in a temporary folder removed afterwards.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"
#include "tessera/serving/access.hpp"

using namespace tessera::serving;
using namespace tessera::test_support;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// std::system's exit code.
int run(const std::string& cmd) {
  int ws = std::system(cmd.c_str());
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

bool have(const char* tool) { return run(std::string("command -v ") + tool + " > /dev/null 2>&1") == 0; }

// A folder with a throwaway CA, a server certificate it signed (SAN 127.0.0.1, localhost), the
// server's key, an API key file, and a second CA that signed nothing here. Test-only material.
struct test_pki {
  fs::path dir;
  std::string api_key = "tessera-test-key-9f2c1a7b3e";
  std::string ca, cert, key, other_ca, key_file;
  bool ok = false;
  std::string error;
  int calls = 0;

  test_pki() {
    dir = fs::temp_directory_path() / ("tessera-tls-" + std::to_string(getpid()));
    fs::create_directories(dir);
    ca = (dir / "ca.pem").string();
    cert = (dir / "server.pem").string();
    key = (dir / "server.key").string();
    other_ca = (dir / "other-ca.pem").string();
    key_file = (dir / "api.key").string();
    std::ofstream(dir / "ext.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    std::ofstream(key_file) << api_key << "\n";  // a final newline, as an editor leaves it
    const std::string d = dir.string(), ec = " -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    const std::string cmd =
        "cd " + d + " && openssl req -x509" + ec + " -keyout ca.key -out ca.pem -days 2 -subj /CN=tessera-test-ca" +
        " && openssl req -x509" + ec + " -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=other-ca" +
        " && openssl req" + ec + " -keyout server.key -out server.csr -subj /CN=localhost" +
        " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2" +
        " -extfile ext.cnf";
    if (!have("openssl")) {
      error = "openssl (the command) is not installed; scripts/setup installs it";
    } else if (run("(" + cmd + ") > " + d + "/openssl.log 2>&1") != 0) {
      error = "openssl failed: " + slurp(dir / "openssl.log");
    } else {
      ok = true;
    }
  }
  ~test_pki() { fs::remove_all(dir); }

  /// tessera-serve (toy model unless `model` says) with the key and TLS, on a free port.
  std::vector<std::string> serve_args(const std::string& model = "toy") const {
    return {bin("tessera-serve"), "--model", model, "--port", "0", "--api-key-file", key_file,
            "--tls-cert", cert, "--tls-key", key};
  }

  struct curl_result {
    int rc = -1;         ///< curl's exit code (0, or e.g. 60: certificate not trusted)
    int code = 0;        ///< HTTP status (0 when there was none)
    std::string body, headers, stderr_text;
  };
  /// curl `args` `url` (one or more URLs, unquoted), with a 10 s limit.
  curl_result curl(const std::string& args, const std::string& url) {
    const std::string n = std::to_string(calls++);
    fs::path body = dir / ("body" + n), headers = dir / ("headers" + n), code = dir / ("code" + n),
             err = dir / ("err" + n);
    curl_result r;
    r.rc = run("curl -sS --max-time 10 -o " + body.string() + " -D " + headers.string() +
               " -w '%{http_code}' " + args + " " + url + " > " + code.string() + " 2> " + err.string());
    r.code = std::atoi(slurp(code).c_str());
    r.body = slurp(body);
    r.headers = slurp(headers);
    r.stderr_text = slurp(err);
    return r;
  }
  std::string with_key() const { return "--cacert " + ca + " -H 'Authorization: Bearer " + api_key + "'"; }
};

#define REQUIRE_PKI(pki) \
  if (!(pki).ok) GTEST_FAIL() << (pki).error;                                      \
  if (!have("curl")) GTEST_FAIL() << "curl is not installed; scripts/setup installs it"

// `s`: tessera-serve on TLS with the test PKI `pki` (certificate, key, API key file), listening.
#define START_TLS_SERVER(pki, s)         \
  test_pki pki;                          \
  REQUIRE_PKI(pki);                      \
  served_process s(pki.serve_args());    \
  ASSERT_NE(s.port(), 0) << "did not start: '" << s.line() << "'"

/// A TCP connection to 127.0.0.1:port that sends `bytes` (maybe none) and stays open.
int open_raw(uint16_t port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  if (!bytes.empty() && send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// Everything the peer sends until it closes; `closed` says whether it did within `limit`.
std::string read_until_closed(int fd, std::chrono::milliseconds limit, bool& closed) {
  std::string got;
  auto until = std::chrono::steady_clock::now() + limit;
  closed = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return got;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return got;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      return got;
    }
    got.append(buf, static_cast<size_t>(n));
  }
}

std::string error_type(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  return j.is_object() && j.contains("error_type") ? j["error_type"].get<std::string>() : "(not a JSON error: " + body + ")";
}

}  // namespace

// ---- the pieces, without processes --------------------------------------------------------

TEST(Access, ApiKeyCheckAcceptsOnlyTheBearerKey) {
  api_key_check check("s3cret-key");
  EXPECT_TRUE(check.accepts("Bearer s3cret-key"));
  EXPECT_TRUE(check.accepts("bearer s3cret-key"));  // the scheme is case-insensitive (RFC 7235)
  EXPECT_TRUE(check.accepts("BEARER  s3cret-key"));
  for (const char* bad : {"", "s3cret-key", "Bearer", "Bearer ", "Bearer s3cret-ke", "Bearer s3cret-key2",
                          "Bearer S3CRET-KEY", "Basic s3cret-key", "Bearers3cret-key", "Token s3cret-key"})
    EXPECT_FALSE(check.accepts(bad)) << "'" << bad << "'";
}

TEST(Access, PublicRoutesAreTheProbesAndMetrics) {
  for (const char* open : {"/health", "/health?verbose=1", "/metrics", "/v2/health/live", "/v2/health/ready", "/ping"})
    EXPECT_TRUE(is_public_route(open)) << open;
  // TEI's GET / is a health probe, open; POST / predicts and needs the key.
  EXPECT_TRUE(is_public_route("/", "GET"));
  EXPECT_FALSE(is_public_route("/", "POST"));
  EXPECT_FALSE(is_public_route("/predict", "GET"));
  for (const char* closed : {"/info", "/predict", "/tokenize", "/healthz", "/v2", "/v2/health",
                             "/v2/models/toy/ready", "/v2/models/toy/infer", "/", "", "/nope", "//health"})
    EXPECT_FALSE(is_public_route(closed)) << closed;
}

TEST(Access, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1", "localhost"})
    EXPECT_TRUE(is_loopback_address(a)) << a;
  for (const char* a : {"0.0.0.0", "::", "10.1.2.3", "192.168.0.7", "128.0.0.1", "::ffff:10.0.0.1",
                        "fe80::1", "", "example.org", "127.0.0.1 ", "127.0.0"})
    EXPECT_FALSE(is_loopback_address(a)) << a;
}

TEST(Access, KeysAndKeyFiles) {
  EXPECT_TRUE(validate_api_key("abc-DEF_123.~+/=").ok());
  EXPECT_FALSE(validate_api_key("").ok());
  EXPECT_FALSE(validate_api_key("has space").ok());
  EXPECT_FALSE(validate_api_key("tab\there").ok());
  EXPECT_FALSE(validate_api_key("caf\xc3\xa9").ok());
  EXPECT_FALSE(validate_api_key(std::string(4097, 'k')).ok());
  auto dir = fs::temp_directory_path() / ("tessera-keyfile-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ok") << "k3y\r\n";
  std::ofstream(dir / "empty") << "\n";
  std::ofstream(dir / "spaced") << "two words\n";
  auto k = read_api_key_file((dir / "ok").string());
  ASSERT_TRUE(k.has_value()) << k.error().message();
  EXPECT_EQ(*k, "k3y");
  auto e = read_api_key_file((dir / "empty").string());
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message().find("empty"), std::string::npos) << e.error().message();
  EXPECT_FALSE(read_api_key_file((dir / "spaced").string()).has_value());
  auto m = read_api_key_file((dir / "missing").string());
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.error().message().find("cannot be read"), std::string::npos);
  fs::remove_all(dir);
}

// ---- the API key on a real process ---------------------------------------------------------

TEST(SecureServing, ApiKeyGuardsEveryRouteButTheProbes) {
  test_pki pki;
  ASSERT_TRUE(pki.ok) << pki.error;
  served_process s({bin("tessera-serve"), "--model", "toy", "--port", "0", "--api-key-file", pki.key_file});
  ASSERT_NE(s.port(), 0) << "did not start: '" << s.line() << "'";
  const std::string predict = R"({"inputs": "is this allowed"})";

  http_connection anon("127.0.0.1", s.port());
  auto r = anon.request("POST", "/predict", predict);
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(error_type(r.body), "unauthorized");
  EXPECT_NE(r.body.find("missing API key"), std::string::npos) << r.body;
  EXPECT_EQ(r.www_authenticate, "Bearer");
  EXPECT_TRUE(r.keep_alive);  // a 401 does not cost the connection
  for (const char* route : {"/info", "/v2", "/v2/models/toy", "/v2/models/toy/ready", "/nope"}) {
    auto g = anon.request("GET", route);
    EXPECT_EQ(g.status, 401u) << route << ": " << g.body;
  }
  EXPECT_EQ(anon.request("POST", "/tokenize", predict).status, 401u);
  EXPECT_EQ(anon.request("POST", "/v2/models/toy/infer", "{}").status, 401u);
  // The probes and the scrape stay open, as in TEI: load balancers and Prometheus carry no key.
  for (const char* route : {"/health", "/metrics", "/v2/health/live", "/v2/health/ready"})
    EXPECT_EQ(anon.request("GET", route).status, 200u) << route;

  for (const std::string& wrong : {"Bearer " + pki.api_key + "x", "Bearer " + pki.api_key.substr(1),
                                   "Basic " + pki.api_key, pki.api_key, std::string("Bearer wrong")}) {
    http_connection c("127.0.0.1", s.port());
    c.set_header("Authorization", wrong);
    auto w = c.request("POST", "/predict", predict);
    EXPECT_EQ(w.status, 401u) << wrong;
    EXPECT_NE(w.body.find("wrong API key"), std::string::npos) << w.body;
    EXPECT_EQ(w.www_authenticate, "Bearer");
  }

  // A body the server would have to read first is not read without the key: a declared 1 MiB
  // (none of it sent) or a chunked body gets the 401 at once, and the connection is closed.
  for (const char* framing : {"Content-Length: 1048576", "Transfer-Encoding: chunked"}) {
    int fd = open_raw(s.port(), std::string("POST /predict HTTP/1.1\r\nHost: x\r\n") + framing + "\r\n\r\n");
    ASSERT_GE(fd, 0);
    bool closed = false;
    std::string got = read_until_closed(fd, std::chrono::seconds(5), closed);
    close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 401", 0), 0u) << framing << ": " << got;
    EXPECT_TRUE(closed) << framing;
  }

  http_connection keyed("127.0.0.1", s.port());
  keyed.set_header("Authorization", "Bearer " + pki.api_key);
  auto ok = keyed.request("POST", "/predict", predict);
  ASSERT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(json::parse(ok.body).size(), 2u);
  EXPECT_EQ(keyed.request("GET", "/info").status, 200u);
  EXPECT_EQ(keyed.request("GET", "/nope").status, 404u);  // with the key, routes answer as before
  // The 401s are counted (apart from inference failures: a refused request was never an
  // inference request), and nothing else broke.
  auto metrics = keyed.request("GET", "/metrics").body;
  EXPECT_NE(metrics.find("tessera_http_errors{err=\"unauthorized\"} 15\n"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("tessera_request_failure{err=\"unauthorized\"}"), std::string::npos) << metrics;
  EXPECT_TRUE(s.alive());
  EXPECT_EQ(s.stop(), 0);
}

// ---- TLS ------------------------------------------------------------------------------------

TEST(SecureServing, ClientsThatTrustTheCertificateGetAnswersOverTls) {
  START_TLS_SERVER(pki, s);
  EXPECT_EQ(s.line().rfind("listening on https://127.0.0.1:", 0), 0u) << s.line();
  const std::string url = "https://127.0.0.1:" + std::to_string(s.port());
  const std::string body = " -H 'Content-Type: application/json' -d '{\"inputs\": \"hello over tls\"}'";

  auto ok = pki.curl(pki.with_key() + body, url + "/predict");
  ASSERT_EQ(ok.rc, 0) << ok.stderr_text;
  EXPECT_EQ(ok.code, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body).size(), 2u) << ok.body;
  // Same through the name the certificate also carries.
  auto by_name = pki.curl(pki.with_key() + " --resolve localhost:" + std::to_string(s.port()) + ":127.0.0.1",
                          "https://localhost:" + std::to_string(s.port()) + "/info");
  EXPECT_EQ(by_name.code, 200) << by_name.stderr_text;

  auto no_key = pki.curl("--cacert " + pki.ca + body, url + "/predict");
  EXPECT_EQ(no_key.code, 401);
  EXPECT_EQ(error_type(no_key.body), "unauthorized");
  EXPECT_NE(no_key.headers.find("WWW-Authenticate: Bearer"), std::string::npos) << no_key.headers;
  auto wrong = pki.curl("--cacert " + pki.ca + " -H 'Authorization: Bearer nope'" + body, url + "/predict");
  EXPECT_EQ(wrong.code, 401);
  EXPECT_EQ(pki.curl("--cacert " + pki.ca, url + "/health").code, 200);

  // A client that does not trust the certificate refuses the server (curl: 60, peer certificate).
  auto untrusted = pki.curl("-H 'Authorization: Bearer " + pki.api_key + "'", url + "/health");
  EXPECT_EQ(untrusted.rc, 60) << untrusted.stderr_text;
  auto other = pki.curl("--cacert " + pki.other_ca, url + "/health");
  EXPECT_EQ(other.rc, 60) << other.stderr_text;
  // TLS 1.2 and 1.3 are spoken; 1.1 is not: an OpenSSL client that would speak it (security
  // level 0) gets the server's protocol_version alert.
  EXPECT_EQ(pki.curl("--cacert " + pki.ca + " --tlsv1.2 --tls-max 1.2", url + "/health").code, 200);
  EXPECT_EQ(pki.curl("--cacert " + pki.ca + " --tlsv1.3", url + "/health").code, 200);
  const std::string s_client = "openssl s_client -connect 127.0.0.1:" + std::to_string(s.port()) +
                               " -cipher DEFAULT@SECLEVEL=0 < /dev/null 2>&1";
  EXPECT_EQ(run(s_client + " -tls1_2 | grep -q 'Protocol  *: TLSv1.2'"), 0) << "the check itself is broken";
  EXPECT_EQ(run(s_client + " -tls1_1 | grep -q 'alert protocol version'"), 0) << "TLS 1.1 was not refused";
  // TLS 1.2 suites are forward-secret AEAD only: ECDHE with AES-GCM yes, ECDHE with CBC no
  // (OpenSSL's defaults would take it).
  EXPECT_EQ(run(s_client + " -tls1_2 -cipher ECDHE-ECDSA-AES128-GCM-SHA256 | grep -q 'Cipher is ECDHE-ECDSA-AES128-GCM'"), 0);
  EXPECT_NE(run(s_client + " -tls1_2 -cipher ECDHE-ECDSA-AES128-SHA | grep -q 'Cipher is ECDHE-ECDSA-AES128-SHA'"), 0)
      << "a CBC suite was accepted";
  EXPECT_EQ(run(s_client + " -tls1_2 -cipher ECDHE-ECDSA-AES128-SHA | grep -q 'alert handshake failure'"), 0);
  // Keep-alive over one TLS connection: curl reuses it for a second URL.
  auto twice = pki.curl(pki.with_key() + " -v", url + "/info " + url + "/info");
  EXPECT_EQ(twice.rc, 0) << twice.stderr_text;
  EXPECT_NE(twice.stderr_text.find("Re-using existing connection"), std::string::npos) << twice.stderr_text;

  EXPECT_TRUE(s.alive());
  EXPECT_EQ(s.stop(), 0);
}

TEST(SecureServing, PlainHttpToTheTlsPortIsRefusedAndTheServerKeepsServing) {
  START_TLS_SERVER(pki, s);
  const std::string url = "https://127.0.0.1:" + std::to_string(s.port());

  // Plain HTTP: a clear-text 400 that says to use https, then the connection is closed.
  int fd = open_raw(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_GE(fd, 0);
  bool closed = false;
  std::string got = read_until_closed(fd, std::chrono::seconds(5), closed);
  close(fd);
  EXPECT_TRUE(closed) << "the server kept the plain connection open";
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_NE(got.find("\"tls_required\""), std::string::npos) << got;
  EXPECT_NE(got.find("https://"), std::string::npos) << got;
  // curl with http:// gets the same 400, and a real client is not left hanging.
  auto plain = pki.curl("", "http://127.0.0.1:" + std::to_string(s.port()) + "/health");
  EXPECT_EQ(plain.code, 400);
  EXPECT_EQ(error_type(plain.body), "tls_required");
  // Garbage, a truncated ClientHello, and a TLS record of nonsense: each closed, none answered.
  for (const std::string& junk : {std::string("\x16\x03\x01\x00\x05hello", 10), std::string("\x16\x03", 2),
                                  std::string("\x16\x03\x03\xff\xff") + std::string(64, 'x')}) {
    int j = open_raw(s.port(), junk);
    ASSERT_GE(j, 0);
    shutdown(j, SHUT_WR);
    bool jc = false;
    std::string reply = read_until_closed(j, std::chrono::seconds(12), jc);
    close(j);
    EXPECT_TRUE(jc) << "junk of " << junk.size() << " bytes left the connection open";
    EXPECT_EQ(reply.find("HTTP/1.1 200"), std::string::npos);
  }
  auto ok = pki.curl(pki.with_key(), url + "/info");
  EXPECT_EQ(ok.code, 200) << ok.stderr_text;
  EXPECT_TRUE(s.alive());
  EXPECT_EQ(s.stop(), 0);
}

TEST(SecureServing, StalledHandshakesDoNotBlockOtherClients) {
  START_TLS_SERVER(pki, s);
  const std::string url = "https://127.0.0.1:" + std::to_string(s.port());
  // 24 connections that stop mid-handshake (silent, half a record header, half a ClientHello)
  // hold both io threads' worth of sessions while real clients come and go.
  std::vector<int> stalled;
  for (int i = 0; i < 24; ++i) {
    std::string part = i % 3 == 0 ? "" : i % 3 == 1 ? std::string("\x16\x03", 2) : std::string("\x16\x03\x01\x02\x00\x01", 6);
    int fd = open_raw(s.port(), part);
    ASSERT_GE(fd, 0);
    stalled.push_back(fd);
  }
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto ok = pki.curl(pki.with_key() + " -d '{\"inputs\": \"still served\"}'", url + "/predict");
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(ok.code, 200) << ok.stderr_text;
    EXPECT_LT(took, std::chrono::seconds(3)) << "a TLS client waited behind stalled handshakes";
  }
  // The stalled ones are dropped after the handshake timeout (10 s), not kept forever.
  bool closed = false;
  read_until_closed(stalled[1], std::chrono::seconds(15), closed);
  EXPECT_TRUE(closed) << "a stalled handshake was kept open past the handshake timeout";
  for (int fd : stalled) close(fd);
  EXPECT_TRUE(s.alive());
  EXPECT_EQ(s.stop(), 0);
}

// ---- off loopback ---------------------------------------------------------------------------

namespace {
// Runs `args` expecting it to refuse to start; its stderr.
std::string refusal(const std::vector<std::string>& args, int& rc) {
  auto err = fs::temp_directory_path() / ("tessera-refusal-" + std::to_string(getpid()));
  std::string cmd;
  for (const auto& a : args) cmd += "'" + a + "' ";
  rc = run("timeout 20 " + cmd + "< /dev/null > /dev/null 2> " + err.string());
  std::string text = slurp(err);
  fs::remove(err);
  return text;
}
}  // namespace

TEST(SecureServing, AnAddressOffLoopbackNeedsTheKeyAndTlsOrInsecure) {
  test_pki pki;
  ASSERT_TRUE(pki.ok) << pki.error;
  const std::string serve = bin("tessera-serve"), host = bin("tessera-host");
  int rc = 0;
  for (const char* address : {"0.0.0.0", "::", "192.0.2.1"}) {
    std::string err = refusal({serve, "--model", "toy", "--port", "0", "--address", address}, rc);
    EXPECT_EQ(rc, 2) << err;
    EXPECT_NE(err.find(std::string("--address ") + address +
                       " serves other machines: add --api-key-file FILE (or --api-key KEY) and "
                       "--tls-cert FILE --tls-key FILE, or pass --insecure"),
              std::string::npos)
        << err;
  }
  // With half of it, the message names the other half.
  std::string err = refusal({serve, "--model", "toy", "--port", "0", "--address", "0.0.0.0", "--api-key-file",
                             pki.key_file}, rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("add --tls-cert FILE --tls-key FILE, or pass --insecure"), std::string::npos) << err;
  err = refusal({serve, "--model", "toy", "--port", "0", "--address", "0.0.0.0", "--tls-cert", pki.cert,
                 "--tls-key", pki.key}, rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("add --api-key-file FILE (or --api-key KEY), or pass --insecure"), std::string::npos) << err;
  // tessera-host says the same before it starts any tile.
  err = refusal({host, "--model", "bert-tiny", "--tiles", "1", "--serve", "--port", "0", "--address", "0.0.0.0"}, rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("--address 0.0.0.0 serves other machines: add --api-key-file FILE"), std::string::npos) << err;
  // tessera-host's one --insecure also still covers its control socket (no tile comes: it
  // gets past the check, waits 300 ms and says so).
  const std::vector<std::string> control{host, "--external", "--tiles", "1", "--control", "tcp://0.0.0.0:*",
                                         "--register-timeout-ms", "300"};
  err = refusal(control, rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("leaves this machine: pass --keys DIR"), std::string::npos) << err;
  auto insecure = control;
  insecure.push_back("--insecure");
  err = refusal(insecure, rc);
  EXPECT_EQ(rc, 1) << err;
  EXPECT_EQ(err.find("leaves this machine"), std::string::npos) << err;
  EXPECT_NE(err.find("did not register within 300 ms"), std::string::npos) << err;
}

TEST(SecureServing, LoopbackAddressesStartAsBefore) {
  for (const char* address : {"127.0.0.1", "127.0.0.2", "::1", "localhost"}) {
    served_process s({bin("tessera-serve"), "--model", "toy", "--port", "0", "--address", address});
    ASSERT_NE(s.port(), 0) << address << " did not start: '" << s.line() << "'";
    if (std::string(address) == "127.0.0.1" || std::string(address) == "localhost") {
      http_connection c("127.0.0.1", s.port());
      EXPECT_EQ(c.request("POST", "/predict", R"({"inputs": "no key needed here"})").status, 200u) << address;
    }
    EXPECT_EQ(s.stop(), 0);
  }
}

// Binding the wildcard is what these two are about; the only traffic goes to 127.0.0.1.
TEST(SecureServing, InsecureServesOffLoopbackWithoutKeyOrTls) {
  served_process s({bin("tessera-serve"), "--model", "toy", "--port", "0", "--address", "0.0.0.0", "--insecure"});
  ASSERT_NE(s.port(), 0) << "did not start: '" << s.line() << "'";
  EXPECT_EQ(s.line().rfind("listening on http://0.0.0.0:", 0), 0u) << s.line();
  http_connection c("127.0.0.1", s.port());
  EXPECT_EQ(c.request("POST", "/predict", R"({"inputs": "insecure on purpose"})").status, 200u);
  EXPECT_EQ(s.stop(), 0);
}

TEST(SecureServing, KeyAndTlsServeOffLoopbackWithoutInsecure) {
  test_pki pki;
  REQUIRE_PKI(pki);
  auto args = pki.serve_args();
  args.insert(args.end(), {"--address", "0.0.0.0"});
  served_process s(args);
  ASSERT_NE(s.port(), 0) << "did not start: '" << s.line() << "'";
  EXPECT_EQ(s.line().rfind("listening on https://0.0.0.0:", 0), 0u) << s.line();
  const std::string url = "https://127.0.0.1:" + std::to_string(s.port());
  EXPECT_EQ(pki.curl(pki.with_key() + " -d '{\"inputs\": \"hi\"}'", url + "/predict").code, 200);
  EXPECT_EQ(pki.curl("--cacert " + pki.ca + " -d '{\"inputs\": \"hi\"}'", url + "/predict").code, 401);
  EXPECT_EQ(s.stop(), 0);
}

TEST(SecureServing, BadKeyOrTlsFlagsStopWithAClearMessage) {
  test_pki pki;
  ASSERT_TRUE(pki.ok) << pki.error;
  const std::string serve = bin("tessera-serve");
  std::ofstream(pki.dir / "empty.key") << "\n";
  const std::string locked = (pki.dir / "locked.key").string();
  ASSERT_EQ(run("openssl pkey -in " + pki.key + " -aes256 -passout pass:x -out " + locked + " 2> /dev/null"), 0);
  struct bad_case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<bad_case> cases{
      {{"--tls-cert", pki.cert}, "--tls-cert and --tls-key go together"},
      {{"--tls-key", pki.key}, "--tls-cert and --tls-key go together"},
      {{"--tls-cert", pki.cert, "--tls-key", (pki.dir / "ca.key").string()}, "does not belong to the certificate"},
      {{"--tls-cert", pki.key, "--tls-key", pki.key}, "not a usable PEM certificate chain"},
      {{"--tls-cert", pki.cert, "--tls-key", pki.cert}, "not a usable unencrypted PEM private key"},
      // A passphrase-protected key is refused, not prompted for (stdin is /dev/null here anyway).
      {{"--tls-cert", pki.cert, "--tls-key", locked}, "not a usable unencrypted PEM private key"},
      {{"--tls-cert", (pki.dir / "missing.pem").string(), "--tls-key", pki.key}, "cannot be read"},
      {{"--api-key-file", (pki.dir / "empty.key").string()}, "empty"},
      {{"--api-key-file", (pki.dir / "missing.key").string()}, "cannot be read"},
      {{"--api-key", "two words"}, "visible ASCII only"},
      {{"--api-key", "k", "--api-key-file", pki.key_file}, "not both"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{serve, "--model", "toy", "--port", "0"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    int rc = 0;
    std::string err = refusal(args, rc);
    EXPECT_EQ(rc, 2) << c.says << ": " << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
  }
  // tessera-host checks the files before it starts a tile.
  int rc = 0;
  std::string err = refusal({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "1", "--serve", "--port", "0",
                             "--tls-cert", pki.cert, "--tls-key", (pki.dir / "ca.key").string()}, rc);
  EXPECT_EQ(rc, 2) << err;
  EXPECT_NE(err.find("does not belong to the certificate"), std::string::npos) << err;
  EXPECT_EQ(err.find("tile"), std::string::npos) << "a tile was started or waited for: " << err;
}

// ---- the other executable, and clients someone else wrote ------------------------------------

TEST(SecureServing, TesseraHostServesHttpsWithTheKey) {
  test_pki pki;
  REQUIRE_PKI(pki);
  served_process s({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "2", "--serve", "--port", "0",
                    "--address", "0.0.0.0", "--api-key-file", pki.key_file, "--tls-cert", pki.cert,
                    "--tls-key", pki.key});
  ASSERT_NE(s.port(), 0) << "did not start: '" << s.line() << "'";
  EXPECT_EQ(s.line().rfind("listening on https://0.0.0.0:", 0), 0u) << s.line();
  const std::string url = "https://127.0.0.1:" + std::to_string(s.port());
  auto ok = pki.curl(pki.with_key() + " -d '{\"inputs\": \"tiles behind tls\"}'", url + "/predict");
  EXPECT_EQ(ok.code, 200) << ok.body << ok.stderr_text;
  EXPECT_EQ(pki.curl("--cacert " + pki.ca + " -d '{\"inputs\": \"x\"}'", url + "/predict").code, 401);
  EXPECT_EQ(pki.curl("--cacert " + pki.ca, url + "/health").code, 200);
  EXPECT_EQ(s.stop(), 0);
}

// wrk (Debian's, with OpenSSL) over https against plain http, same model (bert-tiny), same key:
// no errors either way; prints both rates (the figure in the note).
TEST(SecureServing, WrkOverTlsAndPlainOnBertTiny) {
  test_pki pki;
  REQUIRE_PKI(pki);
  if (!fs::exists("/usr/bin/wrk")) GTEST_FAIL() << "wrk is not installed; scripts/setup installs it";
  {
    std::ofstream lua(pki.dir / "predict.lua");
    lua << "wrk.method = \"POST\"\n"
           "wrk.body = '{\"inputs\":\"the quick brown fox jumps over the lazy dog\"}'\n"
           "wrk.headers[\"Content-Type\"] = \"application/json\"\n"
           "wrk.headers[\"Authorization\"] = \"Bearer " << pki.api_key << "\"\n"
           "done = function(summary, latency, requests)\n"
           "  io.write(string.format(\"WRK requests=%d non2xx=%d errors=%d rps=%.1f\\n\", summary.requests,\n"
           "    summary.errors.status, summary.errors.connect + summary.errors.read +\n"
           "    summary.errors.write + summary.errors.timeout, summary.requests / (summary.duration / 1e6)))\n"
           "end\n";
  }
  auto drive = [&](bool tls) {
    auto args = tls ? pki.serve_args("bert-tiny")
                    : std::vector<std::string>{bin("tessera-serve"), "--model", "bert-tiny", "--port", "0",
                                               "--api-key-file", pki.key_file};
    served_process s(args);
    EXPECT_NE(s.port(), 0) << "did not start: '" << s.line() << "'";
    if (s.port() == 0) return 0.0;
    const std::string out = (pki.dir / (tls ? "wrk-tls.out" : "wrk-plain.out")).string();
    const std::string cmd = "timeout 30 /usr/bin/wrk -t2 -c16 -d3s -s " + (pki.dir / "predict.lua").string() + " " +
                            (tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(s.port()) + "/predict > " +
                            out + " 2>&1";
    EXPECT_EQ(run(cmd), 0) << cmd;
    std::string text = slurp(out);
    std::cout << (tls ? "https" : "http ") << ": " << text.substr(text.find("WRK "));
    long requests = 0, non2xx = -1, errors = -1;
    double rps = 0;
    auto at = text.find("WRK requests=");
    EXPECT_NE(at, std::string::npos) << text;
    if (at == std::string::npos) return 0.0;
    std::sscanf(text.c_str() + at, "WRK requests=%ld non2xx=%ld errors=%ld rps=%lf", &requests, &non2xx, &errors, &rps);
    EXPECT_GT(requests, 50) << text;
    EXPECT_EQ(non2xx, 0) << text;
    EXPECT_EQ(errors, 0) << text;
    EXPECT_TRUE(s.alive());
    return rps;
  };
  double plain = drive(false), tls = drive(true);
  std::cout << "wrk bert-tiny -t2 -c16 -d3s: plain " << plain << " req/s, TLS " << tls << " req/s ("
            << (plain > 0 ? 100.0 * tls / plain : 0) << "% of plain)\n";
  // Keep-alive over TLS: a handshake per request would cut the rate far below this.
  EXPECT_GT(tls, 0.3 * plain);
}
