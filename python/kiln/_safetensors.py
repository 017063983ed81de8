"""_safetensors.py — the safetensors files Kiln's weights travel in (F32 and I32, little-endian):
read into NumPy arrays (Model.state_dict) and written from them (Model.load_state_dict)."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.dtype("<f4"), "I32": np.dtype("<i4")}
_NAMES = {np.dtype("<f4"): "F32", np.dtype("<i4"): "I32"}


def read(path):
    """{name: array} of the file's tensors, in the file's order (fresh arrays)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        arr = np.frombuffer(data, _DTYPES[e["dtype"]], (end - begin) // 4, 8 + n + begin)
        out[name] = arr.reshape(e["shape"]).copy()
    return out


def write(path, tensors):
    """tensors: {name: C-contiguous float32 or int32 array}."""
    head, offset = {}, 0
    for name, a in tensors.items():
        head[name] = {"dtype": _NAMES[a.dtype.newbyteorder("<")], "shape": list(a.shape),
                      "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes())
