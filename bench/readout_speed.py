"""Lesson 2's speed claims, measured in one process.

1. An epoch of a frozen readout on cached features against an epoch of fine-tuning, on
   the same CoNLL-2003 sentences: the readout never runs the encoder, so expect two
   orders of magnitude.
2. Feature extraction's throughput (counted FLOPs of the encoder's forward pass per
   second) against a plain float32 matmul's FLOP/s on the same device.

Run: ``.venv/bin/python bench/readout_speed.py [--sentences 500] [--threads 1]``
(or ``python -m bench.readout_speed``). Sizes and models come from the active profile
(``FTCOURSE_PROFILE``); nothing is written to the feature cache.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=500, help="CoNLL-2003 training sentences timed")
    parser.add_argument("--readout", default="concat_last4", help="the frozen readout timed")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice; 1 is steadier on a shared machine)")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from ftcourse import config, data, heads, models, readout, speed, training
    from ftcourse.session import quiet_libraries, seed_everything

    profile = config.get_profile()
    if profile.name == "offline":
        os.environ["HF_HUB_OFFLINE"] = "1"
    quiet_libraries()
    warnings.filterwarnings("ignore", message="The course encoder is missing")
    seed_everything(0)
    device = models.pick_device(profile)

    conll = data.load_conll2003(profile)
    sentences = conll["train"].select(range(min(args.sentences, len(conll["train"]))))
    tokenizer = models.load_tokenizer(profile=profile)
    encoder = models.load_encoder(profile, add_pooling_layer=False).to(device)
    print(f"profile {profile.name}, device {device}, torch threads {torch.get_num_threads()}, "
          f"{len(sentences)} sentences, max_length {profile.max_length}")

    # Extraction, then a matmul on the same device straight after it.
    features = readout.extract_features(encoder, tokenizer, sentences, max_length=profile.max_length,
                                        batch_size=2 * profile.batch_size, progress=False)
    extraction = readout.extraction_flops_per_second(encoder.config, features)
    matmul = speed.matmul_flops_per_second(device=device)
    print(f"extraction: {features.extraction['tokens']} tokens in {features.extraction['seconds']:.1f} s = "
          f"{features.tokens_per_second:,.0f} tokens/s = {extraction / 1e9:.1f} GFLOP/s")
    print(f"matmul (fp32, 1024^3): {matmul / 1e9:.1f} GFLOP/s")

    # Readout epochs on the cached features: two each, the faster kept (the first warms up).
    readout_seconds = {}
    for head in readout.HEAD_KINDS:
        _, seconds = readout.train_readout(features, args.readout, profile, head=head, epochs=2, device=device)
        readout_seconds[head] = min(seconds)
        print(f"readout {args.readout} ({head}): {readout_seconds[head]:.2f} s per epoch")

    # One epoch of fine-tuning the whole encoder on the same sentences.
    names = data.label_names(sentences, "ner_tags")
    model = heads.set_regime(heads.TaskModel(encoder, heads.TokenTagger(encoder.config.hidden_size, len(names))),
                             "finetune")
    tokenized, _ = readout.tokenized_for_tagging(tokenizer, sentences, profile.max_length)
    start = time.perf_counter()
    history = training.train(model, tokenized, training.TrainConfig(lr=profile.finetune_lr, epochs=1,
                             batch_size=profile.batch_size, progress=False), pad_token_id=tokenizer.pad_token_id)
    finetune_seconds = history.epoch_seconds[0]
    print(f"fine-tuning: {finetune_seconds:.1f} s per epoch ({time.perf_counter() - start:.1f} s with setup)")

    ratios = {f"finetune_epoch / {head}_readout_epoch": finetune_seconds / s for head, s in readout_seconds.items()}
    ratios["extraction_flops / matmul_flops"] = extraction / matmul
    print("\nratios")
    for name, value in ratios.items():
        print(f"  {name:<40} {value:8.2f}")
    return ratios


if __name__ == "__main__":
    main()
