"""trainer.precision on the CPU: bf16-mixed computes the float32 model's function at bf16's precision, and
`auto` picks bf16 only where the machine has bf16 arithmetic units (emulated bf16 is far slower than fp32)."""

import json
import math
from pathlib import Path

import pytest
import torch
from test_run_smoke import run

from ablate.nn.loss import label_smoothed_loss
from ablate.nn.model import Transformer, TransformerConfig
from ablate.training import hardware
from ablate.training.hardware import resolve_precision

BOS, PAD = 1, 0


def cpuinfo_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), None)
    if line is None:
        pytest.skip("/proc/cpuinfo lists no flags")
    return set(line.split(":", 1)[1].split())


def test_native_bf16_probe_agrees_with_cpuinfo():
    # torch's probe against the kernel's list of CPU features: AVX512_BF16 or AMX (amx_bf16).
    flags = cpuinfo_flags()
    assert hardware.cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)


def test_auto_picks_bf16_only_with_bf16_units(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: True)
    assert resolve_precision("auto", "auto") == "bf16-mixed"
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: False)
    assert resolve_precision("auto", "auto") == "32-true"
    for explicit in ("32-true", "bf16-mixed", "16-mixed"):  # an explicit choice is kept as given
        assert resolve_precision(explicit, "cpu") == explicit
    with pytest.warns(UserWarning, match="bf16-mixed: this CPU has no bf16 units"):
        resolve_precision("bf16-mixed", "auto")  # kept, with a warning: emulated bf16 is slow
    # A GPU: Ampere or later has bf16 units; a V100 only emulates it (torch: including_emulation=True).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_precision("auto", "gpu") == "32-true"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert resolve_precision("auto", "auto") == "bf16-mixed"
    assert resolve_precision("auto", "cpu") == "32-true"  # accelerator=cpu asks the CPU, not the GPU


def small_model(dropout=0.0) -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=97, n_layers=2, d_model=64, d_ff=128, n_heads=4, d_k=16, d_v=16, dropout=dropout
    )
    return Transformer(cfg)


def batch(B=6, S=11, T=9, V=97):
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(3, V, (B, S), generator=g), torch.randint(3, V, (B, T), generator=g)
    for i, (ls, lt) in enumerate([(11, 9), (7, 5), (3, 2), (9, 9), (1, 1), (5, 8)][:B]):
        src[i, ls:], tgt[i, lt:] = PAD, PAD
    tgt[:, 0] = BOS
    return src, tgt


def test_cpu_bf16_autocast_forward_is_close_to_float64():
    m = small_model().eval()
    src, tgt = batch()
    ref = m.double()(src, tgt).detach()  # (B, T, d)
    m.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(src, tgt)
    err = float((out.detach().double() - ref).norm() / ref.norm())
    assert 1e-4 < err < 3e-2  # bf16 rounding shows (8 bits of mantissa), and stays at its scale


def test_cpu_bf16_training_step_agrees_with_float32():
    # One step's loss and gradients as Lightning's bf16-mixed computes them on a CPU (autocast, float32
    # master weights): the loss within 1%, the gradient's direction within cosine 0.995.
    m = small_model()
    src, tgt = batch()

    def loss_and_grads(autocast: bool):
        m.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            sums = label_smoothed_loss(m.logits(m(src, tgt[:, :-1])), tgt[:, 1:], 0.1, PAD)
        (sums.smoothed / sums.tokens).backward()
        return float(sums.smoothed / sums.tokens), torch.cat([p.grad.flatten() for p in m.parameters()])

    l32, g32 = loss_and_grads(False)
    l16, g16 = loss_and_grads(True)
    assert l16 != l32 and abs(l16 - l32) / l32 < 1e-2
    assert torch.nn.functional.cosine_similarity(g16, g32, dim=0).item() > 0.995
    assert math.isfinite(l16) and all(p.grad.dtype == torch.float32 for p in m.parameters())


def test_run_records_the_precision_auto_resolved_to(tmp_path):
    expected = "bf16-mixed" if {"avx512_bf16", "amx_bf16"} & cpuinfo_flags() else "32-true"
    p = run(tmp_path, "trainer.precision=auto", "train.max_steps=4")  # the smoke test's command
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
    assert rec["config"]["trainer"]["precision"] == "auto" and rec["precision"] == expected
