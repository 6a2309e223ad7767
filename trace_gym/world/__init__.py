"""The shared customer-service world: one data model and one tool vocabulary for every
customer-service capability environment, so that skills trained on one transfer to the
others and to the composite benchmark (the paper's environments lost transfer when tool and
argument names drifted from the target)."""

from trace_gym.world.model import World, money, world_diff

__all__ = ["World", "money", "world_diff"]
