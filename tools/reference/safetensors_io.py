"""A minimal safetensors writer and reader for the reference generators (no `safetensors`
package needed). Writes what the reference implementation writes: compact JSON header with
__metadata__ first, tensors ordered by decreasing element size then name, header padded with
spaces to a multiple of 8 bytes, little-endian row-major data."""
import json
import struct

import numpy as np

_DTYPES = {
    np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
    np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("uint8"): "U8",
}
_NUMPY = {v: k for k, v in _DTYPES.items()}


def save(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (float64/32/16, int64/32, uint8)."""
    arrays = {name: np.ascontiguousarray(a) for name, a in tensors.items()}
    order = sorted(arrays, key=lambda n: (-arrays[n].dtype.itemsize, n))
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        a = arrays[name]
        header[name] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            f.write(arrays[name].astype(arrays[name].dtype.newbyteorder("<")).tobytes())


def load(path):
    """Returns (dict name -> numpy array, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=_NUMPY[info["dtype"]]).reshape(info["shape"])
    return out, metadata


def check_gradients(loss_fn, params, names, gen, samples=3, eps=1e-6):
    """Asserts that autograd's gradients (already in params[name].grad) match central finite
    differences of loss_fn() in float64 at a few random elements of each named parameter."""
    import torch
    for name in names:
        p = params[name]
        flat = p.detach().view(-1)
        for _ in range(samples):
            i = int(torch.randint(0, flat.numel(), (1,), generator=gen))
            with torch.no_grad():
                old = flat[i].item()
                flat[i] = old + eps
                up = loss_fn().item()
                flat[i] = old - eps
                down = loss_fn().item()
                flat[i] = old
            numeric = (up - down) / (2 * eps)
            analytic = p.grad.view(-1)[i].item()
            assert abs(numeric - analytic) <= 1e-6 + 1e-5 * abs(analytic), (name, i, numeric, analytic)
