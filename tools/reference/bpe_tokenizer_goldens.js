#!/usr/bin/env node
// Writes the golden files for the HuggingFaceTokenizer and TikTokenizer tests into
// tests/data/tokenizers/: small but real tokenizer files, a sample text, and the ids that the
// reference JavaScript implementations give for that text.
//
//   tokenizer_golden.txt          State of the Union paragraphs, then tricky text (unicode, emoji,
//                                 digits, whitespace runs, contractions, special-token text)
//   hf_llama3_style/              tokenizer.json + tokenizer_config.json: Llama 3's layout
//                                 (Split regex + ByteLevel without regex, ignore_merges,
//                                 TemplateProcessing adding <|begin_of_text|>, merges as pairs)
//   hf_gpt2_style/                GPT-2's layout (NFKC normalizer, ByteLevel with its regex,
//                                 merges as "a b" strings, <|endoftext|> added token)
//   tiktoken_ranks.json           the same BPE as Megatron's TikTokenizer JSON ranks file
//   *.ids                         the reference ids, 20 per line
//
// The BPE is GPT-2's own, cut to its first 1500 merges (so the files stay small): byte b is id
// (and tiktoken rank) b, merge i makes id 256 + i (the ranks file has three more tokens, below). Both tokenizer.json files and the ranks file
// are derived from gpt2-merges.txt of scripts/fetch_data.sh.
//
// References (pinned; `npm install` into a temporary directory, nothing kept):
//   @huggingface/tokenizers@0.2.0  tokenizers.js, a port of HF tokenizers: new Tokenizer(json,
//                                  config).encode(text).ids, as Megatron's
//                                  HuggingFaceTokenizer.text_to_ids (tokenizer(text).input_ids)
//   js-tiktoken@1.0.21             a port of openai/tiktoken, set up as Megatron-LM's
//                                  TikTokenTokenizer (megatron/core/tokenizers/text/libraries/
//                                  tiktoken_tokenizer.py): ranks shifted by num_special_tokens,
//                                  its special tokens <unk> <s> </s> <mask> <pad> <cls> <sep>
//                                  <SPECIAL_7> ..., encode(text, allowed_special="all")
//
// Usage: node tools/reference/bpe_tokenizer_goldens.js [DATA_DIR] [OUT_DIR]
//   DATA_DIR default ${MEGATRON_DATA_DIR:-~/.cache/megatron-cpp}, OUT_DIR tests/data/tokenizers.
//
// The text avoids U+0085 and U+FEFF, on which JavaScript's \s differs from Rust's and Python's.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {execFileSync} = require('child_process');

const dataDir = process.argv[2] || process.env.MEGATRON_DATA_DIR ||
                path.join(os.homedir(), '.cache', 'megatron-cpp');
const outDir = process.argv[3] || path.join(__dirname, '..', '..', 'tests', 'data', 'tokenizers');
const NUM_MERGES = 1500;
const NUM_SPECIAL = 1000;  // Megatron's --tiktoken-num-special-tokens default

// --- the references ----------------------------------------------------------------------------
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tokgold-'));
execFileSync('npm', ['install', '--silent', '--no-audit', '--no-fund', '--prefix', tmp,
                     '@huggingface/tokenizers@0.2.0', 'js-tiktoken@1.0.21'], {stdio: 'inherit'});
const {Tokenizer} = require(path.join(tmp, 'node_modules', '@huggingface', 'tokenizers'));
const {Tiktoken} = require(path.join(tmp, 'node_modules', 'js-tiktoken', 'dist', 'lite.cjs'));

// --- the BPE: GPT-2's first NUM_MERGES merges --------------------------------------------------
// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest map to U+0100 + n.
const byteToChar = [];
{
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    byteToChar[b] = String.fromCodePoint(printable ? b : 256 + n++);
  }
}
const charToByte = new Map(byteToChar.map((c, b) => [c, b]));
const toBytes = (s) => Buffer.from([...s].map((c) => charToByte.get(c)));

const mergeLines = fs.readFileSync(path.join(dataDir, 'gpt2-merges.txt'), 'utf8')
                       .split('\n').filter((l) => l && !l.startsWith('#version'))
                       .slice(0, NUM_MERGES);
const merges = mergeLines.map((l) => l.split(' '));
const vocab = {};
byteToChar.forEach((c, b) => { vocab[c] = b; });
merges.forEach(([a, b], i) => {
  if (!(a in vocab) || !(b in vocab)) throw new Error(`merge ${i} uses an unknown token`);
  if (a + b in vocab) throw new Error(`merge ${i} repeats token ${a + b}`);
  vocab[a + b] = 256 + i;
});
const vocabSize = 256 + NUM_MERGES;

// --- tokenizer.json files ----------------------------------------------------------------------
const LLAMA3_SPLIT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" +
                     " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const added = (content, id) => ({id, content, single_word: false, lstrip: false, rstrip: false,
                                 normalized: false, special: true});
const bpeModel = (mergeForm, ignoreMerges) => ({
  type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
  end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges,
  vocab, merges: mergeForm,
});
const byteLevel = (useRegex) => ({type: 'ByteLevel', add_prefix_space: false, trim_offsets: true,
                                  use_regex: useRegex});
const BOT = '<|begin_of_text|>';
const llama3 = {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [added(BOT, vocabSize), added('<|end_of_text|>', vocabSize + 1),
                 added('<|eot_id|>', vocabSize + 2)],
  normalizer: null,
  pre_tokenizer: {type: 'Sequence', pretokenizers: [
    {type: 'Split', pattern: {Regex: LLAMA3_SPLIT}, behavior: 'Isolated', invert: false},
    byteLevel(false)]},
  post_processor: {type: 'Sequence', processors: [
    {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
    {type: 'TemplateProcessing',
     single: [{SpecialToken: {id: BOT, type_id: 0}}, {Sequence: {id: 'A', type_id: 0}}],
     pair: [{SpecialToken: {id: BOT, type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
            {SpecialToken: {id: BOT, type_id: 1}}, {Sequence: {id: 'B', type_id: 1}}],
     special_tokens: {[BOT]: {id: BOT, ids: [vocabSize], tokens: [BOT]}}}]},
  decoder: byteLevel(true),
  model: bpeModel(merges, true),
};
const llama3Config = {bos_token: BOT, eos_token: '<|end_of_text|>',
                      clean_up_tokenization_spaces: true, tokenizer_class: 'PreTrainedTokenizerFast'};
const gpt2 = {
  version: '1.0', truncation: null, padding: null,
  added_tokens: [added('<|endoftext|>', vocabSize)],
  normalizer: {type: 'NFKC'},
  pre_tokenizer: byteLevel(true),
  post_processor: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
  decoder: byteLevel(true),
  model: bpeModel(mergeLines, false),
};
const gpt2Config = {bos_token: '<|endoftext|>', eos_token: '<|endoftext|>',
                    clean_up_tokenization_spaces: false, tokenizer_class: 'GPT2Tokenizer'};

// --- Megatron's TikTokenizer ranks file -------------------------------------------------------
const rankTokens = [];
for (let b = 0; b < 256; ++b) rankTokens.push(Buffer.from([b]));
for (const [a, b] of merges) rankTokens.push(toBytes(a + b));
// Three whole pieces on top, so that the two split patterns give different ids: v1 keeps
// " camelCase" and " McDonald" whole (v2 splits them at the case change), v2 keeps
// " e\u0301te\u0301" whole (v1 does not count the combining accents as letters).
for (const word of [' camelCase', ' McDonald', ' e\u0301te\u0301']) rankTokens.push(Buffer.from(word));
const ranksJson = rankTokens.map((bytes, rank) => ({
  rank, token_bytes: bytes.toString('base64'), token_str: bytes.toString('utf8')}));
// Megatron's patterns (tiktoken_tokenizer.py). v1's possessive ?+ and ++ become ? and + for
// JavaScript: in both places backtracking cannot produce a different match (the optional
// character is never a letter; [\r\n]* may match nothing).
const TIKTOKEN_V1 = "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" +
                    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
const TIKTOKEN_V2 = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*" +
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" +
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|" +
    "\\s+(?!\\S)|\\s+";
const specialTokens = ['<unk>', '<s>', '</s>', '<mask>', '<pad>', '<cls>', '<sep>'];
for (let i = specialTokens.length; i < NUM_SPECIAL; ++i) specialTokens.push(`<SPECIAL_${i}>`);
const tiktoken = (pattern) => new Tiktoken({
  pat_str: pattern,
  special_tokens: Object.fromEntries(specialTokens.map((t, i) => [t, i])),
  bpe_ranks: `! ${NUM_SPECIAL} ` + rankTokens.map((b) => b.toString('base64')).join(' '),
});

// --- the text ----------------------------------------------------------------------------------
// The first paragraphs (up to ~2500 characters, cut at a sentence end) of four addresses.
const corpus = fs.readFileSync(path.join(dataDir, 'sotu.jsonl'), 'utf8').split('\n');
const sotu = [0, 60, 150, 230].map((i) => {
  const text = JSON.parse(corpus[i]).text;
  return text.slice(0, text.indexOf('. ', 2500) + 1);
});
const tricky = [
  "I'm sure they'll say it's fine; we'd've known. Y'ALL'RE HERE, DON'T go! rock'n'roll O'Neil",
  'Ünïcödé: café naïve résumé Ångström Zürich Straße façade jalapeño Dvořák Łódź São Paulo',
  'decomposed: e\u0301te\u0301 n\u0303o — full width: ＡＢＣ １２３ ligature: ﬁne ﬂow ½ ² Ⅻ',
  'Ελληνικά Русский язык עברית العربية हिन्दी ภาษาไทย 中文分词 你好，世界！ 日本語の文章です。 한국어',
  'emoji: 😀 🚀 👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ 🎉🎉🎉 🤖 ⚡ 🏳️‍🌈 ∑∫√∞ ≠≤≥ →⇒ ★☆ «»',
  'digits: 1 12 123 1234 12345 123456789 3.14159 -2.5e-10 1,000,000 $1,234.56 0xDEADBEEF v1.2.3',
  '2026-12-02T01:45:00Z 555-0100 100% 7th 21st 1990s ٣٤٥ १२३',
  'whitespace:  two   three    four\ttab\t\ttabs \n newline\n\n\nthree  \n  \r\n crlf \u00a0nbsp\u3000ideographic',
  '    indented code:\n    def f(x, y=None):\n        return x ** 2 if y is None else y // 3\n',
  'special tokens: <|begin_of_text|>Hello<|end_of_text|> <|eot_id|> <|endoftext|>bye',
  'tiktoken specials: <s>start</s> <unk> <mask> <pad><cls><sep> <SPECIAL_42> <SPECIAL_999> <SPECIAL_1000>',
  'almost special: <|begin_of_text| <|endoftext |> < s> <SPECIAL_x>',
  'case: CamelCase HTTPServer iPhone McDonald\'s ALLCAPS camelCase path/to/file.txt a/b//c',
  'accents: e\u0301te\u0301 cafe\u0301 Pokémon ÉCOLE',
  'repeats: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ---------- ==== !!!??? ... ,,,,',
  'trailing spaces then end   ',
];
const text = sotu.join('\n\n') + '\n\n' + tricky.join('\n') + '\n   ';
if (/[\u0085\ufeff]/.test(text)) throw new Error('text must avoid U+0085 and U+FEFF');

// --- run the references and write ---------------------------------------------------------------
function writeIds(name, ids) {
  const lines = [];
  for (let i = 0; i < ids.length; i += 20) lines.push(ids.slice(i, i + 20).join(' '));
  fs.writeFileSync(path.join(outDir, name), lines.join('\n') + '\n');
  console.log(`${name}: ${ids.length} ids`);
}
fs.mkdirSync(outDir, {recursive: true});
fs.writeFileSync(path.join(outDir, 'tokenizer_golden.txt'), text);
for (const [dir, json, config] of [['hf_llama3_style', llama3, llama3Config],
                                   ['hf_gpt2_style', gpt2, gpt2Config]]) {
  fs.mkdirSync(path.join(outDir, dir), {recursive: true});
  fs.writeFileSync(path.join(outDir, dir, 'tokenizer.json'), JSON.stringify(json));
  fs.writeFileSync(path.join(outDir, dir, 'tokenizer_config.json'),
                   JSON.stringify(config, null, 2) + '\n');
  const tokenizer = new Tokenizer(json, config);
  writeIds(`${dir}.ids`, tokenizer.encode(text).ids);
}
fs.writeFileSync(path.join(outDir, 'tiktoken_ranks.json'), JSON.stringify(ranksJson));
for (const [name, pattern] of [['v1', TIKTOKEN_V1], ['v2', TIKTOKEN_V2]]) {
  const ids = tiktoken(pattern).encode(text, 'all');
  const plain = tiktoken(pattern).encode(text, [], []);
  if (ids.length === plain.length) throw new Error('special-token text was not recognised');
  writeIds(`tiktoken_${name}.ids`, ids);
}
fs.rmSync(tmp, {recursive: true, force: true});
