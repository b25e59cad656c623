"""Optimizer-step compute beyond the memory-bound update (engine/step_time.optimizer_time).

Muon (K. Jordan, KellerJordan/Muon muon.py `zeropower_via_newtonschulz5`; torch.optim.Muon):
each hidden weight matrix's momentum is orthogonalised by `steps` (default 5) Newton–Schulz
iterations in bf16 on X (m × n, transposed so that m ≤ n):
A = X Xᵀ (2m²n FLOPs), B = bA + cA² (2m³), X ← aX + BX (2m²n): 4m²n + 2m³ per iteration.
"""

from __future__ import annotations

import numpy as np

from planner.engine.arrays import Num, out

NEWTON_SCHULZ_STEPS = 5


def newton_schulz_flops(rows: Num, cols: Num, steps: Num = NEWTON_SCHULZ_STEPS) -> Num:
    """FLOPs of Muon's orthogonalisation of one rows × cols matrix: steps·(4m²n + 2m³), m ≤ n."""
    r, c = np.asarray(rows, dtype=float), np.asarray(cols, dtype=float)
    m, n = np.minimum(r, c), np.maximum(r, c)
    return out(np.asarray(steps, dtype=float) * (4.0 * m * m * n + 2.0 * m ** 3))
