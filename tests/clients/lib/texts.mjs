// Seeded texts for the BPE tokenizer checks and benchmark: Unicode letters of many scripts,
// combining marks, emoji (ZWJ sequences, skin tones, flags), CJK, numbers of several scripts,
// whitespace runs with tabs and newlines, code, very long words, contractions, leading spaces.
//
// Left out on purpose, each for a stated reason:
//   U+0085 and U+FEFF: JavaScript's \s (gpt-3-encoder) and Unicode's White_Space (Hugging Face's
//     tokenizers, tessera) disagree on them (tested in tessera's unit tests instead);
//   U+2581: LLaMA's space marker; typed in a text it decodes as a space (HF does the same);
//   special tokens typed in the text (<|endoftext|>, <s>): the npm libraries do not parse them;
//   characters assigned after Unicode 14 (tessera's tables; Node may know newer ones).

export function rng(seed) {  // mulberry32
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ranges = {
  latin1: [0xc0, 0xff], latinExtA: [0x100, 0x17f], greek: [0x391, 0x3c9], cyrillic: [0x410, 0x44f],
  hebrew: [0x5d0, 0x5ea], arabic: [0x627, 0x64a], devanagari: [0x915, 0x939], thai: [0xe01, 0xe2e],
  hangul: [0xac00, 0xd7a3], hiragana: [0x3041, 0x3096], katakana: [0x30a1, 0x30fa], cjk: [0x4e00, 0x9fa5],
  armenian: [0x531, 0x556], georgian: [0x10d0, 0x10fa], ethiopic: [0x1200, 0x1248],
};
const marks = [[0x300, 0x36f], [0x93e, 0x94c], [0x591, 0x5bd], [0x64b, 0x652], [0xe31, 0xe3a], [0x20d0, 0x20dc]];
const digits = [[0x30, 0x39], [0x660, 0x669], [0x966, 0x96f], [0xff10, 0xff19], [0x2160, 0x2188], [0x2460, 0x2473]];
const emojiRanges = [[0x1f600, 0x1f64f], [0x1f300, 0x1f5ff], [0x1f680, 0x1f6c5], [0x1f90d, 0x1f9ff], [0x2600, 0x26ff]];
const emojiSeqs = ["👨\u200d👩\u200d👧\u200d👦", "👍🏽", "🇫🇷", "🇯🇵", "1\ufe0f\u20e3", "❤️", "🏳️\u200d🌈", "🧑🏿\u200d💻", "🦙", "🤗"];
const words = ["the", "of", "and", "to", "in", "is", "The", "that", "for", "it", "with", "as", "was", "on", "Hello", "world",
  "tokenizer", "byte", "pair", "encoding", "unbelievably", "antidisestablishmentarianism", "naïve", "café", "Zürich",
  "résumé", "coöperate", "straße", "Ελλάδα", "Москва", "東京", "北京市", "서울", "こんにちは", "مرحبا", "שלום", "नमस्ते",
  "ภาษาไทย", "LLaMA", "GPT-2", "iPhone", "e-mail", "U.S.A.", "don't", "it's", "we're", "they've", "I'll", "she'd", "I'm",
  "can't", "IT'S", "WE'RE", "rock'n'roll", "'tis", "o'clock", "y'all'd've", "''", "'s", "'re", "'ve", "'ll", "'d", "'m", "'t"];
const punct = [".", ",", "!", "?", ";", ":", "...", "—", "–", "-", "(", ")", "[", "]", "{", "}", "\"", "'", "`", "«", "»",
  "“", "”", "¿", "¡", "…", "→", "∑", "€", "$", "%", "&", "@", "#", "*", "/", "\\", "|", "~", "^", "©", "°", "±", "<", ">", "=", "+", "_"];
const spaces = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "\u00a0", "\u3000", "\u2003", "\u2028", "    "];
const code = [
  "def f(x):\n    return x ** 2  # square\n",
  "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
  "const re = /'s|'t| ?\\p{L}+/gu;\nconsole.log(`${a}+${b}`);",
  "{\"id\": 42, \"name\": \"tessera\", \"tags\": [\"a\", \"b\"], \"ok\": true}",
  "<div class=\"x\">&nbsp;<b>bold</b></div>",
  "SELECT name, COUNT(*) FROM t WHERE x >= 3 GROUP BY name;",
  "#include <vector>\nstd::vector<int> v{1, 2, 3};",
  "    if x != None and y == 0:\n        raise ValueError('bad')",
  "git commit -m \"fix: don't crash\" && echo $?",
  "a=1;b=2;c=a+b\nprint(c)\r\n",
];

function pick(r, list) { return list[Math.floor(r() * list.length)]; }
function cp(r, [lo, hi]) { return String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1))); }
function many(r, n, f) { let s = ""; for (let i = 0; i < n; ++i) s += f(); return s; }

const makers = [
  r => pick(r, words),
  r => pick(r, words),
  r => pick(r, words) + pick(r, punct),
  r => pick(r, punct) + pick(r, punct),
  r => many(r, 1 + Math.floor(r() * 8), () => cp(r, pick(r, Object.values(ranges)))),
  r => many(r, 1 + Math.floor(r() * 6), () => cp(r, ranges.cjk)),
  r => many(r, 1 + Math.floor(r() * 5), () => cp(r, ranges.latin1) + (r() < 0.5 ? cp(r, pick(r, marks)) : "")),
  r => "e" + cp(r, marks[0]) + cp(r, marks[0]) + pick(r, words),
  r => many(r, 1 + Math.floor(r() * 12), () => cp(r, digits[0])),
  r => many(r, 1 + Math.floor(r() * 4), () => cp(r, pick(r, digits))),
  r => String(Math.floor(r() * 1e6)) + "." + String(Math.floor(r() * 100)),
  r => (r() * 1e9).toLocaleString("en-US"),
  r => many(r, 1 + Math.floor(r() * 3), () => cp(r, pick(r, emojiRanges))),
  r => pick(r, emojiSeqs) + pick(r, emojiSeqs),
  r => pick(r, code),
  r => pick(r, spaces),
];

/// One text of up to `pieces` pieces joined by spaces or other whitespace.
export function mixedText(r, pieces) {
  let s = r() < 0.2 ? pick(r, spaces) : "";
  const n = 1 + Math.floor(r() * pieces);
  for (let i = 0; i < n; ++i) {
    s += pick(r, makers)(r);
    s += r() < 0.7 ? " " : pick(r, spaces.concat(["", ""]));
  }
  return r() < 0.5 ? s.trimEnd() : s;
}

/// The texts of the exactness checks: fixed edge cases, long runs, then seeded mixtures.
export function exactnessTexts(seed, count) {
  const r = rng(seed);
  const t = ["", " ", "  ", "\n", "\t", " \n ", "a", "Hello world", " Hello world", "  leading spaces", "trailing   ",
    "it's we're they've I'll she'd I'm don't", "IT'S 'S 's'", "x'sy 'll'", "\r\n\r\n", "\t\ttabs\t\tand\ttabs",
    "123 4567 89012 3.14159 1,000,000", "٠١٢٣ ١٢ ½ ² Ⅻ ①②", "e\u0301 n\u0303 a\u0308 cafe\u0301", "🦙Ꙋ", "Ꙋ🦙",
    "東京タワーは333メートル", "grabbed", " grabbed", "           grabbed", "ax\n####\nboo"];
  // Very long words and runs (kept under ~2 KB: gpt-3-encoder's merge loop is cubic in a word's length).
  t.push("a".repeat(1000), many(r, 700, () => String.fromCharCode(97 + Math.floor(r() * 26))),
         "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(12), "9".repeat(500), "!?".repeat(300),
         " ".repeat(300) + "x", "\n".repeat(100), "\t \t ".repeat(60), many(r, 400, () => cp(r, ranges.cjk)),
         many(r, 300, () => cp(r, pick(r, emojiRanges))), many(r, 200, () => cp(r, ranges.hangul)));
  while (t.length < count) t.push(mixedText(r, 1 + Math.floor(r() * 40)));
  return t;
}
