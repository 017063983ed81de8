"""_lib.py — finding and loading libkiln.so, the ctypes prototypes of the C API functions the
package calls (include/kiln.h), and KilnError.

Where the library is looked for, first found wins:
  1. $KILN_LIBRARY: the file itself, or a folder holding libkiln.so (only there when set);
  2. libkiln.so beside this package's files (an install may put it there);
  3. the path the install wrote into _installed.py (cmake --install: <prefix>/<libdir>);
  4. run from the repository (python/kiln/ under a Kiln checkout): build/api/libkiln.so, then
     every other build*/api/libkiln.so, the most recently built first, skipping sanitizer
     builds (their runtimes must be loaded before Python starts);
  5. the dynamic loader's own search path (libkiln.so installed system-wide).
A library that loads but lacks a function the package calls (built before it) is passed over
for the next one; when none will do, the ImportError lists each tried and why.
"""
import ctypes
import glob
import os

__all__ = ["KilnError", "lib", "library_path", "check", "last_error", "mpi_library"]


class KilnError(RuntimeError):
    """A failure reported by Kiln; the message is the library's own diagnostic (for model text:
    file:line:col, the source line and a caret)."""


_HERE = os.path.dirname(os.path.abspath(__file__))
_SANITIZED = ("KILN_SANITIZE:BOOL=ON", "KILN_TSAN:BOOL=ON", "KILN_FUZZ:BOOL=ON")


def _sanitized(build_dir):
    """Whether the build in build_dir was configured with a sanitizer (its CMakeCache says)."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
            cache = f.read()
    except OSError:
        return False
    return any(flag in cache for flag in _SANITIZED)


def _repository_builds():
    """libkiln.so of the repository's build folders when this package sits in python/kiln of a
    Kiln checkout: build/ first, then the other build*/ folders, newest library first."""
    root = os.path.dirname(os.path.dirname(_HERE))
    if not (os.path.isfile(os.path.join(root, "include", "kiln.h")) and os.path.isdir(os.path.join(root, "api"))):
        return []
    first = os.path.join(root, "build", "api", "libkiln.so")
    others = [p for p in glob.glob(os.path.join(root, "build*", "api", "libkiln.so")) if p != first]
    others.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    found = [first] if os.path.isfile(first) else []
    return [p for p in found + others if not _sanitized(os.path.dirname(os.path.dirname(p)))]


def _installed():
    try:
        from . import _installed as inst   # written by cmake --install
    except ImportError:
        return []
    return [os.path.normpath(os.path.join(_HERE, inst.LIBRARY))]


def _candidates():
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return [os.path.join(env, "libkiln.so") if os.path.isdir(env) else env]
    return [os.path.join(_HERE, "libkiln.so")] + _installed() + _repository_builds() + ["libkiln.so"]


_c = ctypes
_p = _c.c_void_p
_sp = _c.c_char_p
_ip = _c.POINTER(_c.c_int)
_i64p = _c.POINTER(_c.c_int64)
_pp = _c.POINTER(_p)
_spp = _c.POINTER(_sp)
# Every function of include/kiln.h the package calls: (restype, argtypes).
_PROTOS = {
    "kiln_last_error": (_sp, []),
    "kiln_version": (_sp, []),
    "kiln_free": (None, [_p]),
    "kiln_source_file": (_c.c_int, [_sp, _sp, _c.c_int, _spp, _i64p, _i64p, _sp, _pp]),
    "kiln_source_text": (_c.c_int, [_sp, _sp, _sp, _c.c_int, _spp, _i64p, _i64p, _pp]),
    "kiln_source_free": (None, [_p]),
    "kiln_source_print": (_c.c_int, [_p, _pp]),
    "kiln_source_nrenamed": (_c.c_int, [_p, _ip]),
    "kiln_source_renamed": (_c.c_int, [_p, _c.c_int, _spp, _spp]),
    "kiln_source_jit": (_c.c_int, [_p, _c.c_int, _pp]),
    "kiln_source_compile": (_c.c_int, [_p, _sp, _sp, _c.c_int]),
    "kiln_op_count": (_c.c_int, [_ip]),
    "kiln_op_info": (_c.c_int, [_c.c_int, _spp, _spp, _ip, _ip, _ip]),
    "kiln_op_input": (_c.c_int, [_c.c_int, _c.c_int, _spp, _ip, _ip]),
    "kiln_op_attr": (_c.c_int, [_c.c_int, _c.c_int, _spp, _ip]),
    # lazy arrays (lazy.py)
    "kiln_session_new": (_c.c_int, [_pp]),
    "kiln_session_free": (None, [_p]),
    "kiln_session_seed": (_c.c_int, [_p, _c.c_uint64]),
    "kiln_attrs_new": (_c.c_int, [_pp]),
    "kiln_attrs_free": (None, [_p]),
    "kiln_attrs_parse": (_c.c_int, [_p, _sp, _sp]),
    "kiln_array_number": (_c.c_int, [_p, _c.c_double, _pp]),
    "kiln_array_from_data": (_c.c_int, [_p, _c.c_int, _c.c_int, _i64p, _p, _pp]),
    "kiln_array_zeros": (_c.c_int, [_p, _c.c_int, _c.c_int, _i64p, _pp]),
    "kiln_array_ones": (_c.c_int, [_p, _c.c_int, _c.c_int, _i64p, _pp]),
    "kiln_array_uniform": (_c.c_int, [_p, _c.c_int, _i64p, _c.c_float, _c.c_float, _c.c_uint64, _pp]),
    "kiln_array_normal": (_c.c_int, [_p, _c.c_int, _i64p, _c.c_float, _c.c_float, _c.c_uint64, _pp]),
    "kiln_array_op": (_c.c_int, [_p, _sp, _c.c_int, _pp, _p, _pp]),
    "kiln_array_free": (None, [_p]),
    "kiln_array_shape": (_c.c_int, [_p, _ip, _ip, _i64p]),
    "kiln_array_is_lazy": (_c.c_int, [_p, _ip]),
    "kiln_array_eval": (_c.c_int, [_p, _c.c_int, _pp]),
    "kiln_array_read": (_c.c_int, [_p, _p, _c.c_size_t]),
    "kiln_grad": (_c.c_int, [_p, _c.c_int, _pp, _pp]),
    "kiln_export": (_c.c_int, [_p, _sp, _sp, _sp, _c.c_int, _pp, _spp, _c.c_int, _pp, _spp]),
}


def _load():
    """The first candidate that loads and has every function this package calls."""
    tried = []
    for path in _candidates():
        if path != "libkiln.so" and not os.path.isfile(path):
            tried.append("%s (not there)" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        missing = [name for name in _PROTOS if not hasattr(lib, name)]
        if not missing:
            return lib, path
        tried.append("%s (older than this package: it lacks %s; rebuild it)" % (path, missing[0]))
    raise ImportError("kiln: cannot find libkiln.so; build Kiln (cmake --build build) or set KILN_LIBRARY to its path. "
                      "Tried: " + "; ".join(tried))


lib, library_path = _load()
for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args


def last_error():
    """This thread's last failure message from the library."""
    return lib.kiln_last_error().decode("utf-8", "replace")


def check(rc):
    """Raises KilnError with the library's message when rc is nonzero."""
    if rc:
        raise KilnError(last_error() or "kiln: the call failed (no message)")


_mpi = None


def mpi_library():
    """libkiln_mpi (Model.set_comm): $KILN_MPI_LIBRARY, beside libkiln, or this build tree's
    mpi/ beside its api/; loaded once, after mpi4py has loaded MPI."""
    global _mpi
    if _mpi is None:
        here = os.path.dirname(library_path)
        cands = [os.environ.get("KILN_MPI_LIBRARY", ""), os.path.join(here, "libkiln_mpi.so"),
                 os.path.join(os.path.dirname(here), "mpi", "libkiln_mpi.so"), "libkiln_mpi.so"]
        errors = []
        for c in [c for c in cands if c]:
            try:
                _mpi = _c.CDLL(c, mode=_c.RTLD_GLOBAL)
                break
            except OSError as e:
                errors.append(str(e))
        if _mpi is None:
            raise KilnError("libkiln_mpi is not found (built with Kiln when Open MPI is installed): " + "; ".join(errors))
        _mpi.kiln_mpi_comm_init.restype = _c.c_int
        _mpi.kiln_mpi_comm_init.argtypes = [_p, _p, _c.c_double]
    return _mpi
