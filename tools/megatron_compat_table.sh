#!/usr/bin/env bash
# Writes docs/megatron-compat.md to stdout: how `megatron pretrain-gpt`, `pretrain-bert` and
# `generate` treat every flag of Megatron-LM's arguments.py, as the binary itself reports it
# (--print-megatron-flags; the table is src/cli/args/megatron_flags.cpp and the flag list
# src/cli/args/megatron_flag_list.inc). tests/e2e/megatron_compat_table.sh checks that the committed
# document is this output.
# Usage: tools/megatron_compat_table.sh path/to/megatron > docs/megatron-compat.md
set -euo pipefail
BIN=${1:?usage: $0 path/to/megatron}
cat <<'HEADER'
# Megatron-LM flags

A Megatron-LM launch script runs here with only its launcher replaced: `torchrun ...
pretrain_gpt.py FLAGS` becomes `mpirun ... megatron pretrain-gpt FLAGS` (and `pretrain_bert.py`
becomes `megatron pretrain-bert`; Megatron's inference scripts become `megatron generate`, see
[inference.md](inference.md)). The command line is parsed as argparse parses it: a flag given
twice takes its last value, so overrides can be appended to a script's flags.

Each flag of Megatron-LM's `megatron/training/arguments.py` (NVIDIA/Megatron-LM `d98e8a6`, the
list generated from Megatron's own parser by `tools/reference/megatron_flags.py`) is, for each
subcommand:

- **supported**: implemented; the note is the flag's help text here;
- **no effect**: accepted and logged (` > --flag has no effect here: why`); it only selects a GPU
  implementation, a fusion, an overlap, a profiler or a telemetry service, so ignoring it trains,
  logs and saves the same thing;
- **no effect if V**: accepted with its default value V, rejected with any other;
- **rejected**: it would change what is trained, logged, saved or loaded and is not supported
  here; the run stops before any work with `--flag VALUE: why`;
- **checked against the checkpoint** (generate): the model is the checkpoint's, so the value
  given must be the checkpoint's; with `--use-checkpoint-args` the checkpoint's value is used.

Flags that are not Megatron's (`--device`, `--tf32`, `--metrics-file`, `--post-layernorm`, ...)
are listed by `megatron pretrain-gpt --help`. This file is generated:
`tools/megatron_compat_table.sh build/megatron > docs/megatron-compat.md`.

| flag | pretrain-gpt | pretrain-bert | generate | note |
|---|---|---|---|---|
HEADER
paste <("$BIN" pretrain-gpt --print-megatron-flags) <("$BIN" pretrain-bert --print-megatron-flags) \
  <("$BIN" generate --print-megatron-flags) |
  awk -F '\t' '{
    gsub(/\|/, "\\|", $3); gsub(/\|/, "\\|", $6); gsub(/\|/, "\\|", $9)
    if ($1 != $4 || $1 != $7) { print "flag lists differ: " $1 " vs " $4 " vs " $7 > "/dev/stderr"; exit 1 }
    note = ($3 == $6) ? $3 : "GPT: " $3 "; BERT: " $6
    if ($9 != $3) note = note "; generate: " $9
    printf "| `%s` | %s | %s | %s | %s |\n", $1, $2, $5, $8, note
  }'
