// Reference WordPiece ids from Hugging Face's own JS tokenizer (transformers.js BertTokenizer, on
// the npm package @huggingface/tokenizers), for tests/data/models/tokenizer_goldens.json.
//
// usage: node models/scripts/tokenizer_goldens.mjs tests/data/models
//   needs `npm install @huggingface/transformers` in $TESSERA_NPM_DIR (default /tmp/tessera-models-npm).
// Reads tokenizer_cases.json (written by scripts/make_model_goldens.py) and the vocab it names; builds
// the tokenizer.json HF's BertTokenizerFast would have (BertNormalizer, BertPreTokenizer, WordPiece,
// [CLS] $A [SEP] $B [SEP] template) for do_lower_case true and false; writes ids and type ids.
// No truncation here: transformers.js truncates differently from Python's BertTokenizer.
import fs from "node:fs";
import path from "node:path";

const out = process.argv[2];
const npm = process.env.TESSERA_NPM_DIR || "/tmp/tessera-models-npm";
let Tokenizer, source;
try {
  ({ BertTokenizer: Tokenizer } = await import(path.join(npm, "node_modules/@huggingface/transformers/dist/transformers.node.mjs")));
  source = "@huggingface/transformers BertTokenizer";
} catch (e) {
  console.error("transformers.js failed to load (" + e.message.split("\n")[0] + "); using @huggingface/tokenizers");
  ({ Tokenizer } = await import(path.join(npm, "node_modules/@huggingface/tokenizers/dist/tokenizers.mjs")));
  source = "@huggingface/tokenizers Tokenizer";
}
const cases = JSON.parse(fs.readFileSync(path.join(out, "tokenizer_cases.json"), "utf8"));
const vocabLines = fs.readFileSync(path.join(out, cases.vocab), "utf8").split("\n");
if (vocabLines.at(-1) === "") vocabLines.pop();
const vocab = {};
vocabLines.forEach((t, i) => { vocab[t] = i; });
const specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

function make(lower) {
  const tj = {
    version: "1.0", truncation: null, padding: null,
    added_tokens: specials.map(t => ({ id: vocab[t], content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: lower },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
             { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } }],
      special_tokens: { "[CLS]": { id: "[CLS]", ids: [vocab["[CLS]"]], tokens: ["[CLS]"] }, "[SEP]": { id: "[SEP]", ids: [vocab["[SEP]"]], tokens: ["[SEP]"] } },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
  const tc = { tokenizer_class: "BertTokenizer", do_lower_case: lower, model_max_length: 1000000,
               unk_token: "[UNK]", cls_token: "[CLS]", sep_token: "[SEP]", pad_token: "[PAD]", mask_token: "[MASK]" };
  return new Tokenizer(tj, tc);
}

function run(tok, c) {
  if (source.startsWith("@huggingface/transformers")) {
    const e = "text" in c ? tok(c.text, { return_tensor: false }) : tok(c.a, { text_pair: c.b, return_tensor: false });
    return { ids: Array.from(e.input_ids, Number), type_ids: Array.from(e.token_type_ids, Number) };
  }
  const e = "text" in c ? tok.encode(c.text, { return_token_type_ids: true })
                        : tok.encode(c.a, { text_pair: c.b, return_token_type_ids: true });
  return { ids: e.ids, type_ids: e.token_type_ids };
}

const tokUncased = make(true), tokCased = make(false);
const results = cases.cases.map(c => ({ ...c, uncased: run(tokUncased, c), cased: run(tokCased, c) }));
fs.writeFileSync(path.join(out, "tokenizer_goldens.json"),
                 JSON.stringify({ source, vocab: cases.vocab, cases: results }, null, 0) + "\n");
console.log(`wrote ${results.length} cases with ${source}`);
