"""The XID catalog: what an ops engineer is told to do for each XID."""

import pytest

from apps.failures import xid as catalog
from apps.failures.choices import Severity


def test_it_tells_to_drain_reset_and_replace_a_gpu_fallen_off_the_bus():
    entry = catalog.lookup(79)
    assert entry.severity == Severity.CRITICAL
    assert entry.fatal
    for word in ("drain", "reset", "reseat", "replace"):
        assert word in entry.action.lower()


@pytest.mark.parametrize("code", [48, 95])
def test_it_tells_to_drain_and_reset_after_an_uncorrectable_ecc_error(code):
    entry = catalog.lookup(code)
    assert entry.severity == Severity.CRITICAL
    assert "drain the node and reset the gpu" in entry.action.lower()
    assert "rma" in entry.action.lower()  # if it comes back


def test_it_tells_to_reset_at_the_next_idle_window_when_a_row_remap_is_pending():
    entry = catalog.lookup(63)
    assert entry.severity == Severity.WARNING
    assert "reset the gpu at the next idle window" in entry.action.lower()
    assert not entry.fatal


def test_it_tells_to_rma_when_row_remapping_failed():
    entry = catalog.lookup(64)
    assert entry.severity == Severity.CRITICAL
    assert "rma the gpu" in entry.action.lower()


def test_it_says_a_contained_ecc_error_killed_the_application_and_left_the_gpu_usable():
    entry = catalog.lookup(94)
    assert entry.name == "Contained ECC error"
    assert "application" in entry.action
    assert "GPU is OK" in entry.action
    assert not entry.fatal


def test_it_tells_to_check_nvlink_cables_and_nvswitch_then_reset_then_rma():
    action = catalog.lookup(74).action
    for words in ("cables", "NVSwitch", "reset the GPUs", "RMA"):
        assert words in action


@pytest.mark.parametrize("code", [13, 31, 43])
def test_it_puts_application_xids_down_to_the_application(code):
    entry = catalog.lookup(code)
    assert entry.category == "application"
    assert entry.severity == Severity.WARNING
    assert not entry.fatal


def test_it_calls_xid_45_a_side_effect_of_earlier_errors():
    entry = catalog.lookup(45)
    assert entry.severity == Severity.INFO
    assert "side effect" in entry.action


def test_it_maps_an_unlisted_xid_to_a_generic_warning_that_says_where_to_look():
    entry = catalog.lookup(777)
    assert not entry.known
    assert entry.severity == Severity.WARNING
    assert "Look up XID 777 in NVIDIA's XID catalog" in entry.action
    assert entry.title == "XID 777: Unlisted XID"


@pytest.mark.parametrize(
    "code", [13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 123, 140]
)
def test_it_lists_every_xid_the_issue_names(code):
    assert catalog.CATALOG[code].known


def test_a_fatal_xid_counts_the_context_teardown_as_its_side_effects():
    assert {"xid-45", "xid-43", "xid-13", "xid-154"} <= catalog.possible_effects(79)
    assert catalog.possible_causes("xid-45") >= {48, 79, 95}
    assert catalog.possible_causes("xid-79") == frozenset()


def test_a_non_fatal_xid_has_no_side_effects_but_can_explain_a_counter():
    assert 94 not in catalog.possible_causes("xid-45")
    assert 94 in catalog.possible_causes(catalog.ECC_UNCORRECTED)


def test_a_failed_row_remap_is_never_swallowed_as_a_side_effect():
    assert catalog.possible_causes("xid-64") == frozenset()


# The values travel as plain integers (GpuSample.recovery_action): NVML_GPU_RECOVERY_ACTION_*.
@pytest.mark.parametrize(
    ("value", "name", "words"),
    [
        (0, "none", "No recovery action"),
        (1, "gpu_reset", "Reset the GPU"),
        (2, "node_reboot", "Reboot the node"),
        (3, "drain_p2p", "peer-to-peer"),
        (4, "drain_and_reset", "Drain the node, then reset the GPU"),
    ],
)
def test_it_puts_nvml_recovery_actions_into_words(value, name, words):
    action = catalog.recovery_action(value)
    assert action.name == name
    assert words in action.text


def test_an_unknown_recovery_action_from_a_newer_driver_says_so():
    action = catalog.recovery_action(15)
    assert action.name == "unknown"
    assert "15" in action.text
