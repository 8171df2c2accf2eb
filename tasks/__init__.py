"""tasks layer of dynamicrubric."""
