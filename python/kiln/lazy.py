"""lazy.py — lazy arrays: the C API's deferred compute (kiln_session, kiln_array_*) from Python.

An op on arrays records it and returns at once with its shape and dtype known; reading an
array (.numpy(), np.asarray, print) compiles the pending graph it needs with the same passes
and code generator as a model, runs it and keeps the value. Compiled graphs are cached by
their structure, so a loop that builds the same expression each time compiles once.

Every op of the op table is a function here (kiln.relu, kiln.convolution, ...), made from the
table the library describes (kiln_op_info), so none is missing or out of step: tensor inputs
are positional (or named by the op's input names), attributes are keywords written as the
language writes them (kernel=(3, 3), pool_type="max", no_bias=True). All arrays live in one
session per process (kiln_session: calls on it are serialised by its lock)."""
import builtins
import ctypes as C
import math
import os
import threading
import weakref

import numpy as np

from ._convert import F32, I32, to_numpy
from ._lib import KilnError, check, lib

__all__ = ["Array", "array", "zeros", "ones", "uniform", "normal", "grad", "export", "compute", "seed"]

_DT = {0: F32, 1: I32}
_CODE = {F32: 0, I32: 1}


class _Session:
    """The process's kiln_session, made on first use and freed after the last array."""
    _lock = threading.Lock()
    _current = None

    def __init__(self):
        h = C.c_void_p()
        check(lib.kiln_session_new(C.byref(h)))
        self.h = h.value
        self._fin = weakref.finalize(self, lib.kiln_session_free, self.h)

    @classmethod
    def get(cls):
        with cls._lock:
            if cls._current is None:
                cls._current = cls()
            return cls._current


def seed(value):
    """The seed of the random draws inside computations (dropout's masks in kiln.grad), as
    kiln_session_seed sets it; kiln.grad call k after it draws what train_step's step k draws in
    a model created with that seed."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2 ** 64:
        raise ValueError("seed is an unsigned 64-bit integer, not %r" % (value,))
    check(lib.kiln_session_seed(_Session.get().h, int(value)))


def _free(h, session):
    lib.kiln_array_free(h)


class Array:
    """A lazy array: .shape and .dtype at once, the value when read (.numpy(), np.asarray(a),
    print(a), torch.from_dlpack(a))."""
    __slots__ = ("_h", "_s", "shape", "dtype", "_fin", "__weakref__")
    __array_ufunc__ = None          # NumPy operators defer to ours: ndarray + Array is an Array
    __array_priority__ = 1000

    def __init__(self, handle, session):
        self._h, self._s = handle, session
        self._fin = weakref.finalize(self, _free, handle, session)
        t, rank = C.c_int(), C.c_int()
        dims = (C.c_int64 * 6)()
        check(lib.kiln_array_shape(handle, C.byref(t), C.byref(rank), dims))
        self.shape = tuple(dims[i] for i in range(rank.value))
        self.dtype = _DT[t.value]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a rank-0 array")
        return self.shape[0]

    @property
    def is_lazy(self):
        """True until the array is computed."""
        v = C.c_int()
        check(lib.kiln_array_is_lazy(self._h, C.byref(v)))
        return bool(v.value)

    def numpy(self):
        """The value as a fresh ndarray (computing it first if it is lazy)."""
        out = np.empty(self.shape, self.dtype)
        check(lib.kiln_array_read(self._h, out.ctypes.data, out.nbytes))
        return out

    def __array__(self, dtype=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __dlpack__(self, stream=None):
        return self.numpy().__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)               # kDLCPU

    def __repr__(self):
        return "kiln." + repr(self.numpy())

    def __str__(self):
        return str(self.numpy())

    def __float__(self):
        return float(self.numpy())

    def __int__(self):
        return int(self.numpy())

    def __bool__(self):
        return bool(self.numpy())

    @property
    def T(self):
        """The axes reversed (transpose)."""
        return _op("transpose", [self], {"axes": tuple(range(self.ndim - 1, -1, -1))}) if self.ndim > 1 else self

    def __neg__(self):
        return _op("neg", [self], {})

    def __pos__(self):
        return self

    def __abs__(self):
        return _op("abs", [self], {})

    def __add__(self, o):
        return _binary("add", self, o)

    def __radd__(self, o):
        return _binary("add", o, self)

    def __sub__(self, o):
        return _binary("sub", self, o)

    def __rsub__(self, o):
        return _binary("sub", o, self)

    def __mul__(self, o):
        return _binary("mul", self, o)

    def __rmul__(self, o):
        return _binary("mul", o, self)

    def __truediv__(self, o):
        return _binary("div", self, o)

    def __rtruediv__(self, o):
        return _binary("div", o, self)

    def __pow__(self, o):
        return _binary("pow", self, o)

    def __rpow__(self, o):
        return _binary("pow", o, self)

    def __matmul__(self, o):
        return _binary("matmul", self, o, numbers=False)

    def __rmatmul__(self, o):
        return _binary("matmul", o, self, numbers=False)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _op("reshape", [self], {"shape": tuple(shape)})

    def sum(self, axis=None, keepdims=False):
        return _reduce("sum", self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _reduce("mean", self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _reduce("max", self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _reduce("min", self, axis, keepdims)


def _reduce(op, x, axis, keepdims):
    attrs = {"keepdims": bool(keepdims)}
    if axis is not None:
        attrs["axis"] = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    return _op(op, [x], attrs)


# ---- making arrays ----

def _shape_arg(shape, what):
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError("%s: shape is an int or a tuple of ints, not %r" % (what, shape)) from None
    if len(shape) > 6 or builtins.any(d < 1 for d in shape):
        raise ValueError("%s: shape %r: rank 0..6, every size at least 1" % (what, shape))
    return shape, (C.c_int64 * builtins.max(len(shape), 1))(*shape)


def _dtype_arg(dtype, what):
    if dtype is None:
        return F32
    d = np.dtype(dtype)
    if d not in _CODE:
        raise TypeError("%s: dtype is float32 or int32, not %s" % (what, d))
    return d


def array(x, dtype=None):
    """An array holding a copy of x (anything NumPy can view): floats become float32, integers
    int32 (by the same_kind rule, integers checked to fit), unless dtype says which."""
    if isinstance(x, Array):
        return x
    a = to_numpy(x, "kiln.array")
    if dtype is not None:
        want = _dtype_arg(dtype, "kiln.array")
    elif a.dtype.kind in "iu":
        want = I32
    elif a.dtype.kind in "fb":
        want = F32
    else:
        raise TypeError("kiln.array: got %s; Kiln holds float32 and int32" % a.dtype)
    if a.dtype != want:
        if not np.can_cast(a.dtype, want, casting="same_kind"):
            raise TypeError("kiln.array: %s does not convert to %s under NumPy's same_kind rule" % (a.dtype, want))
        if want == I32 and a.size and a.dtype.kind in "iu" and (int(a.min()) < -2 ** 31 or int(a.max()) >= 2 ** 31):
            raise ValueError("kiln.array: values do not fit int32")
    a = np.ascontiguousarray(a, dtype=want)
    if a.ndim > 6 or 0 in a.shape:
        raise ValueError("kiln.array: shape %r: rank 0..6 and no empty axis" % (a.shape,))
    s = _Session.get()
    h = C.c_void_p()
    dims = (C.c_int64 * builtins.max(a.ndim, 1))(*a.shape)
    check(lib.kiln_array_from_data(s.h, _CODE[want], a.ndim, dims, a.ctypes.data, C.byref(h)))
    return Array(h.value, s)


def _filled(fn, shape, dtype, what):
    shape, dims = _shape_arg(shape, what)
    d = _dtype_arg(dtype, what)
    s = _Session.get()
    h = C.c_void_p()
    check(fn(s.h, _CODE[d], len(shape), dims, C.byref(h)))
    return Array(h.value, s)


def zeros(shape, dtype=None):
    """An array of zeros (float32 unless dtype=int32)."""
    return _filled(lib.kiln_array_zeros, shape, dtype, "kiln.zeros")


def ones(shape, dtype=None):
    """An array of ones (float32 unless dtype=int32)."""
    return _filled(lib.kiln_array_ones, shape, dtype, "kiln.ones")


def _random(fn, shape, a, b, seed_, what):
    shape, dims = _shape_arg(shape, what)
    if isinstance(seed_, bool) or not isinstance(seed_, (int, np.integer)) or not 0 <= seed_ < 2 ** 64:
        raise ValueError("%s: seed is an unsigned 64-bit integer, not %r" % (what, seed_))
    s = _Session.get()
    h = C.c_void_p()
    check(fn(s.h, len(shape), dims, float(a), float(b), int(seed_), C.byref(h)))
    return Array(h.value, s)


def uniform(shape, low=0.0, high=1.0, seed=0):
    """float32 drawn uniformly from [low, high) by the runtime's Philox: element i is what a model
    created with `seed` draws for its first tensor with the same initializer."""
    return _random(lib.kiln_array_uniform, shape, low, high, seed, "kiln.uniform")


def normal(shape, mean=0.0, std=1.0, seed=0):
    """float32 drawn from N(mean, std^2) by the runtime's Philox (as uniform)."""
    return _random(lib.kiln_array_normal, shape, mean, std, seed, "kiln.normal")


def _number(v):
    if not math.isfinite(v) or builtins.abs(v) > 3.4028234663852886e38:
        raise ValueError("%r is not a finite float32" % (v,))
    s = _Session.get()
    h = C.c_void_p()
    check(lib.kiln_array_number(s.h, float(v), C.byref(h)))
    return Array(h.value, s)


def _operand(x, numbers=True):
    if isinstance(x, Array):
        return x
    if numbers and isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        return _number(x)
    return array(x)


def _binary(op, a, b, numbers=True):
    if not isinstance(a, Array) and not isinstance(b, Array):
        return NotImplemented
    try:
        return _op(op, [_operand(a, numbers), _operand(b, numbers)], {})
    except TypeError:
        return NotImplemented


# ---- ops ----

def _attr_text(name, v):
    """An attribute value as the language writes it."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            raise ValueError("attribute %s: %r is not finite" % (name, v))
        return repr(float(v))
    if isinstance(v, str):
        if '"' in v or "\\" in v or "\n" in v:
            raise ValueError("attribute %s: %r holds a quote, backslash or newline" % (name, v))
        return '"%s"' % v
    if isinstance(v, (tuple, list)):
        if not v or not builtins.all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
            raise TypeError("attribute %s: a tuple of ints, not %r" % (name, v))
        return "(%s)" % ", ".join(str(int(x)) for x in v) if len(v) > 1 else "(%d,)" % int(v[0])
    raise TypeError("attribute %s: %r is not a number, bool, string or tuple of ints" % (name, v))


def _op(op, inputs, attrs):
    s = None
    for x in inputs:
        if x._s is not (s or x._s):
            raise KilnError("%s: arrays of different sessions" % op)
        s = x._s
    s = s or _Session.get()
    a = C.c_void_p()
    check(lib.kiln_attrs_new(C.byref(a)))
    try:
        for k, v in attrs.items():
            check(lib.kiln_attrs_parse(a, k.encode(), _attr_text(k, v).encode()))
        ins = (C.c_void_p * builtins.max(len(inputs), 1))(*[x._h for x in inputs])
        h = C.c_void_p()
        check(lib.kiln_array_op(s.h, op.encode(), len(inputs), ins, a, C.byref(h)))
    finally:
        lib.kiln_attrs_free(a)
    return Array(h.value, s)


def _describe_ops():
    """{op name: (inputs [(name, optional, aux)], attrs [(name, required)], doc, variadic)}."""
    n = C.c_int()
    check(lib.kiln_op_count(C.byref(n)))
    ops = {}
    for i in range(n.value):
        name, doc = C.c_char_p(), C.c_char_p()
        nin, nat, var = C.c_int(), C.c_int(), C.c_int()
        check(lib.kiln_op_info(i, C.byref(name), C.byref(doc), C.byref(nin), C.byref(nat), C.byref(var)))
        ins, ats = [], []
        for k in range(nin.value):
            nm, opt, aux = C.c_char_p(), C.c_int(), C.c_int()
            check(lib.kiln_op_input(i, k, C.byref(nm), C.byref(opt), C.byref(aux)))
            ins.append((nm.value.decode(), bool(opt.value), bool(aux.value)))
        for k in range(nat.value):
            nm, req = C.c_char_p(), C.c_int()
            check(lib.kiln_op_attr(i, k, C.byref(nm), C.byref(req)))
            ats.append((nm.value.decode(), bool(req.value)))
        ops[name.value.decode()] = (ins, ats, doc.value.decode(), bool(var.value))
    return ops


def _make_op(name, ins, ats, doc, variadic):
    in_names = [i[0] for i in ins]
    attr_names = {a[0] for a in ats}

    def f(*args, **kw):
        args = list(args)
        if not variadic:
            for k in list(kw):
                if k in in_names and k not in attr_names:
                    pos = in_names.index(k)
                    if pos < len(args):
                        raise TypeError("kiln.%s: input %s given twice" % (name, k))
                    args += [None] * (pos + 1 - len(args))
                    args[pos] = kw.pop(k)
            while args and args[-1] is None:      # an optional input left out: bias=None
                args.pop()
            if len(args) > len(in_names):
                raise TypeError("kiln.%s takes at most %d inputs (%s); %d were given" % (
                    name, len(in_names), ", ".join(in_names), len(args)))
            if builtins.any(a is None for a in args):
                raise TypeError("kiln.%s: inputs %s: only trailing inputs may be left out" % (name, ", ".join(in_names)))
        unknown = [k for k in kw if k not in attr_names]
        if unknown:
            raise TypeError("kiln.%s has no input or attribute %s (inputs: %s; attributes: %s)" % (
                name, ", ".join(unknown), ", ".join(in_names) or "none", ", ".join(a[0] for a in ats) or "none"))
        return _op(name, [_operand(a) for a in args], kw)

    sig_in = ", ".join(("*%s" % i[0]) if variadic else ("%s=None" % i[0] if i[1] else i[0]) for i in ins)
    sig_at = ", ".join(a[0] if a[1] else "%s=..." % a[0] for a in ats)
    f.__name__ = f.__qualname__ = name
    f.__module__ = "kiln"
    aux = [i[0] for i in ins if i[2]]
    f.__doc__ = "kiln.%s(%s%s%s) -> Array (lazy). As %s.%s" % (
        name, sig_in, "; " if sig_in and sig_at else "", sig_at, doc or "the op table's row",
        (" The aux states (%s) are arrays passed as the last inputs." % ", ".join(aux)) if aux else "")
    return f


OPS = _describe_ops()
# The package puts these in its namespace (kiln.relu); kept out of this module's own, where
# max, min, abs, sum, pow and slice would hide the builtins.
op_functions = {name: _make_op(name, *desc) for name, desc in OPS.items()}


# ---- gradients, computing, export ----

def _arrays(xs, what):
    if isinstance(xs, Array):
        return [xs], True
    xs = list(xs)
    if not builtins.all(isinstance(x, Array) for x in xs):
        raise TypeError("%s: expected kiln arrays" % what)
    return xs, False


def grad(loss, arrays):
    """Gradients of the f32 scalar `loss` with respect to each of `arrays` (arrays made from data:
    kiln.array, zeros, uniform, ...), as lazy arrays of their shapes, derived by the backward pass
    train_step uses; one compile computes them all when one is read."""
    if not isinstance(loss, Array):
        raise TypeError("kiln.grad: loss is a kiln array, not %s" % type(loss).__name__)
    wrt, single = _arrays(arrays, "kiln.grad")
    n = len(wrt)
    outs = (C.c_void_p * builtins.max(n, 1))()
    check(lib.kiln_grad(loss._h, n, (C.c_void_p * builtins.max(n, 1))(*[x._h for x in wrt]), outs))
    res = [Array(outs[i], loss._s) for i in range(n)]
    return res[0] if single else res


def compute(*arrays):
    """Computes the arrays together (one compile for all of them); returns nothing."""
    xs = [x for x in arrays if isinstance(x, Array)]
    if len(xs) != len(arrays):
        raise TypeError("kiln.compute takes kiln arrays")
    if xs:
        check(lib.kiln_array_eval(xs[0]._s.h, len(xs), (C.c_void_p * len(xs))(*[x._h for x in xs])))


def _named(xs, prefix, what):
    if xs is None:
        return [], []
    if isinstance(xs, Array):
        xs = [xs]
    if isinstance(xs, dict):
        names, arrs = list(xs.keys()), list(xs.values())
    else:
        arrs = list(xs)
        names = [prefix if len(arrs) == 1 and prefix == "y" else "%s%d" % (prefix, i) for i in range(len(arrs))]
    if not builtins.all(isinstance(a, Array) for a in arrs):
        raise TypeError("kiln.export: %s are kiln arrays" % what)
    return names, arrs


def export(path, outputs, inputs=None, weights=None, name=None):
    """Writes the recorded graph that computes `outputs` as a .kiln model at path and its weights
    (every array made from data that is not an input) as safetensors (path with .safetensors,
    or `weights`): kiln.compile(path) with those weights computes what the arrays do. outputs and
    inputs are an array, a list (named y / y0.., x0..) or a dict {name: array}."""
    p = os.fspath(path)
    w = os.fspath(weights) if weights is not None else (p[:-5] if p.endswith(".kiln") else p) + ".safetensors"
    model = name or "".join(c if c.isalnum() or c == "_" else "_" for c in os.path.basename(p).rsplit(".", 1)[0]) or "model"
    onames, outs = _named(outputs, "y", "outputs")
    inames, ins = _named(inputs, "x", "inputs")
    if not outs:
        raise ValueError("kiln.export: no outputs")
    s = outs[0]._s

    def carr(xs):
        return (C.c_void_p * builtins.max(len(xs), 1))(*[x._h for x in xs])

    def cstr(xs):
        return (C.c_char_p * builtins.max(len(xs), 1))(*[x.encode() for x in xs])
    check(lib.kiln_export(s.h, os.fsencode(p), os.fsencode(w), model.encode(), len(outs), carr(outs), cstr(onames),
                          len(ins), carr(ins), cstr(inames)))
    return w
