#!/usr/bin/env python3
"""Golden train/valid/test document boundaries by Megatron-LM's current split rule (since Nov
2023, megatron/core/datasets: parse_and_normalize_split + normalize,
convert_split_vector_to_split_matrix, and the builder's int(round(bookend * n))), computed with
numpy and Python floats as Megatron computes them. Writes tests/data/split_golden.txt:
`SPLIT SIZE b0 b1 b2 b3` per line.

Usage: python3 tools/reference/megatron_split.py > tests/data/split_golden.txt
"""
import functools
import re

import numpy

SPLITS = ["949,50,1", "969, 30, 1", "90,5,5", "98,2,0", "1,1,1", "1,1,0", "1,1", "80/20",
          "100", "99,1", "2,1,1", "3,3,3", "33.3,33.3,33.4", "0,1,0"]
SIZES = [1, 2, 3, 5, 7, 10, 17, 40, 99, 100, 101, 233, 1000, 1001, 4097, 123457]


def boundaries(split, n):
    weights = list(map(float, re.findall(r"[.0-9]+", split)))
    weights += [0.0] * (3 - len(weights))
    w = numpy.array(weights, dtype=numpy.float64)
    w = (w / numpy.sum(w)).tolist()
    cumulative = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *w])
    out = []
    for k in range(3):
        beg, end = cumulative[k], cumulative[k + 1]
        if end <= beg:  # Megatron's None split: no documents
            b = int(round(beg * float(n)))
            out.append((b, b))
        else:
            out.append((int(round(beg * float(n))), int(round(end * float(n)))))
    assert out[0][1] == out[1][0] and out[1][1] == out[2][0]
    return [out[0][0], out[0][1], out[1][1], out[2][1]]


for split in SPLITS:
    for n in SIZES:
        print(split.replace(" ", ""), n, *boundaries(split, n))
