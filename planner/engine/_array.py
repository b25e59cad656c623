"""Tiny helpers so engine functions return a float for scalar inputs and an array otherwise."""

from __future__ import annotations

from typing import Union

import numpy as np

Num = Union[float, int, np.ndarray]


def out(x: Num) -> Num:
    """Return a Python float for a 0-d result, else the array unchanged."""
    if type(x) is np.ndarray and x.ndim:  # the common case, without np.ndim's dispatch
        return x
    return float(x) if np.ndim(x) == 0 else x
