#!/usr/bin/env python3
"""Golden global batch sizes from Megatron-LM's own StepBatchsizeNumMicroBatchesCalculator
(megatron/core/num_microbatches_calculator.py, loaded from a Megatron-LM checkout as a lone
file: it needs only the standard library).

One tab-separated line per case, each starting with the schedule string and its seq_length
(0: thresholds are samples):
  steps   SCHEDULE SEQ  "threshold:batch ..." as parsed and sorted
  batch   SCHEDULE SEQ  consumed_samples global_batch_size
  iters   SCHEDULE SEQ  train_samples iterations (training.py's update_train_iters loop)
  error   SCHEDULE SEQ  (the calculator refuses the schedule)

Usage: python3 tools/reference/megatron_batch_schedule.py MEGATRON_LM_SOURCES > tests/data/batch_schedule_golden.txt
"""
import importlib.util
import os
import sys

path = os.path.join(sys.argv[1], 'megatron', 'core', 'num_microbatches_calculator.py')
spec = importlib.util.spec_from_file_location('num_microbatches_calculator', path)
calculators = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calculators)

# (schedule, seq_length): the GPT-3 example's, suffixes, commas, unsorted entries, samples.
SCHEDULES = [
    ('0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536', 2048),
    ('0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536', 64),
    ('0:8 640:16 1280:32', 64),
    ('0:8,640:16,  1280:24', 0),
    ('1.5k:12 0:4 3K:20', 0),
    ('0:2 10:4 25:6 26:8', 0),
    ('0:1.5K 1e3:2e3 2_000:0.0025M', 0),
    ('0:16 100:32', 64),
    ('   0:4   ', 1),
    ('0:4 100:8', 128),
    ('16', 0),
    ('0:4 0:8', 0),
    ('5:4 10:8', 0),
    ('0:0', 0),
    ('0:4 10:-8', 0),
    ('0:4 x:8', 0),
    ('', 0),
]


def calculator(schedule, seq_length):
    return calculators.StepBatchsizeNumMicroBatchesCalculator(
        micro_batch_size=1, data_parallel_size=1, decrease_batch_size_if_needed=False, rank=1,
        schedule=schedule, seq_length=seq_length or None)


def batch_at(calc, consumed):
    calc.update(consumed, consistency_check=False)
    return calc.get_current_global_batch_size()


def iterations(calc, train_samples):
    consumed, iters = 0, 0
    while consumed < train_samples:
        consumed += batch_at(calc, consumed)
        iters += 1
    return iters


for schedule, seq in SCHEDULES:
    head = f'{schedule}\t{seq}'
    try:
        calc = calculator(schedule, seq)
    except (AssertionError, ValueError):
        print(f'error\t{head}')
        continue
    print(f'steps\t{head}\t' + ' '.join(f'{t}:{b}' for t, b in calc.schedule))
    thresholds = sorted({t + d for t, _ in calc.schedule for d in (-1, 0, 1) if t + d >= 0})
    for consumed in thresholds + [thresholds[-1] + 1000]:
        print(f'batch\t{head}\t{consumed}\t{batch_at(calc, consumed)}')
    last = calc.schedule[-1][0]
    for train_samples in sorted({1, 7, 64, last, last + 1, last + 100, 3 * last + 5}):
        if train_samples <= 10**7:
            print(f'iters\t{head}\t{train_samples}\t{iterations(calc, train_samples)}')
