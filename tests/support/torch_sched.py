"""torch_sched.py -- torch.optim.lr_scheduler's equivalent of a train clause's
`schedule NAME(attrs)` (docs/language.md, "Optimizers and schedules"; kernels/k_optim.c's
k_sched_lr computes Kiln's side), for the tests against PyTorch: the conformance suite's
single-tensor optimizer cases and tests/python/test_torch_train.py's whole models."""


def torch_scheduler(torch, opt, sched):
    """sched = (name, attrs) as the train clause writes them; opt's lr is the base lr."""
    S = torch.optim.lr_scheduler
    name, a = sched
    if name == "step":
        return S.StepLR(opt, step_size=a["step_size"], gamma=a.get("gamma", 0.1))
    if name == "multistep":
        return S.MultiStepLR(opt, milestones=list(a["milestones"]), gamma=a.get("gamma", 0.1))
    if name == "exponential":
        return S.ExponentialLR(opt, gamma=a["gamma"])
    if name == "cosine":
        # LinearLR over the warmup, then CosineAnnealingLR over the rest, in a SequentialLR
        w, total, low = a.get("warmup", 0), a["total"], a.get("min_lr", 0.0)
        if not w:
            return S.CosineAnnealingLR(opt, T_max=total, eta_min=low)
        warm = S.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1)
        return S.SequentialLR(opt, [warm, S.CosineAnnealingLR(opt, T_max=total - w, eta_min=low)], milestones=[w])
    if name == "onecycle":
        return S.OneCycleLR(opt, max_lr=opt.param_groups[0]["lr"], total_steps=a["total"], pct_start=a.get("pct_start", 0.3),
                            div_factor=a.get("div_factor", 25.0), final_div_factor=a.get("final_div_factor", 1e4),
                            anneal_strategy="cos", cycle_momentum=False, three_phase=False)
    raise ValueError(name)
