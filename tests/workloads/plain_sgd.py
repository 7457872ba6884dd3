"""One SGD update written out by hand, for the test workloads whose subject is not the optimizer.

torch.optim imports torch._dynamo when the first optimizer is built: about 3 s of every capture on
a 2-core CPU. Without an optimizer diagnose finds steps at each outermost module call instead.
"""

import torch


def sgd_step(model: torch.nn.Module, loss: torch.Tensor, lr: float = 0.1) -> None:
    """Backward from `loss`, then p -= lr * grad for every parameter of `model`."""
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
