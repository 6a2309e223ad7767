"""The trace_gym contract: spaces, action parsing, tools, verification, seeding, users, env."""
