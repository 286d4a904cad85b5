"""The simulator against stored measurements and published numbers (README.md)."""
