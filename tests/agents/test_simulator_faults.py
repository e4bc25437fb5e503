"""The fault script format: what it accepts, and the error each mistake gets."""

import pytest

from agents.simulator.faults import FaultSpec, FaultSpecError, parse_fault_spec


def test_it_reads_every_form_of_entry():
    specs = parse_fault_spec(
        """
        # the demo's faults
        gpu-003:gpu2:xid79@120
        gpu-007:straggler:gpu5, gpu-010:die@300
        - gpu-004:thermal@60+600:gpu1
        *:xid48~0.5/h gpu-002:flap@30:mlx5_3   # a comment after entries
        """
    )

    assert [(s.host, s.kind, s.gpu, s.port, s.at_s, s.rate_per_hour, s.duration_s) for s in specs] == [
        ("gpu-003", "xid79", 2, None, 120.0, None, None),
        ("gpu-007", "straggler", 5, None, None, None, None),
        ("gpu-010", "die", None, None, 300.0, None, None),
        ("gpu-004", "thermal", 1, None, 60.0, None, 600.0),
        ("*", "xid48", None, None, None, 0.5, None),
        ("gpu-002", "flap", None, "mlx5_3", 30.0, None, None),
    ]
    assert str(specs[0]) == "gpu-003:gpu2:xid79@120"


def test_it_reads_an_empty_script_as_no_faults():
    assert parse_fault_spec("  \n# nothing yet\n") == []


def test_it_knows_which_hosts_an_entry_applies_to():
    one, every = parse_fault_spec("gpu-003:die, *:die")

    assert one.applies_to("gpu-003")
    assert not one.applies_to("gpu-004")
    assert every.applies_to("gpu-004")
    assert isinstance(one, FaultSpec)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("gpu-003", "Fault 'gpu-003': expected HOST:FAULT (for example gpu-003:gpu2:xid79@120)."),
        ("gpu_3:die", "Fault 'gpu_3:die': 'gpu_3' is not a hostname or '*'."),
        ("gpu-1:xid97@3", "Fault 'gpu-1:xid97@3': unknown fault 'xid97'; expected one of die, flap, straggler"),
        ("gpu-1:xid97", "unknown fault 'xid97'"),
        ("gpu-1:Thermal", "unknown fault 'Thermal'"),
        ("gpu-1:gpu2", "Fault 'gpu-1:gpu2': names no fault; expected one of die, flap"),
        ("gpu-1:thermal:xid79", "names two faults (thermal, xid79); write one per entry."),
        ("gpu-1:thermal:gpu1:gpu2", "names two targets (gpu1, gpu2); write one per entry."),
        ("gpu-1:die:gpu2", "die takes the whole node; it names no GPU or port."),
        ("gpu-1:xid79:mlx5_1", "xid79 happens to a GPU; name one as gpuN, not 'mlx5_1'."),
        ("gpu-1:flap:gpu1", "flap happens to a network port; name one as mlx5_N, not 'gpu1'."),
        ("gpu-1:xid79@abc", "'@abc' is not a time in seconds after the start (for example @120)."),
        ("gpu-1:xid79@-4", "'@-4' is not a time in seconds"),
        ("gpu-1:xid79~x/h", "'~x/h' is not a rate per hour above zero and at most 3600 (for example ~0.5/h)."),
        ("gpu-1:xid79~0/h", "'~0/h' is not a rate per hour above zero"),
        ("gpu-1:xid48~5000/h", "'~5000/h' is not a rate per hour above zero and at most 3600"),
        ("gpu-1:xid79~2", "'~2' is not a rate per hour"),
        ("gpu-1:xid79@5+10", "xid79 happens once; it takes no duration ('+10')."),
        ("gpu-1:thermal@5+0", "'+0' is not a duration in seconds above zero (for example +600)."),
    ],
)
def test_it_names_the_entry_and_the_mistake(entry, message):
    with pytest.raises(FaultSpecError) as error:
        parse_fault_spec(f"gpu-009:die\n{entry}")

    assert message in str(error.value)
    assert isinstance(error.value, ValueError)
