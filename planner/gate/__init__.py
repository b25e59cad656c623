"""The CI gate: every rule on a plan or engine config, pass / fail / warn."""
