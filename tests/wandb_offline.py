"""Read an offline W&B run file (`offline-run-*/run-<id>.wandb`) without network.

wandb 0.31 ships no reader for these files. The format is a LevelDB-style log: a 7-byte file header
(":W&B", magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each chunk a 7-byte header (CRC-32,
length, type: full / first / middle / last) and its bytes; a record is one full chunk or first..last.
Each record is a `wandb.proto.wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

BLOCK = 32768
HEADER = struct.Struct("<4sHB")
CHUNK = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path):
    """Yield the serialized protobuf records of a .wandb file, checking every chunk's CRC."""
    data = Path(path).read_bytes()
    ident, magic, _version = HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path}: not a W&B run file")
    pos, pending = HEADER.size, b""
    while pos + CHUNK.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK.size:  # the rest of a block too small for a header is padding
            pos += left
            continue
        crc, length, kind = CHUNK.unpack_from(data, pos)
        body = data[pos + CHUNK.size : pos + CHUNK.size + length]
        if length == 0 and kind == 0:
            break
        if zlib.crc32(bytes([kind]) + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"{path}: bad checksum at byte {pos}")
        pos += CHUNK.size + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            pending = body
        elif kind == MIDDLE:
            pending += body
        elif kind == LAST:
            yield pending + body
            pending = b""


def summary(path: str | Path) -> dict:
    """{'config', 'history' (a list of {key: value}), 'summary', 'run' (group, job_type, id, name, project,
    entity), 'metrics' (the define_metric summary goals by name), 'artifacts' (name, type, files)} of an
    offline run."""
    from wandb.proto import wandb_internal_pb2 as pb

    # exited: the run's exit record is there, the file is whole
    out: dict = {"config": {}, "history": [], "summary": {}, "run": {}, "metrics": {}, "artifacts": [],
                 "exited": False}  # fmt: skip
    for raw in records(path):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        out["exited"] |= kind == "exit"
        if kind == "run":
            out["run"] = {
                "group": rec.run.run_group,
                "job_type": rec.run.job_type,
                "id": rec.run.run_id,
                "name": rec.run.display_name,
                "project": rec.run.project,
                "entity": rec.run.entity,
            }
        if kind == "artifact":
            a = rec.artifact
            paths = [e.path for e in a.manifest.contents]
            out["artifacts"].append({"name": a.name, "type": a.type, "files": paths})
        if kind == "metric":  # define_metric: {name: summary goals}
            m = rec.metric
            out["metrics"][m.name or m.glob_name] = {
                g
                for g, on in (("min", m.summary.min), ("max", m.summary.max), ("last", m.summary.last))
                if on
            }
        if kind in ("config", "run"):  # wandb.init(config=...) arrives inside the run record
            for item in (rec.config if kind == "config" else rec.run.config).update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            )
        elif kind == "summary":
            for item in rec.summary.update:
                out["summary"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out


def written_summary(path: str | Path, timeout: float = 30.0) -> dict:
    """summary() once W&B's service has written the run's exit record: in the test's own process,
    wandb.finish() can return before the service has flushed the offline file."""
    import time

    t0 = time.monotonic()
    while True:
        try:
            s = summary(path)
        except ValueError:  # a chunk half-written
            s = {"exited": False}
        if s["exited"] or time.monotonic() - t0 > timeout:
            return s
        time.sleep(0.2)
