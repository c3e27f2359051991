"""Frozen readout on cached features against full fine-tuning, time per epoch.

The readout runs the frozen encoder once to cache each sentence's [CLS] state, then
trains a linear head on the cache: an epoch touches H x 2 weights per sentence instead of
running the encoder forward and backward. Both see the same SST-2 sentences in batches of
the same size. (``bench/readout_speed.py``, when present, measures lesson 2's own version.)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .common import Row, device, stopwatch


@torch.inference_mode()
def cls_features(encoder, data, batch_size: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    from ftcourse import training

    encoder.eval()
    features, labels = [], []
    order = []
    loader = training.make_loader(data, batch_size, shuffle=False, pad_token_id=pad_token_id)
    for indices, batch in zip(loader.batch_sampler, loader):
        batch = {k: v.to(device()) for k, v in batch.items()}
        labels.append(batch.pop("labels"))
        features.append(encoder(**batch).last_hidden_state[:, 0])
        order += indices
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return torch.cat(features)[inverse], torch.cat(labels)[inverse]


def readout_epoch_seconds(features, labels, batch_size: int, epochs: int = 20, seed: int = 0) -> float:
    torch.manual_seed(seed)
    head = nn.Linear(features.shape[1], 2).to(device())
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-3)
    with stopwatch() as clock:
        for _ in range(epochs):
            for index in torch.randperm(len(features), device=features.device).split(batch_size):
                loss = F.cross_entropy(head(features[index]), labels[index])
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return clock["seconds"] / epochs


def main(shared: dict | None = None, train_size: int = 1000, max_length: int = 64, batch_size: int = 32,
         seed: int = 0) -> list[Row]:
    from ftcourse import config, heads, models, training

    from .common import sst2_subset

    shared = shared or {}
    if "train" in shared:
        train, tokenizer = shared["train"], shared["tokenizer"]
    else:
        train, _, tokenizer = sst2_subset(train_size, max_length, seed)
    print(f"\n== frozen readout on cached features vs full fine-tuning ==\n"
          f"{len(train)} SST-2 sentences, batch {batch_size}; readout: a linear head on cached [CLS] states")
    encoder = models.load_encoder(add_pooling_layer=False).to(device())
    with stopwatch() as extraction:
        features, labels = cls_features(encoder, train, 128, tokenizer.pad_token_id)
    readout_s = readout_epoch_seconds(features, labels, batch_size, seed=seed)
    finetune_s = shared.get("finetune_epoch_s")
    if finetune_s is None:  # run alone: time a fine-tuning epoch here, in the same process
        torch.manual_seed(seed)
        model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, 2))
        config_ = training.TrainConfig(lr=config.get_profile().finetune_lr, batch_size=batch_size, seed=seed, progress=False)
        finetune_s = training.train(model, train, config_, pad_token_id=tokenizer.pad_token_id).seconds_per_epoch
    ratio = finetune_s / readout_s
    print(f"fine-tuning: {finetune_s:.1f} s/epoch; readout: {readout_s * 1000:.1f} ms/epoch "
          f"(after a one-time feature extraction of {extraction['seconds']:.1f} s, "
          f"{extraction['seconds'] / finetune_s:.2f} of a fine-tuning epoch)")
    print(f"fine-tuning epoch / readout epoch: {ratio:,.0f}x")
    return [Row("fine-tuning epoch / frozen-readout epoch", f"{ratio:,.0f}x", "", None,
                f"{finetune_s:.1f} s vs {readout_s * 1000:.1f} ms; one-time extraction {extraction['seconds']:.1f} s")]
