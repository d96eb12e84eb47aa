"""Training and beam-4 decoding speed of ablate beside fairseq, Hugging Face Marian and OpenNMT-py.

One process, the same architecture for every implementation (post-LN, tied shared embeddings, sinusoidal
positions, ReLU FFN; OpenNMT-py has only pre-LN and is labelled so), random weights and random tokens,
interleaved repetitions after warm-up, medians reported:

- training: target tokens/s of forward + label-smoothed loss + backward + Adam step, dropout 0.1, batches of
  B sentences x L tokens on both sides (no padding: every implementation gets exactly the same work);
- MFU: model FLOPs per second (matmuls and attention, forward x 3) over a matmul peak measured in this run;
- decoding: beam 4 at a forced output length (EOS suppressed until L + 1 steps), sentences/s; ours is also
  checked against our uncached reference search (identical tokens);
- peak memory: the largest RSS increase over the measured steps (sampled every millisecond).

Peers run where they import (install them with ../shared/peers/install_peers.sh and run this file with that
venv's python; ablate is imported from this checkout). Writes JSON lines and a Markdown table:

    python -m benchmarks.speed --configs tiny small base --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ablate.nn.decode import CachedStepper, UncachedStepper, beam_search
from ablate.nn.loss import LogitsBuffer, label_smoothed_loss
from ablate.nn.model import Transformer, TransformerConfig, count_parameters
from ablate.nn.optim import make_adam

ROOT = Path(__file__).resolve().parents[1]

PAD, BOS, EOS = 0, 1, 2  # the ids every implementation is given


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    d: int
    ff: int
    heads: int
    vocab: int
    batch: int  # sentences per training batch (and per decoding batch)
    length: int  # tokens per sentence, source and target; decoding produces length + 1 steps


SHAPES = {
    "tiny": Shape("tiny", 2, 128, 512, 4, 8000, 64, 24),
    "small": Shape("small", 3, 256, 1024, 4, 8000, 64, 24),
    "base": Shape("base", 6, 512, 2048, 8, 37000, 32, 32),
    "big": Shape("big", 6, 1024, 4096, 16, 37000, 32, 32),
}


def train_flops(s: Shape) -> float:
    """Model FLOPs of one training step: 3 x forward (backward = 2 x forward), matmuls + attention."""
    B, L, d, f, N, V = s.batch, s.length, s.d, s.ff, s.layers, s.vocab
    enc = N * (4 * d * d + 2 * d * f) * L + N * 2 * L * L * d  # projections + QK^T, AV per sentence
    dec = N * (6 * d * d + 2 * d * f) * L + N * 2 * d * d * L  # self q,k,v,o + cross q,o + FFN; cross k,v
    dec += N * (2 * L * L * d + 2 * L * L * d)  # self and cross attention scores and sums
    out = d * V * L
    return 3 * 2 * B * (enc + dec + out)


def matmul_peak(threads: int) -> float:
    """Best fp32 GFLOP/s over a few large square matmuls (the denominator of MFU)."""
    best = 0.0
    for n in (1024, 2048, 3072):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        for _ in range(3):
            t = time.perf_counter()
            a @ b
            best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e9)
    return best


class RssPeak:
    """Peak resident memory above the level at entry, sampled from /proc every millisecond."""

    def __enter__(self):
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.mib = (self.peak - self.base) / 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ----------------------------------------------------------------------------------------------------------
# Implementations: build(shape) once; train_step(src, tgt); decode(src) -> (B, T) tokens


class Ablate:
    name = "ablate"
    norm = "post"

    def __init__(self, s: Shape, precision: str = "fp32", compile: bool = False):
        cfg = TransformerConfig(
            vocab_size=s.vocab, n_layers=s.layers, d_model=s.d, d_ff=s.ff, n_heads=s.heads,
            d_k=s.d // s.heads, d_v=s.d // s.heads, dropout=0.1, pad_id=PAD,
        )  # fmt: skip
        self.model = Transformer(cfg)
        self.logits = LogitsBuffer()  # as lit.training_step: the logits' memory kept between steps
        self.opt = make_adam(self.model.parameters())
        for g in self.opt.param_groups:  # make_adam leaves lr to the schedule (1.0); peers get the same 1e-4
            g["lr"] = 1e-4
        self.params = count_parameters(self.model)
        self.bf16 = precision == "bf16"
        self.fwd = torch.compile(self.model) if compile else self.model
        if self.bf16:
            self.name = "ablate bf16"
        if compile:
            self.name += " compiled"

    def train_step(self, src, tgt):
        self.model.train()
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            hidden = self.fwd(src, tgt_in)  # (B, T, d)
            real = tgt_out != PAD
            logits = self.logits.project(hidden[real], self.model.embedding.weight)  # (N, V): real tokens
        sums = label_smoothed_loss(logits, tgt_out[real], 0.1, PAD, consume_logits=True)
        (sums.smoothed / sums.tokens).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def decode(self, src, steps: int, uncached: bool = False):
        self.model.eval()
        stepper = (UncachedStepper if uncached else CachedStepper)(self.model)
        lengths = torch.full((src.shape[0],), src.shape[1])
        out = beam_search(
            ForcedLength(stepper, steps), src, lengths, BOS, EOS, beam=4, alpha=0.6, max_len_a=0.0,
            max_len_b=steps,
        )  # fmt: skip
        return out.tokens


class ForcedLength:
    """Suppresses EOS until the last step, so that every search runs exactly `steps` decoder steps."""

    def __init__(self, inner, steps: int):
        self.inner, self.steps, self.t = inner, steps, 0

    def start(self, src, max_len, beams=1):
        self.t = 0
        return self.inner.start(src, max_len, beams)

    def step(self, tokens, state):
        logits = self.inner.step(tokens, state)
        self.t += 1
        if self.t < self.steps:
            logits[:, EOS] = float("-inf")
        return logits

    def reorder(self, state, index, same_source=False):
        return self.inner.reorder(state, index, same_source)


class Marian:
    """Hugging Face MarianMTModel with the paper's architecture (its parameter count equals ours)."""

    name = "HF Marian"
    norm = "post"

    def __init__(self, s: Shape, **_):
        from transformers import MarianConfig, MarianMTModel

        cfg = MarianConfig(
            vocab_size=s.vocab, decoder_vocab_size=s.vocab, d_model=s.d, encoder_layers=s.layers,
            decoder_layers=s.layers, encoder_attention_heads=s.heads, decoder_attention_heads=s.heads,
            encoder_ffn_dim=s.ff, decoder_ffn_dim=s.ff, activation_function="relu", dropout=0.1,
            attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=512, scale_embedding=True,
            share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=PAD,
            eos_token_id=EOS, bos_token_id=BOS, decoder_start_token_id=BOS, forced_eos_token_id=None,
        )  # fmt: skip
        self.model = MarianMTModel(cfg)
        trained = [p for p in self.model.parameters() if p.requires_grad]  # its sinusoids are frozen weights
        self.opt = torch.optim.Adam(trained, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.params = sum(p.numel() for p in trained)
        self.vocab = s.vocab

    def train_step(self, src, tgt):
        self.model.train()
        out = self.model(input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt[:, :-1])
        loss = F.cross_entropy(
            out.logits.reshape(-1, self.vocab), tgt[:, 1:].reshape(-1), ignore_index=PAD, label_smoothing=0.1
        )
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def decode(self, src, steps: int):
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=src, attention_mask=src != PAD, num_beams=4, length_penalty=0.6,
                min_new_tokens=steps, max_new_tokens=steps, do_sample=False, early_stopping=True,
            )  # fmt: skip
        return out[:, 1:].tolist()


class Fairseq:
    """fairseq 0.12.2 `transformer` (post-LN, --share-all-embeddings), its label-smoothed criterion and its
    SequenceGenerator."""

    name = "fairseq"
    norm = "post"

    def __init__(self, s: Shape, **_):
        import argparse as ap
        from types import SimpleNamespace

        from fairseq.data import Dictionary
        from fairseq.models.transformer import TransformerModel
        from fairseq.models.transformer.transformer_legacy import base_architecture

        d = Dictionary()  # pad 1, eos 2, unk 3, bos 0: remap ours below
        for i in range(s.vocab - len(d)):
            d.add_symbol(f"w{i}")
        self.dict = d
        args = ap.Namespace(
            encoder_embed_dim=s.d, encoder_ffn_embed_dim=s.ff, encoder_layers=s.layers,
            encoder_attention_heads=s.heads, decoder_layers=s.layers, decoder_attention_heads=s.heads,
            decoder_ffn_embed_dim=s.ff, dropout=0.1, share_all_embeddings=True, max_source_positions=1024,
            max_target_positions=1024,
        )  # fmt: skip
        base_architecture(args)
        task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
        self.model = TransformerModel.build_model(args, task)
        # fairseq 0.12 encoder layers also hold copies of their weights for a fused inference path
        # (in_proj_weight, fc1_weight, ...: direct attributes of the layer); training never touches them.
        trained = [
            p
            for n, p in self.model.named_parameters()
            if not re.search(r"layers\.\d+\.[a-z0-9_]+_(weight|bias)$", n)
        ]
        self.opt = torch.optim.Adam(trained, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.params = sum(p.numel() for p in trained)
        self.vocab = s.vocab

    def _ids(self, x):  # our ids (pad 0, bos 1, eos 2) -> fairseq's (bos 0, pad 1, eos 2)
        y = x.clone()
        y[x == PAD], y[x == BOS] = self.dict.pad(), self.dict.bos()
        return y

    def train_step(self, src, tgt):
        from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

        self.model.train()
        src, tgt = self._ids(src), self._ids(tgt)
        lengths = (src != self.dict.pad()).sum(1)
        net_out = self.model(src, lengths, tgt[:, :-1])
        lprobs = self.model.get_normalized_probs(net_out, log_probs=True)
        loss, _ = label_smoothed_nll_loss(
            lprobs.view(-1, self.vocab), tgt[:, 1:].reshape(-1), 0.1, ignore_index=self.dict.pad()
        )
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def decode(self, src, steps: int):
        from fairseq.sequence_generator import SequenceGenerator

        self.model.eval()
        gen = SequenceGenerator(
            [self.model], self.dict, beam_size=4, max_len_a=0, max_len_b=steps - 1, min_len=steps - 1,
            len_penalty=0.6,
        )  # fmt: skip
        src = self._ids(src)
        sample = {"net_input": {"src_tokens": src, "src_lengths": (src != self.dict.pad()).sum(1)}}
        with torch.no_grad():
            out = gen.generate([self.model], sample)
        return [h[0]["tokens"].tolist() for h in out]


class OpenNMT:
    """OpenNMT-py 3.5.1 Transformer (pre-LN with a final norm: it has no post-LN option), shared vocabulary,
    tied embeddings, sinusoidal positions."""

    name = "OpenNMT-py (pre-LN)"
    norm = "pre"

    def __init__(self, s: Shape, **_):
        import onmt.model_builder as mb
        import onmt.opts as opts
        from onmt.utils.parse import ArgumentParser

        parser = ArgumentParser()
        opts.model_opts(parser)
        opts._add_train_general_opts(parser)
        opts.distributed_opts(parser)
        o = parser.parse_args([])
        o.encoder_type = o.decoder_type = "transformer"
        o.enc_layers = o.dec_layers = s.layers
        o.hidden_size = o.word_vec_size = o.src_word_vec_size = o.tgt_word_vec_size = s.d
        o.enc_hid_size = o.dec_hid_size = s.d
        o.transformer_ff = s.ff
        o.heads = s.heads
        o.dropout, o.attention_dropout = [0.1], [0.0]
        o.position_encoding = True
        o.share_embeddings = o.share_decoder_embeddings = True
        o.model_dtype = "fp32"
        ArgumentParser.update_model_opts(o)
        ArgumentParser.validate_model_opts(o)
        vocab = _onmt_vocab(s.vocab)
        self.model = mb.build_base_model(o, {"src": vocab, "tgt": vocab, "decoder_start_token": "<s>"})
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.params = sum(p.numel() for p in self.model.parameters())
        self.vocab = s.vocab

    def train_step(self, src, tgt):
        self.model.train()
        lengths = (src != PAD).sum(1)
        dec_out, _ = self.model(src[..., None], tgt[..., None], lengths, with_align=False)  # it drops tgt[-1]
        logits = self.model.generator(dec_out)
        loss = F.cross_entropy(
            logits.reshape(-1, self.vocab), tgt[:, 1:].reshape(-1), ignore_index=PAD, label_smoothing=0.1
        )
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def decode(self, src, steps: int):
        raise NotImplementedError("OpenNMT-py beam search needs its Translator/vocab objects: not measured")


def _onmt_vocab(n: int):
    import pyonmttok

    v = pyonmttok.build_vocab_from_tokens(
        [f"w{i}" for i in range(n - 4)], special_tokens=["<blank>", "<s>", "</s>", "<unk>"]
    )
    return v


PEERS = {"fairseq": Fairseq, "marian": Marian, "opennmt": OpenNMT}


# ----------------------------------------------------------------------------------------------------------


def batch(s: Shape, gen: torch.Generator):
    src = torch.randint(4, s.vocab, (s.batch, s.length), generator=gen)
    tgt = torch.randint(4, s.vocab, (s.batch, s.length + 1), generator=gen)
    tgt[:, 0] = BOS
    return src, tgt


def time_it(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def bench_shape(s: Shape, impls: dict, args, peak: float, log) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    src, tgt = batch(s, gen)
    tokens = s.batch * s.length
    flops = train_flops(s)
    train_t = {k: [] for k in impls}
    dec_t = {k: [] for k in impls}
    mem = {k: 0.0 for k in impls}
    for impl in impls.values():  # warm-up (and allocator growth) outside the timed region
        for _ in range(args.warmup):
            impl.train_step(src, tgt)
    for _ in range(args.reps):  # interleaved: each repetition times every implementation once
        for name, impl in impls.items():
            with RssPeak() as m:
                train_t[name].append(time_it(lambda i=impl: i.train_step(src, tgt), args.steps))
            mem[name] = max(mem[name], m.mib)
    dec_src = src[: args.decode_batch or s.batch]
    steps = s.length + 1
    for name, impl in impls.items():
        try:
            impl.decode(dec_src[:2], steps)
        except NotImplementedError:
            dec_t[name] = None
    for _ in range(args.reps):
        for name, impl in impls.items():
            if dec_t[name] is not None:
                dec_t[name].append(time_it(lambda i=impl: i.decode(dec_src, steps), 1))
    rows = []
    for name, impl in impls.items():
        t = statistics.median(train_t[name])
        row = {
            "shape": s.name, **asdict(s), "impl": impl.name, "norm": impl.norm, "params": impl.params,
            "train_tok_s": tokens / t, "train_step_s": t, "train_gflops": flops / t / 1e9,
            "mfu": flops / t / 1e9 / peak, "peak_gflops": peak, "train_peak_rss_mib": mem[name],
            "decode_sent_s": (len(dec_src) / statistics.median(dec_t[name])) if dec_t[name] else None,
            "threads": torch.get_num_threads(), "torch": torch.__version__, "reps": args.reps,
        }  # fmt: skip
        rows.append(row)
        log(json.dumps(row))
    return rows


def check_identical(s: Shape) -> bool:
    """Our cached beam search against the uncached reference at the forced length (same weights)."""
    torch.manual_seed(0)
    ours = Ablate(s)
    src, _ = batch(s, torch.Generator().manual_seed(1))
    src = src[:8]
    return ours.decode(src, s.length + 1) == ours.decode(src, s.length + 1, uncached=True)


def markdown(rows: list[dict], peak: float) -> str:
    out = [
        f"Measured {time.strftime('%Y-%m-%d')}, {rows[0]['threads']} threads, torch {rows[0]['torch']}, "
        f"fp32 matmul peak {peak:.0f} GFLOP/s (measured in the same run); medians of {rows[0]['reps']} "
        "interleaved repetitions.",
        "",
        "| shape | implementation | params | train tok/s | vs best peer | MFU | RSS growth MiB | "
        "beam-4 sent/s | vs best peer |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        rs = [r for r in rows if r["shape"] == shape]
        peers = [r for r in rs if not r["impl"].startswith("ablate")]
        best_t = max((r["train_tok_s"] for r in peers), default=None)
        best_d = max((r["decode_sent_s"] for r in peers if r["decode_sent_s"]), default=None)
        for r in rs:
            vt = f"{r['train_tok_s'] / best_t:.2f}x" if best_t and r not in peers else ""
            vd = (
                f"{r['decode_sent_s'] / best_d:.2f}x"
                if best_d and r["decode_sent_s"] and r not in peers
                else ""
            )
            dec = f"{r['decode_sent_s']:.1f}" if r["decode_sent_s"] else "n/a"
            out.append(
                f"| {shape} | {r['impl']} | {r['params']:,} | {r['train_tok_s']:,.0f} | {vt} | "
                f"{100 * r['mfu']:.0f}% | {r['train_peak_rss_mib']:.0f} | {dec} | {vd} |"
            )
    out += [
        "",
        "RSS growth: the peak of resident memory while the timed training steps run, above its level when "
        "they start: memory a step maps anew. Memory kept from one step to the next (ablate's logits "
        "buffer, allocator caches) is not counted again, so this is not a footprint.",
    ]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=["tiny", "small", "base"], choices=sorted(SHAPES))
    ap.add_argument(
        "--peers", nargs="*", default=list(PEERS), help="fairseq marian opennmt (those that import)"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="training steps per timed repetition")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--decode-batch", type=int, default=0, help="sentences per beam search (0: the shape's batch)"
    )
    ap.add_argument("--bf16", action="store_true", help="also time ablate under bf16 autocast")
    ap.add_argument("--compile", action="store_true", help="also time ablate with torch.compile")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jsonl = open(out / f"speed-{stamp}.jsonl", "w")

    def log(line: str) -> None:
        print(line, flush=True)
        jsonl.write(line + "\n")
        jsonl.flush()

    peak = matmul_peak(args.threads)
    print(f"fp32 matmul peak: {peak:.1f} GFLOP/s with {args.threads} threads", flush=True)
    rows = []
    for shape in args.configs:
        s = SHAPES[shape]
        torch.manual_seed(0)
        impls = {"ablate": Ablate(s)}
        print(f"[{shape}] ablate: {impls['ablate'].params:,} parameters", flush=True)
        if args.bf16:
            impls["ablate-bf16"] = Ablate(s, precision="bf16")
        if args.compile:
            impls["ablate-compiled"] = Ablate(s, compile=True)
        for p in args.peers:
            try:
                impls[p] = PEERS[p](s)
                print(f"[{shape}] {impls[p].name}: {impls[p].params:,} parameters", flush=True)
            except Exception as e:  # not installed, or does not build here: say so and go on
                print(
                    f"[{shape}] {p}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:120]})", flush=True
                )
        same = check_identical(s)
        print(f"[{shape}] cached beam search == uncached reference: {same}", flush=True)
        for r in bench_shape(s, impls, args, peak, log):
            r["identical_to_reference"] = same if r["impl"] == "ablate" else None
            rows.append(r)
    table = markdown(rows, peak)
    (out / "speed.md").write_text(table)
    jsonl.close()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
