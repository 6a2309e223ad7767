"""``trace/desk-lite-v0``: a small service desk, two or three requests from three capabilities.

## Capability
None of its own: a CPU-sized composite target. Each task needs two (at difficulty 0) or
three of tool-call precision, information gathering (clarify) and error recovery with
communication, one request per capability, in one world and one conversation. It is
``trace/service-desk-v0`` (the same generator, verifier, customer and oracle, see that
module) restricted to those three members and to the tools their requests use, so that the
compact first prompt stays near 1,000 tokens of a small model's tokenizer (the full desk
lists 27 tools: 1.9-2.3k tokens). Every check carries the capability of the request it
grades, so a failed episode's ``info["verification"]["lacking_capabilities"]`` names the
capability (or capabilities) it failed on; ``required_capabilities`` lists those the task
needed.

## Task (seed 0, train split, difficulty 0)
Two requests raised one after another, e.g. "upgrade the shipping on my recent order" with
the order left out (a clarify request: ask which order, then upgrade it) then "book a
delivery for order O-..." that fails until the locked account is verified with the date of
birth the customer gave (a recover-communicate request: fix, retry, report the date).
Tool-call requests are the flat ones at every difficulty (cancel an order with a reason,
move a reservation's payment, add bags), so no nested-argument tool is needed.

## Tools
``get_customer``, ``get_order``, ``get_payment_method`` (read); ``cancel_order``,
``update_reservation_payment``, ``add_baggage``, ``upgrade_shipping``,
``schedule_delivery``, ``set_order_payment_method``, ``verify_identity``,
``release_order_hold`` (write); ``report_unable`` (control): exactly the tools the
members' oracles call over the tasks this id generates.

## Reward
As ``trace/service-desk-v0``: each request's member checks (scoped to its records) weigh
the same, a gate in any request zeroes the score, and a write to a record outside every
request trips ``no_unrequested_write``. Doing nothing scores 0.

## Episode end
As ``trace/service-desk-v0``: the customer raises the next request once the current one's
own customer is done, and leaves after the last; truncated at ``max_turns``.

## Difficulty
| knob | d = 0 (the evaluation setting) | d = 1 |
|---|---|---|
| requests | 2 | 2 or 3 (uniform) |
| all requests in the opening message | never | 50 % of the tasks with several |
| each request | its module at d = 0 | its module at d = 1 (tool-call: flat requests only) |

## Version history
* v0: initial version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig, knob
from trace_gym.envs import clarify, recover_communicate, service_desk, tool_call
from trace_gym.envs.helpers.tool_call_requests import FLAT
from trace_gym.primitives.seeding import StableRNG

ENV_ID = "trace/desk-lite-v0"
CAPABILITY = "desk_lite"
"""The registry's capability field; checks carry the member capabilities."""
POOL = (tool_call.CAPABILITY, clarify.CAPABILITY, recover_communicate.CAPABILITY)
"""The member capabilities, in the service desk's member order."""
MEMBER_CONFIG = ((tool_call.CAPABILITY, "requests", FLAT),)
"""Tool-call requests stay flat at every difficulty: the nested ones need five more tools."""
TOOLS = (
    "get_customer",
    "get_order",
    "get_payment_method",
    "cancel_order",
    "update_reservation_payment",
    "add_baggage",
    "upgrade_shipping",
    "schedule_delivery",
    "set_order_payment_method",
    "verify_identity",
    "release_order_hold",
    "report_unable",
)
MOST_REQUESTS = len(POOL)
TOGETHER_AT_MAX = 0.5
"""Chance at difficulty 1 that a task with several requests raises them all at once."""
TOGETHER_RATES = (
    KnobRate("together", 0.0, 0.0, 0.0),
    KnobRate("together", 1.0, TOGETHER_AT_MAX, 0.05),
)
"""How often the requests come all at once, by difficulty (v0 and v1 alike)."""


@dataclass(frozen=True)
class DeskLiteConfig(SpecConfig):
    """Generator settings; :meth:`knobs` maps difficulty to them."""

    min_requests: int = knob(2, low=1, high=MOST_REQUESTS, doc="fewest requests per task")
    max_requests: int = knob(
        2, low=1, high=MOST_REQUESTS, doc="requests per task: uniform in min..max_requests"
    )
    together_probability: float = knob(
        0.0, low=0.0, high=1.0, doc="the opening message raises every request at once"
    )
    member_difficulty: float = knob(
        0.0, low=0.0, high=1.0, doc="difficulty each request is generated at"
    )
    capabilities: tuple[str, ...] = knob(POOL, choices=POOL, doc="the member capabilities")

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "max_requests": 2 + round((MOST_REQUESTS - 2) * d),
            "together_probability": TOGETHER_AT_MAX * d,
            "member_difficulty": d,
        }

    def desk_config(self) -> service_desk.ServiceDeskConfig:
        """The service desk's config that generates these tasks."""
        return service_desk.ServiceDeskConfig(
            max_requests=self.max_requests,
            min_requests=self.min_requests,
            together_probability=self.together_probability,
            capabilities=self.capabilities,
            member_difficulty=self.member_difficulty,
            member_config=MEMBER_CONFIG,
        )


def generate_task(rng: StableRNG, cfg: DeskLiteConfig) -> service_desk.ServiceDeskTask:
    """The service desk's generator on the three members (checks the request count too)."""
    return service_desk.generate_task(rng, cfg.desk_config())


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="CPU-sized composite target: each task needs two or three of tool-call "
    "precision, clarification and error recovery, with only their tools listed; every check "
    "carries the capability it exercises.",
    config=DeskLiteConfig,
    generate=generate_task,
    verify=service_desk.verify,
    oracle=service_desk.oracle,
    user=service_desk.ServiceDeskUser,
    instructions=service_desk.instructions,
    hint=service_desk.hint,
    features=service_desk.features,
    tools=TOOLS,
    max_turns=30,
    tags=("composite", "target_benchmark", CAPABILITY),
    oracle_segments=service_desk.oracle_segments,
    request_decisions=service_desk.request_decisions,
    initial_world_from_task=True,
    env_name="DeskLiteEnv",
    knob_rates=(
        KnobRate("n_requests", 0.0, 1.0, 0.0, equals=2),
        KnobRate("n_requests", 1.0, 0.5, 0.05, equals=3),
        *TOGETHER_RATES,
    ),
    # distinct masked task templates: 199-200 of 200 seeds at d = 0, 0.5 and 1
    template_floor=700,
)
DeskLiteEnv = SPEC.env_class
"""The small composite target; see the module docstring for the full description."""
