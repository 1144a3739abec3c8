#!/usr/bin/env python3
"""Golden learning rates and weight decays from Megatron-LM's own OptimizerParamScheduler
(megatron/core/optimizer_param_scheduler.py, imported from a Megatron-LM checkout with its
heavy dependencies stood in for, as in megatron_flags.py). One line per (schedule, sample
count): the schedule's settings, the sample count, then get_lr and get_wd (%.17g).

Usage: python3 tools/reference/megatron_lr_schedule.py MEGATRON_LM_SOURCES > tests/data/lr_schedule_golden.txt
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_flags  # noqa: E402  (the stand-in importer)

sys.path.insert(0, sys.argv[1])
sys.meta_path.insert(0, megatron_flags._StandInFinder())
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler  # noqa: E402


class _Optimizer:
    param_groups = [{}]


# style, warmup steps (fractional allowed: --lr-warmup-fraction), decay steps, init, max, min,
# WSD decay steps, WSD style, start wd, end wd, wd increment steps, wd style
SCHEDULES = [
    ("linear", 0.0, 40, 0.0, 1e-3, 1e-4, 0, "linear", 0.1, 0.1, 40, "constant"),
    ("cosine", 2.5, 40, 0.0, 1e-3, 1e-4, 0, "linear", 0.01, 0.1, 40, "linear"),
    ("cosine", 0.43, 430, 1e-5, 6e-5, 6e-6, 0, "linear", 0.0, 0.1, 100, "cosine"),
    ("constant", 8.0, 40, 0.0, 1e-3, 0.0, 0, "linear", 0.1, 0.1, 40, "constant"),
    ("inverse-square-root", 8.0, 400, 0.0, 1e-3, 1e-5, 0, "linear", 0.1, 0.1, 40, "constant"),
    ("inverse-square-root", 0.0, 400, 0.0, 1e-3, 1e-5, 0, "linear", 0.1, 0.1, 40, "constant"),
    ("WSD", 4.0, 100, 0.0, 1e-3, 1e-4, 20, "linear", 0.1, 0.1, 40, "constant"),
    ("WSD", 4.0, 100, 0.0, 1e-3, 1e-4, 30, "cosine", 0.1, 0.1, 40, "constant"),
    ("WSD", 0.0, 100, 0.0, 1e-3, 1e-4, 25, "exponential", 0.1, 0.1, 40, "constant"),
    ("WSD", 0.0, 100, 0.0, 1e-3, 1e-4, 25, "minus_sqrt", 0.1, 0.1, 40, "constant"),
]
STEPS = [0, 1, 2, 3, 4, 5, 8, 9, 17, 20, 39, 40, 41, 64, 75, 80, 99, 100, 101, 200, 429, 430, 431]

for (style, warmup, decay, init, max_lr, min_lr, wsd, wsd_style, start_wd, end_wd, wd_steps,
     wd_style) in SCHEDULES:
    s = OptimizerParamScheduler(
        _Optimizer(), init_lr=init, max_lr=max_lr, min_lr=min_lr, lr_warmup_steps=warmup,
        lr_decay_steps=decay, lr_decay_style=style, start_wd=start_wd, end_wd=end_wd,
        wd_incr_steps=wd_steps, wd_incr_style=wd_style,
        wsd_decay_steps=wsd if style == "WSD" else None, lr_wsd_decay_style=wsd_style)
    for n in STEPS:
        s.num_steps = n
        print(style, repr(warmup), decay, repr(init), repr(max_lr), repr(min_lr), wsd, wsd_style,
              repr(start_wd), repr(end_wd), wd_steps, wd_style, n,
              "%.17g" % s.get_lr({}), "%.17g" % s.get_wd())
