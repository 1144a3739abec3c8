#!/usr/bin/env bash
# The README, run: every ```bash block of README.md, in order, in one shell, from the top of a
# scratch copy of the checkout — as a new user pasting them one after another would — so the
# README and the program cannot drift apart. Then checks what the blocks promise.
#
# Conventions (stated at the top of README.md too):
#   - a block is skipped when the line just above its fence is an HTML comment starting
#     "<!-- readme-test: skip" that gives the reason (the two commands themselves, benchmarks);
#     commands with placeholders ("...") belong in ```text blocks, which are never run
#   - `cmake --install build` installs into a scratch DESTDIR whose bin/ leads the PATH, so
#     `megatron` is the binary under test and nothing outside the scratch directory changes
#   - the scratch checkout links every top-level entry of the source tree (except runs/), and
#     build/ to the build directory of the binary under test; the blocks may write only under
#     runs/ (checked)
# Steps of "Train on your own text" that need their subcommand: `megatron eval` and `megatron
# generate` must stay shown there; when one succeeds on --help and no block of that section
# runs it, this test fails and says where the step goes.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}" "${MEGATRON_DATA_DIR:?}"
SRC="$MEGATRON_SOURCE_DIR"
BUILD="$(dirname "$MEGATRON_BINARY")"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# ---- the scratch checkout ----
CHECKOUT="$WORK/checkout"
mkdir -p "$CHECKOUT"
for entry in "$SRC"/* "$SRC"/.[!.]*; do
  name="$(basename "$entry")"
  [[ -e $entry && $name != runs && $name != build && $name != .git ]] || continue
  ln -s "$entry" "$CHECKOUT/$name"
done
ln -s "$BUILD" "$CHECKOUT/build"
export DESTDIR="$WORK/dest"
PREFIX="$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BUILD/CMakeCache.txt")"
export PATH="$DESTDIR${PREFIX:-/usr/local}/bin:$PATH"

# ---- the blocks ----
# extract FILE [SECTION]: the runnable blocks (of one "## SECTION" only, when given), each
# preceded by an echo naming its line, as one script.
extract() {
  awk -v section="${2:-}" '
    /^## / { in_section = (section == "" || $0 == "## " section) }
    !in_block && /^```bash[[:space:]]*$/ {
      in_block = 1
      skip = prev ~ /^<!-- readme-test: skip/ || !in_section
      if (!skip) printf "echo \"== README.md line %d\"\n", NR
      next
    }
    in_block && /^```[[:space:]]*$/ { in_block = 0; prev = ""; next }
    in_block { if (!skip) print; next }
    { prev = $0 }
  ' "$1"
}
extract "$SRC/README.md" > "$WORK/readme_blocks.sh"
extract "$SRC/README.md" "Train on your own text" > "$WORK/tutorial_blocks.sh"
[[ $(grep -c '^echo "== README.md line' "$WORK/tutorial_blocks.sh") -ge 6 ]] ||
  fail "README.md has no section \"## Train on your own text\" with its steps"

SOURCE_STATUS_BEFORE=""
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  SOURCE_STATUS_BEFORE="$(git -C "$SRC" status --porcelain)"
fi
echo "== running $(grep -c '^echo "== README.md line' "$WORK/readme_blocks.sh") README blocks"
(cd "$CHECKOUT" && timeout 800 bash -euo pipefail "$WORK/readme_blocks.sh") ||
  fail "a README block failed (its line is the last '== README.md line' above)"

# ---- what the blocks promise ----
cd "$CHECKOUT"
echo "== checking the results"
for f in config.json model.safetensors generation_config.json README.md; do
  [[ -s runs/own/hf/$f ]] || fail "the HF export has no $f"
done
# The model card says what the README promises: the data, the tokens seen, the tokenizer.
for line in '| training data | `runs/own/data/corpus_text_document` |' \
  '| tokens seen | 10,240 (160 sequences of 64 tokens) |' \
  '| tokenizer | SentencePieceTokenizer (`'; do
  grep -qF -- "$line" runs/own/hf/README.md || fail "the model card has no line '$line'"
done
# Step 2's tokenizer: 2,000 pieces, the vocabulary of every model above.
grep -q '"vocab_size": 2000' runs/own/hf/config.json || fail "the HF model's vocabulary is not 2000"
grep -q '<svg' runs/own/loss.svg || fail "runs/own/loss.svg is not an SVG"
# Step 7's LAMBADA run: every sample of the file evaluated once by the two replicas.
grep -q '"task":"LAMBADA".*"total_examples":9' runs/own/eval.jsonl ||
  fail "runs/own/eval.jsonl has no LAMBADA result over the file's 9 samples"
node - runs/own/tp1/metrics.jsonl runs/own/tp2/metrics.jsonl <<'EOF'
const fs = require('fs');
const rows = (p) => fs.readFileSync(p, 'utf8').trim().split('\n').map(JSON.parse);
const [tp1, tp2] = process.argv.slice(2).map(rows);
const train = (r) => r.filter((x) => x.type === 'train');
const iterations = (r) => JSON.stringify(train(r).map((x) => x.iteration));
// Every 5 iterations and the first: the resumed run prints its first iteration (11), as
// Megatron, but keeps it out of the metrics file, which then has an uninterrupted run's rows.
for (const [name, r, logged] of [['tp1', tp1, [1, 5, 10, 15, 20]],
                                 ['tp2 (stopped at 10, resumed)', tp2, [1, 5, 10, 15, 20]]]) {
  const expected = JSON.stringify(logged);
  if (iterations(r) !== expected) {
    console.error(`FAIL: ${name} logs iterations ${iterations(r)}, expected ${expected} once each`);
    process.exit(1);
  }
}
// The README says the one- and two-process curves lie on top of each other.
train(tp1).forEach((a) => {
  const b = train(tp2).find((x) => x.iteration === a.iteration);
  if (Math.abs(a.lm_loss - b.lm_loss) > 1e-4 * Math.abs(a.lm_loss)) {
    console.error(`FAIL: iteration ${a.iteration}: lm loss ${a.lm_loss} (TP 1) vs ${b.lm_loss} (TP 2)`);
    process.exit(1);
  }
});
// The evaluations every 5 iterations, then the final one, marked as such.
// Step 5's samples: iterations 10 (the first run) and 20 (the resumed one), each continuing its
// prompt.
const samples = tp2.filter((x) => x.type === 'samples');
if (JSON.stringify(samples.map((x) => x.iteration)) !== '[10,20]' ||
    !samples.every((x) => x.samples.length === 1 && x.samples[0].text.startsWith('Tensor parallelism'))) {
  console.error('FAIL: tp2 sample rows', JSON.stringify(samples));
  process.exit(1);
}
const valid = tp2.filter((x) => x.type === 'validation');
const finals = valid.filter((x) => x.final).map((x) => x.iteration);
if (JSON.stringify(finals) !== '[20]' || !valid[valid.length - 1].final) {
  console.error(`FAIL: tp2's final validation rows are at ${JSON.stringify(finals)}, expected [20], last`);
  process.exit(1);
}
if (!(valid.length >= 2 && valid[valid.length - 1].lm_loss < valid[0].lm_loss - 0.5)) {
  console.error('FAIL: the validation loss did not fall by 0.5:', valid.map((x) => x.lm_loss));
  process.exit(1);
}
console.log(`tp1 = tp2 at every logged iteration; validation loss ${valid[0].lm_loss.toFixed(3)}` +
            ` -> ${valid[valid.length - 1].lm_loss.toFixed(3)}`);
EOF

# The blocks wrote nothing outside runs/ (here or in the source tree).
for entry in * .[!.]*; do
  [[ -e $entry && ! -L $entry && $entry != runs ]] || continue
  fail "the README's commands wrote '$entry' outside runs/"
done
if [[ -n $SOURCE_STATUS_BEFORE || -d $SRC/.git || -f $SRC/.git ]]; then
  [[ "$(git -C "$SRC" status --porcelain)" == "$SOURCE_STATUS_BEFORE" ]] ||
    fail "the README's commands changed the source tree: $(git -C "$SRC" status --porcelain)"
  git -C "$SRC" check-ignore -q runs/own || fail "runs/ is not ignored by git"
fi

# ---- steps waiting for their subcommand ----
for step in "eval:8. Evaluate" "generate:10. Generate text"; do
  cmd="${step%%:*}"
  if megatron "$cmd" --help >/dev/null 2>&1 && ! grep -q "megatron $cmd" "$WORK/tutorial_blocks.sh"; then
    fail "megatron $cmd exists now: show it in README.md's \"Train on your own text\", step" \
      "\"${step#*:}\", as a bash block (this test runs it)"
  fi
done
echo "README: OK"
