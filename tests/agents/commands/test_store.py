"""The keys an agent has run, on disk: they survive a restart, unreadable ones are said out loud, and
old finished ones are forgotten."""

import logging

from agents.commands.store import RETENTION_S, CommandStore
from agents.protocol import CommandResult

NOW = 1_780_000_000.0


def finished(store: CommandStore, key: str) -> None:
    store.accept(key, invasive=True)
    store.finish(key, CommandResult(key=key, outcome="exited", exit_code=0, finished=store.clock()))


def test_a_finished_key_and_its_result_survive_a_restart(tmp_path):
    store = CommandStore(tmp_path, clock=lambda: NOW)
    finished(store, "k-1")
    store.accept("k-2", invasive=False)

    again = CommandStore(tmp_path, clock=lambda: NOW)

    assert again.get("k-1").result == CommandResult(key="k-1", outcome="exited", exit_code=0, finished=NOW)
    assert (again.get("k-2").state, again.get("k-2").invasive) == ("accepted", False)
    assert [path.stat().st_mode & 0o777 for path in tmp_path.glob("*.json")] == [0o600, 0o600]


def test_a_record_that_cannot_be_read_is_named_in_an_error(tmp_path, caplog):
    (tmp_path / "k-bad.json").write_text("{not json")

    with caplog.at_level(logging.ERROR):
        store = CommandStore(tmp_path)

    assert store.get("k-bad") is None
    assert "cannot read the command record" in caplog.text
    assert "k-bad.json" in caplog.text


def test_finished_keys_are_forgotten_after_the_retention_and_past_the_cap(tmp_path, monkeypatch):
    now = [NOW]
    store = CommandStore(tmp_path, clock=lambda: now[0])
    finished(store, "k-old")
    now[0] += RETENTION_S + 1
    finished(store, "k-new")
    store.accept("k-open", invasive=True)

    assert store.prune() == 1
    assert store.get("k-old") is None
    assert not (tmp_path / "k-old.json").exists()
    assert store.get("k-new") is not None

    monkeypatch.setattr("agents.commands.store.MAX_RECORDS", 1)
    assert store.prune() == 1  # the finished one goes; an open one is never forgotten
    assert [store.get(key) is not None for key in ("k-new", "k-open")] == [False, True]
