"""Scripts around the simulator: measure/ (on GPU machines), validate/ (the simulator against
the measurements), bench/ (the simulator's own speed); see README.md."""
