"""The CUDA paths against the CPU ones: SDPA attention, fused dropout, bf16 autocast, beam search on the GPU.

Skipped without a CUDA device (CI has none). Run on a GPU machine with `pytest tests/test_gpu.py -m ""`.
References are float64 on the CPU; float32 on the GPU runs with TF32 off (torch's default for matmuls).
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.nn.decode import CachedStepper, UncachedStepper, beam_search
from ablate.nn.loss import label_smoothed_loss
from ablate.nn.model import Dropout, Transformer, TransformerConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ROOT = Path(__file__).resolve().parents[1]
BOS, EOS, PAD = 1, 2, 0


def small_model(seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=97, n_layers=2, d_model=64, d_ff=128, n_heads=4, d_k=16, d_v=16, **kw)
    return Transformer(cfg)


def batch(seed=0, B=6, S=11, T=9, V=97):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (B, S), generator=g)
    tgt = torch.randint(3, V, (B, T), generator=g)
    for i, (ls, lt) in enumerate([(11, 9), (7, 5), (3, 2), (9, 9), (1, 1), (5, 8)][:B]):
        src[i, ls:], tgt[i, lt:] = PAD, PAD  # padding: SDPA's boolean mask must drop these keys
    tgt[:, 0] = BOS
    return src, tgt


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.detach().double().cpu() - ref).norm() / ref.norm())


@pytest.mark.parametrize("kw", [{}, {"norm": "pre"}, {"positional": "learned"}])
def test_cuda_float32_forward_matches_cpu_float64(kw):
    # The GPU attends through F.scaled_dot_product_attention, the CPU through four written-out ops: the
    # two paths must compute the same function, padding and the causal mask included.
    m = small_model(**kw).eval()
    src, tgt = batch()
    ref = m.double()(src, tgt).detach()  # (B, T, d), the CPU path in float64
    out = m.float().cuda()(src.cuda(), tgt.cuda())
    assert rel_err(out, ref) < 1e-5
    real = tgt != PAD
    ref_logits = m.double().cpu().logits(ref)[real]
    m.float().cuda()
    out_logits = m.logits(out)[real.cuda()]
    assert rel_err(out_logits, ref_logits) < 1e-5


def test_cuda_bf16_autocast_forward_is_close():
    m = small_model().eval()
    src, tgt = batch()
    ref = m.double()(src, tgt).detach()
    m.float().cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = m(src.cuda(), tgt.cuda())
    assert out.dtype == torch.float32  # post-LN: layer norm runs in float32 under autocast
    err = rel_err(out, ref)
    assert 1e-4 < err < 3e-2  # bf16 rounding shows, and stays at bf16's scale (8 bits of mantissa)


def test_cuda_dropout_rate_and_scale():
    # Off the CPU, ablate's Dropout hands over to torch's fused kernel (F.dropout).
    y = Dropout(0.3).train()(torch.ones(2000, 500, device="cuda"))
    kept = (y != 0).double().mean().item()
    assert abs(kept - 0.7) < 3e-3  # 1e6 draws: sd 4.6e-4
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.7))


def test_cuda_bf16_training_gradients_agree_with_float32():
    # One training step's loss and gradients under bf16-mixed (trainer.precision) against float32.
    m = small_model(dropout=0.0).cuda()
    src, tgt = (t.cuda() for t in batch())
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]

    def loss_and_grads(autocast: bool):
        m.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = m.logits(m(src, tgt_in))
            sums = label_smoothed_loss(logits, tgt_out, 0.1, PAD)
        (sums.smoothed / sums.tokens).backward()
        g = torch.cat([p.grad.flatten() for p in m.parameters()])
        return float(sums.smoothed / sums.tokens), g

    l32, g32 = loss_and_grads(False)
    l16, g16 = loss_and_grads(True)
    assert abs(l16 - l32) / l32 < 1e-2
    cos = torch.nn.functional.cosine_similarity(g16, g32, dim=0).item()
    assert cos > 0.995
    assert math.isfinite(l16) and all(p.grad.dtype == torch.float32 for p in m.parameters())


def copy_model(steps=150) -> Transformer:
    """A small model trained for a few seconds to copy its source: outputs differ in tokens and length."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=30, n_layers=2, d_model=32, d_ff=64, n_heads=4, d_k=8, d_v=8, dropout=0.0
    )
    m = Transformer(cfg)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(steps):
        src = torch.randint(3, 30, (32, 8))
        tgt = torch.cat([torch.full((32, 1), BOS), src, torch.full((32, 1), EOS)], 1)
        sums = label_smoothed_loss(m.logits(m(src, tgt[:, :-1])), tgt[:, 1:], 0.0, PAD)
        opt.zero_grad()
        (sums.smoothed / sums.tokens).backward()
        opt.step()
    return m.double().eval()


def test_cuda_cached_beam_equals_uncached_and_cpu():
    m = copy_model()
    src, _ = batch(seed=3, V=30)
    lens = (src != PAD).sum(1)
    kw = dict(beam=4, alpha=0.6, max_len_b=8)
    cpu = beam_search(CachedStepper(m), src, lens, BOS, EOS, **kw)
    m.cuda()
    cached = beam_search(CachedStepper(m), src.cuda(), lens.cuda(), BOS, EOS, **kw)
    full = beam_search(UncachedStepper(m), src.cuda(), lens.cuda(), BOS, EOS, **kw)
    assert cached.tokens == full.tokens == cpu.tokens
    # The search keeps its scores in float32: the devices round differently in the last place.
    assert torch.allclose(cached.scores, full.scores, rtol=0, atol=1e-5)
    assert torch.allclose(cached.scores.cpu(), cpu.scores, rtol=0, atol=1e-5)
    assert len({len(t) for t in cpu.tokens}) > 1  # the test would miss length bugs if all were equal
    assert len({tok for t in cpu.tokens for tok in t}) > 5  # and not one token repeated


def test_lightning_run_on_gpu_bf16_mixed(tmp_path):
    # `python -m ablate.run` on the GPU with bf16-mixed, the built-in data: the record names the device and
    # the precision, and the trained model beats the uniform distribution on dev by far.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable, "-m", "ablate.run", "scale=tiny", "recipe=tiny", "logger=none",
        "trainer.accelerator=gpu",
        "trainer.precision=bf16-mixed", "train.max_steps=60", "scale.width=0.125", "data.vocab_size=300",
        f"results_dir={tmp_path}/results", f"data.cache_dir={tmp_path}/cache",
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
    assert rec["status"] == "finished" and rec["steps"] == 60
    assert rec["device"] == torch.cuda.get_device_name(0)
    assert rec["config"]["trainer"]["precision"] == "bf16-mixed"
    assert rec["metrics"]["dev_ppl"] < 300 / 4  # uniform over the vocabulary would be 300


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_compiled_loss_equals_the_cpu_loss(dtype):
    # label_smoothed_loss on CUDA logits runs FusedSmoothedCrossEntropy through torch.compile; the
    # reference is the CPU path (SmoothedCrossEntropy) in float64 on the same logits.
    import ablate.nn.loss as L

    torch.manual_seed(0)
    N, V = 3000, 8000
    z64 = torch.randn(N, V, dtype=torch.float64) * 3
    target = torch.randint(1, V, (N,))
    target[:100] = PAD
    z = z64.to(dtype).cuda().requires_grad_(True)
    s = L.label_smoothed_loss(z, target.cuda(), 0.1, PAD)
    (s.smoothed * 0.7 + s.nll * 0.2).backward()
    ref_z = z.detach().double().cpu().requires_grad_(True)  # the same (rounded) logits
    r = L.label_smoothed_loss(ref_z, target, 0.1, PAD)
    (r.smoothed * 0.7 + r.nll * 0.2).backward()
    assert z.grad.dtype == dtype
    assert L._forward_compiled.compiled is not L._smoothed_ce_forward  # compiled, not the eager fallback
    assert L._backward_compiled.compiled is not L._smoothed_ce_backward
    assert abs(s.smoothed.item() - r.smoothed.item()) / r.smoothed.item() < 1e-6
    assert abs(s.nll.item() - r.nll.item()) / r.nll.item() < 1e-6
    tol = 1e-6 if dtype == torch.float32 else 1e-2  # the gradient is stored in the logits' dtype
    assert rel_err(z.grad, ref_z.grad) < tol
    assert z.grad[:100].abs().max().item() == 0.0  # pads get no gradient
