"""Bundled framework profiles (TOML), loaded by planner.specs.framework."""
