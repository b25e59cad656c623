"""Default memory reserves that the CLI's help quotes, kept apart from the budget
(``specs.budget``) so that building the help loads no spec class."""

# fitted there; quoted by the CLI's help, which reads the specs, not the engine
from planner.engine.allocator import FRAGMENTATION_SHARE as FRAGMENTATION_SHARE

# The safety margin held back from capacity for spikes the model does not see: an assumption
# (no framework states one), printed with every memory verdict and changed with --margin.
MARGIN_SHARE = 0.05
