"""The lowest layer of the environment library: seeded randomness (:mod:`.seeding`) and tool
declarations (:mod:`.tools`).

Both the world (records, generators, the tool vocabulary) and the contract (``core``: the
engine and the spec) build on them, so they live below both and import nothing of trace_gym
but :mod:`trace_gym.errors`: the dependencies go one way, ``core -> world -> primitives``.
"""
