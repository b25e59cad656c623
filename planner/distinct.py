"""A sub-result computed once per distinct tuple of the candidate columns it depends on.

The search's candidates cross every knob, but each part of the cost model reads only some of
them (a layer's activations: TP, SP, CP and micro-batch; the ZeRO states: the split and the
sharding), so a batch of ~32,000 candidates holds a few hundred distinct tuples per part. A
part runs on one representative row per tuple and its arrays are gathered back to every row:
the same arithmetic on the same numbers, so the results are bit-for-bit those of the full
arrays (elementwise IEEE operations do not depend on their neighbours).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

# Below this share of distinct rows the gather pays for itself; above it the part runs on the
# rows as they are (a single-row estimate never pays for the key).
WORTH_IT = 0.5
_KEY_LIMIT = 1 << 62


def distinct_rows(cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct tuple, each row's tuple index) for parallel integer columns.

    The key is mixed-radix over each column's range; when the radices would overflow int64
    the key so far is renumbered densely first (np.unique), so any column values work."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    radix = 1
    for col in cols:
        lo, hi = int(col.min()), int(col.max())
        span = hi - lo + 1
        if span == 1:
            continue
        if radix * span >= _KEY_LIMIT:
            _, key = np.unique(key, return_inverse=True)
            radix = int(key.max()) + 1
        key = key * span + (col - lo)
        radix *= span
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def gather(tree: Any, idx: np.ndarray, n: int) -> Any:
    """tree with every array of length n indexed by idx (dataclasses, dicts, tuples and lists
    walked; scalars and other objects as they are)."""
    if isinstance(tree, np.ndarray):
        return tree[idx] if tree.ndim == 1 and len(tree) == n else tree
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return dataclasses.replace(tree, **{f.name: gather(getattr(tree, f.name), idx, n)
                                            for f in dataclasses.fields(tree) if f.init})
    if isinstance(tree, dict):
        return {k: gather(v, idx, n) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(gather(v, idx, n) for v in tree)
    return tree


def on_distinct(c: Any, names: Sequence[str], part: Callable[[Any], Any]) -> Any:
    """part(c) computed on one row per distinct tuple of the named columns of c and gathered
    back to every row (or on c itself where most rows are distinct)."""
    n = len(c)
    if n < 2:
        return part(c)
    first, inverse = distinct_rows([getattr(c, k) for k in names])
    if len(first) > WORTH_IT * n:
        return part(c)
    return gather(part(c.take(first)), inverse, len(first))


def concat(trees: list[Any]) -> Any:
    """Trees of the same structure (as gather walks them) with their 1-d arrays concatenated:
    the rows of consecutive blocks as one block; everything else taken from the first."""
    head = trees[0]
    if isinstance(head, np.ndarray):
        return np.concatenate(trees) if head.ndim == 1 else head
    if dataclasses.is_dataclass(head) and not isinstance(head, type):
        return dataclasses.replace(head, **{
            f.name: concat([getattr(t, f.name) for t in trees])
            for f in dataclasses.fields(head) if f.init})
    if isinstance(head, dict):
        return {k: concat([t[k] for t in trees]) for k in head}
    if isinstance(head, (tuple, list)):
        return type(head)(concat(list(vs)) for vs in zip(*trees))
    return head
