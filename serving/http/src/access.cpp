// API key check, public routes, loopback addresses. See access.hpp.
#include "tessera/serving/access.hpp"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace tessera::serving {

namespace {

std::array<unsigned char, 32> sha256(std::string_view s) {
  std::array<unsigned char, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace

bool is_public_route(std::string_view target, std::string_view method) {
  std::string_view path = target.substr(0, target.find('?'));
  return path == "/health" || path == "/ping" || (path == "/" && method == "GET") || path == "/metrics" ||
         path == "/v2/health/live" || path == "/v2/health/ready";
}

api_key_check::api_key_check(std::string_view key) : digest_(sha256(key)) {}

bool api_key_check::accepts(std::string_view authorization) const {
  auto space = authorization.find(' ');
  if (space == std::string_view::npos || !iequals(authorization.substr(0, space), "bearer")) {
    // Still hash something, so that a missing scheme costs the same as a wrong key.
    auto d = sha256(authorization);
    (void)CRYPTO_memcmp(d.data(), digest_.data(), d.size());
    return false;
  }
  std::string_view token = authorization.substr(space + 1);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  auto d = sha256(token);
  return CRYPTO_memcmp(d.data(), digest_.data(), d.size()) == 0;
}

status validate_api_key(std::string_view key) {
  if (key.empty()) return status::invalid("the API key is empty; pass a non-empty --api-key or --api-key-file");
  if (key.size() > 4096) return status::invalid("the API key is longer than 4096 characters");
  for (char c : key)
    if (c < 0x21 || c > 0x7e)
      return status::invalid(
          "the API key holds a space, a control or a non-ASCII character, which a client cannot "
          "send in an Authorization header; use visible ASCII only (e.g. openssl rand -hex 32)");
  return ok_status();
}

result<std::string> read_api_key_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return status::invalid("--api-key-file " + path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  std::string key = text.str();
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  if (auto st = validate_api_key(key); !st.ok()) return st.with_context("--api-key-file " + path);
  return key;
}

bool is_loopback_address(std::string_view address) {
  std::string a(address);
  if (a == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, a.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, a.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

}  // namespace tessera::serving
