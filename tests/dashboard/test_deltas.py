"""A client's view: what it is sent is what differs from what it already has, and nothing steps back."""

from apps.dashboard.deltas import FAILURES, RUNS, LiveView, changes, merge


def test_changes_keeps_only_what_differs_object_by_object():
    have = {"a": 1, "b": {"x": 1.0, "y": 2.0}, "c": None}
    new = {"a": 1, "b": {"x": 1.0, "y": 3.0}, "c": None, "d": {"z": 0}}
    assert changes(have, new) == {"b": {"y": 3.0}, "d": {"z": 0}}


def test_changes_sends_a_value_that_became_absent_as_null():
    assert changes({"power_w": 400.0}, {"power_w": None}) == {"power_w": None}


def test_a_key_left_out_is_unchanged_not_removed():
    have = {"1": {"util": 5}, "2": {"util": 6}}
    merge(have, changes(have, {"2": {"util": 7}}))
    assert have == {"1": {"util": 5}, "2": {"util": 7}}


def fleet_view() -> LiveView:
    view = LiveView()
    view.reset_fleet({"1": {"ts": 10.0, "util_gpu_mean": 50.0, "lifecycle": "in_service"}})
    return view


def test_a_delta_holds_the_newest_of_what_arrived_and_is_then_what_the_client_has():
    view = fleet_view()
    view.offer_fleet(1, {"ts": 11.0, "util_gpu_mean": 60.0})
    view.offer_fleet(1, {"ts": 12.0, "util_gpu_mean": 50.0})  # back where the client is
    view.offer_fleet(2, {"ts": 12.0, "util_gpu_mean": 10.0})
    assert view.take_delta() == {"fleet": {"1": {"ts": 12.0}, "2": {"ts": 12.0, "util_gpu_mean": 10.0}}}
    assert view.take_delta() == {}
    assert view.sent["fleet"]["2"] == {"ts": 12.0, "util_gpu_mean": 10.0}


def test_a_sample_no_newer_than_what_the_client_has_or_is_owed_is_left_out():
    view = fleet_view()
    assert not view.offer_fleet(1, {"ts": 9.0, "util_gpu_mean": 1.0})  # older than the snapshot
    assert view.take_delta() == {}
    assert view.offer_fleet(1, {"ts": 13.0, "util_gpu_mean": 70.0})
    assert not view.offer_fleet(1, {"ts": 12.0, "util_gpu_mean": 20.0})  # older than what is owed
    assert view.take_delta() == {"fleet": {"1": {"ts": 13.0, "util_gpu_mean": 70.0}}}


def test_a_state_change_without_a_timestamp_always_counts():
    view = fleet_view()
    assert view.offer_fleet(1, {"lifecycle": "quarantined"})
    assert view.take_delta() == {"fleet": {"1": {"lifecycle": "quarantined"}}}


def test_updates_for_streams_the_client_does_not_hold_are_ignored():
    view = LiveView()
    assert not view.offer_fleet(1, {"lifecycle": "drained"})
    assert not view.offer_node(1, {"lifecycle": "drained"})
    assert view.pending == {}
    view.reset_node(1, {"lifecycle": "in_service", "gpus": {}})
    assert not view.offer_node(2, {"lifecycle": "drained"})
    assert view.take_delta() == {}


def test_dropping_a_node_forgets_what_it_was_owed():
    view = LiveView()
    view.reset_node(1, {"gpus": {}})
    view.offer_node(1, {"ts": 1.0, "gpus": {"0": {"util_gpu": 5.0}}})
    view.drop_node(1)
    assert (view.node_ids(), view.take_delta()) == ([], {})


def test_a_fresh_snapshot_replaces_what_was_owed_for_that_stream():
    view = LiveView()
    view.reset_node(1, {"ts": 1.0, "gpus": {"0": {"util_gpu": 5.0}}})
    view.offer_node(1, {"ts": 2.0, "gpus": {"0": {"util_gpu": 6.0}}})
    view.reset_node(1, {"ts": 3.0, "gpus": {"0": {"util_gpu": 7.0}}})
    assert view.take_delta() == {}


def test_the_failures_feed_sends_each_changed_failure_whole_and_keeps_nothing():
    view = LiveView()
    view.offer_to_feed(FAILURES, 7, {"id": 7, "state": "open"})
    assert view.pending == {}  # not subscribed
    view.reset_feed(FAILURES)
    view.offer_to_feed(FAILURES, 7, {"id": 7, "state": "open", "count": 1})
    view.offer_to_feed(FAILURES, 7, {"id": 7, "state": "open", "count": 2})  # the newest payload wins
    assert view.take_delta() == {"failures": {"7": {"id": 7, "state": "open", "count": 2}}}
    assert view.sent["failures"] == {}
    view.offer_to_feed(FAILURES, 7, {"id": 7, "state": "acknowledged", "count": 2})
    assert view.take_delta() == {"failures": {"7": {"id": 7, "state": "acknowledged", "count": 2}}}
    view.drop_feed(FAILURES)
    view.offer_to_feed(FAILURES, 7, {"id": 7, "state": "resolved", "count": 2})
    assert (view.holds_feed(FAILURES), view.take_delta()) == (False, {})


def test_the_runs_feed_is_a_feed_of_its_own_beside_the_failures():
    view = LiveView()
    view.reset_feed(RUNS)
    assert not view.offer_to_feed(FAILURES, 7, {"id": 7})  # not subscribed to that one
    assert view.offer_to_feed(RUNS, 3, {"state": "running", "percent": 10})
    assert view.offer_to_feed(RUNS, 3, {"state": "running", "percent": 40})
    assert view.take_delta() == {"runs": {"3": {"state": "running", "percent": 40}}}
    assert (view.sent["runs"], view.take_delta()) == ({}, {})
