// tessera/common/text.hpp: reading a text file whole, and walking text a line at a time.
//
//   auto text = tessera::read_file("trace.csv");      // std::nullopt when it cannot be read
//   auto same = tessera::read_text_file("trace.csv"); // or not_found "trace.csv: cannot open"
//   tessera::line_reader lines(*text);
//   for (std::string_view line; lines.next(line);)
//     if (line.empty()) return bad(lines.number());    // 1-based number of `line`
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera {

/// The bytes of a file, or nullopt when it cannot be opened (the caller says what it was for).
inline std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

/// read_file, or not_found "PATH: cannot open".
inline result<std::string> read_text_file(const std::filesystem::path& path) {
  auto text = read_file(path);
  if (!text) return status::not_found(path.string() + ": cannot open");
  return std::move(*text);
}

/// The lines of a text: '\n' ends a line and a '\r' before it is dropped; text after the last
/// '\n' is one more line, an empty rest is none.
class line_reader {
 public:
  explicit line_reader(std::string_view text) : text_(text) {}
  /// The next line into `line`; false at the end of the text.
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    ++number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return true;
  }
  /// 1-based number of the line next() gave last.
  int number() const { return number_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int number_ = 0;
};

/// The non-empty items of a comma-separated list ("1,32" -> {"1", "32"}; "a,,b" -> {"a", "b"}):
/// the form of tools' list options.
inline std::vector<std::string> split_list(std::string_view s, char sep = ',') {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace tessera
