"""BERT's AdamW, as the ModSAR paper's BERT4Rec environment trains its Table 4 models.

Google's BERT (TensorFlow `AdamWeightDecayOptimizer`) and the paper's port of it differ from torch's AdamW in
two ways that move early training: no bias correction (step t is (1 - beta1^t) / sqrt(1 - beta2^t) times
Adam's: 3.2x at step 1, up to 6.6x near step 12 with betas (0.9, 0.999), still 1.26x at step 1,000) and eps
1e-6 added to sqrt(v). Weight decay is decoupled, added to the update before the learning rate:
    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  p <- p - lr (m / (sqrt(v) + eps) + wd p)
torch has no switch for either, hence this small class (`train.optimizer=adamw_bert`).
"""

from __future__ import annotations

import torch


class BertAdamW(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = torch.enable_grad()(closure)() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                m, v = state["m"], state["v"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = m / (v.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                p.sub_(update, alpha=group["lr"])
        return loss
