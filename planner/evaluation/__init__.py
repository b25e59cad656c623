"""One layout (or an array of candidate layouts) to memory, step time and the layout rules."""
