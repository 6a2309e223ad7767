"""The split between make test and make test-long (tests/selection.py, the ``long`` marker)."""

from tests.selection import is_swe, one_swe_env_in_make_test


def _long(param) -> bool:
    return not isinstance(param, str) and any(m.name == "long" for m in param.marks)


def _id(param) -> str:
    return param if isinstance(param, str) else param.values[0]


def test_a_sweep_keeps_every_other_id_and_the_swe_representative():
    ids = ["trace/a-v0", "trace/swe-x-v0", "trace/swe-repair-v0", "trace/b-v0", "trace/swe-y-v0"]
    params = one_swe_env_in_make_test(ids)
    assert [_id(p) for p in params] == ids  # nothing dropped, the order kept
    assert [_id(p) for p in params if _long(p)] == ["trace/swe-x-v0", "trace/swe-y-v0"]


def test_without_the_representative_the_first_swe_id_stays():
    params = one_swe_env_in_make_test(["trace/a-v0", "trace/swe-x-v0", "trace/swe-y-v0"])
    assert [_id(p) for p in params if not _long(p)] == ["trace/a-v0", "trace/swe-x-v0"]
    assert one_swe_env_in_make_test(["trace/a-v0"]) == ["trace/a-v0"]


def test_make_test_runs_every_fast_property_on_every_environment():
    import trace_gym
    from tests.gym.test_properties import CHECKS, SLOW_ON_SWE, _property_params

    in_make_test = {(p.values[0], p.values[1]) for p in _property_params() if not _long(p)}
    for env_id in trace_gym.registered_ids():
        for check in CHECKS:
            if check not in SLOW_ON_SWE:
                assert (env_id, check) in in_make_test, (env_id, check.__name__)
    swe_slow = {e for e, c in in_make_test if c in SLOW_ON_SWE and is_swe(e)}
    assert swe_slow == {"trace/swe-repair-v0"}
