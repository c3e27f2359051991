"""The training loop under ``accelerate launch`` with 2 processes on the CPU (gloo).

The test launches this very file as the training script. Each process records the
example ids its model saw while training (every example carries a unique token at
position 1) and its final weights; the test then checks that, in every epoch, the two
processes together saw each example exactly once, took the same number of steps, and
ended with the same weights.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

NUM_PROCESSES = 2
EPOCHS = 2
NUM_EXAMPLES = 83  # 11 batches of 8: an odd count, so the sampler must split one to even the shards
BATCH_SIZE = 8
FIRST_ID = 10  # example i carries token FIRST_ID + i at position 1


def toy_data():
    """Sentences of lengths 4..19 whose second token names the example."""
    import datasets

    generator = torch.Generator().manual_seed(0)
    rows = {"input_ids": [], "labels": []}
    for i in range(NUM_EXAMPLES):
        length = 4 + i % 16
        filler = torch.randint(FIRST_ID + NUM_EXAMPLES, 200, (length - 3,), generator=generator).tolist()
        rows["input_ids"].append([2, FIRST_ID + i, *filler, 3])
        rows["labels"].append(i % 2)
    data = datasets.Dataset.from_dict(rows)
    return data.map(lambda row: {"attention_mask": [1] * len(row["input_ids"])})


def worker(out: Path) -> None:
    """What each process runs (``accelerate launch`` starts this file)."""
    from accelerate import PartialState
    from transformers import BertConfig, BertModel

    from ftcourse import heads, training

    class RecordingModel(heads.TaskModel):
        """Remembers which examples each training epoch fed it."""

        def __init__(self, *args):
            super().__init__(*args)
            self.epochs_seen = []

        def train(self, mode: bool = True):
            if mode:
                self.epochs_seen.append([])
            return super().train(mode)

        def forward(self, input_ids, **kwargs):
            if self.training:
                self.epochs_seen[-1] += (input_ids[:, 1] - FIRST_ID).tolist()
            return super().forward(input_ids, **kwargs)

    torch.manual_seed(int(os.environ["RANK"]))  # different initial weights: DDP must sync them
    config = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    model = RecordingModel(BertModel(config, add_pooling_layer=False), heads.SentenceClassifier(32, 2))
    data = toy_data()
    history = training.train(
        model, data, training.TrainConfig(lr=1e-3, epochs=EPOCHS, batch_size=BATCH_SIZE, progress=False),
        eval_data=data, metric=training.accuracy,  # the default Accelerator(), as the notebooks call it
    )
    state = PartialState()  # what train's Accelerator() set up: gloo on the CPU here
    rank = state.process_index
    torch.save(model.state_dict(), out / f"weights_{rank}.pt")
    (out / f"seen_{rank}.json").write_text(json.dumps({
        "world_size": state.num_processes,
        "backend": state.backend,
        "epochs_seen": [ids for ids in model.epochs_seen if ids],
        "steps": len(history.losses),
        "examples_seen": history.examples_seen,
    }))


def test_sharded_sampler_splits_batches_so_shards_are_equal_and_disjoint():
    from ftcourse import training

    lengths = [3 + i % 11 for i in range(NUM_EXAMPLES)]
    for shards in (1, 2, 3, 4):
        samplers = [training.BucketBatchSampler(lengths, BATCH_SIZE, seed=1, num_shards=shards, shard=s) for s in range(shards)]
        batches = [list(sampler) for sampler in samplers]
        assert len({len(b) for b in batches}) == 1 and all(len(b) == len(samplers[0]) for b in batches)
        assert sorted(i for shard in batches for batch in shard for i in batch) == list(range(NUM_EXAMPLES))
    with pytest.raises(ValueError, match="fewer processes"):
        training.BucketBatchSampler([5, 5, 5], BATCH_SIZE, num_shards=4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    out = tmp_path_factory.mktemp("distributed")
    # torchrun-style processes (--multi_gpu) kept on the CPU: accelerate then picks gloo.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(NUM_PROCESSES),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(_free_port()), __file__, str(out)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_processes_together_see_each_example_once_per_epoch(launched):
    records = [json.loads((launched / f"seen_{rank}.json").read_text()) for rank in range(NUM_PROCESSES)]
    assert all(r["world_size"] == NUM_PROCESSES and r["backend"] == "gloo" for r in records)
    assert all(len(r["epochs_seen"]) == EPOCHS for r in records)
    for epoch in range(EPOCHS):
        together = sorted(i for r in records for i in r["epochs_seen"][epoch])
        assert together == list(range(NUM_EXAMPLES)), f"epoch {epoch}: an example was dropped or repeated"
        assert all(r["epochs_seen"][epoch] for r in records), "a process sat idle"
    assert len({r["steps"] for r in records}) == 1, "processes took different numbers of steps"
    assert all(r["examples_seen"] == EPOCHS * NUM_EXAMPLES for r in records)


def test_final_weights_agree_across_processes(launched):
    first, *others = [torch.load(launched / f"weights_{rank}.pt") for rank in range(NUM_PROCESSES)]
    for other in others:
        for name, tensor in first.items():
            torch.testing.assert_close(other[name], tensor, rtol=0, atol=1e-6, msg=f"{name} differs")


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
