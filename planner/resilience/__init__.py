"""Failures and checkpoints: contents and size, write time, interval, goodput, stragglers."""
