"""The command messages of the wire protocol: what the server may ask an agent to run, and what the
agent may answer, refused with the field's name on either side when out of bounds."""

import math

import msgspec
import pytest

from agents import protocol

DEADLINE = 1_800_000_000.0


def command(**fields: object) -> protocol.Command:
    return protocol.Command(**{"key": "k-1", "check": "health", "time_limit_s": 60, "deadline": DEADLINE, **fields})


def test_a_command_goes_both_ways_unchanged():
    sent = command(params={"max_pcie_replays": 10, "ignore_xids": [13, 31]}, env={"NCCL_ALGO": "Ring"})
    assert protocol.decode_server_message(protocol.encode(sent)) == sent


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PATH", "PYTHONPATH", "nccl_algo", "NCCL_", "CP_COMMAND_KEY"])
def test_a_command_may_not_set_what_would_hand_over_the_node(name):
    frame = protocol.encode(command(env={"NCCL_ALGO": "Ring"})).replace(b"NCCL_ALGO", name.encode())

    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_server_message(frame)

    assert refused.value.code == "invalid"
    assert "$.env" in refused.value.message


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"time_limit_s": 0}, "time_limit_s"),
        ({"time_limit_s": protocol.MAX_TIME_LIMIT_S + 1}, "time_limit_s"),
        ({"key": "no spaces"}, "key"),
        ({"check": "rm -rf /"}, "check"),
        ({"params": {"x": "y" * protocol.MAX_PARAMS_BYTES}}, "params of"),
    ],
)
def test_a_command_out_of_bounds_is_refused_naming_the_field(fields, named):
    raw = msgspec.json.encode({"type": "command", "key": "k-1", "check": "health", "time_limit_s": 60,
                               "deadline": DEADLINE, **fields})  # fmt: skip

    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_server_message(raw)

    assert refused.value.code == "invalid"
    assert named in refused.value.message


def test_a_command_cannot_be_built_with_parameters_json_cannot_carry():
    with pytest.raises(ValueError, match="params holds a NaN"):
        command(params={"duration_s": math.nan})


def test_a_result_says_its_exit_code_exactly_when_its_process_exited():
    with pytest.raises(ValueError, match="exit_code is given when, and only when"):
        protocol.CommandResult(key="k-1", outcome="exited", finished=DEADLINE)
    with pytest.raises(ValueError, match="exit_code is given when, and only when"):
        protocol.CommandResult(key="k-1", outcome="timed_out", finished=DEADLINE, exit_code=-15)
    ok = protocol.CommandResult(key="k-1", outcome="exited", exit_code=0, started=DEADLINE - 5, finished=DEADLINE)
    assert protocol.decode_agent_message(protocol.encode(ok)) == ok


def test_a_result_carrying_a_check_result_that_contradicts_itself_is_refused_with_its_key():
    result = {
        "type": "check_result", "check": "compute", "device": "cpu", "device_name": "cpu", "tool": "torch",
        "started": DEADLINE - 5, "finished": DEADLINE, "passed": True,
        "measurements": [{"name": "tflops_fp32", "measured": 1.0, "unit": "TFLOP/s", "expected": 2.0, "passed": True}],
    }  # fmt: skip
    frame = msgspec.json.encode(
        {
            "type": "command_result",
            "key": "k-7",
            "outcome": "exited",
            "exit_code": 0,
            "finished": DEADLINE,
            "result": result,
        }
    )

    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_agent_message(frame)

    assert (refused.value.code, refused.value.key) == ("invalid", "k-7")
    assert refused.value.reply().key == "k-7"  # the agent learns which command's report was refused
    assert "contradicts" in refused.value.message


def test_a_results_output_is_bounded():
    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_agent_message(
            protocol.encode(protocol.CommandResult(key="k-1", outcome="refused", finished=DEADLINE)).replace(
                b'"refused"', b'"refused","output":"' + b"x" * (protocol.MAX_OUTPUT_CHARS + 1) + b'"'
            )
        )
    assert "output" in refused.value.message


def test_a_relayed_line_is_a_check_line_and_nothing_else():
    update = protocol.CommandUpdate(key="k-1", line=protocol.CheckProgress(check="compute", fraction=0.5, step="bf16"))
    assert protocol.decode_agent_message(protocol.encode(update)) == update
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_agent_message(protocol.encode(update).replace(b"check_progress", b"check_result"))
