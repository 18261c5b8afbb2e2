// The deterministic built-in vocab that presets carry, so text can be tokenized without files.
// Layout follows bert-base-uncased: [PAD]=0, [unused0..98]=1..99, [UNK]=100, [CLS]=101, [SEP]=102,
// [MASK]=103, then characters (incl. all of CJK U+4E00..U+9FFF), "##" characters, common words and suffixes, then [unused*] filler.
#include <string>
#include <unordered_set>

#include "tessera/models/tokenizer.hpp"

namespace tessera::models {
namespace {

constexpr const char* common_words =
    "the of and to in a is that for it as was with be by on not he i this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more out up into do any your "
    "what some can about them him than then only its also two time could new first after like may other over such "
    "people very how most our these just used made through between many well before must back where those much "
    "year years day make world good way because each while part same under house word work school state city "
    "government company system number group problem fact hand place case week point home water room mother area "
    "money story night month lot right study book eye job business issue side kind head service friend father "
    "power hour game line end member law car name president team minute idea kid body information face others "
    "level office door health person art war history party result change morning reason research girl guy moment "
    "air teacher force education movie film music love great small large long little old big high different "
    "important public bad able young early late hello world good bad not no yes thank thanks please sorry what "
    "who why how say said get go going went know think see come want look use find give tell ask feel try leave "
    "call keep let begin seem help talk turn start show hear play run move live believe hold bring happen write "
    "provide sit stand lose pay meet include continue set learn lead understand watch follow stop create speak "
    "read allow add spend grow open walk win offer remember consider appear buy wait serve die send expect build "
    "stay fall cut reach kill remain model text token tile bert inference request batch";
constexpr const char* suffixes =
    "s es ed ing ly er est tion tions ness ment ments al ful less ize ise ion ity ous able ible ive ic ical ist ism "
    "ance ence ant ent ary ory ship hood dom ward wise y en an n t d e a o i";

}  // namespace

vocabulary vocabulary::builtin(int size) {
  std::vector<std::string> toks;
  std::unordered_set<std::string> seen;
  auto add = [&](const std::string& t) {
    if (seen.insert(t).second) toks.push_back(t);
  };
  add("[PAD]");
  for (int i = 0; i < 99; ++i) add("[unused" + std::to_string(i) + "]");
  add("[UNK]");
  add("[CLS]");
  add("[SEP]");
  add("[MASK]");
  auto utf8 = [](char32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  // Characters (lower-case/unaccented forms, as the uncased tokenizer produces them).
  std::vector<char32_t> chars;
  for (char32_t c = 33; c < 127; ++c)
    if (c < 'A' || c > 'Z') chars.push_back(c);
  for (char32_t c = 0xA1; c < 0xC0; ++c) chars.push_back(c);  // Latin-1 symbols
  chars.push_back(0xDF);
  chars.push_back(0xE6);
  chars.push_back(0xF0);
  chars.push_back(0xF8);
  chars.push_back(0xFE);
  for (char32_t c = 0x3B1; c <= 0x3C9; ++c) chars.push_back(c);    // Greek
  for (char32_t c = 0x430; c <= 0x44F; ++c) chars.push_back(c);    // Cyrillic
  for (char32_t c = 0x2010; c <= 0x2027; ++c) chars.push_back(c);  // general punctuation
  for (char32_t c = 0x3041; c <= 0x3096; ++c) chars.push_back(c);  // hiragana
  for (char32_t c = 0x30A1; c <= 0x30FA; ++c) chars.push_back(c);  // katakana
  for (char32_t c = 0x4E00; c <= 0x9FFF; ++c) chars.push_back(c);  // CJK Unified Ideographs
  for (char32_t c : chars) add(utf8(c));
  for (char32_t c : chars)
    if (c >= 0x30 && c < 0x3000 && !(c >= 0x2010 && c <= 0x2027) && !(c >= 0x3A && c <= 0x40) && !(c >= 0x5B && c <= 0x60) &&
        !(c >= 0x7B && c <= 0xBF))
      add("##" + utf8(c));
  auto add_list = [&](const char* list, const char* prefix) {
    std::string w;
    for (const char* p = list;; ++p) {
      if (*p == ' ' || *p == '\0') {
        if (!w.empty()) add(prefix + w);
        w.clear();
        if (*p == '\0') break;
      } else {
        w.push_back(*p);
      }
    }
  };
  add_list(common_words, "");
  add_list(suffixes, "##");
  for (int i = 99; static_cast<int>(toks.size()) < size; ++i) add("[unused" + std::to_string(i) + "]");
  toks.resize(static_cast<size_t>(std::max(size, 104)));
  std::string text;
  for (const auto& t : toks) text += t + "\n";
  return std::move(*from_text(text, "built-in vocab"));
}

}  // namespace tessera::models
