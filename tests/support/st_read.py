"""st_read.py — a safetensors file read into NumPy arrays, for the Python test scripts that
judge a .so's saved weights (tests/onnx/training.py, tests/gpu/f64_step.py)."""
import json
import struct

import numpy as np


def read_safetensors(path):
    """{name: array} of the file's tensors (F32 and I32, the dtypes Kiln writes)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = np.float32 if e["dtype"] == "F32" else np.int32
        out[name] = np.frombuffer(data[8 + n + b:8 + n + end], dt).reshape(e["shape"])
    return out
