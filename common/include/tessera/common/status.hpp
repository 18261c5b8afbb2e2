// tessera/common/status.hpp: the three kinds of error, as one small vocabulary.
//
//   * A bug in tessera aborts with context: TESSERA_CHECK(cond) << ... (see check.hpp).
//   * A user or configuration mistake is a status with code invalid_argument (or
//     not_found / out_of_memory) whose message says what to change; executables print it
//     and exit with a non-zero code.
//   * An expected runtime failure (peer gone, timeout, malformed message) is a status the
//     caller handles. No exception crosses a process boundary: replies carry a status.
//
// Usage:
//   tessera::result<int> parse_port(std::string_view s) {
//     if (s.empty()) return tessera::status::invalid("port is empty; pass --port N");
//     return 42;
//   }
//   auto r = parse_port("x");
//   if (!r.ok()) std::cerr << r.error().to_string();
//
//   tessera::status st = flush_a();   // both run; the first failure is the one kept
//   st.update(flush_b());
//   if (!st.ok()) return st;
//
// Both types are [[nodiscard]]: dropping one is a compiler warning, so an error cannot be lost
// by forgetting to look at it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera {

/// Error codes. The numeric values travel on the wire (exchange/protocol.hpp): append only.
enum class errc : uint8_t {
  ok = 0,
  invalid_argument = 1,  ///< the caller's input is wrong; the message says what to change
  bad_message = 2,       ///< a wire message failed validation
  out_of_memory = 3,     ///< a tile's arena (or another hard cap) would be exceeded
  not_found = 4,         ///< a named thing (tensor, kernel, preset, file) does not exist
  timeout = 5,           ///< a deadline passed
  peer_failed = 6,       ///< a peer process vanished or reported failure
  io_error = 7,          ///< an operating-system call failed
  unsupported = 8,       ///< valid, but not implemented for this configuration
  overloaded = 9,        ///< a bounded queue is full
  cancelled = 10,        ///< shut down before completion
  internal = 11,         ///< a bug in tessera, reported rather than aborting a server
};

/// Human name of a code, e.g. "bad_message".
std::string_view errc_name(errc code);

/// A code and a message. Default-constructed (or ok_status()) it means success.
class [[nodiscard]] status {
 public:
  status() = default;
  status(errc code, std::string message) : code_(code), message_(std::move(message)) {}

  static status invalid(std::string m) { return {errc::invalid_argument, std::move(m)}; }
  static status bad_message(std::string m) { return {errc::bad_message, std::move(m)}; }
  static status out_of_memory(std::string m) { return {errc::out_of_memory, std::move(m)}; }
  static status not_found(std::string m) { return {errc::not_found, std::move(m)}; }
  static status timeout(std::string m) { return {errc::timeout, std::move(m)}; }
  static status peer_failed(std::string m) { return {errc::peer_failed, std::move(m)}; }
  static status io_error(std::string m) { return {errc::io_error, std::move(m)}; }
  static status unsupported(std::string m) { return {errc::unsupported, std::move(m)}; }
  static status internal(std::string m) { return {errc::internal, std::move(m)}; }

  /// True on success. There is no conversion to bool: `if (!st.ok())` reads the right way round.
  bool ok() const { return code_ == errc::ok; }
  errc code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "bad_message: header too short (3 bytes)".
  std::string to_string() const;

  /// Prefixes context: status::invalid("x").with_context("loading config.json") -> "loading config.json: x".
  status with_context(std::string_view context) const;

  /// Keeps the first error: takes `other` only while this one is ok.
  void update(const status& other) {
    if (ok()) *this = other;
  }

 private:
  errc code_ = errc::ok;
  std::string message_;
};

/// Success: `return ok_status();`.
inline status ok_status() { return {}; }

/// A value or a failed status (a small std::expected; C++20 has none).
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}            // NOLINT(implicit)
  result(status error) : v_(std::move(error)) {}       // NOLINT(implicit)

  bool has_value() const { return v_.index() == 0; }
  /// Same as has_value(), named as status names it.
  bool ok() const { return has_value(); }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const status& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, status> v_;
};

}  // namespace tessera

/// Returns early from a function returning status or result<T> when `expr` (a status) failed.
#define TESSERA_RETURN_IF_ERROR(expr)              \
  do {                                             \
    ::tessera::status tessera_st_ = (expr);        \
    if (!tessera_st_.ok()) return tessera_st_;     \
  } while (0)
