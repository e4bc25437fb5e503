"""``dcgmi diag -r LEVEL -j``: NVIDIA DCGM's diagnostic, its JSON output parsed per test and GPU.

Level 1 takes seconds (deployment checks: driver, permissions, persistence mode, pending page
retirement or row remapping, ...), 2 about two minutes (adds PCIe and memory tests, a short stress),
3 about fifteen (targeted stress and power, memory bandwidth, diagnostic GEMMs), 4 an hour or more
(memtest, pulse test, the EUD where installed).

Two layouts are read, told apart by the root key:

- DCGM 4 (``"DCGM Diagnostic"``): each test has ``results``, one per entity (``entity_group``
  "GPU", ``entity_id``), each with ``status``, ``warnings`` (objects with ``warning``,
  ``error_id``, ``error_category``, ``error_severity``) and ``info`` (a list), and a
  ``test_summary``; results of entity-less tests (software checks) are only in the summary;
- DCGM 3 and earlier (``"DCGM GPU Diagnostic"``): per-GPU results carry ``gpu_id`` (a string), or
  ``gpu_ids`` ("0,1,2,3") for node-wide ones, ``info`` is a string, statuses may be upper case
  ("PASS"), and the level-one tests wrote the message under ``warnings`` inside each warning.

Odd cases: ``dcgmi`` may print a line of text before the document (only the outermost ``{...}`` is
read); a failure to run is ``{"DCGM Diagnostic": {"runtime_error": ...}}``; ``--iterations`` wraps
one document per iteration in ``iterations``, with an ``Overall Result``; the JSON never says
"Warn" (the table does): a warning is reported as "Fail"; a test that did not run is left out.
dcgmi's exit code is not the verdict (it is non-zero for a failed test and for a failure to run
alike): the parsed statuses are.
"""

import json
import signal
from dataclasses import dataclass, field
from typing import Any, Final

from agents.executors.context import CheckContext
from agents.executors.params import DcgmDiagParams
from agents.executors.results import measurement
from agents.executors.runtime import CheckSkipped, CheckUnavailable, gpus_label
from agents.executors.tools.process import run_tool
from agents.protocol import CheckMeasurement

ROOTS: Final = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
MAX_TEXTS: Final = 5  # warnings and info lines kept per result
MAX_TEXT: Final = 300


class DcgmiOutputError(ValueError):
    """Output that is not a dcgmi diag JSON document, or one that says the diag could not run."""


@dataclass(frozen=True)
class DiagResult:
    category: str  # "Deployment", "Integration", "Hardware", "Stress"
    test: str  # "memory", "pcie", "Denylist", ...
    gpu: int | None  # None: node-wide
    status: str  # "Pass", "Fail", "Skip", "Warn", "Not Run"
    warnings: tuple[str, ...] = ()
    error_ids: tuple[int, ...] = ()
    info: tuple[str, ...] = ()
    iteration: int | None = None
    entity: str | None = None  # an entity that is not a GPU ("CPU 0")


@dataclass
class DiagRun:
    results: list[DiagResult] = field(default_factory=list)
    version: str | None = None
    driver: str | None = None
    layout: str = ""  # "dcgm4" or "dcgm3"
    overall: str | None = None  # --iterations only

    @property
    def failed(self) -> list[DiagResult]:
        return [result for result in self.results if result.status in ("Fail", "Warn")]


def parse(text: str) -> DiagRun:
    document = _document(text)
    if "iterations" in document:
        run = DiagRun(overall=_status(document.get("Overall Result")))
        for number, iteration in enumerate(document["iterations"] or []):
            _read(iteration, run, number)
        return run
    run = DiagRun()
    _read(document, run, None)
    return run


def _document(text: str) -> dict[str, Any]:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise DcgmiOutputError(f"dcgmi printed no JSON document: {text.strip()[:500]!r}")
    try:
        document = json.loads(text[start : end + 1])
    except json.JSONDecodeError as error:
        raise DcgmiOutputError(f"dcgmi's output is not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise DcgmiOutputError("dcgmi's JSON is not an object")
    return document


def _read(document: dict[str, Any], run: DiagRun, iteration: int | None) -> None:
    root_key = next((key for key in ROOTS if key in document), None)
    if root_key is None:
        raise DcgmiOutputError(f"dcgmi's JSON has none of {ROOTS}; its keys: {sorted(document)[:10]}")
    run.layout = "dcgm4" if root_key == ROOTS[0] else "dcgm3"
    root = document[root_key] or {}
    if root.get("runtime_error"):
        raise DcgmiOutputError(f"dcgmi diag could not run: {str(root['runtime_error'])[:1000]}")
    metadata = document.get("metadata") or {}
    run.version = metadata.get("version") or document.get("version") or root.get("version") or run.version
    run.driver = metadata.get("Driver Version Detected") or document.get("Driver Version Detected") or run.driver
    for category in root.get("test_categories") or []:
        for test in category.get("tests") or []:
            entries = test.get("results") or []
            if not entries and test.get("test_summary"):
                entries = [test["test_summary"]]
            for entry in entries:
                for gpu in _gpus(entry):
                    run.results.append(
                        _result(category.get("category", ""), test.get("name", ""), gpu, entry, iteration)
                    )


def _gpus(entry: dict[str, Any]) -> list[int | None]:
    if "entity_id" in entry:
        return [int(entry["entity_id"])] if entry.get("entity_group", "GPU") == "GPU" else [None]
    if "gpu_id" in entry:
        return [int(entry["gpu_id"])]
    if entry.get("gpu_ids"):
        return [int(part) for part in str(entry["gpu_ids"]).split(",") if part.strip().isdigit()]
    return [None]


def _result(category: str, test: str, gpu: int | None, entry: dict[str, Any], iteration: int | None) -> DiagResult:
    warnings = entry.get("warnings") or []
    if isinstance(warnings, dict):
        warnings = [warnings]
    texts = [str(w.get("warning") or w.get("warnings") or "")[:MAX_TEXT] for w in warnings if isinstance(w, dict)]
    ids = [int(w["error_id"]) for w in warnings if isinstance(w, dict) and isinstance(w.get("error_id"), int)]
    info = entry.get("info") or []
    if isinstance(info, str):
        info = [info]
    entity = None
    if entry.get("entity_group") not in (None, "GPU"):
        entity = f"{entry['entity_group']} {entry.get('entity_id', '')}".strip()
    return DiagResult(
        category=category,
        test=test,
        gpu=gpu,
        status=_status(entry.get("status")) or "Not Run",
        warnings=tuple(texts[:MAX_TEXTS]),
        error_ids=tuple(ids[:MAX_TEXTS]),
        info=tuple(str(line)[:MAX_TEXT] for line in info[:MAX_TEXTS]),
        iteration=iteration,
        entity=entity,
    )


def _status(text: object) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip().title()  # "PASS" (DCGM 3's software tests) as "Pass"


# The check -------------------------------------------------------------------------------------

LEVEL_TIMEOUT_S: Final = {1: 600.0, 2: 1800.0, 3: 3 * 3600.0, 4: 6 * 3600.0}
LEVEL_DURATION: Final = {1: "seconds", 2: "about 2 minutes", 3: "about 15 minutes", 4: "an hour or more"}


def run_check(params: DcgmDiagParams, ctx: CheckContext) -> None:
    binary = ctx.which("dcgmi")
    if binary is None:
        raise CheckSkipped("dcgmi is not on PATH (DCGM is not installed on this node)")
    tested = [gpu.name for gpu in ctx.gpus() if not params.gpus or gpu.index in params.gpus]
    ctx.result.ran_on("cuda", gpus_label(tested), "dcgmi")
    argv = [binary, "diag", "-r", str(params.level), "-j"]
    if params.gpus:
        argv += ["-i", ",".join(str(gpu) for gpu in params.gpus)]
    ctx.result.evidence["command"] = " ".join(argv[1:])
    ctx.reporter.progress(0.0, f"dcgmi diag -r {params.level}", f"takes {LEVEL_DURATION[params.level]}")
    # SIGINT is how dcgmi is told to stop a diag (it then asks the host engine to abort it).
    ran = run_tool(argv, timeout_s=params.timeout_s or LEVEL_TIMEOUT_S[params.level], stop_signal=signal.SIGINT)
    ctx.result.evidence.update(exit_code=ran.returncode, seconds=round(ran.seconds, 3))
    if ran.timed_out:
        raise CheckUnavailable(f"dcgmi diag -r {params.level} did not finish in {ran.seconds:.0f} s")
    try:
        parsed = parse(ran.stdout)
    except DcgmiOutputError as error:
        raise CheckUnavailable(f"{error} (exit {ran.returncode}; stderr: {ran.stderr_tail[-500:]})") from None
    version = f"dcgmi {parsed.version}" if parsed.version else "dcgmi"
    ctx.result.ran_on("cuda", ctx.result.device_name, version)
    ctx.result.evidence.update(layout=parsed.layout, driver=parsed.driver, overall=parsed.overall)
    ctx.result.add(*(_measurement(result) for result in parsed.results))


def _measurement(result: DiagResult) -> CheckMeasurement:
    """A test on a GPU as a count of failures (1 or 0) that must be 0; a skipped test is not judged."""
    evidence: dict[str, object] = {"status": result.status, "category": result.category, "test": result.test}
    for name in ("warnings", "error_ids", "info"):
        if getattr(result, name):
            evidence[name] = list(getattr(result, name))
    for name in ("iteration", "entity"):
        if getattr(result, name) is not None:
            evidence[name] = getattr(result, name)
    judged = result.status in ("Pass", "Fail", "Warn")
    return measurement(
        _name(result.test),
        0 if result.status == "Pass" else 1 if judged else 0,
        "count",
        0 if judged else None,
        "at_most",
        gpu=result.gpu,
        evidence=evidence,
    )


def _name(test: str) -> str:
    """ "Page Retirement/Row Remap" as ``dcgm_page_retirement_row_remap``."""
    words = "".join(ch if ch.isalnum() else " " for ch in test.lower()).split()
    return ("dcgm_" + "_".join(words))[:64] if words else "dcgm_test"
