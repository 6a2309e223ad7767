"""``trace/desk-lite-v1``: the small service desk cut to the two capabilities a 135M model
sometimes solves: a tool-call request and a recover-communicate request in every task.

## Capability
None of its own: the CPU-sized composite target of the fair comparison (issue 26). It is
``trace/desk-lite-v0`` (see that module: the service desk's generator, verifier, customer and
oracle) restricted to tool-call precision and error recovery with communication. Why this
pair: across seven warm-start designs on v0, SmolLM2-135M solved a clarify request at most
once in 16, so every v0 task that held one (two thirds of them) was lost whatever training
did; the best design (``benchmarks/adapters/desk-lite-warmstart-a6``) solved 3 of the 19
tool-call + recover tasks and none of the others (``benchmarks/results/desk_lite_band.json``).
Each check still carries its request's capability, so ``lacking_capabilities`` names the
request a failed episode failed on.

## Task (seed 0, train split, difficulty 0)
Two requests raised one after another, in a random order: a flat tool-call request (cancel
an order with a reason, move a reservation's payment, add bags) and one that fails until its
cause is fixed (a locked account verified with the date of birth the customer gave, a held
order released), retried and reported.

## Tools
v0's tools less ``report_unable``, which no oracle of these two members calls:
``get_customer``, ``get_order``, ``get_payment_method`` (read); ``cancel_order``,
``update_reservation_payment``, ``add_baggage``, ``upgrade_shipping``,
``schedule_delivery``, ``set_order_payment_method``, ``verify_identity``,
``release_order_hold`` (write).

## Reward
As ``trace/service-desk-v0``: each request's member checks weigh the same, a gate in any
request zeroes the score, a write outside every request trips ``no_unrequested_write``.

## Episode end
As ``trace/service-desk-v0``; truncated at ``max_turns``.

## Difficulty
| knob | d = 0 (the evaluation setting) | d = 1 |
|---|---|---|
| requests | 2 (one per capability) | 2 |
| both requests in the opening message | never | 50 % of the tasks |
| each request | its module at d = 0 | its module at d = 1 (tool-call: flat requests only) |

## Version history
* v0: tool-call, clarify and recover-communicate (``trace_gym.envs.desk_lite``).
* v1: tool-call and recover-communicate only; always two requests; no ``report_unable``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trace_gym.core.spec import KnobRate, knob
from trace_gym.envs import desk_lite, recover_communicate, service_desk, tool_call
from trace_gym.primitives.seeding import StableRNG

ENV_ID = "trace/desk-lite-v1"
CAPABILITY = desk_lite.CAPABILITY
POOL = (tool_call.CAPABILITY, recover_communicate.CAPABILITY)
"""The member capabilities, in the service desk's member order."""
TOOLS = tuple(t for t in desk_lite.TOOLS if t != "report_unable")
REQUESTS = len(POOL)


@dataclass(frozen=True)
class DeskLiteV1Config(desk_lite.DeskLiteConfig):
    """v0's settings with two members: every task raises one request of each."""

    min_requests: int = knob(REQUESTS, low=1, high=REQUESTS, doc="fewest requests per task")
    max_requests: int = knob(
        REQUESTS, low=1, high=REQUESTS, doc="requests per task: uniform in min..max_requests"
    )
    capabilities: tuple[str, ...] = knob(POOL, choices=POOL, doc="the member capabilities")

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "together_probability": desk_lite.TOGETHER_AT_MAX * d,
            "member_difficulty": d,
        }


def generate_task(rng: StableRNG, cfg: DeskLiteV1Config) -> service_desk.ServiceDeskTask:
    """v0's generator on the two members (defined here, so the spec's module is this one)."""
    return desk_lite.generate_task(rng, cfg)


SPEC = dataclasses.replace(
    desk_lite.SPEC,
    id=ENV_ID,
    description="CPU-sized composite target: each task needs tool-call precision and error "
    "recovery with communication (one request each), with only their tools listed; every "
    "check carries the capability it exercises.",
    config=DeskLiteV1Config,
    generate=generate_task,
    tools=TOOLS,
    env_name="DeskLiteV1Env",
    knob_rates=(
        KnobRate("n_requests", 0.0, 1.0, 0.0, equals=2),
        KnobRate("n_requests", 1.0, 1.0, 0.0, equals=2),
        *desk_lite.TOGETHER_RATES,
    ),
)
DeskLiteV1Env = SPEC.env_class
"""The two-capability composite target; see the module docstring for the full description."""
