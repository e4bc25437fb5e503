"""NVML's clock event reasons in words: what the node page shows for a GPU running below its clocks."""

from apps.telemetry.throttle import decode


def test_a_mask_reads_as_its_reasons_in_bit_order_with_the_slowdowns_marked():
    reasons = decode(0x4 | 0x8 | 0x40)

    assert [(reason.text, reason.slowdown) for reason in reasons] == [
        ("power cap", False),
        ("hardware slowdown", True),
        ("thermal slowdown (hardware)", True),
    ]


def test_bits_a_newer_driver_added_are_named_not_dropped():
    reasons = decode(0x1 | 0x8000)

    assert [reason.text for reason in reasons] == ["idle", "unknown reason bits 0x8000"]
    assert reasons[-1].slowdown


def test_nothing_reported_and_no_reason_read_as_none():
    assert decode(None) == []
    assert decode(0) == []
