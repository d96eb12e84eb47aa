import math

import pytest
import torch

from ablate.nn.loss import label_smoothed_loss
from ablate.nn.optim import inverse_sqrt_lr, linear_warmup_cosine_lr


def test_label_smoothed_loss_by_hand():
    # One token, V = 3, logits (0, ln 2, 0): p = (1/4, 1/2, 1/4); reference y = 1, eps = 0.1.
    logits = torch.tensor([[[0.0, math.log(2.0), 0.0]]])
    target = torch.tensor([[1]])
    s = label_smoothed_loss(logits, target, eps=0.1, pad_id=99)
    # q = (0.05, 0.9, 0.05): loss = -(0.9 ln 1/2 + 0.05 ln 1/4 + 0.05 ln 1/4)
    #                              = 0.9 ln2 + 0.1 * 2 ln2 = 1.1 ln2
    assert s.smoothed.item() == pytest.approx(1.1 * math.log(2.0), rel=1e-6)
    assert s.nll.item() == pytest.approx(math.log(2.0), rel=1e-6)
    assert s.tokens.item() == 1


def test_padding_does_not_count():
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[1, 2, 0], [3, 0, 0]])
    s = label_smoothed_loss(logits, target, eps=0.1, pad_id=0, per_sentence=True)
    assert s.tokens.item() == 3
    lp = torch.log_softmax(logits, -1)
    nll = -(lp[0, 0, 1] + lp[0, 1, 2] + lp[1, 0, 3])
    assert s.nll.item() == pytest.approx(nll.item(), rel=1e-5)
    assert s.tokens_per_sentence.tolist() == [2, 1]
    assert s.nll_per_sentence[1].item() == pytest.approx(-lp[1, 0, 3].item(), rel=1e-5)
    # Full log-softmax reference for the smoothed value.
    e = 0.1 / 6
    ref = 0.0
    for b, t in ((0, 0), (0, 1), (1, 0)):
        y = target[b, t]
        q = torch.full((7,), e)
        q[y] = 0.9
        ref += -(q * lp[b, t]).sum().item()
    assert s.smoothed.item() == pytest.approx(ref, rel=1e-5)


def test_schedule_at_known_steps():
    # Equation 3 with d_model 512, warmup 4000.
    assert inverse_sqrt_lr(4000, 512, 4000) == pytest.approx(6.988e-4, rel=1e-3)  # the peak
    assert inverse_sqrt_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-9)
    assert inverse_sqrt_lr(2000, 512, 4000) == pytest.approx(6.988e-4 / 2, rel=1e-3)  # linear warmup
    assert inverse_sqrt_lr(100_000, 512, 4000) == pytest.approx(1.398e-4, rel=1e-3)
    assert inverse_sqrt_lr(4000, 1024, 4000) == pytest.approx(4.94e-4, rel=1e-3)  # big
    assert inverse_sqrt_lr(16000, 512, 4000) == pytest.approx(inverse_sqrt_lr(4000, 512, 4000) / 2, rel=1e-9)


def test_cosine_follows_steps_or_the_time_budget_whichever_is_further():
    # warmup 10, total 110: step 60 is half-way through the decay -> peak / 2
    assert linear_warmup_cosine_lr(5, 1.0, 10, 110) == pytest.approx(0.5)
    assert linear_warmup_cosine_lr(60, 1.0, 10, 110) == pytest.approx(0.5)
    assert linear_warmup_cosine_lr(60, 1.0, 10, 110, time_progress=0.2) == pytest.approx(0.5)
    # the clock is further along: 3/4 of the budget spent -> 0.5 * (1 + cos(3 pi / 4))
    assert linear_warmup_cosine_lr(60, 1.0, 10, 110, time_progress=0.75) == pytest.approx(0.5 * (1 - 2**-0.5))
    assert linear_warmup_cosine_lr(20, 2.0, 10, 110, time_progress=1.0) == 0.0
    assert linear_warmup_cosine_lr(5, 1.0, 10, 110, time_progress=0.9) == pytest.approx(0.5)  # warmup first


def test_budget_clock_sets_progress_after_warmup_and_stops_at_the_deadline(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import ablate.training.callbacks as tr

    now = [0.0]
    saved = []
    trainer = SimpleNamespace(
        global_step=0,
        should_stop=False,
        strategy=SimpleNamespace(reduce=lambda t, reduce_op: t),
        save_checkpoint=lambda p: saved.append(p.name),
    )
    module = SimpleNamespace(device=torch.device("cpu"), accumulate=1)
    batch = (SimpleNamespace(micro=0), None)
    clock = tr.TrainClock()
    b = tr.Budget(minutes=1.0, ckpt_dir=tmp_path, clock=clock, warmup_steps=2, checkpoint_every=100)  # 60 s
    monkeypatch.setattr(tr.time, "perf_counter", lambda: now[0])
    clock.on_train_start(trainer, module)
    b.on_train_start(trainer, module)
    for step, t in enumerate([5.0, 10.0, 35.0, 59.0, 61.0], start=1):  # step ends at these seconds
        trainer.global_step, now[0] = step, t
        b.on_train_batch_end(trainer, module, None, batch, 0)
        if step == 3:  # warmup ended at step 2, 10 s: 25 of the 50 s left are spent
            assert b.warm_end_s == 10.0 and b.progress == pytest.approx(0.5)
        assert trainer.should_stop == (t >= 60.0)
    assert b.progress == 1.0 and saved == ["step0000005.ckpt"]
    assert b.state_dict() == {"warm_end_s": 10.0} and clock.state_dict() == {"time_s": 61.0}
    # a resumed run (checkpoint at 35 s) starts from the clock's progress, not from the step's
    clock2 = tr.TrainClock()
    again = tr.Budget(minutes=1.0, ckpt_dir=tmp_path, clock=clock2, warmup_steps=2, checkpoint_every=100)
    clock2.load_state_dict({"time_s": 35.0})
    again.load_state_dict({"warm_end_s": 10.0})
    now[0] = 100.0
    clock2.on_train_start(trainer, module)
    again.on_train_start(trainer, module)
    assert again.progress == pytest.approx(0.5) and clock2.state_dict()["time_s"] == 35.0
    # train.max_minutes counts the same clock: 35 s before the restart + 20 s after it > 50 s
    limit = tr.TimeLimit(50 / 60, clock2)
    trainer.should_stop = False
    now[0] = 110.0  # 45 s trained
    limit.on_train_batch_end(trainer, module, None, batch, 0)
    assert not trainer.should_stop
    now[0] = 120.0  # 55 s
    limit.on_train_batch_end(trainer, module, None, batch, 0)
    assert trainer.should_stop


def test_lightning_module_applies_step_one_first():
    from ablate.config import RunConfig
    from ablate.nn.model import TransformerConfig
    from ablate.training.module import Seq2SeqModule

    cfg = RunConfig()
    m = Seq2SeqModule(
        cfg,
        TransformerConfig(vocab_size=20, n_layers=1, d_model=512, d_ff=8, n_heads=1, d_k=4, d_v=4),
        total_steps=10,
        accumulate=1,
    )
    opt_cfg = m.configure_optimizers()
    opt, sched = opt_cfg["optimizer"], opt_cfg["lr_scheduler"]["scheduler"]
    assert opt.param_groups[0]["lr"] == pytest.approx(inverse_sqrt_lr(1, 512, 4000))
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    for _ in range(3):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(inverse_sqrt_lr(4, 512, 4000))


@pytest.mark.parametrize("consume", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_fused_loss_gradient_matches_log_softmax_autograd(eps, consume):
    # The closed-form backward (p - q) against autograd through an explicit log-softmax, in float64,
    # with gradients flowing into both the smoothed loss and the nll, pads included.
    torch.manual_seed(0)
    V = 11
    w = torch.randn(3, 5, V, dtype=torch.float64, requires_grad=True)
    z = w * 1.0  # a non-leaf, as the output projection's logits are (consume_logits overwrites them)
    target = torch.randint(1, V, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    s = label_smoothed_loss(z, target, eps=eps, pad_id=0, consume_logits=consume)
    (0.7 * s.smoothed + 0.2 * s.nll).backward()
    got = w.grad.clone()

    z2 = w.detach().clone().requires_grad_(True)
    lp = torch.log_softmax(z2, -1)
    q = torch.full_like(lp, eps / (V - 1))
    q.scatter_(-1, target[..., None], 1.0 - eps)
    mask = (target != 0).double()
    smoothed = (-(q * lp).sum(-1) * mask).sum()
    nll = (-lp.gather(-1, target[..., None])[..., 0] * mask).sum()
    (0.7 * smoothed + 0.2 * nll).backward()
    assert s.smoothed.item() == pytest.approx(smoothed.item(), rel=1e-12)
    assert s.nll.item() == pytest.approx(nll.item(), rel=1e-12)
    torch.testing.assert_close(got, z2.grad, rtol=1e-12, atol=1e-12)
    assert got[0, 3:].abs().max().item() == 0.0  # pads get no gradient


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gpu_loss_equals_the_cpu_loss(eps):
    # FusedSmoothedCrossEntropy (the CUDA path; here its math eager, in float64) against SmoothedCrossEntropy:
    # the same losses and the same gradient, with weights on both outputs.
    from ablate.nn.loss import FusedSmoothedCrossEntropy, SmoothedCrossEntropy

    torch.manual_seed(0)
    N, V = 7, 13
    w = torch.randn(N, V, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, V, (N,))
    g_s, g_n = torch.rand(N, dtype=torch.float64), torch.rand(N, dtype=torch.float64)
    out = {}
    for name, apply in (("gpu", FusedSmoothedCrossEntropy.apply), ("cpu", SmoothedCrossEntropy.apply)):
        smoothed, nll = apply(w * 1.0, target, eps, False)
        (g_s * smoothed + g_n * nll).sum().backward()
        out[name] = (smoothed.detach(), nll.detach(), w.grad.clone())
        w.grad = None
    for a, b in zip(out["gpu"], out["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # and in float32 from bf16 logits, as under trainer.precision=bf16-mixed: the gradient comes back in bf16
    z = w.detach().bfloat16().requires_grad_(True)
    smoothed, nll = FusedSmoothedCrossEntropy.apply(z, target, eps, False)
    (g_s.float() * smoothed + g_n.float() * nll).sum().backward()
    assert smoothed.dtype == torch.float32 and z.grad.dtype == torch.bfloat16
    torch.testing.assert_close(z.grad.double(), out["cpu"][2], rtol=0, atol=2e-2)


def test_logits_buffer_gives_the_plain_projection_and_gradients():
    # LogitsBuffer.project against F.linear, float64, through the consuming loss; the second step is
    # larger (the storage grows), the third smaller (a prefix of it).
    from ablate.nn.loss import LogitsBuffer

    g = torch.Generator().manual_seed(0)
    w = torch.randn(11, 6, generator=g, dtype=torch.float64, requires_grad=True)
    buf = LogitsBuffer()
    for n in (5, 9, 3):
        h = torch.randn(n, 6, generator=g, dtype=torch.float64, requires_grad=True)
        t = torch.randint(0, 11, (n,), generator=g)
        grads = []
        for project in (buf.project, torch.nn.functional.linear):
            w.grad = h.grad = None
            label_smoothed_loss(project(h, w), t, 0.1, -1, consume_logits=True).smoothed.backward()
            grads.append((h.grad.clone(), w.grad.clone()))
        assert not buf.busy
        assert torch.allclose(grads[0][0], grads[1][0], atol=1e-12)
        assert torch.allclose(grads[0][1], grads[1][1], atol=1e-12)
    assert buf.storage.nbytes() == 9 * 11 * 8


def test_logits_buffer_is_not_handed_out_twice_before_backward():
    from ablate.nn.loss import LogitsBuffer

    g = torch.Generator().manual_seed(1)
    w = torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    h1, h2 = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(2))
    buf = LogitsBuffer()
    z1 = buf.project(h1, w)
    z2 = buf.project(h2, w)  # before z1's backward: must not overwrite z1
    assert torch.equal(z1, h1 @ w.t()) and torch.equal(z2, h2 @ w.t())
    assert z1.untyped_storage().data_ptr() != z2.untyped_storage().data_ptr()
    with torch.no_grad():  # evaluation: plain tensors, the buffer untouched
        assert buf.project(h2, w).untyped_storage().data_ptr() != buf.storage.data_ptr()
