"""_convert.py — what crosses into C as a tensor: any object NumPy can view (NumPy arrays, torch
CPU tensors, objects with __array_interface__, __array__ or __dlpack__, nested lists), made a
C-contiguous array of the dtype the model declares. A contiguous array of that dtype goes as it
is (no copy); other dtypes convert where NumPy's same_kind rule allows it (float64 -> float32,
int64 -> int32, with a range check for the integers); anything else is a TypeError naming the
input, what was given and what the model wants."""
import numpy as np

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
_I32_MIN, _I32_MAX = -2 ** 31, 2 ** 31 - 1


def shape_text(shape):
    return "[%s]" % ", ".join(str(s) for s in shape)


def dtype_word(dtype):
    """The model's own word for a dtype: f32, i32."""
    return {F32: "f32", I32: "i32"}.get(np.dtype(dtype), str(dtype))


def to_numpy(x, what):
    """x as a NumPy array (a view where one can be had), or TypeError naming `what`."""
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach"):
        if x.device.type != "cpu":
            raise TypeError("%s: a torch tensor on %s; Kiln reads CPU memory (use .cpu())" % (what, x.device))
        x = x.detach()
        if x.is_conj():
            x = x.resolve_conj()
        try:
            return x.numpy()
        except (TypeError, RuntimeError) as e:
            raise TypeError("%s: torch tensor of dtype %s cannot be viewed by NumPy: %s" % (what, x.dtype, e)) from None
    try:
        if hasattr(x, "__array_interface__") or hasattr(x, "__array_struct__") or hasattr(x, "__array__"):
            return np.asarray(x)
        if hasattr(x, "__dlpack__"):
            return np.from_dlpack(x)
        return np.asarray(x)
    except (TypeError, ValueError, RuntimeError, BufferError) as e:
        raise TypeError("%s: cannot view %s as an array: %s" % (what, type(x).__name__, e)) from None


def _int32_range(a, what):
    if a.size and a.dtype.kind in "iu":
        lo, hi = int(a.min()), int(a.max())
        if lo < _I32_MIN or hi > _I32_MAX:
            raise ValueError("%s: values %d..%d do not fit int32, which the model reads" % (what, lo, hi))


def as_dtype(a, want, what, wants_text):
    """a converted to dtype `want` by the same_kind rule, or TypeError."""
    if a.dtype == want:
        return a
    if a.dtype.kind not in "biuf" or not np.can_cast(a.dtype, want, casting="same_kind"):
        raise TypeError("%s: got %s%s; the model wants %s (%s converts to it under NumPy's same_kind rule, %s does not)"
                        % (what, a.dtype, shape_text(a.shape), wants_text, "float64" if want == F32 else "int64", a.dtype))
    if want == I32:
        _int32_range(a, what)
    return a.astype(want)


def as_input(x, want, what, wants_text):
    """x as a C-contiguous, aligned array of dtype `want` (x itself when it already is one)."""
    a = as_dtype(to_numpy(x, what), want, what, wants_text)
    if not (a.flags.c_contiguous and a.flags.aligned) or a.dtype.byteorder == ">":
        a = np.ascontiguousarray(a, dtype=want)
    return a
