// Private: a checked reader over a msgpack header. The first error sticks; later reads return
// zero values, so decoders read straight through and check once at the end.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <msgpack.hpp>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/exchange/protocol.hpp"

namespace tessera::exchange {

class wire_reader {
 public:
  wire_reader(const msgpack::object* items, uint32_t n, std::shared_ptr<std::string> err)
      : items_(items), n_(n), err_(std::move(err)) {}

  uint32_t size() const { return n_; }
  bool failed() const { return !err_->empty(); }
  void fail(const std::string& why) {
    if (err_->empty()) *err_ = why;
  }

  uint64_t u64(const char* field, uint64_t max = std::numeric_limits<uint64_t>::max()) {
    const msgpack::object* o = next(field);
    if (!o) return 0;
    if (o->type != msgpack::type::POSITIVE_INTEGER) {
      fail(std::string(field) + ": expected an unsigned integer");
      return 0;
    }
    if (o->via.u64 > max) {
      fail(std::string(field) + ": " + std::to_string(o->via.u64) + " exceeds the limit " + std::to_string(max));
      return 0;
    }
    return o->via.u64;
  }
  uint32_t u32(const char* field, uint32_t max = std::numeric_limits<uint32_t>::max()) {
    return static_cast<uint32_t>(u64(field, max));
  }
  uint8_t u8(const char* field, uint8_t max = 255) { return static_cast<uint8_t>(u64(field, max)); }

  int64_t i64(const char* field) {
    const msgpack::object* o = next(field);
    if (!o) return 0;
    if (o->type == msgpack::type::POSITIVE_INTEGER) {
      if (o->via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(std::string(field) + ": integer out of range");
        return 0;
      }
      return static_cast<int64_t>(o->via.u64);
    }
    if (o->type == msgpack::type::NEGATIVE_INTEGER) return o->via.i64;
    fail(std::string(field) + ": expected an integer");
    return 0;
  }

  double f64(const char* field) {
    const msgpack::object* o = next(field);
    if (!o) return 0;
    if (o->type == msgpack::type::FLOAT64 || o->type == msgpack::type::FLOAT32) return o->via.f64;
    if (o->type == msgpack::type::POSITIVE_INTEGER) return static_cast<double>(o->via.u64);
    if (o->type == msgpack::type::NEGATIVE_INTEGER) return static_cast<double>(o->via.i64);
    fail(std::string(field) + ": expected a number");
    return 0;
  }

  bool boolean(const char* field) {
    const msgpack::object* o = next(field);
    if (!o) return false;
    if (o->type != msgpack::type::BOOLEAN) {
      fail(std::string(field) + ": expected a boolean");
      return false;
    }
    return o->via.boolean;
  }

  std::string str(const char* field, uint32_t max_len) {
    const msgpack::object* o = next(field);
    if (!o) return {};
    if (o->type != msgpack::type::STR) {
      fail(std::string(field) + ": expected a string");
      return {};
    }
    if (o->via.str.size > max_len) {
      fail(std::string(field) + ": string of " + std::to_string(o->via.str.size) + " bytes exceeds " +
           std::to_string(max_len));
      return {};
    }
    return std::string(o->via.str.ptr, o->via.str.size);
  }

  /// A nested array; `expected` >= 0 demands that many elements.
  wire_reader array(const char* field, int64_t expected = -1) {
    const msgpack::object* o = next(field);
    if (!o) return {nullptr, 0, err_};
    if (o->type != msgpack::type::ARRAY) {
      fail(std::string(field) + ": expected an array");
      return {nullptr, 0, err_};
    }
    if (expected >= 0 && o->via.array.size != static_cast<uint64_t>(expected)) {
      fail(std::string(field) + ": expected " + std::to_string(expected) + " fields, got " +
           std::to_string(o->via.array.size));
      return {nullptr, 0, err_};
    }
    return {o->via.array.ptr, o->via.array.size, err_};
  }

  std::vector<int64_t> i64_list(const char* field, uint32_t max_count) {
    return list<int64_t>(field, max_count, [&](wire_reader& r) { return r.i64(field); });
  }
  std::vector<int32_t> i32_list(const char* field, uint32_t max_count) {
    return list<int32_t>(field, max_count, [&](wire_reader& r) {
      int64_t v = r.i64(field);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        r.fail(std::string(field) + ": value out of int32 range");
        return int32_t{0};
      }
      return static_cast<int32_t>(v);
    });
  }
  std::vector<uint32_t> u32_list(const char* field, uint32_t max_count) {
    return list<uint32_t>(field, max_count, [&](wire_reader& r) { return r.u32(field); });
  }
  std::vector<float> f32_list(const char* field, uint32_t max_count) {
    return list<float>(field, max_count, [&](wire_reader& r) {
      double d = r.f64(field);
      // A finite real beyond float's range has no float value (the cast would be undefined).
      if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()) {
        r.fail(std::string(field) + ": a real beyond float's range");
        return 0.0f;
      }
      return static_cast<float>(d);
    });
  }
  std::vector<std::string> str_list(const char* field, uint32_t max_count, uint32_t max_len) {
    return list<std::string>(field, max_count, [&](wire_reader& r) { return r.str(field, max_len); });
  }

  /// The error of the whole header, if any; also demands that every field was read.
  status finish(const char* what) const {
    if (!err_->empty()) return status::bad_message(std::string(what) + ": " + *err_);
    if (pos_ != n_)
      return status::bad_message(std::string(what) + ": " + std::to_string(n_) + " fields, expected " +
                                 std::to_string(pos_));
    return ok_status();
  }

 private:
  const msgpack::object* next(const char* field) {
    if (!err_->empty()) return nullptr;
    if (pos_ >= n_) {
      fail(std::string(field) + ": missing");
      return nullptr;
    }
    return &items_[pos_++];
  }

  template <class T, class F>
  std::vector<T> list(const char* field, uint32_t max_count, F read_one) {
    wire_reader a = array(field);
    std::vector<T> out;
    if (a.size() > max_count) {
      fail(std::string(field) + ": " + std::to_string(a.size()) + " elements exceed the limit " +
           std::to_string(max_count));
      return out;
    }
    out.reserve(a.size());
    for (uint32_t i = 0; i < a.size() && !failed(); ++i) out.push_back(read_one(a));
    return out;
  }

  const msgpack::object* items_;
  uint32_t n_;
  uint32_t pos_ = 0;
  std::shared_ptr<std::string> err_;
};

/// A parsed header frame: owns the msgpack zone the readers point into.
struct parsed_header {
  msgpack::object_handle handle;
  msg_type type{};
  const msgpack::object* body_obj = nullptr;

  wire_reader body(uint32_t fields) const {
    auto err = std::make_shared<std::string>();
    if (body_obj->via.array.size != fields) {
      *err = "body has " + std::to_string(body_obj->via.array.size) + " fields, expected " + std::to_string(fields);
      return {nullptr, 0, err};
    }
    return {body_obj->via.array.ptr, body_obj->via.array.size, err};
  }
};

/// Parses frame 0 under unpack limits; checks magic, version and a known type.
status parse_header(const char* data, size_t size, parsed_header& out);

}  // namespace tessera::exchange
