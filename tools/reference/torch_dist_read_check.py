#!/usr/bin/python3
"""An independent reader of the `torch_dist` checkpoints megatron-cpp writes
(`megatron convert --to megatron-lm-core --ckpt-format torch_dist`, `--save --ckpt-format
torch_dist`), written from the definitions of PyTorch Distributed Checkpoint (PyTorch 2.x's
torch/distributed/checkpoint/{metadata,filesystem}.py: a `.metadata` pickle of Metadata, each
chunk a torch.save archive at [offset, offset + length) of its `.distcp` file) and Megatron-Core's
dist_checkpointing (metadata.json, common.pt). PyTorch 1.13 (Debian's, installed here) predates
that DCP, so `.metadata` is unpickled with the stand-ins of PyTorch 2.9's dataclasses that
megatron_torch_dist_checkpoint.py defines (same modules, names and fields), under an allow-list
of globals; every chunk is read by PyTorch's own torch.load. Nothing of megatron-cpp is used.

Then every global tensor is compared with the one the reference scripts build from the source of
the conversion, by their own mapping (megatron_torch_dist_checkpoint.py):
  --source gpt2       the tiny GPT-2 (tests/data/gpt2_tiny/hf) as Megatron-Core's global tensors
                      (gpt2_state): every model key, bit for bit; the word embedding's real rows
                      (its padding depends on the writer's TP size: must be zero)
  --source gpt2_adam  the `torch_dist_gpt2_adam_tp2` fixture's tensors (adam_state): the
                      optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.* tensors bit for bit, the
                      bf16 weights as their exact f32 values (megatron-cpp keeps f32 weights)
and the common state's iteration, checkpoint_version and args layout are checked.

Usage: /usr/bin/python3 tools/reference/torch_dist_read_check.py ITERATION_DIR --source S
       [--tp T --pp P]   (the layout the files must say they were written at)
Prints one line per check; exit status 0 when everything matches, 1 otherwise.
"""
import argparse
import io
import json
import os
import pickle
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_torch_dist_checkpoint as tdc  # noqa: E402

MD, FS = tdc.pytorch2_classes()

# The globals a DCP .metadata of Megatron-Core holds; anything else is refused.
ALLOWED = {
    ("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
}
ALLOWED |= {("torch", d) for d in ("float32", "float64", "float16", "bfloat16", "int32", "int64",
                                    "uint8")}
ALLOWED |= {("torch.distributed.checkpoint.metadata", c) for c in (
    "Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata",
    "MetadataIndex", "TensorProperties", "_MEM_FORMAT_ENCODING", "StorageMeta")}


class MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"forbidden global {module}.{name}")
        if module == "torch.distributed.checkpoint.metadata":
            return getattr(MD, name)
        if module == "torch.distributed.checkpoint.filesystem":
            return getattr(FS, name)
        return super().find_class(module, name)


def read_checkpoint(directory):
    """Every global tensor of the DCP checkpoint in `directory`, assembled from its chunks."""
    with open(os.path.join(directory, ".metadata"), "rb") as f:
        metadata = MetadataUnpickler(f).load()
    assert type(metadata) is MD.Metadata, type(metadata)
    assert metadata.version == "1.0.0", metadata.version
    files = {}
    tensors = {}
    for key, meta in metadata.state_dict_metadata.items():
        if isinstance(meta, MD.BytesStorageMetadata):
            continue
        assert isinstance(meta, MD.TensorStorageMetadata), (key, meta)
        assert isinstance(meta.size, torch.Size), key
        out = torch.zeros(meta.size, dtype=meta.properties.dtype)
        covered = torch.zeros(meta.size, dtype=torch.int32)
        for chunk in meta.chunks:
            info = metadata.storage_data[MD.MetadataIndex(key, chunk.offsets)]
            if info.relative_path not in files:
                with open(os.path.join(directory, info.relative_path), "rb") as f:
                    files[info.relative_path] = f.read()
            data = files[info.relative_path][info.offset:info.offset + info.length]
            assert len(data) == info.length, f"{key}: chunk past the end of its file"
            t = torch.load(io.BytesIO(data))
            assert t.shape == chunk.sizes and t.dtype == meta.properties.dtype, (key, t.shape)
            box = tuple(slice(o, o + n) for o, n in zip(chunk.offsets, chunk.sizes))
            out[box] = t
            covered[box] += 1
        assert bool((covered == 1).all()), f"{key}: chunks do not cover each element once"
        tensors[key] = out
    return tensors


def compare(ours, expected, vocab):
    """Bit-for-bit comparison. A bf16 expected tensor (the bf16 run's weights) is compared as its
    exact f32 value: megatron-cpp's checkpoints keep f32 weights."""
    failures = 0
    if set(ours) != set(expected):
        print("keys differ: only ours", sorted(set(ours) - set(expected)), "only expected",
              sorted(set(expected) - set(ours)))
        failures += 1
    for key in sorted(set(ours) & set(expected)):
        a, b = ours[key], expected[key]
        if a.dtype == torch.float32 and b.dtype == torch.bfloat16:
            b = b.float()
        if key.endswith("word_embeddings.weight"):
            if bool((a[vocab:] != 0).any()):
                print(f"{key}: padding rows are not zero")
                failures += 1
            a, b = a[:vocab], b[:vocab]
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        print(f"{'ok' if same else 'MISMATCH'} {key} {list(a.shape)} {a.dtype}")
        failures += not same
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--source", choices=("gpt2", "gpt2_adam"), required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    a = parser.parse_args()
    with open(os.path.join(a.directory, "metadata.json")) as f:
        config = json.load(f)
    assert config["sharded_backend"] == "torch_dist", config
    common = torch.load(os.path.join(a.directory, "common.pt"))
    args = common["args"]
    assert common["checkpoint_version"] == 3.0
    assert args.tensor_model_parallel_size == a.tp, args.tensor_model_parallel_size
    assert args.pipeline_model_parallel_size == a.pp, args.pipeline_model_parallel_size
    assert args.ckpt_format == "torch_dist"
    ours = read_checkpoint(a.directory)
    vocab = tdc.mlm.hf_weights()[1]["vocab_size"]
    if a.source == "gpt2":
        expected, _, _, _, iteration, _ = tdc.gpt2_state()
        failures = compare(ours, expected, vocab)
        iteration = 0
    else:
        expected, _, _, _, iteration, _ = tdc.adam_state()
        failures = compare(ours, expected, vocab)
        optimizer = common["optimizer"]  # MixedPrecisionOptimizer's: torch's state inside
        step = optimizer["optimizer"]["state"]["common_step"]
        if "fp32_from_fp16_params" not in optimizer:
            print("the optimizer state is not MixedPrecisionOptimizer's")
            failures += 1
        if int(step) != tdc.ADAM_STEPS:
            print("optimizer step", int(step), "expected", tdc.ADAM_STEPS)
            failures += 1
        if args.consumed_train_samples != tdc.ADAM_STEPS * tdc.ADAM_GBS:
            print("consumed samples", args.consumed_train_samples)
            failures += 1
    if common["iteration"] != iteration:
        print("iteration", common["iteration"], "expected", iteration)
        failures += 1
    print(f"{len(ours)} tensors read, {failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
