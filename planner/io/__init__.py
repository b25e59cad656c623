"""Text in and out: bounded reading and parsing of files, numbers as people type them,
value checks, display units, and atomic writing."""
