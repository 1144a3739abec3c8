#!/usr/bin/python3
"""Python port of Megatron's finetuning data readers (tasks/data_utils.py, tasks/race/data.py,
tasks/glue/mnli.py, tasks/glue/qqp.py), up to tokenization, the reference of
tests/unit/tasks_finetune_data_test.cpp. Reads the fixtures in OUT (RACE/dev/middle/*.txt,
mnli_*.tsv, qqp_*.tsv) as Megatron does and writes OUT/expected.json: the cleaned texts, labels
and ids of every sample, and build_tokens_types_paddings_from_ids on a few id lists.

Usage: /usr/bin/python3 tools/reference/finetune_data_reference.py tests/data/finetune
"""
import glob
import json
import os
import re
import sys


def clean_text(text):
    text = text.replace("\n", " ")
    text = re.sub(r"\s+", " ", text)
    for _ in range(3):
        text = text.replace(" . ", ". ")
    return text


def race(datapath):
    out = []
    for filename in sorted(glob.glob(os.path.join(datapath, "*.txt"))):
        with open(filename, "r") as f:
            for line in f:
                data = json.loads(line)
                context = clean_text(data["article"])
                for qi, question in enumerate(data["questions"]):
                    label = ord(data["answers"][qi]) - ord("A")
                    qas = []
                    for choice in data["options"][qi]:
                        qa = question.replace("_", choice) if "_" in question \
                            else " ".join([question, choice])
                        qas.append(clean_text(qa))
                    out.append({"context": context, "qa": qas, "label": label})
    return out


MNLI_LABELS = {"contradiction": 0, "entailment": 1, "neutral": 2}


def mnli(filename, test_label="contradiction"):
    samples, first, is_test = [], True, False
    with open(filename, "r") as f:
        for line in f:
            row = line.strip().split("\t")
            if first:
                first = False
                is_test = len(row) == 10
                continue
            label = test_label if is_test else row[-1].strip()
            samples.append({"text_a": clean_text(row[8].strip()),
                            "text_b": clean_text(row[9].strip()),
                            "label": MNLI_LABELS[label], "uid": int(row[0].strip())})
    return samples


def qqp(filename, test_label=0):
    samples, first, is_test = [], True, False
    with open(filename, "r") as f:
        for line in f:
            row = line.strip().split("\t")
            if first:
                first = False
                is_test = len(row) == 3
                continue
            if is_test:
                uid, a, b, label = int(row[0].strip()), clean_text(row[1].strip()), \
                    clean_text(row[2].strip()), test_label
            else:
                if len(row) != 6:
                    continue
                uid, a, b = int(row[0].strip()), clean_text(row[3].strip()), \
                    clean_text(row[4].strip())
                label = int(row[5].strip())
                if len(a) == 0 or len(b) == 0:
                    continue
            samples.append({"text_a": a, "text_b": b, "label": label, "uid": uid})
    return samples


def build_tokens_types_paddings_from_ids(a, b, max_seq_length, cls_id, sep_id, pad_id):
    ids, types, paddings = [cls_id] + a + [sep_id], [0] * (len(a) + 2), [1] * (len(a) + 2)
    if b is not None:
        ids += b
        types += [1] * len(b)
        paddings += [1] * len(b)
    trimmed = False
    if len(ids) >= max_seq_length:
        ids, types, paddings = ids[:max_seq_length - 1], types[:max_seq_length - 1], \
            paddings[:max_seq_length - 1]
        trimmed = True
    if b is not None or trimmed:
        ids.append(sep_id)
        types.append(0 if b is None else 1)
        paddings.append(1)
    pad = max_seq_length - len(ids)
    if pad > 0:
        ids += [pad_id] * pad
        types += [pad_id] * pad
        paddings += [0] * pad
    return {"ids": ids, "types": types, "paddings": paddings}


PAIR_CASES = [  # a, b (None: no second text), max_seq_length
    ([5, 6, 7], [8, 9], 10), ([5, 6, 7], [8, 9], 7), ([5, 6, 7], [8, 9], 6),
    ([5, 6, 7], None, 8), ([5, 6, 7, 8, 9, 10], None, 5), ([], [8], 4), ([5] * 12, [9] * 3, 8)]
CLS, SEP, PAD = 101, 102, 0


def main(out_dir):
    expected = {
        "race": race(os.path.join(out_dir, "RACE", "dev", "middle")),
        "mnli_train": mnli(os.path.join(out_dir, "mnli_train.tsv")),
        "mnli_test": mnli(os.path.join(out_dir, "mnli_test_matched.tsv")),
        "qqp_train": qqp(os.path.join(out_dir, "qqp_train.tsv")),
        "qqp_test": qqp(os.path.join(out_dir, "qqp_test.tsv")),
        "pairs": [{"a": a, "b": b, "max_seq_length": n,
                   "out": build_tokens_types_paddings_from_ids(a, b, n, CLS, SEP, PAD)}
                  for a, b, n in PAIR_CASES],
    }
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
