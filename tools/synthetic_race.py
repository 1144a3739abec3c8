#!/usr/bin/env python3
"""A synthetic task in RACE's exact file format whose answers are recoverable from the passage,
for the finetuning e2e test (tests/e2e/finetune_race.sh); standard library only.

Each article states the colour of two of a person's things among filler sentences; each of its
two questions asks one thing's colour (as a question, or as RACE's cloze with "_"), with the
true colour among 4 options. Writes OUT/RACE/{train,dev}/middle/1.txt and OUT/RACE/dev/high/1.txt
(one JSON article per line: article, questions, options, answers, id), OUT/vocab.txt (a
WordPiece vocabulary of every word used) and OUT/corpus.jsonl (the articles as {"text"}, a
pretraining corpus).

Usage: tools/synthetic_race.py OUT [SEED]
"""
import json, os, random, sys
out = sys.argv[1]
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
COLORS = ["red", "blue", "green", "black", "white", "brown", "pink", "gray"]
THINGS = ["ball", "car", "hat", "cup", "box", "bag"]
NAMES = ["tom", "ann", "sam", "kate"]
FILLER = ["the sky is big .", "it is a nice day .", "we like school .", "the dog runs fast ."]

def article(n_questions):
    facts = {}
    name = rng.choice(NAMES)
    things = rng.sample(THINGS, n_questions)
    sentences = []
    for t in things:
        facts[t] = rng.choice(COLORS)
        sentences.append(f"{name} has a {facts[t]} {t} .")
    sentences += rng.sample(FILLER, 2)
    rng.shuffle(sentences)
    questions, options, answers = [], [], []
    for t in things:
        wrong = rng.sample([c for c in COLORS if c != facts[t]], 3)
        opts = wrong + [facts[t]]
        rng.shuffle(opts)
        questions.append(f"what color is the {t} of {name} ?" if rng.random() < 0.5
                         else f"the {t} of {name} is _ .")
        options.append(opts)
        answers.append("ABCD"[opts.index(facts[t])])
    return {"article": " ".join(sentences), "questions": questions, "options": options,
            "answers": answers, "id": "synthetic"}

def write(dirname, articles, per):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, "1.txt"), "w") as f:
        for _ in range(articles):
            f.write(json.dumps(article(per)) + "\n")

write(os.path.join(out, "RACE", "train", "middle"), 100, 2)
write(os.path.join(out, "RACE", "dev", "middle"), 12, 2)
write(os.path.join(out, "RACE", "dev", "high"), 12, 2)
with open(os.path.join(out, "corpus.jsonl"), "w") as f:
    for _ in range(100):
        # Sentences as the sentence splitter of `preprocess --split-sentences` expects them.
        text = article(2)["article"].replace(" .", ".").split(". ")
        f.write(json.dumps({"text": ". ".join(t.capitalize() for t in text)}) + "\n")
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", "_", "what", "color", "is", "the",
         "of", "has", "a"] + COLORS + THINGS + NAMES + sorted({w for s in FILLER for w in s.split()} - {"."})
with open(os.path.join(out, "vocab.txt"), "w") as f:
    for w in dict.fromkeys(vocab):
        f.write(w + "\n")
