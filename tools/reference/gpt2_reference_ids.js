#!/usr/bin/env node
// Writes the GPT-2 BPE golden files tests/data/bpe_golden.txt and tests/data/bpe_golden.ids:
// a deterministic, varied text (English prose, code, numbers, whitespace runs, contractions,
// accented, CJK and other scripts, emoji) and the ids that the npm package gpt-3-encoder@1.1.4
// (a port of openai/gpt-2's encoder.py) gives for it. The C++ tokenizer must reproduce them.
//
// Usage: node tools/reference/gpt2_reference_ids.js [OUT_DIR]   (default tests/data)
// Fetches the package with `npm pack` into a temporary directory; nothing is installed.
//
// The text avoids U+0085 and U+FEFF: JavaScript's \s disagrees with Python's `regex` \s on
// exactly those two characters, and our tokenizer follows Python (GPT-2's own behaviour).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const {execFileSync} = require('child_process');

const outDir = process.argv[2] || path.join(__dirname, '..', '..', 'tests', 'data');

// --- the reference encoder -----------------------------------------------------------------
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'gpt3enc-'));
execFileSync('npm', ['pack', '--silent', 'gpt-3-encoder@1.1.4'], {cwd: tmp, stdio: 'ignore'});
execFileSync('tar', ['xzf', 'gpt-3-encoder-1.1.4.tgz'], {cwd: tmp});
const encoder = require(path.join(tmp, 'package', 'Encoder.js'));

// --- deterministic text ----------------------------------------------------------------------
// mulberry32: a tiny seeded PRNG so the text is the same on every machine and node version.
let seed = 20261129;
function random() {
  seed = (seed + 0x6D2B79F5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (list) => list[Math.floor(random() * list.length)];
const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));

const words = ('the of and to in a is that for it as was with be by on not he this are or his ' +
  'from at which but have an they you were her she there been one all we their has would when ' +
  'if so no will can more about said out up into than its them only other new some could time ' +
  'these two may first then do any like my now over such our man me even most made after also ' +
  'did many before must through back years where much your way well down should because each ' +
  'just those people how too little state good very make world still own see men work long get ' +
  'here between both life being under never day same another know while last might us great ' +
  'old year off come since against go came right used take three government congress nation ' +
  'tokenizer parallelism transformer gradient embedding attention throughput checkpoint ' +
  'unaffable antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis ' +
  'Megatron GPT BERT NVIDIA OpenAI PyTorch Washington Lincoln Roosevelt America').split(' ');
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "’s", "'x"];
const subjects = ["it", "he", "she", "we", "they", "you", "I", "don", "can", "won", "John",
  "y'all", "rock'n'roll", "O'Neil", "'tis"];
const accented = ['café', 'naïve', 'résumé', 'Ångström', 'Zürich', 'Straße', 'façade',
  'jalapeño', 'Dvořák', 'Łódź', 'São Paulo', 'Tiếng Việt', 'crème brûlée', 'Ærøskøbing',
  'İstanbul', 'Kraków', 'smörgåsbord', 'señorita', 'Héllo', 'e\u0301te\u0301', 'n\u0303o',
  'Ελληνικά', 'Русский язык', 'Українська', 'עברית', 'العربية', 'हिन्दी', 'ภาษาไทย',
  'ქართული', 'Հայերեն', 'ᚠᚢᚦᚨᚱᚲ'];
const cjk = ['中文分词', '你好，世界！', '東京都', 'ひらがな', 'カタカナ', '日本語の文章です。',
  '한국어 텍스트', '대한민국', '漢字', '机器学习模型', '「引用」', '（括弧）', '　全角スペース　',
  '１２３４５', 'ＡＢＣ'];
const emoji = ['😀', '🚀', '👍🏽', '👨‍👩‍👧‍👦', '🇺🇸', '🇯🇵', '❤️', '✨', '🎉🎉🎉', '🤖', '🧠',
  '☃', '⚡', '🏳️‍🌈', '🙂🙃', '©', '™', '°C', '€', '£', '¥', '∑∫√∞', '≠≤≥', '→⇒', '★☆',
  '♠♣♥♦', '┌─┐', '│ │', '└─┘', '…', '—', '–', '«»', '„“', '‹›', '§¶', '†‡'];
const unicodeNumbers = ['²', '³', '½', '¾', 'Ⅻ', 'ⅷ', '٣٤٥', '१२३', '①②③', '𝟙𝟚𝟛', '¹⁰'];
const whitespace = ['  ', '   ', '    ', '\t', '\t\t', '\n', '\n\n', '\n\n\n', ' \n', '  \n ',
  '\r\n', '\u00a0', '\u3000', '\u2003', '\u2009', ' \t ', '\n    ', '\n\t', '\u2028', '\v', '\f'];

function sentence() {
  const n = int(4, 18);
  const parts = [];
  for (let i = 0; i < n; ++i) {
    let w = pick(words);
    const r = random();
    if (r < 0.08) w = pick(subjects) + pick(contractions);
    else if (r < 0.12) w = pick(accented);
    else if (r < 0.14) w = w.toUpperCase();
    else if (r < 0.17) w = String(int(0, 100000));
    else if (r < 0.19) w = pick(emoji);
    else if (r < 0.21) w = pick(cjk);
    parts.push(w);
    if (random() < 0.08) parts.push(pick([',', ';', ':', ' -', ' --', ' (', ')', '"', "'"]));
  }
  let s = parts.join(' ').replace(/ ([,;:)])/g, '$1');
  s = s.charAt(0).toUpperCase() + s.slice(1);
  return s + pick(['.', '.', '.', '!', '?', '...', '?!', '."', '.)']);
}

function prose() {
  const sentences = [];
  for (let i = int(3, 9); i > 0; --i) sentences.push(sentence());
  return sentences.join(pick([' ', ' ', ' ', '  ']));
}

function number() {
  return pick([
    () => String(int(0, 9)),
    () => String(int(0, 1e9)),
    () => (random() * 1000).toFixed(int(1, 6)),
    () => int(1, 999) + ',' + String(int(0, 999)).padStart(3, '0') + ',' +
          String(int(0, 999)).padStart(3, '0'),
    () => '$' + (random() * 1e6).toFixed(2),
    () => int(1790, 2021) + '-' + String(int(1, 12)).padStart(2, '0') + '-' +
          String(int(1, 28)).padStart(2, '0'),
    () => '0x' + int(0, 0xffffff).toString(16).toUpperCase(),
    () => '+1 (' + int(200, 999) + ') ' + int(200, 999) + '-' + int(1000, 9999),
    () => int(1, 99) + '%',
    () => (random() < 0.5 ? '-' : '') + random().toExponential(int(1, 4)),
    () => 'v' + int(0, 9) + '.' + int(0, 30) + '.' + int(0, 99),
    () => pick(unicodeNumbers),
    () => String(int(0, 9)).repeat(int(10, 40)),
  ])();
}

const identifiers = ['x', 'y', 'idx', 'hidden_size', 'numHeads', 'seq_len', 'tensor', 'ptr',
  'grad_output', 'self', 'kv_cache', '__init__', 'MAX_LEN', 'i', 'j', 'buffer_', 'm_count'];
function code() {
  const indent = pick(['', '  ', '    ', '\t', '        ']);
  const a = pick(identifiers), b = pick(identifiers), c = pick(identifiers);
  return pick([
    () => `${indent}for (int ${a} = 0; ${a} < ${b}; ++${a}) {\n${indent}  ${c}[${a}] += ${b} * 0.5f;\n${indent}}`,
    () => `${indent}def ${a}(${b}, ${c}=None):\n${indent}    return ${b} ** 2 if ${c} is None else ${c} // 3`,
    () => `${indent}const ${a} = ${b}?.${c} ?? [] ; // TODO: ${sentence()}`,
    () => `${indent}#include <vector>\n${indent}std::vector<int32_t> ${a}{${int(0, 9)}, ${int(0, 99)}};`,
    () => `${indent}if ${a} != ${b} && !${c} || ${a} <= -1 {\n${indent}\treturn Err("${a}: {}", ${b});\n${indent}}`,
    () => `${indent}${a} = torch.randn(${int(1, 64)}, ${int(1, 1024)}, dtype=torch.bfloat16)  # [b, h]`,
    () => `${indent}SELECT ${a}, COUNT(*) FROM ${b} WHERE ${c} >= ${int(0, 99)} GROUP BY ${a};`,
    () => `${indent}<div class="${a}">&nbsp;${sentence()}</div>`,
    () => `${indent}{"${a}": [${int(0, 9)}, ${random().toFixed(3)}, null, true], "${b}": "${c}\\n"}`,
    () => `${indent}/* ${a} */ ${b} <<= 2; ${c} ^= ~${a} | (${b} & 0xFF); // ${a}->${b}::${c}`,
    () => `${indent}$ ./megatron pretrain-gpt --num-layers ${int(1, 48)} --hidden-size ${int(1, 64) * 64} 2>&1 | tee log.txt`,
    () => `${indent}https://example.com/${a}?q=${b}&page=${int(1, 99)}#${c} <user@example.org>`,
  ])();
}

function block() {
  const r = random();
  if (r < 0.45) return prose();
  if (r < 0.65) return code();
  if (r < 0.75) {
    const nums = [];
    for (let i = int(3, 12); i > 0; --i) nums.push(number());
    return nums.join(pick([' ', ', ', '\t', ' | ', '\n']));
  }
  if (r < 0.85) {
    const items = [];
    for (let i = int(2, 8); i > 0; --i) items.push(pick([...accented, ...cjk, ...emoji]));
    return items.join(pick(['', ' ', '、', ' · ', '\n']));
  }
  if (r < 0.92) return pick(whitespace).repeat(int(1, 6)) + sentence() + pick(whitespace);
  return pick(['- ', '* ', '1. ', '> ', '# ', '## ', '| ', '    - ']) + sentence();
}

const blocks = [];
let size = 0;
while (size < 120000) {
  const b = block();
  blocks.push(b);
  size += Buffer.byteLength(b, 'utf8');
  blocks.push(pick(['\n', '\n\n', '\n', ' ', '\n\n\n', '  \n', '\n \n']));
}
// Long single pieces (DNA, base64-like letters, repeated letters and digits): BPE cost grows
// with piece length, and the C++ side uses a different (heap) order of work for them.
const runs = [];
for (const [alphabet, length] of [['ACGT', 3000], ['abcdefghijklmnopqrstuvwxyzABCDEFGHIJ', 1500],
                                  ['a', 2000], ['ab', 1200], ['7', 1000], ['é', 600]]) {
  let run = '';
  for (let i = 0; i < length; ++i) run += pick(alphabet.split(''));
  runs.push(run);
}
// End on a whitespace run so the \s+(?!\S) rule is exercised at the very end of the text.
const text = blocks.join('') + runs.join(' ') + '\n' + '   \n\n  ';
if (/[\u0085\ufeff]/.test(text)) throw new Error('text must avoid U+0085 and U+FEFF');

// --- golden files ----------------------------------------------------------------------------
const ids = encoder.encode(text);
if (encoder.decode(ids) !== text) throw new Error('reference encoder does not round-trip');
fs.mkdirSync(outDir, {recursive: true});
fs.writeFileSync(path.join(outDir, 'bpe_golden.txt'), text);
const lines = [];
for (let i = 0; i < ids.length; i += 20) lines.push(ids.slice(i, i + 20).join(' '));
fs.writeFileSync(path.join(outDir, 'bpe_golden.ids'), lines.join('\n') + '\n');
fs.rmSync(tmp, {recursive: true, force: true});
console.log(`wrote ${Buffer.byteLength(text, 'utf8')} bytes of text and ${ids.length} ids to ${outDir}`);
