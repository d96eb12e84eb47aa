"""A checkpoint in a run folder is untrusted input: resuming loads it as weights alone (torch.load with
weights_only=True, Lightning's resume included), so a planted `last.ckpt` whose pickle would run code is
refused in one line naming the folder, and nothing it holds runs."""

import pickle
from pathlib import Path

from test_stop_anywhere import STOP_ENV, run, run_dir


class Plant:
    """Unpickled, it writes a marker file: what a malicious checkpoint could do instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_a_planted_checkpoint_is_refused_in_one_line_and_runs_nothing(tmp_path):
    marker, probe = tmp_path / "marker", tmp_path / "probe"
    pickle.loads(pickle.dumps(Plant(probe)))
    assert probe.read_text() == "ran"  # the plant works on any loader that unpickles objects
    s = run(tmp_path, **{STOP_ENV: "step@6:SIGINT"})
    assert s.returncode == 130, s.stderr[-3000:]
    ckpts = sorted((run_dir(tmp_path) / "checkpoints").glob("*.ckpt"))
    assert ckpts  # the stopped run's: each replaced by the plant
    for path in ckpts:
        path.write_bytes(pickle.dumps({"state_dict": {}, "global_step": 10**6, "x": Plant(marker)}))
    again = run(tmp_path)
    assert again.returncode != 0 and not marker.exists()
    (line,) = again.stderr.strip().splitlines()
    assert "no readable checkpoint" in line and str(run_dir(tmp_path).name) in line, line
