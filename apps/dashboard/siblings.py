"""Each figure a run's node measured, with its siblings beside it: the median and range of the same
figure (check, measurement, unit) on the run's other nodes of the same node type, and whether it is
far from that median. An outlier node shows at a glance ("412 TFLOP/s · run median 655 (640–668)").

The siblings of a node are the others: its own values are taken out, without building a list per
node (a 1,000-node run would sort 8,000 values a thousand times), by finding each order statistic of
"all values less this node's" with two binary searches.
"""

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from apps.jobs.models import Command

# Far from the run: more than this share of the siblings' median away from it (or, where the median
# is 0, such as an error counter, any other value). A straggler GPU is typically 20 % or more down.
FAR_SHARE: Final = 0.10
# A ratio (a compute run's drop from its first to its last quarter) is a share of a whole that sits
# near 0 on a sound GPU: a tenth of its median is noise (-0.001 against -0.008 was "far", and so was
# most of every healthy node's compute check), so it is far a tenth of the whole away.
WHOLE: Final = {"ratio": 1.0}

Key = tuple[int, str, str, str]  # node type, check, measurement, unit


@dataclass(frozen=True)
class Siblings:
    median: float
    low: float
    high: float
    count: int  # how many figures of the other nodes

    def far(self, value: float, unit: str = "") -> bool:
        return abs(value - self.median) > FAR_SHARE * max(abs(self.median), WHOLE.get(unit, 0.0))


def _kth_without(values: list[float], own: list[float], k: int) -> float:
    """The k-th smallest (from 0) of sorted ``values`` with sorted ``own`` (a part of it) taken out."""
    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if bisect_right(values, values[mid]) - bisect_right(own, values[mid]) >= k + 1:
            hi = mid
        else:
            lo = mid + 1
    return values[lo]


def siblings_of(values: list[float], own: list[float]) -> Siblings | None:
    """The others' median and range (None when there are no others)."""
    n = len(values) - len(own)
    if n <= 0:
        return None
    middle = _kth_without(values, own, n // 2)
    median = middle if n % 2 else (_kth_without(values, own, n // 2 - 1) + middle) / 2
    return Siblings(median, _kth_without(values, own, 0), _kth_without(values, own, n - 1), n)


def _all_measurements(command: Command) -> list[dict[str, Any]]:
    result = command.result if isinstance(command.result, dict) else {}
    return [m for m in result.get("measurements") or [] if isinstance(m, dict)]


def _numeric(measurement: dict[str, Any]) -> bool:
    return isinstance(measurement.get("measured"), int | float) and not isinstance(measurement["measured"], bool)


def _key(command: Command, measurement: dict[str, Any]) -> Key:
    return (command.node.node_type_id, command.check_name, str(measurement["name"]), str(measurement.get("unit", "")))


def attach_figures(commands: Iterable[Command]) -> None:
    """Give each command ``figures`` (its measurements, each with ``siblings`` and ``far``),
    ``far_count`` and ``farthest`` (the figure farthest from its siblings' median, among the far
    ones). The commands come with their nodes (``select_related("node")``)."""
    commands = list(commands)
    everyone: dict[Key, list[float]] = defaultdict(list)
    mine: dict[tuple[int, Key], list[float]] = defaultdict(list)
    for command in commands:
        for m in filter(_numeric, _all_measurements(command)):
            key = _key(command, m)
            everyone[key].append(float(m["measured"]))
            mine[command.node_id, key].append(float(m["measured"]))
    for values in (*everyone.values(), *mine.values()):
        values.sort()
    for command in commands:
        figures = []
        for m in _all_measurements(command):
            siblings = None
            if _numeric(m):
                key = _key(command, m)
                siblings = siblings_of(everyone[key], mine[command.node_id, key])
            far = siblings is not None and siblings.far(float(m["measured"]), str(m.get("unit", "")))
            figures.append(m | {"siblings": siblings, "far": far})
        command.figures = figures
        far = [f for f in figures if f["far"]]
        command.far_count = len(far)
        command.farthest = max(far, key=lambda f: abs(f["measured"] - f["siblings"].median), default=None)
