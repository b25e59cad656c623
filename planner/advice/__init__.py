"""Advice on top of the search: elastic shrink, a bigger batch, the cheapest fix of a failing plan."""
