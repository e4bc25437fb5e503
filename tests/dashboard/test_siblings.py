"""A run's figures with their siblings beside them: the others' median and range, exact against
``statistics`` on many random runs, and whether a figure is far from that median."""

import random
import statistics

from apps.dashboard.siblings import Siblings, siblings_of


def test_the_others_median_and_range_leave_the_nodes_own_values_out():
    draw = random.Random(12)
    for _ in range(3000):
        values = [draw.choice([0, 1, 2, 3, 5, 5, 6, 7.5, 9]) for _ in range(draw.randint(1, 14))]
        own = draw.sample(values, draw.randint(0, len(values)))
        others = list(values)
        for value in own:
            others.remove(value)

        found = siblings_of(sorted(values), sorted(own))

        if not others:
            assert found is None
        else:
            expected = (statistics.median(others), min(others), max(others), len(others))
            assert (found.median, found.low, found.high, found.count) == expected, (values, own)


def test_a_figure_is_far_beyond_a_tenth_of_the_median_and_any_count_off_a_zero_median():
    run = Siblings(median=655.0, low=640.0, high=668.0, count=7)
    assert [run.far(value) for value in (412.0, 600.0, 655.0, 700.0, 730.0)] == [True, False, False, False, True]
    counters = Siblings(median=0.0, low=0.0, high=0.0, count=3)
    assert [counters.far(value) for value in (0.0, 2.0)] == [False, True]


def test_a_ratio_is_far_a_tenth_of_the_whole_from_the_median_not_a_tenth_of_the_median():
    # A sound GPU's compute drop sits near 0: the noise between nodes is not far from the run.
    drops = Siblings(median=-0.008, low=-0.019, high=-0.001, count=15)
    assert [drops.far(value, "ratio") for value in (-0.0013, -0.0187, 0.05, 0.2)] == [False, False, False, True]
    assert drops.far(-0.0013)  # another unit's tenth of the median
