#include "tessera/common/status.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "tessera/common/check.hpp"

namespace tessera {

std::string_view errc_name(errc code) {
  switch (code) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::bad_message: return "bad_message";
    case errc::out_of_memory: return "out_of_memory";
    case errc::not_found: return "not_found";
    case errc::timeout: return "timeout";
    case errc::peer_failed: return "peer_failed";
    case errc::io_error: return "io_error";
    case errc::unsupported: return "unsupported";
    case errc::overloaded: return "overloaded";
    case errc::cancelled: return "cancelled";
    case errc::internal: return "internal";
  }
  return "unknown";
}

std::string status::to_string() const {
  if (ok()) return "ok";
  std::string s(errc_name(code_));
  s += ": ";
  s += message_;
  return s;
}

status status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

namespace detail {

check_failure::check_failure(const char* file, int line, const char* cond) {
  os_ << "tessera bug: check failed at " << file << ":" << line << ": " << cond << ": ";
}

check_failure::~check_failure() {
  std::cerr << os_.str() << std::endl;
  std::abort();
}

}  // namespace detail
}  // namespace tessera
