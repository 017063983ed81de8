"""_abi.py — ctypes mirrors of runtime/rt_model.h: the descriptor (rt_model_desc) and the entry
points (rt_model_api) that every generated .so exports under the name `kiln_model`, and that
kiln_source_jit returns for a model JIT-compiled in this process.

The mirror is of ABI RT_MODEL_ABI = "kiln-model-9"; a library or .so of another ABI is refused
with a message, so a change of rt_model.h is caught here rather than read wrongly. Only what
the package reads is spelled out; the steps stay opaque pointers.
"""
import ctypes as C

ABI = "kiln-model-9"
MAX_RANK = 6          # K_MAX_RANK
MAX_BDIMS = 8         # K_MAX_BDIMS
ROLE_INPUT, ROLE_PARAM, ROLE_AUX, ROLE_STATE, ROLE_CONST, ROLE_VALUE = range(6)
DV_TENSOR = 0
TARGET_CPU, TARGET_CUDA = 0, 1
F32, I32 = 0, 1


class Shape(C.Structure):           # k_shape
    _fields_ = [("rank", C.c_int32), ("d", C.c_int64 * MAX_RANK)]


class TensorInfo(C.Structure):      # rt_tensor_info
    _fields_ = [("name", C.c_char_p), ("role", C.c_int32), ("dtype", C.c_int32), ("shape", Shape),
                ("init", C.c_int32), ("init_a", C.c_float), ("init_b", C.c_float), ("data", C.c_void_p),
                ("ctr", C.c_int32)]


class Program(C.Structure):         # rt_program
    _fields_ = [("nsteps", C.c_int32), ("steps", C.c_void_p), ("arena_bytes", C.c_int64),
                ("offset", C.POINTER(C.c_int64)), ("ninputs", C.c_int32), ("inputs", C.POINTER(C.c_int32)),
                ("noutputs", C.c_int32), ("outputs", C.POINTER(C.c_int32)), ("is_train", C.c_int32),
                ("npatches", C.c_int32), ("patches", C.c_void_p), ("dims_used", C.c_uint32)]


class Dim(C.Structure):             # rt_dim
    _fields_ = [("name", C.c_char_p), ("lo", C.c_int64), ("hi", C.c_int64)]


class DimVal(C.Structure):          # k_dimval: a * prod(extent[d] for bit d of mask) + b
    _fields_ = [("mask", C.c_uint32), ("a", C.c_int64), ("b", C.c_int64)]


class DimPatch(C.Structure):        # rt_dimpatch
    _fields_ = [("kind", C.c_int32), ("index", C.c_int32), ("slot", C.c_int32), ("axis", C.c_int32), ("v", DimVal)]


class SgdParam(C.Structure):
    _fields_ = [("momentum", C.c_float), ("wd", C.c_float), ("nesterov", C.c_int32)]


class AdamParam(C.Structure):
    _fields_ = [("beta1", C.c_float), ("beta2", C.c_float), ("eps", C.c_float), ("wd", C.c_float)]


class Ints(C.Structure):            # k_ints
    _fields_ = [("n", C.c_int32), ("v", C.c_int64 * MAX_RANK)]


class Schedule(C.Structure):        # k_schedule
    _fields_ = [("kind", C.c_int32), ("step_size", C.c_int64), ("milestones", Ints), ("total", C.c_int64),
                ("warmup", C.c_int64), ("gamma", C.c_float), ("min_lr", C.c_float), ("pct_start", C.c_float),
                ("div_factor", C.c_float), ("final_div_factor", C.c_float)]


class Desc(C.Structure):            # rt_model_desc
    _fields_ = [("abi", C.c_char_p), ("name", C.c_char_p), ("ntensors", C.c_int32),
                ("tensors", C.POINTER(TensorInfo)), ("predict", Program), ("has_train", C.c_int32),
                ("train", Program), ("optim", C.c_int32), ("lr", C.c_float), ("sgd", SgdParam), ("adam", AdamParam),
                ("sched", Schedule), ("clip_norm", C.c_float), ("target", C.c_int32), ("gpu_module", C.c_char_p), ("gpu_lib_module", C.c_char_p), ("ndims", C.c_int32), ("dims", C.POINTER(Dim)),
                ("ntensor_patches", C.c_int32), ("tensor_patches", C.POINTER(DimPatch))]


_vp, _i = C.c_void_p, C.c_int
_ptrs = C.POINTER(C.c_void_p)
_ext = C.POINTER(C.c_int64)
# CFUNCTYPE, not PYFUNCTYPE: ctypes releases the GIL for the length of each call.
CREATE = C.CFUNCTYPE(_vp, C.POINTER(Desc), C.c_uint64)
DESTROY = C.CFUNCTYPE(None, _vp)
PATH_FN = C.CFUNCTYPE(_i, _vp, C.c_char_p)
PREDICT = C.CFUNCTYPE(_i, _vp, _ptrs, _ptrs)
TRAIN = C.CFUNCTYPE(_i, _vp, _ptrs, C.POINTER(C.c_float))
SET_LR = C.CFUNCTYPE(_i, _vp, C.c_float)
ERROR = C.CFUNCTYPE(C.c_char_p, _vp)
PREDICT_AT = C.CFUNCTYPE(_i, _vp, _ext, _ptrs, _ptrs)
TRAIN_AT = C.CFUNCTYPE(_i, _vp, _ext, _ptrs, C.POINTER(C.c_float))
GET_LR = C.CFUNCTYPE(C.c_float, _vp)
SAVE_STATE = C.CFUNCTYPE(_i, _vp, C.c_char_p)
SET_COMM = C.CFUNCTYPE(_i, _vp, C.c_void_p)


class Comm(C.Structure):            # kiln_comm (include/kiln_comm.h); filled by libkiln_mpi
    _fields_ = [("rank", C.c_int), ("size", C.c_int), ("ctx", C.c_void_p), ("start", C.c_void_p), ("wait", C.c_void_p),
                ("bucket_bytes", C.c_int64), ("progress", C.c_void_p), ("failed", C.c_void_p)]


class Api(C.Structure):             # rt_model_api, the exported `kiln_model`
    _fields_ = [("abi", C.c_char_p), ("desc", C.POINTER(Desc)), ("create", CREATE), ("destroy", DESTROY),
                ("load", PATH_FN), ("save", PATH_FN), ("predict", PREDICT), ("train_step", TRAIN), ("set_lr", SET_LR),
                ("error", ERROR), ("predict_device", C.c_void_p), ("train_step_device", C.c_void_p),
                ("predict_at", PREDICT_AT), ("train_step_at", TRAIN_AT), ("lr", GET_LR),
                ("save_state", SAVE_STATE), ("load_state", SAVE_STATE), ("set_comm", SET_COMM)]


def check_abi(api, what):
    """None when api (an Api) and its descriptor speak ABI; else the reason they cannot be read."""
    got = api.abi.decode("ascii", "replace") if api.abi else "?"
    if got != ABI:
        return "%s was built for ABI '%s'; this package reads '%s' (recompile it, or update python/kiln/_abi.py)" % (
            what, got, ABI)
    if not api.desc or not api.desc.contents.abi or api.desc.contents.abi.decode("ascii", "replace") != ABI:
        return "%s: its descriptor is not of ABI '%s'" % (what, ABI)
    if not api.create or not api.destroy or not api.predict or not api.error:
        return "%s: its kiln_model lacks entry points" % what
    return None
