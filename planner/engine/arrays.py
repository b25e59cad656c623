"""The engine's number types, and the helpers that let a function return a float for scalar
inputs and an array otherwise."""

from __future__ import annotations

from typing import Any, TypeAlias, Union

import numpy as np
from numpy.typing import NDArray

# An array the engine computes: float64, one entry per candidate layout.
FloatArray: TypeAlias = NDArray[np.float64]
# Integer columns: the layout knobs' codes and degrees, rank lists.
IntArray: TypeAlias = NDArray[np.int64]
# A quantity the engine broadcasts: a Python number, or an array of them (float, int or bool
# layout columns). A broadcasting function returns a float for scalar inputs, an array otherwise.
Num: TypeAlias = Union[float, NDArray[Any]]
# A condition the engine broadcasts: a Python bool for scalar inputs, a bool array otherwise.
Mask: TypeAlias = Union[bool, NDArray[np.bool_]]


def out(x: Num) -> Num:
    """Return a Python float for a 0-d result, else the array unchanged."""
    if type(x) is np.ndarray and x.ndim:  # the common case, without np.ndim's dispatch
        return x
    return float(x) if np.ndim(x) == 0 else x


def array(x: Num) -> FloatArray:
    """A broadcast result as the float array a caller that passed arrays holds (no copy when
    it is one already; a scalar becomes a 0-d array)."""
    return np.asarray(x, dtype=float)
