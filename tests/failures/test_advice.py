"""apps/failures/advice.py: the lifecycle move each failure's advice calls for, and a failure as a reason."""

import pytest

from apps.failures import conditions
from apps.failures.advice import as_reason, recommended_move
from apps.failures.models import Failure
from apps.inventory.choices import Lifecycle


def failure(code: str, *, xid: int | None = None, recovery_action: int | None = None, **fields) -> Failure:
    return Failure(pk=12, code=code, xid=xid, recovery_action=recovery_action, title="A title", **fields)


@pytest.mark.parametrize(
    ("made", "move"),
    [
        (failure("xid-79", xid=79), Lifecycle.DRAINED),  # fatal: the GPU needs a reset
        (failure("xid-48", xid=48), Lifecycle.DRAINED),
        (failure("xid-63", xid=63), Lifecycle.DRAINED),  # "drain the node when convenient"
        (failure("xid-13", xid=13), None),  # the application's fault
        (failure("xid-154", xid=154), None),
        (failure("xid-154", xid=154, recovery_action=4), Lifecycle.DRAINED),  # NVML asks for a drain and reset
        (failure("xid-13", xid=13, recovery_action=0), None),  # NVML: nothing to do
        (failure(conditions.ROW_REMAP_FAILED.code), Lifecycle.DRAINED),
        (failure(conditions.ECC_UNCORRECTED.code), Lifecycle.DRAINED),
        (failure(conditions.STRAGGLER.code), Lifecycle.BURN_IN),
        (failure(conditions.NODE_UNREACHABLE.code), None),
        (failure(conditions.THERMAL.code), None),
    ],
)
def test_the_move_each_advice_calls_for(made, move):
    assert recommended_move(made) == move


def test_every_advice_that_says_drain_calls_for_draining():
    from apps.failures import xid as catalog

    advice = [(catalog.condition_code(e.code), e.code, e.action) for e in catalog.CATALOG.values()]
    advice += [(c.code, None, c.action) for c in vars(conditions).values() if isinstance(c, conditions.Condition)]
    for code, xid, words in advice:
        if "drain the node" in words.lower():
            assert recommended_move(failure(code, xid=xid)) == Lifecycle.DRAINED, code


def test_a_failure_as_a_reason_names_it_and_where_it_is():
    assert as_reason(failure("xid-79", xid=79, gpu_index=6)) == "Failure #12: A title (GPU 6)"
    assert as_reason(failure("port-down", port_name="mlx5_0/1")) == "Failure #12: A title (mlx5_0/1)"
    assert as_reason(failure("node-unreachable")) == "Failure #12: A title"
