"""One module per capability environment, each read top to bottom in the same order:
config, task, generator, verifier, oracle, scripted user, environment class."""
