// Unicode helpers shared by the tokenizers: character classes over the generated tables
// (unicode_tables.cpp), UTF-8 decoding with a clear error, and lossy decoding (U+FFFD for each
// maximal ill-formed subpart, as Unicode chapter 3 recommends and Rust's from_utf8_lossy and the
// WHATWG TextDecoder do).
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <vector>

#include "unicode.hpp"

namespace tessera::models::unicode {


uint8_t char_class(char32_t cp) {
  // The Basic Multilingual Plane from a flat table (filled once from the runs), the rest by
  // binary search over the runs.
  static const std::vector<uint8_t> bmp = [] {
    std::vector<uint8_t> t(0x10000, 0);
    for (int r = 0; r < tables::class_runs_size; ++r) {
      const char32_t first = tables::class_runs[r].first;
      const char32_t stop = r + 1 < tables::class_runs_size ? tables::class_runs[r + 1].first : 0x110000;
      for (char32_t c = first; c < stop && c < 0x10000; ++c) t[c] = tables::class_runs[r].bits;
    }
    return t;
  }();
  if (cp < 0x10000) return bmp[cp];
  const auto* first = tables::class_runs;
  const auto* last = tables::class_runs + tables::class_runs_size;
  const auto* it = std::upper_bound(first, last, cp, [](char32_t c, const tables::class_run& r) { return c < r.first; });
  return it == first ? 0 : (it - 1)->bits;
}

char32_t to_lower(char32_t cp) {
  if (cp < 128) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const auto* first = tables::lower_map;
  const auto* last = tables::lower_map + tables::lower_map_size;
  const auto* it = std::lower_bound(first, last, cp, [](const tables::code_pair& p, char32_t c) { return p.from < c; });
  return (it != last && it->from == cp) ? it->to : cp;
}

void append_nfd(char32_t cp, std::u32string& out) {
  constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
  constexpr char32_t t_count = 28, n_count = 21 * 28;
  if (cp >= s_base && cp < s_base + 11172) {  // Hangul syllable: algorithmic decomposition
    const char32_t s = cp - s_base;
    out.push_back(l_base + s / n_count);
    out.push_back(v_base + (s % n_count) / t_count);
    if (s % t_count) out.push_back(t_base + s % t_count);
    return;
  }
  if (cp < 0xC0) {
    out.push_back(cp);
    return;
  }
  const auto* first = tables::nfd_map;
  const auto* last = tables::nfd_map + tables::nfd_map_size;
  const auto* it = std::lower_bound(first, last, cp, [](const tables::decomposition& d, char32_t c) { return d.cp < c; });
  if (it != last && it->cp == cp) out.append(tables::nfd_pool + it->offset, it->length);
  else out.push_back(cp);
}

bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

result<std::u32string> decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  auto bad = [&](const char* why) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(s[i]));
    return status::invalid(std::string("invalid UTF-8 at byte ") + std::to_string(i) + " (" + hex + "): " + why +
                           "; pass UTF-8 text");
  };
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    int n;
    char32_t cp, min;
    if ((b0 & 0xE0) == 0xC0) { n = 1; cp = b0 & 0x1F; min = 0x80; }
    else if ((b0 & 0xF0) == 0xE0) { n = 2; cp = b0 & 0x0F; min = 0x800; }
    else if ((b0 & 0xF8) == 0xF0) { n = 3; cp = b0 & 0x07; min = 0x10000; }
    else return bad("not a valid leading byte");
    if (i + static_cast<size_t>(n) >= s.size()) return bad("sequence truncated at the end of the text");
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return bad("missing continuation byte");
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min) return bad("overlong encoding");
    if (cp >= 0xD800 && cp <= 0xDFFF) return bad("encodes a UTF-16 surrogate");
    if (cp > 0x10FFFF) return bad("code point above U+10FFFF");
    out.push_back(cp);
    i += static_cast<size_t>(n) + 1;
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

utf8_unit next_utf8(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {utf8_unit::valid, 1, b0};
  int need;
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) { need = 1; cp = b0 & 0x1F; }
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2; cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3; cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {utf8_unit::invalid, 1, 0};
  }
  size_t k = 1;
  for (; k <= static_cast<size_t>(need); ++k) {
    if (i + k >= s.size()) return {utf8_unit::incomplete, k, 0};
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {utf8_unit::invalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {utf8_unit::valid, k, cp};
}

void append_utf8_lossy(std::string_view s, std::string& out) {
  size_t i = 0;
  while (i < s.size()) {
    const utf8_unit u = next_utf8(s, i);
    if (u.kind == utf8_unit::valid) out.append(s.data() + i, u.length);
    else out.append(replacement_utf8);
    i += u.length;
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const utf8_unit u = next_utf8(s, i);
    if (u.kind != utf8_unit::valid) return false;
    i += u.length;
  }
  return true;
}

std::string nfc(std::string_view s) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // ASCII is its own NFC
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0 || !out) return std::string(s);
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

}  // namespace tessera::models::unicode
