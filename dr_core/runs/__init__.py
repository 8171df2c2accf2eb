"""One function per pipeline step or command: round steps, evaluate, policy eval, stale-fresh, reward model, store
commands, demo."""
