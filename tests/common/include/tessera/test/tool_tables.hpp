// tessera/test/tool_tables.hpp: reading what a benchmark or tool printed: its non-empty lines,
// and its CSV file checked to be a header plus the expected rows, every line with the header's
// number of fields (commas inside double quotes, as in a plan "R,S,W,M", do not separate), and
// a bench's "RESULT a=1 b=x" line as a map.
//
//   auto lines = tessera::test_support::csv_lines(csv_path, rows.size());   // header first
//   for (const auto& l : tessera::test_support::lines_of(run.out)) ...
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::test_support {

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

/// "RESULT a=1 b=x" -> {a: 1, b: x} (words without '=' are passed over).
inline std::map<std::string, std::string> result_fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line.substr(std::string("RESULT ").size()));
  for (std::string kv; in >> kv;) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

/// Fields of one CSV line (commas outside double quotes).
inline int csv_fields(const std::string& line) {
  int n = 1;
  bool quoted = false;
  for (char c : line) quoted ^= c == '"', n += c == ',' && !quoted;
  return n;
}

/// The CSV file's lines; a failed expectation unless it has a header and `rows` rows, each with
/// the header's number of fields.
inline std::vector<std::string> csv_lines(const std::filesystem::path& file, size_t rows) {
  std::ifstream f(file);
  std::stringstream text;
  text << f.rdbuf();
  auto lines = lines_of(text.str());
  EXPECT_EQ(lines.size(), rows + 1) << file << ":\n" << text.str();
  for (const auto& l : lines) EXPECT_EQ(csv_fields(l), csv_fields(lines.empty() ? l : lines[0])) << l;
  return lines;
}

}  // namespace tessera::test_support
