"""flows layer of dynamicrubric."""
