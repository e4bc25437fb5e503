"""The error window: a connection is closed once it earns ``limit`` refusals within ``window_s``."""

from apps.gateway.guards import ErrorWindow
from tests.clock import ManualClock


def test_the_limit_within_the_window_closes_and_fewer_do_not():
    clock = ManualClock(now=100.0)
    window = ErrorWindow(limit=3, window_s=10, clock=clock)

    assert [window.add("invalid"), window.add("malformed")] == [False, False]
    clock.advance_to(110.0)
    assert window.add("invalid")  # three within 10 s


def test_refusals_spread_wider_than_the_window_never_close():
    clock = ManualClock(now=100.0)
    window = ErrorWindow(limit=3, window_s=10, clock=clock)

    added = []
    for second in range(0, 60, 6):  # one every 6 s: at most two in any 10 s
        clock.advance_to(100.0 + second)
        added.append(window.add("invalid"))

    assert not any(added)


def test_the_servers_own_failures_do_not_count_against_the_agent():
    window = ErrorWindow(limit=2, window_s=10, clock=ManualClock())

    assert not any(window.add(code) for code in ["internal", "not_ready"] * 5)
    assert [window.add("oversize"), window.add("oversize")] == [False, True]
