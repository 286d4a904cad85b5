"""Scripts around the simulator: measure/ (on GPU machines), validate/ (the simulator against
the measurements), bench/ (the simulator's own speed),
docs/ (the run outputs the docs show); see README.md."""
