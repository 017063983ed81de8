"""The C functions the package added to include/kiln.h (api/api_py.c), called directly through
ctypes with bad arguments: NULLs, indices out of range, options that do not apply. Each must
fail with a message (kiln_last_error), never crash."""
import ctypes as C
import os

import pytest

import kiln
from kiln._lib import last_error, lib
from conftest import EXAMPLES

MLP = os.path.join(EXAMPLES, "mlp.kiln").encode()
TEXT = b"dim n = 4\nmodel m {\n  input x : f32[n]\n  y = relu(x)\n  output y\n}\n"


def fails(rc, match):
    assert rc != 0
    assert match in last_error(), last_error()


def source(path=MLP):
    h = C.c_void_p()
    assert lib.kiln_source_file(path, None, 0, None, None, None, None, C.byref(h)) == 0, last_error()
    return h


def test_source_nulls():
    h = C.c_void_p()
    fails(lib.kiln_source_file(None, None, 0, None, None, None, None, C.byref(h)), "path is NULL")
    fails(lib.kiln_source_file(MLP, None, 0, None, None, None, None, None), "out is NULL")
    fails(lib.kiln_source_text(None, None, None, 0, None, None, None, C.byref(h)), "text is NULL")
    fails(lib.kiln_source_file(MLP, None, 1, None, None, None, None, C.byref(h)), "dim_names or values is NULL")
    fails(lib.kiln_source_file(MLP, None, -1, None, None, None, None, C.byref(h)), "ndims is -1")
    names = (C.c_char_p * 1)(b"batch")
    fails(lib.kiln_source_file(MLP, None, 1, names, (C.c_int64 * 1)(0), None, None, C.byref(h)), "a dim is 1..2^40")
    fails(lib.kiln_source_file(MLP, None, 1, names, (C.c_int64 * 1)(4), (C.c_int64 * 1)(5), None, C.byref(h)),
          "1 <= LO <= HI")
    fails(lib.kiln_source_file(MLP, None, 1, (C.c_char_p * 1)(b"no name"), (C.c_int64 * 1)(4), None, None, C.byref(h)),
          "is not a name")
    fails(lib.kiln_source_file(MLP, None, 0, None, None, None, b"softmax_cross_entropy sgd(lr=0.1)", C.byref(h)),
          "train applies to .onnx files")
    fails(lib.kiln_source_file(MLP, b"other", 0, None, None, None, None, C.byref(h)), "has no model named other")
    assert h.value is None
    lib.kiln_source_free(None)


def test_source_calls():
    s = source()
    p, n = C.c_void_p(), C.c_int()
    fails(lib.kiln_source_print(None, C.byref(p)), "source or text is NULL")
    fails(lib.kiln_source_print(s, None), "source or text is NULL")
    assert lib.kiln_source_print(s, C.byref(p)) == 0 and C.string_at(p.value).startswith(b"model mlp {\n  input image : f32[64, 784]")
    lib.kiln_free(p)
    fails(lib.kiln_source_nrenamed(None, C.byref(n)), "source or n is NULL")
    assert lib.kiln_source_nrenamed(s, C.byref(n)) == 0 and n.value == 0
    fails(lib.kiln_source_renamed(s, 0, None, None), "pair 0 of 0")
    fails(lib.kiln_source_renamed(None, 0, None, None), "source is NULL")
    api = C.c_void_p()
    fails(lib.kiln_source_jit(None, 2, C.byref(api)), "source or api is NULL")
    fails(lib.kiln_source_jit(s, 2, None), "source or api is NULL")
    fails(lib.kiln_source_jit(s, 7, C.byref(api)), "opt_level 7 is not 0..3")
    fails(lib.kiln_source_compile(None, b"x.so", None, 2), "source or path is NULL")
    fails(lib.kiln_source_compile(s, None, None, 2), "source or path is NULL")
    fails(lib.kiln_source_compile(s, b"x.so", b"tpu", 2), "target 'tpu' is not cpu or cuda")
    fails(lib.kiln_source_compile(s, b"x.so", None, -1), "opt_level -1")
    fails(lib.kiln_source_compile(s, b"/nonexistent/dir/x.so", None, 0), "/nonexistent/dir/x.so")
    assert lib.kiln_source_jit(s, 0, C.byref(api)) == 0 and api.value
    assert lib.kiln_source_jit(s, 0, C.byref(api)) == 0      # again: a second build, both freed with s
    lib.kiln_source_free(s)


def test_op_table_calls():
    n, name, nin = C.c_int(), C.c_char_p(), C.c_int()
    fails(lib.kiln_op_count(None), "n is NULL")
    assert lib.kiln_op_count(C.byref(n)) == 0 and n.value == len(kiln.lazy.OPS)
    fails(lib.kiln_op_info(n.value, C.byref(name), None, None, None, None), "op %d of %d" % (n.value, n.value))
    fails(lib.kiln_op_info(-1, None, None, None, None, None), "op -1")
    assert lib.kiln_op_info(0, C.byref(name), None, C.byref(nin), None, None) == 0 and name.value == b"add"
    fails(lib.kiln_op_input(0, nin.value, C.byref(name), None, None), "add: input 2 of 2")
    fails(lib.kiln_op_attr(0, 0, C.byref(name), None), "add: attribute 0 of 0")


def test_array_number():
    s, a = C.c_void_p(), C.c_void_p()
    assert lib.kiln_session_new(C.byref(s)) == 0
    fails(lib.kiln_array_number(None, 1.0, C.byref(a)), "session is NULL")
    fails(lib.kiln_array_number(s, 1.0, None), "out is NULL")
    fails(lib.kiln_array_number(s, float("nan"), C.byref(a)), "not a finite f32")
    fails(lib.kiln_array_number(s, 1e39, C.byref(a)), "not a finite f32")
    assert lib.kiln_array_number(s, 2.5, C.byref(a)) == 0
    lib.kiln_session_free(s)


def test_onnx_source_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not protobuf at all")
    with pytest.raises(kiln.KilnError, match="bad.onnx"):
        kiln.compile(bad)
    with pytest.raises(kiln.KilnError, match="model must be NULL"):
        kiln.compile(bad, model="x")
