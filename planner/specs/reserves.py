"""Default memory reserves that the CLI's help quotes, kept apart from the budget
(``specs.budget``) so that building the help loads no spec class."""

# fitted there; quoted by the CLI's help, which reads the specs, not the engine
from planner.engine.allocator import FRAGMENTATION_SHARE as FRAGMENTATION_SHARE

# The safety margin held back from capacity for spikes the model does not see: an assumption
# (no framework states one), printed with every memory verdict and changed with --margin.
MARGIN_SHARE = 0.05

# The headroom a ranked #1 must leave, as a share of its own peak: the memory model's largest
# under-estimate of a measured peak in the shared calibration set (calibration_modern.json,
# torchtitan Llama-3.1-405B, FSDP 1 × CP 8 × TP 8 × PP 8 at 262,144 tokens, FP8: 84.9 GB
# measured, 79.3 GB modelled, −6.6 %; tests/test_memory_calibration.py prints every row).
# A layout left with less is within the model's own error of an OOM: `fit` shows it, flagged,
# after those that meet the rule. Changed with --min-headroom-gb (an absolute floor instead).
HEADROOM_SHARE = 0.066
