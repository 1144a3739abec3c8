#!/usr/bin/python3
"""Loads tests/data/torch_file/written.pt — the file megatron-cpp's torch_save writes for the
object of tests/unit/core_torch_file_test.cpp (fixed_object) — with PyTorch's own torch.load,
checks every value against what that object holds, and writes what PyTorch saw (types, dtypes,
shapes, values) to tests/data/torch_file/written.torch_load.txt.

Run after regenerating written.pt (MEGATRON_WRITE_TORCH_GOLDEN=1 unit_tests
--gtest_filter=TorchFile.WriterOutputIsTheFilePyTorchLoaded):
  /usr/bin/python3 tools/reference/torch_file_check.py
"""
import argparse
import collections
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, "tests/data/torch_file")


def main():
    obj = torch.load(os.path.join(DIR, "written.pt"))
    t = torch.tensor
    expect_tensors = {
        "f32": t([[0, 0.5, -1], [2.25, 3e-8, 1e30]], dtype=torch.float32),
        "f32_transposed": t([[1, 4], [2, 5], [3, 6]], dtype=torch.float32),
        "f64": t([0.1, -2.5], dtype=torch.float64),
        "bf16": t([1.5, -3.0, 0.0078125], dtype=torch.bfloat16),
        "f16": t([[0.5, -65504.0], [1e-3, 2.0]], dtype=torch.float16),
        "i64": t([-1, 1 << 40, 7], dtype=torch.int64),
        "i32": t([-7, 123456], dtype=torch.int32),
        "u8": t([0, 1, 127, 128, 255], dtype=torch.uint8),
        "scalar": t(42.0, dtype=torch.float32),
    }
    for k, v in expect_tensors.items():
        got = obj[k]
        assert got.dtype == v.dtype and got.shape == v.shape and torch.equal(got, v), (k, got, v)
        assert got.is_contiguous() and not got.requires_grad, k
    assert type(obj["ordered"]) is collections.OrderedDict
    assert obj["ordered"] == collections.OrderedDict(a=1, b=[None, True, False])
    assert type(obj["args"]) is argparse.Namespace
    assert vars(obj["args"]) == dict(hidden_size=32, lr=0.25, name="tiny \u00fc",
                                     params_dtype=torch.bfloat16)
    assert obj["ints"] == (0, 255, 256, 65535, 65536, -1, 2147483647, -2147483648, 2147483648,
                           1 << 62, -(1 << 62), -(1 << 63))
    assert obj["floats"] == [1.5, -0.0, 1e300] and str(obj["floats"][1]) == "-0.0"
    assert obj["bytes"] == b"\x00\xff\x80abc" and type(obj["bytes"]) is bytes
    assert obj["empty"] == {} and obj["tuple1"] == (1,) and obj["int_keys"] == {3: "three"}
    keys = ["f32", "f32_transposed", "f64", "bf16", "f16", "i64", "i32", "u8", "scalar",
            "ordered", "args", "ints", "floats", "bytes", "empty", "tuple1", "int_keys"]
    assert list(obj.keys()) == keys, list(obj.keys())
    with open(os.path.join(DIR, "written.torch_load.txt"), "w") as f:
        f.write(f"# torch.load of written.pt by PyTorch {torch.__version__}, Python "
                f"{sys.version.split()[0]}: every value as expected\n")
        for k in keys:
            v = obj[k]
            if isinstance(v, torch.Tensor):
                f.write(f"{k}: {v.dtype} {list(v.shape)} {v.tolist()}\n")
            else:
                f.write(f"{k}: {type(v).__name__} {v!r}\n")
    print("written.pt loads in PyTorch", torch.__version__, "with every value as expected")


if __name__ == "__main__":
    main()
