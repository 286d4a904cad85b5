"""Measuring on GPU machines, and fitting the simulator's tables to the measurements
(README.md)."""
