"""Composition of per-capability adapters into one policy.

* ``routing``: per-task routing (the base model reads the task's opening messages and picks
  one adapter for the whole episode); ``task_routing_accuracy`` measures it;
* ``moe``: the token-level mixture (a router per decoder block picks one adapter per token);
* ``router_training``: training the mixture's routers; ``token_routing_accuracy`` measures
  them;
* ``export``: one expert back out of a mixture, or a static merge of adapters;
* ``cli``: the ``trace-train route|merge|train-router|export`` commands.

Submodules load torch; this package file does not, so ``import trace_train.compose`` is cheap.
"""
