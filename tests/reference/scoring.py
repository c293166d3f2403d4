"""How likely a model finds a continuation, read left to right (what dlm-run --score reports).

Token i of the continuation is predicted from the prompt and continuation[:i] with every later
position of the continuation masked; the result is the mean negative log-likelihood per token in
nats. One full forward per token, computed in float64 from the float32 logits.
"""

import torch


def left_to_right_nll(model, prompt_ids, continuation_ids):
    if model.mask_token_id is None:
        raise ValueError("scoring needs a model with a mask token")
    prompt_ids, continuation_ids = list(prompt_ids), list(continuation_ids)
    if not prompt_ids or not continuation_ids:
        raise ValueError("scoring needs a non-empty prompt and continuation")
    ids = prompt_ids + [model.mask_token_id] * len(continuation_ids)
    total = 0.0
    for i, token in enumerate(continuation_ids):
        position = len(prompt_ids) + i
        row = model.forward(ids)[position].double()
        total += float(torch.logsumexp(row, 0) - row[token])
        ids[position] = token
    return total / len(continuation_ids)
