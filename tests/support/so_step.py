"""so_step.py -- one train_step of a generated .so named `net`, run in a child process by the
ONNX training tests (tests/onnx/training.py, rnn.py), so that a crash in it is a failed check,
not a dead test: the test runs `THIS_TEST.py --step SO X.npy LABEL.npy WEIGHTS AFTER`, which
calls step()."""
import ctypes

import numpy as np


def step(so, xin, lin, weights, after):
    """The child: one train_step of the .so, from weights, saved to after; prints the loss."""
    lib = ctypes.CDLL(so)
    lib.net_create.restype = ctypes.c_void_p
    lib.net_create.argtypes = [ctypes.c_uint64]
    for f in ("net_load", "net_save"):
        getattr(lib, f).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.net_train_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)]
    lib.net_destroy.argtypes = [ctypes.c_void_p]
    xs, ls = np.ascontiguousarray(np.load(xin)), np.ascontiguousarray(np.load(lin))
    m, loss = lib.net_create(0), ctypes.c_float()
    rc = lib.net_load(m, weights.encode()) or lib.net_train_step(m, xs.ctypes.data, ls.ctypes.data, ctypes.byref(loss)) \
        or lib.net_save(m, after.encode())
    lib.net_destroy(m)
    print(repr(loss.value))
    return rc
