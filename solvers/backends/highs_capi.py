"""A MIP solved through HiGHS's C API, so its interrupt callback sees the LP iterations.

NOTE (why not highspy): highspy 1.14's callback output lacks
`mip_total_lp_iterations`, which HiGHS's MIP solver does fill at every
interrupt callback; the node count and the number of callbacks alone track
its CPU time within 0.5x-30x (issue 25). The C API (`highs_c_api.h`) is
exported by highspy's own extension module, so this binds the few functions
a MIP solve needs there with ctypes: no other library, the same HiGHS.
Items of the callback output are read by name
(`Highs_getCallbackDataOutItem`), never by struct layout.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache

import highspy
import numpy as np

# (nodes, LP iterations) so far -> True to stop the solve there.
OnInterrupt = Callable[[int, int], bool]

_CALLBACK = ctypes.CFUNCTYPE(
    None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)
_MIP_INTERRUPT = int(highspy.cb.HighsCallbackType.kCallbackMipInterrupt.value)


class CApiUnavailable(RuntimeError):
    """highspy's extension module does not export HiGHS's C API."""


@dataclass(frozen=True)
class MipRun:
    """What HiGHS reports after a MIP solve."""

    status: highspy.HighsModelStatus
    dual_bound: float
    nodes: int
    lp_iterations: int


@cache
def _lib() -> ctypes.CDLL:
    found = glob.glob(os.path.join(os.path.dirname(highspy.__file__), "_core*.so"))
    lib = ctypes.CDLL(found[0]) if found else None
    if lib is None or not hasattr(lib, "Highs_getCallbackDataOutItem"):
        raise CApiUnavailable("highspy's extension module does not export HiGHS's C API")
    ptr, hint = ctypes.c_void_p, ctypes.c_int32
    if lib.Highs_getSizeofHighsInt(None) != 4:
        raise CApiUnavailable("this HiGHS was built with 64-bit HighsInt")
    doubles = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
    ints = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")
    signatures = {
        "Highs_create": ([], ptr),
        "Highs_destroy": ([ptr], None),
        "Highs_passMip": (
            [ptr, hint, hint, hint, hint, hint, ctypes.c_double]
            + [doubles] * 5
            + [ints, ints, doubles, ints],
            hint,
        ),
        "Highs_setBoolOptionValue": ([ptr, ctypes.c_char_p, hint], hint),
        "Highs_setIntOptionValue": ([ptr, ctypes.c_char_p, hint], hint),
        "Highs_setDoubleOptionValue": ([ptr, ctypes.c_char_p, ctypes.c_double], hint),
        "Highs_setCallback": ([ptr, _CALLBACK, ptr], hint),
        "Highs_startCallback": ([ptr, hint], hint),
        "Highs_getCallbackDataOutItem": ([ptr, ctypes.c_char_p], ptr),
        "Highs_run": ([ptr], hint),
        "Highs_getModelStatus": ([ptr], hint),
        "Highs_getDoubleInfoValue": ([ptr, ctypes.c_char_p, ctypes.POINTER(ctypes.c_double)], hint),
        "Highs_getInt64InfoValue": ([ptr, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)], hint),
        "Highs_getIntInfoValue": ([ptr, ctypes.c_char_p, ctypes.POINTER(hint)], hint),
    }
    for name, (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result
    return lib


def _item(lib: ctypes.CDLL, data_out: int, name: bytes) -> int:
    address = lib.Highs_getCallbackDataOutItem(data_out, name)
    if not address:
        raise CApiUnavailable(f"this HiGHS's callback output has no {name.decode()}")
    return ctypes.cast(address, ctypes.POINTER(ctypes.c_int64))[0]


def _set_option(lib: ctypes.CDLL, highs: int, name: str, value: bool | int | float) -> None:
    key = name.encode()
    if isinstance(value, bool):
        status = lib.Highs_setBoolOptionValue(highs, key, int(value))
    elif isinstance(value, int):
        status = lib.Highs_setIntOptionValue(highs, key, value)
    else:
        status = lib.Highs_setDoubleOptionValue(highs, key, float(value))
    if status != 0:
        raise ValueError(f"HiGHS refused option {name} = {value!r}")


def solve_mip(
    lp: highspy.HighsLp,
    integer_cols: np.ndarray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    options: Mapping[str, bool | int | float],
    on_interrupt: OnInterrupt,
) -> MipRun:
    """`lp` (its row bounds replaced by `row_lower`, `row_upper`; `integer_cols` integer) as a
    MIP, single-threaded and silent; `on_interrupt` sees every interrupt callback."""
    lib = _lib()
    matrix = lp.a_matrix_
    colwise = matrix.format_ == highspy.MatrixFormat.kColwise
    integrality = np.zeros(lp.num_col_, dtype=np.int32)
    integrality[np.asarray(integer_cols, dtype=np.int64)] = 1

    def doubles(values) -> np.ndarray:
        return np.ascontiguousarray(values, dtype=np.float64)

    def ints(values) -> np.ndarray:
        return np.ascontiguousarray(values, dtype=np.int32)

    failed: list[BaseException] = []

    def callback(kind, message, data_out, data_in, user) -> None:
        # NOTE: ctypes prints and drops what a callback raises; so it is kept,
        # the solve interrupted, and raised once HiGHS returns.
        try:
            nodes = _item(lib, data_out, b"mip_node_count")
            iterations = _item(lib, data_out, b"mip_total_lp_iterations")
            stop = on_interrupt(nodes, iterations)
        except BaseException as err:
            failed.append(err)
            stop = True
        if stop:
            ctypes.cast(data_in, ctypes.POINTER(ctypes.c_int))[0] = 1  # user_interrupt

    c_callback = _CALLBACK(callback)  # held until the run ends
    highs = lib.Highs_create()
    try:
        for name, value in {"output_flag": False, "threads": 1, **options}.items():
            _set_option(lib, highs, name, value)
        status = lib.Highs_passMip(
            highs,
            lp.num_col_,
            lp.num_row_,
            len(matrix.value_),
            1 if colwise else 2,
            1,  # minimise
            lp.offset_,
            doubles(lp.col_cost_),
            doubles(lp.col_lower_),
            doubles(lp.col_upper_),
            doubles(row_lower),
            doubles(row_upper),
            ints(matrix.start_),
            ints(matrix.index_),
            doubles(matrix.value_),
            integrality,
        )
        if status < 0:
            raise ValueError(f"HiGHS refused the MIP (status {status})")
        lib.Highs_setCallback(highs, c_callback, None)
        lib.Highs_startCallback(highs, _MIP_INTERRUPT)
        lib.Highs_run(highs)
        if failed:
            raise failed[0]
        bound = ctypes.c_double()
        nodes = ctypes.c_int64()
        iterations = ctypes.c_int32()
        lib.Highs_getDoubleInfoValue(highs, b"mip_dual_bound", ctypes.byref(bound))
        lib.Highs_getInt64InfoValue(highs, b"mip_node_count", ctypes.byref(nodes))
        lib.Highs_getIntInfoValue(highs, b"simplex_iteration_count", ctypes.byref(iterations))
        return MipRun(
            highspy.HighsModelStatus(lib.Highs_getModelStatus(highs)),
            bound.value,
            nodes.value,
            iterations.value,
        )
    finally:
        lib.Highs_destroy(highs)
