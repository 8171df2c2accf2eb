"""Pure logic: no model, no server, no cluster. Marked by folder: not ``integration``."""
