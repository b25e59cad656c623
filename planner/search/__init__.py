"""The layout search: enumerate the space, price it, prune, keep the Pareto front, rank."""
