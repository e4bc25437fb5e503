"""What one browser holds, and what it has yet to be told: the bookkeeping behind "only what changed".

A client's view is one tree of JSON objects, ``{"fleet": {node: entry}, "nodes": {node: state}}``
(keys are strings, as JSON object keys are). ``sent`` is the tree as the client has it: the snapshots
it was sent with every delta since merged in. ``pending`` collects what arrived since the last
delta. ``take_delta`` returns the parts of ``pending`` that differ from ``sent`` (equal values are
dropped, and a key that ``pending`` lacks is unchanged, never removed), and merges them into
``sent``. The client applies a delta the same way: objects merge key by key, anything else replaces.

The feeds, ``{"failures": {failure: payload}}`` and ``{"runs": {run: summary}}``, are the exception:
they hold no state. Each failure or run that changed goes out whole in the next delta, and ``sent``
forgets it once it went out (a page open for weeks would otherwise remember every failure of those
weeks; the publisher already drops a payload that did not change).
"""

from typing import Any

Tree = dict[str, Any]

FLEET = "fleet"
NODES = "nodes"
FAILURES = "failures"
RUNS = "runs"
FEEDS = (FAILURES, RUNS)
_MISSING = object()


def changes(have: Tree, new: Tree) -> Tree:
    """The part of ``new`` that ``have`` does not already hold, object by object."""
    changed: Tree = {}
    for key, value in new.items():
        old = have.get(key, _MISSING)
        if isinstance(value, dict) and isinstance(old, dict):
            if inner := changes(old, value):
                changed[key] = inner
        elif old is _MISSING or old != value:
            changed[key] = value
    return changed


def merge(into: Tree, patch: Tree) -> None:
    """Apply ``patch`` to ``into`` in place: objects merge key by key, anything else replaces."""
    for key, value in patch.items():
        current = into.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merge(current, value)
        else:
            into[key] = value


class LiveView:
    """One client's streams: the fleet and/or a few nodes, each keyed as in the tree above."""

    def __init__(self) -> None:
        self.sent: Tree = {}
        self.pending: Tree = {}

    def holds_fleet(self) -> bool:
        return FLEET in self.sent

    def node_ids(self) -> list[int]:
        return [int(key) for key in self.sent.get(NODES, {})]

    def holds_feed(self, feed: str) -> bool:
        return feed in self.sent

    def holds_node(self, node_id: int) -> bool:
        return str(node_id) in self.sent.get(NODES, {})

    def reset_fleet(self, entries: Tree) -> None:
        """The client was just sent ``entries`` as its fleet snapshot."""
        self.sent[FLEET] = entries
        self.pending.pop(FLEET, None)

    def reset_node(self, node_id: int, state: Tree) -> None:
        """The client was just sent ``state`` as this node's snapshot."""
        self.sent.setdefault(NODES, {})[str(node_id)] = state
        self.pending.get(NODES, {}).pop(str(node_id), None)

    def reset_feed(self, feed: str) -> None:
        """The client subscribed to a feed (FEEDS): every change of its items from now on is its."""
        self.sent[feed] = {}
        self.pending.pop(feed, None)

    def drop_feed(self, feed: str) -> None:
        self.sent.pop(feed, None)
        self.pending.pop(feed, None)

    def drop_fleet(self) -> None:
        self.sent.pop(FLEET, None)
        self.pending.pop(FLEET, None)

    def drop_node(self, node_id: int) -> None:
        for tree in (self.sent, self.pending):
            tree.get(NODES, {}).pop(str(node_id), None)

    def offer_fleet(self, node_id: int, fragment: Tree) -> bool:
        """Note a fleet entry's change for the next delta; whether it was noted."""
        return self.holds_fleet() and self._offer(FLEET, str(node_id), fragment)

    def offer_node(self, node_id: int, fragment: Tree) -> bool:
        """Note a node state's change for the next delta; whether it was noted."""
        return self.holds_node(node_id) and self._offer(NODES, str(node_id), fragment)

    def offer_to_feed(self, feed: str, item_id: int, payload: Tree) -> bool:
        """A feed's item (a failure, a run) as it is now (the whole payload, which replaces any earlier
        one still pending); whether it was noted."""
        if not self.holds_feed(feed):
            return False
        self.pending.setdefault(feed, {})[str(item_id)] = payload
        return True

    def _offer(self, stream: str, key: str, fragment: Tree) -> bool:
        """Note ``fragment`` for the next delta. A fragment with a ``ts`` (a telemetry sample) no newer
        than what the client has or is about to get is stale (a snapshot read after it was sent, a
        replay) and is left out, so values never step back in time."""
        ts = fragment.get("ts")
        if ts is not None:
            known = self.pending.get(stream, {}).get(key, {}).get("ts", self.sent[stream].get(key, {}).get("ts"))
            if known is not None and ts <= known:
                return False
        merge(self.pending.setdefault(stream, {}).setdefault(key, {}), fragment)
        return True

    def take_delta(self) -> Tree:
        """What the client must be sent now (empty: nothing changed); from here on it holds it."""
        delta = changes(self.sent, self.pending)
        self.pending = {}
        merge(self.sent, delta)
        for feed in FEEDS:
            if self.holds_feed(feed):
                self.sent[feed] = {}
        return delta
