"""Pure arithmetic: floats or numpy arrays in, floats or arrays out.

Every function broadcasts, so the single-layout estimate and the vectorised search call the
same formulas. No I/O, no printing, no pydantic in here. Units: bytes, seconds, FLOPs.
"""
