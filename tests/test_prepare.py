"""Preparing a corpus: WMT14-style sources (fixtures in the real archive layouts) -> prepared folder, the
vocabulary sample, and the command line (ablate.prepare)."""

import dataclasses
import gzip
import hashlib
import http.server
import json
import re
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from ablate.config import DataConfig
from ablate.data import binarize, corpora, wmt14
from ablate.data.corpora import is_prepared
from ablate.data.dataset import Encoded, collate
from ablate.data.sources import DataError
from ablate.prepare import load_config, main, parse_args

FIX = Path(__file__).parent / "fixtures" / "wmt"
VOCAB = 120
# archive name -> members (paths inside the archive, as in the real releases)
LAYOUT = {
    "training-parallel-europarl-v7.tgz": ["training/europarl-v7.de-en.en", "training/europarl-v7.de-en.de"],
    "training-parallel-commoncrawl.tgz": ["commoncrawl.de-en.en", "commoncrawl.de-en.de"],
    "training-parallel-nc-v9.tgz": [
        "training/news-commentary-v9.de-en.en",
        "training/news-commentary-v9.de-en.de",
    ],
    "wmt13-test.tgz": ["test/newstest2013-src.en.sgm", "test/newstest2013-src.de.sgm"],
    "wmt14-test-full.tgz": [
        "test-full/newstest2014-deen-src.en.sgm",
        "test-full/newstest2014-deen-ref.de.sgm",
    ],
}
LINES = {
    "training-parallel-europarl-v7.tgz": 8,
    "training-parallel-commoncrawl.tgz": 8,
    "training-parallel-nc-v9.tgz": 4,
    "wmt13-test.tgz": 3,
    "wmt14-test-full.tgz": 2,
}


def make_spec(where: Path) -> wmt14.Spec:
    """The real spec (members, languages), pointed at tgz archives of the fixtures with their checksums."""
    where.mkdir(parents=True, exist_ok=True)
    archives = []
    for real in wmt14.WMT14_EN_DE.archives:
        path = where / real.name
        with tarfile.open(path, "w:gz") as tf:
            for member in LAYOUT[real.name]:
                tf.add(FIX / member, arcname=member)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        archives.append(wmt14.Archive(real.name, path.as_uri(), size=path.stat().st_size, sha256=sha))
    parts = tuple(dataclasses.replace(p, lines=LINES[p.archive]) for p in wmt14.WMT14_EN_DE.parts)
    return dataclasses.replace(wmt14.WMT14_EN_DE, archives=tuple(archives), parts=parts)


def config(tmp_path: Path, **kw) -> DataConfig:
    kw.setdefault("name", "wmt14_en_de")
    return DataConfig(vocab_size=VOCAB, spm_sentences=1000, cache_dir=str(tmp_path / "cache"), **kw)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def prepare(cfg: DataConfig, log=print) -> Path:
    return corpora.prepare_corpus(cfg, log).root


@pytest.fixture
def spec(tmp_path, monkeypatch):
    """The fixture release in place of the real one: data=wmt14_en_de reads it."""
    spec = make_spec(tmp_path / "server")
    monkeypatch.setitem(corpora.SOURCES, "wmt14_en_de", corpora.wmt14_source(spec))
    return spec


def test_wmt14_end_to_end_reads_like_the_datamodule(tmp_path, spec):
    log = []
    out = prepare(config(tmp_path), log=log.append)
    assert is_prepared(out) and out.parent == tmp_path / "cache" / "data"
    meta = json.loads((out / "meta.json").read_text())
    train = meta["splits"]["train"]
    assert train["lines"] == 20 and train["pairs"] == 15
    assert train["dropped"] == {"empty": 2, "invalid_utf8": 1, "length_ratio": 1, "too_long": 1}
    assert meta["splits"]["dev"]["pairs"] == 3 and meta["splits"]["test"]["pairs"] == 2
    assert meta["vocab_size"] == VOCAB and meta["source"] == "wmt14_en_de"
    assert any("invalid_utf8 1" in m for m in log)  # bad data is printed, not only stored

    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    for split in ("train", "dev", "test"):
        enc = Encoded.load(out / f"{split}.npz")
        assert enc.src_tokens.dtype == np.int32 and enc.src_offsets.dtype == np.int64
        assert len(enc) == meta["splits"][split]["pairs"]
        assert int(enc.tgt_lens.sum()) == meta["splits"][split]["tgt_tokens"]
        for side, toks, offs in (
            ("src", enc.src_tokens, enc.src_offsets),
            ("tgt", enc.tgt_tokens, enc.tgt_offsets),
        ):
            text = lines(out / f"{split}.{side}.txt")
            ids = [toks[offs[i] : offs[i + 1]].tolist() for i in range(len(enc))]
            assert ids == sp.encode(text)  # the arrays are the encoding of the text files, row by row
            if split == "train":  # every character was seen: decoding gives the text back
                assert [sp.decode(x) for x in ids] == text
        mm = binarize.load_npz_mmap(out / f"{split}.npz")
        assert isinstance(mm["src_tokens"], np.memmap)
        assert all(np.array_equal(mm[k], getattr(enc, k)) for k in mm)
        batch = collate(Encoded(**mm), np.arange(len(enc)))
        assert batch.src.shape[0] == len(enc)
    dev_tgt = lines(out / "dev.tgt.txt")
    assert dev_tgt[2] == "Allerdings hält das Brennan Center letzteres für einen Mythos &amp; mehr."
    train_src = lines(out / "train.src.txt")
    assert "Free parking is available on site." in train_src  # an inner CR would split the line on reading


def test_second_call_does_nothing(tmp_path, spec):
    cfg = config(tmp_path)
    out = prepare(cfg, log=lambda m: None)
    before = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    for p in (tmp_path / "cache" / "raw" / "wmt14_en_de").glob("*.tgz"):
        p.unlink()  # the raw downloads are not needed once prepared
    log = []
    assert prepare(cfg, log=log.append) == out
    assert [line for line in log if not line.startswith("warning: ")] == [
        f"{out}: already prepared, nothing to do"
    ]
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == before
    # a prepared folder given as data.root is used as is
    assert prepare(config(tmp_path, root=str(out)), log=lambda m: None) == out


def test_a_crash_while_encoding_leaves_nothing_trusted(tmp_path, spec, monkeypatch):
    cfg = config(tmp_path)
    calls = []

    def boom(sp, batch, threads):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("killed")
        return sp.encode(batch)

    with monkeypatch.context() as m, pytest.raises(RuntimeError, match="killed"):
        m.setattr(binarize, "_encode_chunk", boom)
        prepare(cfg, log=lambda m: None)
    data = tmp_path / "cache" / "data"
    assert not list(data.rglob("meta.json")) and not list(data.glob(".tmp-*"))
    assert not [p for p in data.iterdir() if p.is_dir()]
    out = prepare(cfg, log=lambda m: None)
    assert is_prepared(out) and json.loads((out / "meta.json").read_text())["splits"]["train"]["pairs"] == 15


def test_a_stale_temporary_folder_is_never_trusted(tmp_path, spec):
    cfg = config(tmp_path)
    out = prepare(cfg, log=lambda m: None)
    stale = out.parent / f".tmp-{out.name}-dead"
    stale.mkdir()
    (out / "meta.json").unlink()  # as if the folder had been left incomplete
    assert prepare(cfg, log=lambda m: None) == out
    assert is_prepared(out) and not stale.exists()


def test_line_count_mismatch_names_both_files(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "train.en").write_text("a b\nc d\ne f\n")
    (d / "train.de").write_text("a b\nc d\n")
    (d / "dev.en").write_text("x\n")
    (d / "dev.de").write_text("y\n")
    cfg = config(
        tmp_path,
        name="files",
        **{
            f"{s}_{x}": str(d / f"{s}.{lang}")
            for s in ("train", "dev")
            for x, lang in (("src", "en"), ("tgt", "de"))
        },
    )
    with pytest.raises(DataError, match=r"train\.en has 3 lines but .*train\.de has 2"):
        prepare(cfg, log=lambda m: None)
    assert not list((tmp_path / "cache" / "data").rglob("meta.json"))


def test_a_file_short_of_its_expected_count_is_an_error(tmp_path, spec, monkeypatch):
    spec = dataclasses.replace(spec, parts=(dataclasses.replace(spec.parts[0], lines=9),) + spec.parts[1:])
    monkeypatch.setitem(corpora.SOURCES, "wmt14_en_de", corpora.wmt14_source(spec))
    with pytest.raises(DataError, match=r"europarl-v7\.de-en\.en: 8 lines, expected 9"):
        prepare(config(tmp_path), log=lambda m: None)
    assert not (tmp_path / "cache" / "raw" / "wmt14_en_de" / "europarl-v7.de-en.en").exists()


def test_sgm_segments_in_order_whitespace_collapsed_nothing_unescaped(tmp_path):
    segs = wmt14.parse_sgm_file(FIX / "test" / "newstest2013-src.en.sgm")
    assert segs == [
        "A Republican strategy to counter the re-election of Obama",
        "Republican leaders justified their policy by the need to combat electoral fraud.",
        "However, the Brennan Centre considers this a myth &amp; more.",
    ]
    bad = tmp_path / "bad.sgm"
    bad.write_text('<doc>\n<seg id="1">open\n</doc>\n')
    with pytest.raises(DataError, match=r"bad\.sgm:2: <seg> without"):
        wmt14.parse_sgm_file(bad)


def test_checksum_mismatch_names_the_file_and_keeps_nothing(tmp_path):
    src = tmp_path / "payload.tgz"
    src.write_bytes(b"not the release")
    dest = tmp_path / "raw" / "training-parallel-nc-v9.tgz"
    wrong = wmt14.Archive(dest.name, src.as_uri(), sha256="0" * 64)
    with pytest.raises(DataError, match=r"training-parallel-nc-v9\.tgz.*sha256 .* does not match"):
        wmt14.download(wrong.url, dest, wrong)
    assert not dest.exists() and not list(dest.parent.glob("*.part"))
    dest.write_bytes(b"not the release")  # a file already there is checked too
    with pytest.raises(DataError, match=r"training-parallel-nc-v9\.tgz: sha256"):
        wmt14.verify_archive(dest, wrong)


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    payload = b""
    ranges: list = []

    def do_GET(self):  # noqa: N802
        start = 0
        self.ranges.append(self.headers.get("Range"))
        if self.headers.get("Range"):
            start = int(self.headers["Range"].split("=")[1].split("-")[0])
            self.send_response(206)
        else:
            self.send_response(200)
        body = self.payload[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_download_resumes_a_partial_file(tmp_path):
    payload = bytes(range(256)) * 100
    _RangeHandler.payload = payload
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dest = tmp_path / "a.tgz"
        (tmp_path / "a.tgz.part").write_bytes(payload[:1000])  # an interrupted earlier download
        arch = wmt14.Archive(
            "a.tgz",
            f"http://127.0.0.1:{server.server_port}/a.tgz",
            size=len(payload),
            sha256=hashlib.sha256(payload).hexdigest(),
        )
        wmt14.download(arch.url, dest, arch)
        assert _RangeHandler.ranges == ["bytes=1000-"]  # asked only for the rest
        assert dest.read_bytes() == payload and not (tmp_path / "a.tgz.part").exists()
    finally:
        server.shutdown()


def test_multi30k_download_verifies_line_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(wmt14, "MULTI30K_LINES", {"train": 3, "val": 2, "test_2016_flickr": 1})
    remote = tmp_path / "remote"
    remote.mkdir()
    for stem, n in wmt14.MULTI30K_LINES.items():
        for lang in ("en", "de"):
            with gzip.open(remote / f"{stem}.{lang}.gz", "wt") as f:
                f.write("".join(f"{lang} {i}\n" for i in range(n + (stem == "val" and lang == "de"))))
    base = remote.as_uri() + "/{name}"
    with pytest.raises(DataError, match=r"val\.de\.gz: 3 lines, expected 2"):
        wmt14.fetch_multi30k(tmp_path / "m30k", base=base, log=lambda m: None)
    assert not (tmp_path / "m30k" / "val.de.gz").exists()
    assert (tmp_path / "m30k" / "train.en.gz").is_file()  # verified files stay; a rerun fetches the rest
    with gzip.open(remote / "val.de.gz", "wt") as f:
        f.write("de 0\nde 1\n")
    wmt14.fetch_multi30k(tmp_path / "m30k", base=base, log=lambda m: None)
    assert wmt14.multi30k_complete(tmp_path / "m30k", ("en", "de"))


def test_multi30k_local_folder_is_verified_without_download(multi30k_dir, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError("must not download")

    monkeypatch.setattr(wmt14, "download", no_network)
    assert wmt14.fetch_multi30k(multi30k_dir, log=lambda m: None) == multi30k_dir


def test_command_line_forms():
    assert parse_args(["--data", "wmt14_en_de", "--root", "R", "--cache", "C"]) == (
        "wmt14_en_de",
        ["root=R", "cache_dir=C"],
        None,
    )
    name, rest, task = parse_args(["data=wmt14_en_de", "data.root=R", "data.spm_sentences=5"])
    assert task is None and parse_args(["task=m:T", "data=x"]) == ("x", [], "m:T")
    cfg = load_config(name, rest)
    assert (cfg.name, cfg.root, cfg.vocab_size, cfg.spm_model_type, cfg.spm_sentences) == (
        "wmt14_en_de",
        "R",
        37000,
        "bpe",
        5,
    )


@pytest.mark.parametrize(
    "dev_de, message",
    [
        (b"eins\n\ndrei\n", r"dev\.de:2: empty line in a dev/test file"),
        (b"eins\nzwei\ndr\xe9i\n", r"dev\.de:3: invalid UTF-8"),
        (b"eins\n" + b"x" * 2001 + b"\ndrei\n", r"dev\.de:2: line of 2,001 characters .*at most 2,000"),
    ],
)
def test_a_bad_dev_line_is_an_error_naming_file_and_line(tmp_path, dev_de, message):
    d = tmp_path / "in"
    d.mkdir()
    (d / "train.en").write_text("one two\nthree four\n")
    (d / "train.de").write_text("eins zwei\ndrei vier\n")
    (d / "dev.en").write_text("one\ntwo\nthree\n")
    (d / "dev.de").write_bytes(dev_de)
    files = {
        f"{s}_{x}": str(d / f"{s}.{lang}")
        for s in ("train", "dev")
        for x, lang in (("src", "en"), ("tgt", "de"))
    }
    with pytest.raises(DataError, match=message):
        prepare(config(tmp_path, name="files", **files), log=lambda m: None)


def test_the_command_line_and_training_prepare_one_folder(tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    words = ["a b c", "d e f g", "h i", "j k l m n", "o p q"]
    for split, n in (("train", 60), ("dev", 5)):
        (d / f"{split}.en").write_text("".join(f"{words[i % 5]} {i}\n" for i in range(n)))
        (d / f"{split}.de").write_text("".join(f"{words[(i + 1) % 5]} {i}\n" for i in range(n)))
    args = ["data=files", "data.vocab_size=40", f"data.cache_dir={tmp_path / 'cache'}"] + [
        f"data.{split}_{side}={d / f'{split}.{lang}'}"
        for split in ("train", "dev")
        for side, lang in (("src", "en"), ("tgt", "de"))
    ]
    assert main(args) == 0
    printed = Path(capsys.readouterr().out.strip().splitlines()[-1])
    cfg = load_config(*parse_args(args)[:2])
    log = []
    assert corpora.prepare_corpus(cfg, log.append).root == printed  # what training asks for
    said = [line for line in log if not line.startswith("warning: ")]  # a small test corpus is warned of
    assert said == [f"{printed}: already prepared, nothing to do"]
    corpus = corpora.load_corpus(cfg)  # the in-memory view is the text the builder wrote
    assert corpus.key == json.loads((printed / "meta.json").read_text())["corpus_key"]
    for split in ("train", "dev"):
        assert corpus.splits[split].src == lines(printed / f"{split}.src.txt")
        assert corpus.splits[split].tgt == lines(printed / f"{split}.tgt.txt")


def test_an_unknown_data_name_is_a_config_error_naming_the_key(tmp_path):
    from ablate.config import ConfigError

    with pytest.raises(ConfigError, match=r"data\.name='wmt15' is not one of builtin, files, multi30k"):
        prepare(config(tmp_path, name="wmt15"))


def test_no_data_module_imports_the_command_line():
    import ast

    for path in (Path(__file__).resolve().parents[1] / "ablate" / "data").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] + [str(node.module)]
            else:
                continue
            assert "ablate.prepare" not in names, path


def test_a_source_a_task_brings_is_prepared_by_the_command_with_its_task(tmp_path, capsys, monkeypatch):
    """`ablate.prepare task=reverse_task:ReverseTask data=reverse` prepares the folder training asks for;
    without task= the source is unknown, and the line says where sources come from."""
    import subprocess
    import sys

    user = Path(__file__).resolve().parent / "user_task"
    args = ["data=reverse", "task_cfg.train_pairs=300", "task_cfg.dev_pairs=20", "task_cfg.test_pairs=20",
            "data.vocab_size=100", f"data.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    alone = subprocess.run(
        [sys.executable, "-m", "ablate.prepare", *args], capture_output=True, text=True, timeout=120
    )
    assert alone.returncode == 2
    # the sources a fresh process knows (a test earlier in this process may have registered more)
    said = re.fullmatch(
        r"error: data\.name='reverse' is not one of (.+) \(or of the sources of task=\)", alone.stderr.strip()
    )
    assert said, alone.stderr
    known = said[1].split(", ")
    assert {"builtin", "multi30k", "wmt14_en_de", "wsj"} <= set(known) and "reverse" not in known
    monkeypatch.syspath_prepend(str(user))
    assert main(["task=reverse_task:ReverseTask", *args]) == 0
    printed = Path(capsys.readouterr().out.strip().splitlines()[-1])
    from dataclasses import asdict

    from ablate.config import to_dataclass

    data = asdict(load_config("reverse", [a for a in args[1:] if a.startswith("data.")]))
    own = {"train_pairs": 300, "dev_pairs": 20, "test_pairs": 20}
    run = to_dataclass({"task": "reverse_task:ReverseTask", "data": data, "task_cfg": own})
    assert corpora.prepare_corpus(run, lambda m: None).root == printed
    assert (printed / "train.tgt.txt").read_text().split("\n")[0] == " ".join(
        reversed((printed / "train.src.txt").read_text().split("\n")[0].split())
    )
