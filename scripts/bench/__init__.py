"""The simulator's own speed and memory (README.md)."""
