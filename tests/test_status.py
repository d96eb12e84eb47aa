"""A record's status changes only through ablate.records.status: every transition from every status, the
legal ones written, the illegal ones refused with the file left byte for byte as it was."""

import json

import pytest

from ablate.records import folder, status
from ablate.records.status import TRANSITIONS, IllegalTransition

# By hand, from the table in the module's docstring: (transition, status on disk) -> status after.
LEGAL = {
    ("start", None): "running",
    ("start", "running"): "running",  # resumed after its process died
    ("start", "failed"): "running",
    ("start", "interrupted"): "running",
    ("start", "preempted"): "running",
    ("start", "timed_out"): "running",
    ("start", "cancelled"): "running",
    ("reject", None): "failed",
    ("finish", "running"): "finished",
    ("fail", "running"): "failed",
    ("interrupt", "running"): "interrupted",
    ("preempt", "running"): "preempted",
    ("time_out", "running"): "timed_out",
    ("cancel", "running"): "cancelled",
    ("cancel", "preempted"): "cancelled",  # scancel of a job waiting to be requeued
    ("cancel", "timed_out"): "cancelled",
}


def _record(path, was):
    if was is not None:
        path.write_text(json.dumps({"run_id": "r", "status": was, "finished": "then", "stopped_at_step": 7}))


@pytest.mark.parametrize("name", sorted(TRANSITIONS))
@pytest.mark.parametrize("was", [None, *status.STATUSES])
def test_every_transition_from_every_status(tmp_path, name, was):
    path = tmp_path / "record.json"
    _record(path, was)
    before = path.read_bytes() if was else None
    rec = {"run_id": "r", "status": was, "metrics": {"dev_ppl": 5.0}}
    if (name, was) not in LEGAL:
        with pytest.raises(IllegalTransition, match=f"{name} .* is not a transition"):
            status.transition(path, name, rec, "why")
        assert (path.read_bytes() if was else None) == before and (was or not path.exists())
        return
    out = status.transition(path, name, rec, "why", extra=1)
    on_disk = json.loads(path.read_text())
    assert on_disk == out and on_disk["status"] == LEGAL[name, was] and on_disk["reason"] == "why"
    assert on_disk["metrics"] == {"dev_ppl": 5.0} and on_disk["extra"] == 1
    if LEGAL[name, was] == "running":  # a run starting again forgets how it last ended
        assert "finished" not in on_disk and "stopped_at_step" not in on_disk
    else:
        assert on_disk["finished"]


def test_a_finished_record_is_final(tmp_path):
    path = tmp_path / "record.json"
    _record(path, "finished")
    for name in TRANSITIONS:
        with pytest.raises(IllegalTransition):
            status.transition(path, name, {"run_id": "r"})
    with pytest.raises(IllegalTransition):
        status.update(path, {"run_id": "r", "status": "running"})
    assert json.loads(path.read_text())["status"] == "finished"


def test_update_keeps_a_running_record_running(tmp_path):
    path = tmp_path / "record.json"
    _record(path, "running")
    status.update(path, {"run_id": "r", "status": "running", "params": 3})
    assert json.loads(path.read_text())["params"] == 3
    with pytest.raises(IllegalTransition):  # a status is changed by a named transition, never by update
        status.update(path, {"run_id": "r", "status": "finished"})
    for was in ("failed", "interrupted", "cancelled"):
        _record(path, was)
        with pytest.raises(IllegalTransition):
            status.update(path, {"run_id": "r", "status": "running"})


def test_settle_moves_only_a_record_the_transition_leaves_from(tmp_path):
    """A launcher learning how a job ended: a record that already says how its run ended is left."""
    path = tmp_path / "record.json"
    assert status.settle(path, "fail", "no record yet") is None and not path.exists()
    for was, name, after in [
        ("running", "fail", "failed"),
        ("finished", "fail", "finished"),
        ("interrupted", "fail", "interrupted"),
        ("timed_out", "cancel", "cancelled"),
        ("timed_out", "preempt", "timed_out"),
    ]:
        _record(path, was)
        status.settle(path, name, "the job ended")
        assert json.loads(path.read_text())["status"] == after, (was, name)
    path.write_text("{not json")
    assert status.settle(path, "fail", "x") is None and path.read_text() == "{not json"


def test_a_running_record_without_a_live_process_shows_as_interrupted(tmp_path):
    run = tmp_path / "base-0123-s1"
    run.mkdir()
    rec = {"run_id": run.name, "status": "running"}
    assert status.shown(rec, run) == "interrupted"
    with folder.run_lock(run) as held:
        assert held and status.shown(rec, run) == "running"
    assert status.shown({"status": "finished"}, run) == "finished"


def test_no_transition_writes_over_a_record_of_another_schema(tmp_path):
    """A record a newer version wrote is refused by name, never moved by this version's transitions."""
    import json

    from ablate.records import status

    path = tmp_path / "record.json"
    text = json.dumps({"run_id": "r", "status": "running", "schema_version": 2})
    path.write_text(text)
    with pytest.raises(ValueError, match=r'"schema_version": 2 is not 1, this version\'s'):
        status.transition(path, "fail", {"run_id": "r"}, reason="x")
    assert path.read_text() == text
