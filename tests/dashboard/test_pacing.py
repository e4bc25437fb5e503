"""A browser's deltas: at most one a second, soon after fresh values, in step with a stream that ticks
once a second. Times are passed in: nothing here waits."""

import itertools

import pytest

from apps.dashboard.pacing import DeltaPacing


def pacing() -> DeltaPacing:
    return DeltaPacing(interval_s=1.0, coalesce_s=0.05, fresh_s=0.4)


def test_nothing_owed_nothing_due():
    assert pacing().due() is None


def test_a_client_that_had_nothing_for_a_second_gets_its_delta_after_the_coalescing_window():
    paced = pacing()
    paced.sent(100.0)
    paced.offered(101.2)
    paced.offered(101.22)  # the fleet message the publisher sent with the node's
    assert paced.due() == pytest.approx(101.25)


def test_updates_within_the_second_of_the_last_message_wait_for_that_second_to_end():
    paced = pacing()
    paced.sent(100.0)
    paced.offered(100.7)
    assert paced.due() == 101.0
    paced.offered(100.9)
    assert paced.due() == 101.0


def test_a_snapshot_counts_as_the_seconds_message():
    paced = pacing()
    paced.offered(100.0)
    assert paced.due() == pytest.approx(100.05)
    paced.sent(100.01)  # a snapshot of another stream went first
    assert paced.due() >= 101.01


def test_a_delta_whose_values_would_be_stale_waits_for_fresher_ones():
    paced = pacing()
    paced.sent(100.0)
    paced.offered(100.2)  # at 101.0 it would be 0.8 s old
    assert paced.due() == pytest.approx(101.6)
    paced.offered(101.25)  # the node's next sample
    assert paced.due() == pytest.approx(101.3)


def test_no_delta_waits_longer_than_a_second_and_the_freshness_margin():
    paced = pacing()
    paced.sent(100.0)
    paced.offered(100.2)
    paced.offered(100.3)  # not fresh enough either: due at 101.0 it would be 0.7 s old
    assert paced.due() == pytest.approx(101.6)


def test_once_sent_nothing_is_owed_until_the_next_update():
    paced = pacing()
    paced.offered(100.0)
    paced.settled()
    paced.sent(100.05)
    assert paced.due() is None
    paced.offered(101.5)
    assert paced.due() == pytest.approx(101.55)


def follow(stream: list[float], paced: DeltaPacing, send_takes_s: float) -> list[tuple[float, float]]:
    """(arrival of the newest update sent, send time) for each delta, updates arriving at ``stream``."""
    deltas, owed = [], []
    for arrival in [*stream, float("inf")]:
        while owed and (due := paced.due()) is not None and due <= arrival:
            sent_at = due + send_takes_s  # the timer fires late and the send takes a while
            deltas.append((owed[-1], sent_at))
            paced.settled()
            paced.sent(sent_at)
            owed = []
        if arrival != float("inf"):
            paced.offered(arrival)
            owed.append(arrival)
    return deltas


# A node's samples arrive once a second, some a little late (the ingestor's batches); every send
# lands 5 ms after its timer.
SAMPLES = [1000.0 + second + (0.25 if second % 3 == 0 else 0.0) for second in range(300)]


def test_a_page_watching_one_node_stays_in_step_with_its_samples():
    deltas = follow(SAMPLES, pacing(), send_takes_s=0.005)

    waits = [sent - arrived for arrived, sent in deltas]
    gaps = [later[1] - earlier[1] for earlier, later in itertools.pairwise(deltas)]
    assert max(waits) <= 0.4 + 0.05 + 0.005
    assert min(gaps) >= 1.0
    assert len(deltas) >= 0.9 * len(SAMPLES)  # a second skipped now and then to get back in step


def test_held_only_to_a_second_after_the_last_send_the_samples_would_wait_most_of_a_second():
    deltas = follow(SAMPLES, DeltaPacing(interval_s=1.0, coalesce_s=0.05, fresh_s=float("inf")), send_takes_s=0.005)

    assert max(sent - arrived for arrived, sent in deltas) > 0.9
