// The wire fuzz target's input format: the frames of one multipart message (header, then
// payloads) joined by a 4-byte separator, so that libFuzzer's byte mutations can add, drop and
// resize frames. wire_seeds writes valid messages in this form; wire_fuzz splits them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/exchange/codec.hpp"

namespace tessera::fuzz {

inline constexpr std::string_view frame_separator{"\xF0\x1D\xFA\xCE", 4};
inline constexpr size_t max_frames = 16;  ///< more are joined into the last (bounds work per input)

inline exchange::envelope split_frames(std::string_view in) {
  exchange::envelope e;
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    size_t at = parts.size() + 1 < max_frames ? in.find(frame_separator, pos) : std::string_view::npos;
    parts.push_back(in.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
    if (at == std::string_view::npos) break;
    pos = at + frame_separator.size();
  }
  e.header = zmq::message_t(parts[0].data(), parts[0].size());
  for (size_t i = 1; i < parts.size(); ++i) e.payloads.emplace_back(parts[i].data(), parts[i].size());
  return e;
}

inline std::string join_frames(const exchange::envelope& e) {
  std::string out(e.header.data<char>(), e.header.size());
  for (const auto& p : e.payloads) {
    out += frame_separator;
    out.append(p.data<char>(), p.size());
  }
  return out;
}

}  // namespace tessera::fuzz
