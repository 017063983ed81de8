"""model.py — compiled models: kiln.compile (a .kiln file, .kiln text or an .onnx file, JIT-compiled
in this process or written as a .so), kiln.load (a generated .so), kiln.from_torch (a torch
module exported through torch.onnx), and the Model they return.

Every model is driven through the same table: the rt_model_api a generated .so exports as
`kiln_model`, which kiln_source_jit also returns for a model JIT-compiled here (as `kiln run`
does). Its descriptor gives the inputs, outputs, weights and bounded dims; its entry points are
called through ctypes function pointers, which release the GIL while they run."""
import ctypes as C
import inspect
import itertools
import math
import os
import shutil
import tempfile
import threading
import warnings
import weakref

import numpy as np

from . import _abi
from . import _safetensors
from ._convert import F32, I32, as_input, dtype_word, shape_text, to_numpy, as_dtype
from ._lib import KilnError, check, lib, mpi_library

__all__ = ["Model", "Tensor", "compile", "load", "from_torch"]

_KEYWORDS = frozenset("dim def return model input param const output train with true false".split())
_DTYPES = {_abi.F32: F32, _abi.I32: I32}


class Tensor:
    """An input, output or weight of a model: its name, shape and NumPy dtype. A size that follows
    a bounded dim is written as the model writes it ('batch', '2*seq+1'), as ONNX Runtime shows
    symbolic sizes; `bound` has the shape at the bounds, `type` the model's text (f32[batch, 784])."""
    __slots__ = ("name", "shape", "dtype", "bound", "type")

    def __init__(self, name, shape, dtype, bound, type_text):
        self.name, self.shape, self.dtype, self.bound, self.type = name, shape, dtype, bound, type_text

    def __repr__(self):
        return "Tensor(name=%r, shape=%r, dtype=%s)" % (self.name, self.shape, self.dtype)


# ---- the descriptor's sizes, as runtime/rt_model_dims.c reads them ----

class _Dims:
    """A descriptor's bounded dims and the tensor sizes that follow them."""

    def __init__(self, d):
        self.names = [d.dims[k].name.decode() for k in range(d.ndims)]
        self.lo = [d.dims[k].lo for k in range(d.ndims)]
        self.hi = [d.dims[k].hi for k in range(d.ndims)]
        self.patches = {}   # tensor -> [(axis, mask, a, b)]
        for i in range(d.ntensor_patches):
            p = d.tensor_patches[i]
            if p.kind == _abi.DV_TENSOR:
                self.patches.setdefault(p.index, []).append((p.axis, p.v.mask, p.v.a, p.v.b))

    def size_text(self, mask, a, b):
        words = [self.names[k] for k in range(len(self.names)) if mask >> k & 1]
        text = ("%d*" % a if a != 1 else "") + "*".join(words)
        return text + ("%+d" % b if b else "")

    def shape_at(self, t, bound, ext):
        s = list(bound)
        for axis, mask, a, b in self.patches.get(t, ()):
            p = a
            for k in range(len(ext)):
                if mask >> k & 1:
                    p *= ext[k]
            s[axis] = p + b
        return tuple(s)

    def symbolic(self, t, bound):
        s = list(bound)
        for axis, mask, a, b in self.patches.get(t, ()):
            s[axis] = self.size_text(mask, a, b)
        return tuple(s)

    def text(self):
        return ", ".join("%s = %d..%d" % (n, lo, hi) for n, lo, hi in zip(self.names, self.lo, self.hi))

    def extents(self, tensors, shapes):
        """The extents that give the inputs `tensors` the shapes `shapes` (rt_extents_from_inputs):
        each dim from the first input axis that follows it alone, else its bound."""
        ext = [-1] * len(self.names)
        for t, shape in zip(tensors, shapes):
            for axis, mask, a, b in self.patches.get(t, ()):
                if bin(mask).count("1") != 1 or axis >= len(shape):
                    continue
                k = mask.bit_length() - 1
                v = shape[axis] - b
                if ext[k] < 0 and a and v % a == 0 and self.lo[k] <= v // a <= self.hi[k]:
                    ext[k] = v // a
        return [e if e >= 0 else self.hi[k] for k, e in enumerate(ext)]


class _Entry:
    """One entry point (predict or train_step): its inputs and outputs, with what each call
    needs at hand (the ctypes array types, the name index, the fixed shapes)."""
    __slots__ = ("tidx", "tensors", "out_tidx", "out_tensors", "index", "in_type", "out_type", "fixed", "plain")

    def __init__(self, tidx, tensors, out_tidx, out_tensors, bounded):
        self.tidx, self.tensors, self.out_tidx, self.out_tensors = tidx, tensors, out_tidx, out_tensors
        self.index = {t.name: i for i, t in enumerate(tensors)}
        self.in_type = C.c_void_p * max(len(tensors), 1)
        self.out_type = C.c_void_p * max(len(out_tensors), 1)
        self.fixed = not bounded
        # (dtype, shape) per input where no size follows a bounded dim: the fast path's check
        self.plain = [(t.dtype, t.bound) for t in tensors] if self.fixed else None


class _Source:
    """A kiln_source: one model lowered from a file or text, freed when nothing holds it."""

    def __init__(self, handle):
        self.handle = handle
        self._free = weakref.finalize(self, lib.kiln_source_free, handle)

    @classmethod
    def open(cls, source, dims, model, train):
        names, values, lows = _dim_args(dims)
        n = len(names)
        cnames = (C.c_char_p * max(n, 1))(*[s.encode() for s in names])
        cvals = (C.c_int64 * max(n, 1))(*values)
        clows = (C.c_int64 * max(n, 1))(*lows)
        h = C.c_void_p()
        if model is not None and (not isinstance(model, str) or not model or "\0" in model):
            raise TypeError("model names one model of the file: a non-empty str, not %r" % (model,))
        mod = model.encode() if model is not None else None
        if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
            path = _path_arg(source)
            check(lib.kiln_source_file(path, mod, n, cnames, cvals, clows, train.encode() if train else None, C.byref(h)))
        elif isinstance(source, str):
            if train:
                raise ValueError("train= applies to .onnx sources; .kiln text has its own train statement")
            if "\0" in source:
                raise ValueError("kiln.compile: the model text holds a NUL character")
            check(lib.kiln_source_text(b"<text>", source.encode(), mod, n, cnames, cvals, clows, C.byref(h)))
        else:
            raise TypeError("kiln.compile: source must be a path or .kiln text, not %s" % type(source).__name__)
        return cls(h.value)

    def renamed(self):
        n = C.c_int()
        check(lib.kiln_source_nrenamed(self.handle, C.byref(n)))
        out = {}
        for i in range(n.value):
            a, b = C.c_char_p(), C.c_char_p()
            check(lib.kiln_source_renamed(self.handle, i, C.byref(a), C.byref(b)))
            out[a.value.decode()] = b.value.decode()
        return out

    def text(self):
        p = C.c_void_p()
        check(lib.kiln_source_print(self.handle, C.byref(p)))
        try:
            return C.string_at(p.value).decode()
        finally:
            lib.kiln_free(p)

    def jit(self, opt):
        api = C.c_void_p()
        check(lib.kiln_source_jit(self.handle, opt, C.byref(api)))
        return C.cast(api, C.POINTER(_abi.Api))

    def compile(self, path, target, opt):
        check(lib.kiln_source_compile(self.handle, os.fsencode(os.fspath(path)), target.encode(), opt))


def _looks_like_path(s):
    """A str source is a path unless it reads as model text (a newline or a brace)."""
    return "\n" not in s and "{" not in s


def _dim_args(dims):
    """dims {'batch': 8} or {'batch': (1, 64)} as the C call's names, values (the bound) and lows."""
    if dims is None:
        return [], [], []
    if not isinstance(dims, dict):
        raise TypeError("dims must be a dict such as {'batch': 8} or {'batch': (1, 64)}, not %s" % type(dims).__name__)
    names, values, lows = [], [], []
    for name, v in dims.items():
        if not isinstance(name, str) or not name or "\0" in name:
            raise TypeError("dims: a dim's name is a non-empty str, not %r" % (name,))
        if isinstance(v, (tuple, list)) and len(v) == 2 and all(_is_int(x) for x in v):
            lo, hi = int(v[0]), int(v[1])
            if lo < 1:
                raise ValueError("dims: %s = %d..%d: the low end is at least 1" % (name, lo, hi))
        elif _is_int(v):
            lo, hi = 0, int(v)
        else:
            raise TypeError("dims: %s must be an int (a fixed size) or a pair (lo, hi) (bounded), not %r" % (name, v))
        if hi < 1 or hi >= 2 ** 40:
            raise ValueError("dims: %s = %d: a size is 1..2^40" % (name, hi))
        names.append(name), values.append(hi), lows.append(lo)
    return names, values, lows


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _check_opt(opt):
    if not _is_int(opt) or not 0 <= opt <= 3:
        raise ValueError("opt must be 0, 1, 2 or 3 (LLVM's -O levels), not %r" % (opt,))
    return int(opt)


def _check_seed(seed):
    if not _is_int(seed) or not 0 <= seed < 2 ** 64:
        raise ValueError("seed must be an unsigned 64-bit integer, not %r" % (seed,))
    return int(seed)


# ---- the model ----

def _destroy(destroy, m, keep):
    destroy(m)


class Model:
    """A compiled model: predict and train_step on NumPy arrays or torch tensors.

    >>> m = kiln.compile("examples/mlp.kiln", dims={"batch": (1, 64)})
    >>> prob = m.predict(np.zeros((8, 784), np.float32))       # or m(image=...)
    >>> loss = m.train_step(image, label)
    """

    def __init__(self, api, keep, seed=0, renamed=None, what="the model"):
        a = api.contents
        err = _abi.check_abi(a, what)
        if err:
            raise KilnError(err)
        self._api, self._keep = a, (api, keep)
        d = self._desc = a.desc.contents
        self.name = d.name.decode()
        m = a.create(a.desc, _check_seed(seed))
        if not m:
            msg = a.error(None)
            raise KilnError("cannot create model '%s': %s" % (self.name, msg.decode() if msg else "out of memory"))
        self._m = m
        self._fin = weakref.finalize(self, _destroy, a.destroy, m, (api, keep))
        # the entry points, fetched once (each read of a struct's function field makes an object)
        self._c_predict, self._c_train, self._c_error = a.predict, a.train_step, a.error
        self._c_predict_at, self._c_train_at = a.predict_at, a.train_step_at
        if d.ndims and not (a.predict_at and (a.train_step_at or not d.has_train)):
            raise KilnError("model '%s' has bounded dims, which its target does not run" % self.name)
        self._lock = threading.Lock()
        self._dims = _Dims(d)
        self._lr = _f32(d.lr)
        self._renamed = dict(renamed or {})
        self._pred = self._program(d.predict, False)
        self._train = self._program(d.train, True) if d.has_train else None
        self._weights = {}
        for t in range(d.ntensors):
            ti = d.tensors[t]
            if ti.role in (_abi.ROLE_PARAM, _abi.ROLE_AUX):
                self._weights[ti.name.decode()] = self._tensor(t)

    # -- description --

    def _tensor(self, t):
        ti = self._desc.tensors[t]
        bound = tuple(ti.shape.d[i] for i in range(ti.shape.rank))
        dtype = _DTYPES.get(ti.dtype)
        if dtype is None:
            raise KilnError("model '%s': tensor '%s' has dtype %d, which this package does not know" %
                            (self.name, ti.name.decode(), ti.dtype))
        shape = self._dims.symbolic(t, bound)
        text = "%s%s" % (dtype_word(dtype), shape_text(shape))
        return Tensor(ti.name.decode(), shape, dtype, bound, text)

    def _program(self, p, is_train):
        if p.ninputs < 0 or p.ninputs > 4096 or (not is_train and (p.noutputs < 0 or p.noutputs > 4096)):
            raise KilnError("model '%s': its descriptor is damaged (%d inputs)" % (self.name, p.ninputs))
        ins = [p.inputs[i] for i in range(p.ninputs)]
        outs = [] if is_train else [p.outputs[i] for i in range(p.noutputs)]
        for t in ins + outs:
            if not 0 <= t < self._desc.ntensors:
                raise KilnError("model '%s': its descriptor is damaged (tensor %d of %d)" % (self.name, t, self._desc.ntensors))
        return _Entry(ins, [self._tensor(t) for t in ins], outs, [self._tensor(t) for t in outs], bool(self._dims.names))

    @property
    def inputs(self):
        """predict's inputs, in order: [Tensor(name, shape, dtype)]."""
        return list(self._pred.tensors)

    @property
    def outputs(self):
        """predict's outputs, in order."""
        return list(self._pred.out_tensors)

    @property
    def train_inputs(self):
        """train_step's inputs, in order ([] for a model without a train statement)."""
        return list(self._train.tensors) if self._train else []

    @property
    def dims(self):
        """The bounded dims: {name: (lo, hi)} ({} when every dim is fixed)."""
        return {n: (lo, hi) for n, lo, hi in zip(self._dims.names, self._dims.lo, self._dims.hi)}

    @property
    def weights(self):
        """Every learnable parameter and aux state (what state_dict holds), without reading it."""
        return list(self._weights.values())

    @property
    def renamed(self):
        """For a model from ONNX (from_torch): the ONNX names that were made .kiln names."""
        return dict(self._renamed)

    def __repr__(self):
        def sig(ts):
            return ", ".join("%s: %s" % (t.name, t.type) for t in ts)
        s = "<kiln.Model '%s': predict(%s) -> %s" % (self.name, sig(self._pred.tensors), sig(self._pred.out_tensors))
        if self._train:
            s += "; train_step(%s)" % ", ".join(t.name for t in self._train.tensors)
        if self._dims.names:
            s += "; dims %s" % self._dims.text()
        return s + ">"

    # -- running --

    def _bind(self, entry, prog, args, named):
        """The arguments of predict or train_step as arrays in the entry point's input order."""
        tensors = prog.tensors
        plain = prog.plain
        if plain is not None and not named and len(args) == len(plain):
            # the common case, checked cheaply: arrays of the model's dtypes and fixed shapes
            for x, (dt, shape) in zip(args, plain):
                if type(x) is not np.ndarray or x.dtype != dt or x.shape != shape or not x.flags.c_contiguous \
                        or not x.flags.aligned:
                    break
            else:
                return args
        if len(args) == 1 and isinstance(args[0], dict) and not named:
            args, named = (), dict(args[0])
        if len(args) > len(tensors):
            raise TypeError("%s of '%s' takes %d input%s (%s); %d were given" % (
                entry, self.name, len(tensors), "" if len(tensors) == 1 else "s", ", ".join(t.name for t in tensors), len(args)))
        given = list(args) + [None] * (len(tensors) - len(args))
        have = [True] * len(args) + [False] * (len(tensors) - len(args))
        for key, v in named.items():
            i = prog.index.get(key)
            if i is None and key in _KEYWORDS:
                i = prog.index.get(key + "_")
            if i is None:
                raise TypeError("%s of '%s' has no input '%s'; its inputs are %s" % (
                    entry, self.name, key, ", ".join(t.name for t in tensors) or "none"))
            if have[i]:
                raise TypeError("%s of '%s': input '%s' given twice" % (entry, self.name, tensors[i].name))
            given[i], have[i] = v, True
        missing = [t.name for t, h in zip(tensors, have) if not h]
        if missing:
            raise TypeError("%s of '%s': missing input%s %s (it takes %s)" % (
                entry, self.name, "" if len(missing) == 1 else "s", ", ".join(missing), ", ".join(t.name for t in tensors)))
        arrays = []
        for t, x in zip(tensors, given):
            what = "%s of '%s': input '%s'" % (entry, self.name, t.name)
            arrays.append(as_input(x, t.dtype, what, self._wants(t)))
        if prog.fixed:
            self._check_shapes(entry, prog, arrays, [])
        return arrays

    def _wants(self, t):
        return t.type + (" with %s" % self._dims.text() if self._dims.names and t.shape != t.bound else "")

    def _check_shapes(self, entry, prog, arrays, ext):
        for t, info, a in zip(prog.tidx, prog.tensors, arrays):
            want = self._dims.shape_at(t, info.bound, ext) if ext else info.bound
            if a.shape != want:
                raise TypeError("%s of '%s': input '%s' has shape %s (%s); the model wants %s" % (
                    entry, self.name, info.name, shape_text(a.shape), a.dtype, self._wants(info)))

    def _extents(self, entry, prog, arrays):
        """The bounded dims' extents from the inputs' shapes (checked against them); [] without."""
        if prog.fixed:
            return []
        ext = self._dims.extents(prog.tidx, [a.shape for a in arrays])
        self._check_shapes(entry, prog, arrays, ext)
        return ext

    def _out_arrays(self, prog, ext, out):
        tensors = prog.out_tensors
        shapes = [self._dims.shape_at(t, info.bound, ext) for t, info in zip(prog.out_tidx, tensors)] if ext else \
            [info.bound for info in tensors]
        if out is None:
            return [np.empty(s, info.dtype) for s, info in zip(shapes, tensors)]
        if isinstance(out, np.ndarray):
            out = [out]
        elif isinstance(out, dict):
            unknown = [k for k in out if k not in prog.index and k not in {t.name for t in tensors}]
            if unknown:
                raise TypeError("predict of '%s': out= names %s, which %s no output (its outputs are %s)" % (
                    self.name, ", ".join(unknown), "is" if len(unknown) == 1 else "are",
                    ", ".join(t.name for t in tensors)))
            out = [out.get(t.name) for t in tensors]
        elif isinstance(out, (list, tuple)):
            out = list(out)
        else:
            raise TypeError("predict of '%s': out= is an array, a list or a dict of arrays, not %s" % (
                self.name, type(out).__name__))
        if len(out) != len(tensors):
            raise TypeError("predict of '%s': out= holds %d arrays for %d outputs" % (self.name, len(out), len(tensors)))
        result = []
        for s, info, a in zip(shapes, tensors, out):
            if a is None:
                result.append(np.empty(s, info.dtype))
                continue
            ok = isinstance(a, np.ndarray) and a.dtype == info.dtype and a.shape == s and a.flags.c_contiguous \
                and a.flags.writeable and a.flags.aligned
            if not ok:
                got = "%s%s" % (a.dtype, shape_text(a.shape)) if isinstance(a, np.ndarray) else type(a).__name__
                raise TypeError("predict of '%s': out= array for '%s' must be a writeable C-contiguous %s%s; got %s" % (
                    self.name, info.name, dtype_word(info.dtype), shape_text(s), got))
            result.append(a)
        return result

    def _fail(self, entry):
        msg = self._c_error(self._m)
        return KilnError(msg.decode("utf-8", "replace") if msg else "%s of '%s' failed" % (entry, self.name))

    def _closed(self):
        return KilnError("model '%s' was closed" % self.name)

    def _call(self, entry, fn, *args):
        """fn(model, *args) under the model's lock; a nonzero return raises the library's error."""
        with self._lock:
            if not self._m:
                raise self._closed()
            if fn(self._m, *args):
                raise self._fail(entry)

    def predict(self, *args, out=None, **named):
        """predict on the inputs, given in order, by name, or as one dict {name: array}. One output
        comes back as an ndarray, several as a dict {name: ndarray}; with out= (an array, a list or
        a dict of arrays) the results are written there instead. For a model with bounded dims the
        extents come from the inputs' shapes."""
        p = self._pred
        arrays = self._bind("predict", p, args, named)
        ext = self._extents("predict", p, arrays)
        outs = self._out_arrays(p, ext, out)
        ins = p.in_type(*[_ptr(a) for a in arrays])
        ptrs = p.out_type(*[_ptr(a) for a in outs])
        with self._lock:
            if not self._m:
                raise self._closed()
            if ext:
                rc = self._c_predict_at(self._m, (C.c_int64 * len(ext))(*ext), ins, ptrs)
            else:
                rc = self._c_predict(self._m, ins, ptrs)
            if rc:
                raise self._fail("predict")
        if len(outs) == 1:
            return outs[0]
        return {t.name: o for t, o in zip(p.out_tensors, outs)}

    __call__ = predict

    def train_step(self, *args, **named):
        """One step of the model's train statement (forward, backward, optimizer) on the inputs,
        given as for predict; returns the loss."""
        p = self._train
        if not p:
            raise KilnError("model '%s' has no train statement, so no train_step (a .kiln model needs "
                            "`train LOSS with OPT(...)`; from_torch needs train=True)" % self.name)
        arrays = self._bind("train_step", p, args, named)
        ext = self._extents("train_step", p, arrays)
        ins = p.in_type(*[_ptr(a) for a in arrays])
        loss = C.c_float()
        with self._lock:
            if not self._m:
                raise self._closed()
            if ext:
                rc = self._c_train_at(self._m, (C.c_int64 * len(ext))(*ext), ins, C.byref(loss))
            else:
                rc = self._c_train(self._m, ins, C.byref(loss))
            if rc:
                raise self._fail("train_step")
        return float(loss.value)

    @property
    def lr(self):
        """The learning rate the next train_step uses: the train statement's (or the last one
        set), moved along its schedule when the model has one."""
        if self._api.lr:
            with self._lock:
                return _f32(self._api.lr(self._m))
        return self._lr

    @lr.setter
    def lr(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise TypeError("lr must be a number, not %s" % type(value).__name__)
        if not math.isfinite(float(value)):
            raise ValueError("lr must be finite, not %r" % (value,))
        self._call("set_lr", self._api.set_lr, float(value))
        self._lr = _f32(value)

    def save(self, path):
        """Writes every weight (params and aux states) as safetensors, atomically."""
        self._call("save", self._api.save, _path_arg(path))

    def load_weights(self, path):
        """Reads a safetensors file holding exactly the model's weights (as save writes them); a
        failure changes nothing."""
        self._call("load", self._api.load, _path_arg(path))

    def save_state(self, path):
        """Writes everything a train step reads: the weights, the optimizer's state (momentum,
        Adam's moments), the step count, the schedule's position and the seed, atomically.
        load_state into a fresh model of the same source resumes training bit for bit."""
        self._call("save_state", self._api.save_state, _path_arg(path))

    def load_state(self, path):
        """Reads a file save_state wrote for this model and optimizer; a failure changes nothing."""
        self._call("load_state", self._api.load_state, _path_arg(path))

    def set_comm(self, comm=None, timeout=60.0, bucket_bytes=0):
        """Trains data-parallel as one rank of an mpi4py communicator (default MPI.COMM_WORLD),
        through libkiln_mpi: every rank gets rank 0's weights now; train_step then sums the
        loss and the gradients over the ranks (the loss returned is their mean), so each rank's
        step is the step of one process on every rank's rows. A wait gives up after timeout
        seconds (a rank failed). set_comm(False) trains alone again."""
        if comm is False:
            self._call("set_comm", self._api.set_comm, None)
            self._comm = None
            return
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise KilnError("set_comm needs mpi4py (apt-get install python3-mpi4py): %s" % e) from None
        comm = MPI.COMM_WORLD if comm is None else comm
        mpi = mpi_library()
        c = _abi.Comm()
        if mpi.kiln_mpi_comm_init(C.byref(c), C.c_void_p(MPI._handleof(comm)), C.c_double(timeout)):
            raise KilnError("kiln_mpi_comm_init failed (see stderr)")
        c.bucket_bytes = int(bucket_bytes)
        self._call("set_comm", self._api.set_comm, C.addressof(c))
        self._comm = (c, mpi)   # the model calls into c until set_comm(False) or close

    def state_dict(self, source_names=False):
        """{name: ndarray} of every weight, named as in the model and its safetensors files. With
        source_names, a weight that ONNX import renamed has its source's name instead (a torch
        module's own, for a model from from_torch), so the dict loads back into the module."""
        with tempfile.TemporaryDirectory(prefix="kiln-") as tmp:
            path = os.path.join(tmp, "weights.safetensors")
            self.save(path)
            got = _safetensors.read(path)
        back = {v: k for k, v in self._renamed.items()} if source_names else {}
        return {back.get(name, name): got[name] for name in self._weights if name in got}

    def load_state_dict(self, state, strict=True):
        """Loads {name: array or torch tensor}: the names of state_dict(), or for a model from
        from_torch the module's own state_dict() names. With strict, every weight must be given and
        nothing else (torch's num_batches_tracked counters, which Kiln does not keep, are passed
        over); otherwise missing weights keep their values and unknown names are ignored. Returns
        (missing, unexpected) name lists, as torch does."""
        if not hasattr(state, "items"):
            raise TypeError("load_state_dict takes a dict {name: array}, not %s" % type(state).__name__)
        given, unknown = {}, []
        for key, value in state.items():
            name = self._renamed.get(key, key)
            if name in self._weights:
                given[name] = (key, value)
            elif not str(key).endswith("num_batches_tracked"):
                unknown.append(str(key))
        missing = [n for n in self._weights if n not in given]
        if strict and (unknown or missing):
            parts = []
            if missing:
                parts.append("missing: %s" % ", ".join(missing))
            if unknown:
                parts.append("unknown: %s (the model's weights are %s)" % (", ".join(unknown), ", ".join(self._weights)))
            raise KilnError("load_state_dict of '%s': %s" % (self.name, "; ".join(parts)))
        current = self.state_dict() if missing else {}
        tensors = {}
        for name, info in self._weights.items():
            if name not in given:
                tensors[name] = current[name]
                continue
            key, value = given[name]
            what = "load_state_dict of '%s': '%s'" % (self.name, key)
            a = np.ascontiguousarray(as_dtype(to_numpy(value, what), info.dtype, what, info.type))
            if a.shape != info.bound:
                raise TypeError("%s has shape %s; the model's '%s' is %s" % (what, shape_text(a.shape), name, info.type))
            tensors[name] = a
        with tempfile.TemporaryDirectory(prefix="kiln-") as tmp:
            path = os.path.join(tmp, "weights.safetensors")
            _safetensors.write(path, tensors)
            self.load_weights(path)
        return missing, unknown

    def close(self):
        """Frees the model now (it is freed when garbage-collected otherwise); a call after it
        raises KilnError. Waits for a call running in another thread."""
        with self._lock:
            self._m = None
            self._fin()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_from_buffer, _addressof = C.c_char.from_buffer, C.addressof


def _ptr(a):
    """The address of a C-contiguous array's data: through the buffer protocol where the array is
    writeable (a third of the cost of a.ctypes.data), else a.ctypes.data."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def _path_arg(path):
    try:
        p = os.fsencode(os.fspath(path))
    except TypeError:
        raise TypeError("a path is a str or os.PathLike, not %s" % type(path).__name__) from None
    if not p or b"\0" in p:
        raise ValueError("path %r is empty or holds a NUL" % (path,))
    return p


# ---- the three ways to a model ----

def compile(source, dims=None, opt=2, target="cpu", output=None, model=None, seed=0, train=None):
    """Compiles a model: `source` is a .kiln or .onnx path or .kiln text. dims binds the model's
    dims as `kiln compile -D` does: {'batch': 8} fixes one, {'batch': (1, 64)} bounds it (one
    model for every batch from 1 to 64). Without output the model is JIT-compiled in this
    process; with output='libnet.so' the shared object and its header (NAME.h) are written
    beside each other and the model returned runs that .so. target 'cuda' builds for an NVIDIA
    GPU (always through a .so). seed draws the initial weights from their initializers. train,
    for an .onnx source, is what `kiln import --train` takes ("softmax_cross_entropy
    sgd(lr=0.01)"): a label input, a loss and an optimizer, so the model has a train_step."""
    opt, seed = _check_opt(opt), _check_seed(seed)
    if target not in ("cpu", "cuda"):
        raise ValueError("target is 'cpu' or 'cuda', not %r" % (target,))
    if train is not None and not isinstance(train, str):
        raise TypeError("train is a string \"LOSS OPT(...)\", not %s" % type(train).__name__)
    src = _Source.open(source, dims, model, train)
    return _finish(src, opt, target, output, seed)


def _finish(src, opt, target, output, seed):
    renamed = src.renamed()
    if output is not None:
        src.compile(output, target, opt)
        return load(output, seed=seed, _renamed=renamed)
    if target == "cuda":
        with tempfile.TemporaryDirectory(prefix="kiln-") as tmp:
            path = os.path.join(tmp, "libmodel.so")
            src.compile(path, target, opt)
            return load(path, seed=seed, _renamed=renamed)
    return Model(src.jit(opt), src, seed=seed, renamed=renamed)


_loaded = {}              # real path -> the identity of the file this process loaded from it
_loaded_lock = threading.Lock()
_copies = itertools.count()


def _dlopen(path):
    """CDLL of path. The loader hands back a library already loaded under the same name even when
    the file was replaced since (a model recompiled to the same path): then a copy under a
    fresh name is loaded instead."""
    real = os.path.realpath(path)
    st = os.stat(real)
    ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _loaded_lock:
        prev = _loaded.setdefault(real, ident)
        if prev == ident:
            return C.CDLL(real)
        fd, copy = tempfile.mkstemp(prefix="kiln-%d-%d-" % (os.getpid(), next(_copies)), suffix=".so")
        try:
            with os.fdopen(fd, "wb") as f, open(real, "rb") as g:
                shutil.copyfileobj(g, f)
            return C.CDLL(copy)
        finally:
            os.unlink(copy)


def load(path, seed=0, _renamed=None):
    """A model from a shared object that `kiln compile` (or kiln.compile(output=...)) wrote, driven
    through the descriptor it exports; its weights start as the .so's create draws them (from
    the initializers with `seed`, or the weights it embeds)."""
    seed = _check_seed(seed)
    p = _path_arg(path).decode(errors="surrogateescape")
    if not os.path.isfile(p):
        raise KilnError("cannot load %s: no such file" % p)
    try:
        so = _dlopen(p)
    except OSError as e:
        raise KilnError("cannot load %s: %s" % (p, e)) from None
    try:
        api = _abi.Api.in_dll(so, "kiln_model")
    except ValueError:
        raise KilnError("%s is not a Kiln model (no kiln_model symbol)" % p) from None
    return Model(C.pointer(api), so, seed=seed, renamed=_renamed, what=p)


def from_torch(module, example_inputs, train=False, opt=2, seed=0, opset=13, input_names=None, output_names=None):
    """A torch.nn.Module compiled through ONNX: exported by torch.onnx in this process (in training
    mode, so BatchNorm and Dropout stay ops with torch's names; the module is left as it was),
    imported and JIT-compiled. Shapes are example_inputs' (a tensor or a tuple of them). The model
    starts from the module's weights, and the module's state_dict() loads into it. train=True (or
    "LOSS OPT(...)", default "softmax_cross_entropy sgd(lr=0.01)") adds a label input, the loss of
    the first output and that optimizer, as `kiln import --train` does, so the model has a
    train_step. Inputs are named after forward's parameters, outputs y (y0, y1, ... for several),
    unless input_names / output_names say otherwise."""
    try:
        import torch
    except ImportError as e:
        raise ImportError("kiln.from_torch needs torch (apt-get install python3-torch): %s" % e) from None
    if not isinstance(module, torch.nn.Module):
        raise TypeError("from_torch takes a torch.nn.Module, not %s" % type(module).__name__)
    opt, seed = _check_opt(opt), _check_seed(seed)
    args = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in args)
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise TypeError("from_torch: example_inputs is a tensor or a tuple of tensors")
    if train is True:
        train = "softmax_cross_entropy sgd(lr=0.01)"
    elif train is False or train is None:
        train = None
    elif not isinstance(train, str):
        raise TypeError("train is a bool or a string \"LOSS OPT(...)\", not %s" % type(train).__name__)
    ins = list(input_names) if input_names is not None else _forward_names(module, len(args))
    outs = list(output_names) if output_names is not None else _output_names(module, args)
    saved = {k: v.detach().clone() for k, v in module.state_dict().items()}
    with tempfile.TemporaryDirectory(prefix="kiln-") as tmp:
        path = os.path.join(tmp, "%s.onnx" % _model_name(module))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, path, opset_version=opset, input_names=ins, output_names=outs,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        module.load_state_dict(saved)    # tracing in training mode may have moved BatchNorm's statistics
        src = _Source.open(path, None, None, train)
    m = _finish(src, opt, "cpu", None, seed)
    m.load_state_dict(saved, strict=False)   # the module's own values, whatever the trace did
    return m


def _model_name(module):
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in type(module).__name__.lower())
    return name if name and not name[0].isdigit() and name not in _KEYWORDS else "model"


def _forward_names(module, n):
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) >= n:
        return [p.name for p in params[:n]]
    return ["x%d" % i for i in range(n)] if n > 1 else ["x"]


def _output_names(module, args):
    import torch
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            y = module(*args)
    finally:
        module.train(was)
    if isinstance(y, dict):
        return [str(k) for k in y]
    if isinstance(y, (tuple, list)):
        return ["y%d" % i for i in range(len(y))]
    return ["y"]


def _f32(x):
    """x rounded to float32, written as the shortest decimal that reads back as it (0.1, not
    0.10000000149011612)."""
    return float(str(np.float32(x)))
