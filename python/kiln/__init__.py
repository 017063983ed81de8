"""Kiln from Python: compile a model (.kiln, .onnx or a torch module), run predict and train_step
on NumPy arrays or torch tensors, and compute with lazy arrays. A thin layer over libkiln
through ctypes (docs/python.md is the tour):

    import kiln, numpy as np
    m = kiln.compile("examples/mlp.kiln", dims={"batch": (1, 64)})
    prob = m.predict(np.random.rand(8, 784).astype(np.float32))
    loss = m.train_step(image, label)
    y = kiln.relu(kiln.array(x) * 2)          # lazy: computed when read
    print(y)

Every failure raises kiln.KilnError carrying the library's diagnostic."""
import builtins as _builtins

from ._lib import KilnError, library_path, lib as _lib
from .model import Model, Tensor, compile, from_torch, load
from . import lazy as _lazy
from .lazy import *  # noqa: F401,F403  (kiln.array, kiln.zeros, kiln.relu, ... one function per op)

globals().update(_lazy.op_functions)
for _c in (KilnError, Model, Tensor, _lazy.Array):
    _c.__module__ = "kiln"

__version__ = _lib.kiln_version().decode()
# As NumPy's, `from kiln import *` leaves out the ops named like builtins (max, min, sum, abs,
# pow, slice): kiln.max is there, a star import does not hide max.
__all__ = ["KilnError", "Model", "Tensor", "compile", "load", "from_torch", "library_path"] + _lazy.__all__ + \
    sorted(n for n in _lazy.op_functions if not hasattr(_builtins, n))
