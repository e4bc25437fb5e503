"""The check lines of the wire protocol: what a check may write, and what the runner and the server
refuse (with a code and a message naming the field)."""

import msgspec
import pytest

from agents.protocol import (
    MAX_CHECK_LINE_BYTES,
    MAX_MEASUREMENTS_PER_RESULT,
    CheckLog,
    CheckMeasurement,
    CheckProgress,
    CheckResult,
    ProtocolError,
    decode_check_line,
    encode,
)

STARTED = 1_780_000_000.0


def result(**fields) -> dict:
    base = {
        "type": "check_result",
        "check": "compute",
        "device": "cpu",
        "device_name": "AMD EPYC (CPU, 2 threads)",
        "tool": "torch 2.13.0",
        "started": STARTED,
        "finished": STARTED + 30,
    }
    return {**base, **fields}


def measured(**fields) -> dict:
    return {"name": "tflops_bf16", "measured": 712.5, "unit": "TFLOP/s", **fields}


def test_it_round_trips_every_check_line():
    lines = [
        CheckProgress(check="nvlink", fraction=0.5, step="peer-to-peer copies", message="28 of 56 pairs"),
        CheckLog(check="storage", level="warning", message="no O_DIRECT on tmpfs"),
        CheckResult(
            check="nvlink",
            device="cuda",
            device_name="8 × NVIDIA H100 80GB HBM3",
            tool="torch 2.4.1",
            started=STARTED,
            finished=STARTED + 4,
            passed=False,
            measurements=[
                CheckMeasurement(name="p2p", measured=381.2, unit="GB/s", expected=335, passed=True, gpu=0, peer=1),
                CheckMeasurement(name="p2p", measured=120.4, unit="GB/s", expected=335, passed=False, gpu=2, peer=1),
            ],
            evidence={"matrix_gbps": [[None, 381.2], [120.4, None]], "size_bytes": 268435456},
        ),
    ]

    for line in lines:
        assert decode_check_line(encode(line)) == line


@pytest.mark.parametrize(
    ("line", "code", "words"),
    [
        (result(measurements=[measured(measured=float("nan"))]), "invalid", "Expected `float`, got `null`"),
        (result(measurements=[measured(unit="furlongs")]), "invalid", "$.measurements[0].unit"),
        (result(measurements=[measured(name="TFLOPS bf16")]), "invalid", "$.measurements[0].name"),
        (result(measurements=[measured(measured=1e16)]), "invalid", "$.measurements[0].measured"),
        (result(check="fortune_telling"), "invalid", "$.check"),
        (result(device="gpu"), "invalid", "$.device"),
        (result(finished=STARTED - 1), "invalid", "cannot finish before it started"),
        (result(surprise=1), "invalid", "unknown field `surprise`"),
        (result(passed=True), "invalid", "passed=true needs judged measurements"),
        (
            result(passed=True, error="torch is missing", measurements=[measured(expected=1, passed=True)]),
            "invalid",
            "",
        ),
        (result(passed=None, measurements=[measured(expected=900, passed=False)]), "invalid", "has passed=false"),
        (result(error="x", skipped="y"), "invalid", "either skipped or in error"),
        (result(measurements=[measured(expected=900, passed=True)]), "invalid", "contradicts measured 712.5"),
        (result(evidence={"deep": [[[[[[["too deep"]]]]]]]}), "invalid", "nested deeper"),
        (result(evidence={"blob": "x" * 200_000}), "invalid", "bytes exceeds"),
        (result(measurements=[measured(evidence={"blob": "x" * 5000})]), "invalid", "4096-byte limit"),
        (result(measurements=[measured()] * (MAX_MEASUREMENTS_PER_RESULT + 1)), "invalid", "length <= 1024"),
        ({"type": "check_progress", "check": "compute", "fraction": 1.5, "step": "bf16"}, "invalid", "$.fraction"),
        ({"type": "check_telepathy", "check": "compute"}, "unknown_type", "check_telepathy"),
    ],
)
def test_it_refuses_what_the_server_would(line, code, words):
    with pytest.raises(ProtocolError) as refused:
        decode_check_line(msgspec.json.encode(line))

    assert refused.value.code == code
    assert words in refused.value.message


def test_it_refuses_an_oversize_line_before_parsing_it():
    with pytest.raises(ProtocolError) as refused:
        decode_check_line(b"{" + b" " * MAX_CHECK_LINE_BYTES + b"}")

    assert refused.value.code == "oversize"


def test_it_refuses_to_build_a_result_it_could_not_send():
    with pytest.raises(ValueError, match="finite"):
        CheckMeasurement(name="copy", measured=float("inf"), unit="GB/s")
    with pytest.raises(ValueError, match="NaN or infinite"):
        CheckResult(**{k: v for k, v in result().items() if k != "type"}, evidence={"drop": float("nan")})


def test_a_measurement_is_judged_by_its_bound():
    errors = CheckMeasurement(name="xids", measured=0, unit="count", expected=0, bound="at_most", passed=True)
    slow = CheckMeasurement(name="h2d", measured=26.1, unit="GB/s", expected=52, passed=False)

    assert decode_check_line(encode(result_with(errors, slow, passed=False))).passed is False


def result_with(*measurements: CheckMeasurement, passed: bool | None) -> CheckResult:
    return CheckResult(
        **{k: v for k, v in result().items() if k != "type"}, measurements=list(measurements), passed=passed
    )
