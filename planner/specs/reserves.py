"""Default memory reserves that the CLI's help quotes, kept apart from the budget
(``specs.budget``) so that building the help loads no spec class."""

from planner.engine.allocator import FRAGMENTATION_SHARE  # noqa: F401  (fitted there; quoted by the help)

# The safety margin held back from capacity for spikes the model does not see: an assumption
# (no framework states one), printed with every memory verdict and changed with --margin.
MARGIN_SHARE = 0.05
