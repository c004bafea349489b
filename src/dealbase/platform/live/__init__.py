"""Live subscriptions: a department's events as they commit, fanned out to every subscriber of
a server process from one reader per department."""
