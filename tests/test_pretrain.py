"""The course's own pretrained encoder: it loads offline, it has learned English, and the
code that made it can be stopped and resumed.

The held-out test needs the corpus (FTCOURSE_CORPUS, folder holding wikitext-2-raw/); it is
skipped, saying so, where the corpus is absent. Everything else runs anywhere, offline.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tools import pretrain  # noqa: E402
from ftcourse.config import COURSE_ENCODER_DIR, ConfigError  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="module")
def mlm():
    return pretrain._load_mlm(COURSE_ENCODER_DIR)


def test_loads_offline():
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    weights = COURSE_ENCODER_DIR / "model.safetensors"
    assert weights.is_file() and weights.stat().st_size < 60e6
    encoder = AutoModel.from_pretrained(str(COURSE_ENCODER_DIR), local_files_only=True)
    model = AutoModelForMaskedLM.from_pretrained(str(COURSE_ENCODER_DIR), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(COURSE_ENCODER_DIR), local_files_only=True)
    # Stored as fp16, computed in fp32; enough layers to ask "which layer to read".
    assert next(model.parameters()).dtype == torch.float32
    assert encoder.config.num_hidden_layers >= 4
    assert tokenizer.model_max_length == encoder.config.max_position_embeddings
    enc = tokenizer("The course's own BERT.", return_tensors="pt")
    with torch.no_grad():
        hidden = encoder(**enc).last_hidden_state
    assert hidden.shape == (1, enc.input_ids.shape[1], encoder.config.hidden_size)


def test_heldout_mlm_beats_unigram(mlm):
    try:
        pretrain.find_corpus()
    except ConfigError as err:
        pytest.skip(f"no corpus: {err}")
    model, tokenizer = mlm
    # 128 blocks: ~2,400 masked positions, so the accuracy's standard error is under 0.01.
    res = pretrain.evaluate_mlm((model, tokenizer), split="test", n_blocks=128, seed=0)
    base = pretrain.unigram_baseline(split="test", n_blocks=128, seed=0, tokenizer=tokenizer,
                                     seq_len=model.config.max_position_embeddings)
    assert res["masked_tokens"] == base["masked_tokens"] > 2000  # same positions for both
    # "Well above": the unigram baseline always guesses "the" (~6%). Context must add at least
    # 10 points and 2.5x the accuracy, and cut the perplexity five-fold.
    assert res["accuracy"] > max(base["accuracy"] + 0.10, 2.5 * base["accuracy"]), (res, base)
    assert res["perplexity"] < base["perplexity"] / 5, (res, base)


# Chosen for what a small model trained on 2M words of Wikipedia can know: grammar,
# function words and very frequent patterns of Wikipedia prose, not world knowledge.
CLOZES = [
    ("he was born in [MASK] 1950.", {"january", "february", "march", "april", "may", "june",
                                     "july", "august", "september", "october", "november",
                                     "december"}),
    ("the president [MASK] the united states.", {"of"}),
    ("the song was released [MASK] 2009.", {"in", "on"}),
    ("she [MASK] a member of the band.", {"was", "is", "became"}),
    ("the river flows [MASK] the sea.", {"into", "to", "through", "towards", "toward", "from"}),
    ("they [MASK] the game 3 - 1.", {"won", "lost", "played", "finished", "drew"}),
]


@pytest.mark.parametrize(
    "text,sensible",
    CLOZES,
    ids=[c[0] for c in CLOZES],
)
def test_fill_mask_top5(mlm, text, sensible):
    model, tokenizer = mlm
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0, enc.input_ids[0] == tokenizer.mask_token_id][0]
    top5 = tokenizer.convert_ids_to_tokens(logits.topk(5).indices.tolist())
    assert sensible & set(top5), f"{text!r}: top 5 {top5}"


# ---- the pretraining code, on a tiny corpus


TINY = ["The cat sat on the mat and looked at the dog .",
        "In 1950 the river flowed into the sea near the old town .",
        "She was a member of the band , which released its first album in 2009 ."]


@pytest.fixture
def tiny_corpus(tmp_path, monkeypatch):
    folder = tmp_path / "corpus" / "wikitext-2-raw"
    folder.mkdir(parents=True)
    with gzip.open(folder / "train.txt.gz", "wt", encoding="utf-8") as f:
        for i in range(40):
            f.write(" \n = Article = \n \n")
            f.write(" " + TINY[i % 3] + " " + TINY[(i + 1) % 3] + " \n")
    monkeypatch.setenv("FTCOURSE_CORPUS", str(tmp_path / "corpus"))
    monkeypatch.setenv("FTCOURSE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _tiny_args(tmp, run, *extra):
    return ["train", "--layers", "1", "--hidden", "32", "--heads", "2", "--intermediate", "64",
            "--seq-len", "32", "--batch-size", "4", "--steps", "2", "--warmup-steps", "1",
            "--threads", "1", "--run-dir", str(tmp / run), "--out", str(tmp / run / "model"),
            *extra]


def test_two_step_run_checkpoints_and_resumes(tiny_corpus):
    tmp = tiny_corpus
    ckpt = tmp / "run" / "checkpoint.pt"
    # Stopped after one step: a checkpoint is there, and no final model yet.
    assert pretrain.main(_tiny_args(tmp, "run", "--stop-after-steps", "1")) == 0
    assert torch.load(ckpt, weights_only=False)["step"] == 1
    assert not (tmp / "run" / "model").exists()
    # A stopped run can be exported as it stands; its card says how to finish it.
    partial = pretrain.export_checkpoint(tmp / "run", tmp / "partial")
    stats = json.loads((partial / "training_stats.json").read_text())
    assert stats["partial"] and stats["steps"] == 1 and stats["schedule_done"] == 0.5
    assert "--steps 2" in stats["command"] and stats["command"].endswith("--resume")
    # Starting again without --resume would silently throw the run away: refused.
    assert pretrain.main(_tiny_args(tmp, "run")) == 2
    # --resume continues from step 1 to the end and exports the model.
    assert pretrain.main(_tiny_args(tmp, "run", "--resume")) == 0
    resumed = torch.load(ckpt, weights_only=False)
    assert resumed["step"] == 2 and resumed["tokens_seen"] == 2 * 4 * 32
    assert (tmp / "run" / "model" / "model.safetensors").is_file()
    tokenizer_config = (tmp / "run" / "model" / "tokenizer_config.json").read_text()
    assert "local_files_only" not in tokenizer_config  # how we loaded it is not the model's business
    # Same data, same masks, same optimizer state: identical to an uninterrupted run.
    assert pretrain.main(_tiny_args(tmp, "straight")) == 0
    straight = torch.load(tmp / "straight" / "checkpoint.pt", weights_only=False)
    for name, value in straight["model"].items():
        torch.testing.assert_close(resumed["model"][name], value, msg=name)


def test_masking_follows_bert():
    tokenizer = pretrain.load_tokenizer()
    x = torch.randint(2000, 20000, (64, 128))
    x[:, 0], x[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    g = torch.Generator().manual_seed(0)
    corrupted, chosen, targets = pretrain.mask_tokens(x, tokenizer, g)
    assert not chosen[:, 0].any() and not chosen[:, -1].any()  # never the special tokens
    assert abs(chosen.float().mean().item() * 128 / 126 - 0.15) < 0.01
    masked = (corrupted[chosen] == tokenizer.mask_token_id).float().mean().item()
    same = (corrupted[chosen] == targets).float().mean().item()
    assert abs(masked - 0.8) < 0.02 and abs(same - 0.1) < 0.02
    assert torch.equal(corrupted[~chosen], x[~chosen])


def test_missing_corpus_says_what_to_set(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("FTCOURSE_CORPUS", raising=False)
    assert pretrain.main(["train", "--steps", "1"]) == 2
    assert "FTCOURSE_CORPUS" in capsys.readouterr().err
    missing = tmp_path / "nowhere"
    assert pretrain.main(["train", "--steps", "1", "--corpus", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing / "wikitext-2-raw") in err and "FTCOURSE_CORPUS" in err


def test_unknown_option_is_an_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        pretrain.main(["train", "--no-such-option"])
    assert exit_.value.code == 2
    assert "--no-such-option" in capsys.readouterr().err


def test_sinusoidal_position_init():
    tokenizer = pretrain.load_tokenizer()
    shape = pretrain.Shape(layers=1, hidden=32, heads=2, intermediate=64, seq_len=16)
    model = pretrain.build_model(shape, tokenizer, position_init="sinusoidal")
    table = model.bert.embeddings.position_embeddings.weight.detach()
    assert abs(table.std().item() - model.config.initializer_range) < 1e-4  # no louder than the words
    # Neighbouring positions are more alike than distant ones: the structure random noise lacks.
    cosine = torch.nn.functional.cosine_similarity
    assert cosine(table[5], table[6], dim=0) > cosine(table[5], table[15], dim=0)
    with pytest.raises(ConfigError, match="position_init"):
        pretrain.build_model(shape, tokenizer, position_init="rotary")


def _first_layer_attention(model, x):
    model.config._attn_implementation = "eager"  # sdpa does not return the weights
    with torch.no_grad():
        return model.bert(input_ids=x, output_attentions=True).attentions[0]  # (B, heads, T, T)


def test_mimetic_attention_init_breaks_uniform_attention():
    tokenizer = pretrain.load_tokenizer()
    shape = pretrain.Shape(layers=2, hidden=64, heads=2, intermediate=128, seq_len=32)
    x = torch.randint(2000, 20000, (2, 32))
    entropy = {}
    for init in ("random", "mimetic"):
        model = pretrain.build_model(shape, tokenizer, attention_init=init).eval()
        attention = _first_layer_attention(model, x)
        entropy[init] = -(attention * attention.clamp_min(1e-9).log()).sum(-1).mean().item()
    uniform = torch.log(torch.tensor(32.0)).item()
    # BERT's N(0, 0.02) start attends uniformly: q.k is ~0 for every pair.
    assert abs(entropy["random"] - uniform) < 0.01
    # The mimetic start (W_q W_k^T ~ I) already prefers similar tokens, itself first.
    assert entropy["mimetic"] < uniform - 0.5
    with pytest.raises(ConfigError, match="attention_init"):
        pretrain.build_model(shape, tokenizer, attention_init="orthogonal")


def test_neighbour_init_reads_the_previous_and_next_token():
    tokenizer = pretrain.load_tokenizer()
    shape = pretrain.Shape(layers=2, hidden=64, heads=2, intermediate=128, seq_len=32)
    x = torch.randint(2000, 20000, (4, 32))
    x[:, 5:25:3] = tokenizer.mask_token_id  # a [MASK] has no word of its own to go by
    model = pretrain.build_model(shape, tokenizer, attention_init="neighbour").eval()
    attention = _first_layer_attention(model, x)
    previous, following = attention[:, 0].diagonal(-1, 1, 2), attention[:, 1].diagonal(1, 1, 2)
    assert previous.mean() > 0.3 and following.mean() > 0.3  # uniform would be 1/32
    # The argmax is the neighbour for (nearly) every query, masked or not.
    assert (attention[:, 0, 1:].argmax(-1) == torch.arange(31)).float().mean() > 0.9
    # Later layers keep BERT's start.
    later = model.bert.encoder.layer[1].attention.self.query.weight
    assert abs(later.std().item() - model.config.initializer_range) < 0.003


def test_probe_ner_scores_every_layer(shared_data):
    probe = pretrain.probe_ner(profile="smoke")
    layers = pretrain._load_mlm(COURSE_ENCODER_DIR)[0].config.num_hidden_layers
    assert probe["train_sentences"] == probe["validation_sentences"] == 64
    f1 = probe["entity_f1_by_layer"]
    assert len(f1) == layers + 1 and all(0 <= x <= 100 for x in f1)


def test_extra_text_is_train_text_without_labels(shared_data):
    from ftcourse.data import read_conll

    sst2 = pretrain.extra_paragraphs("sst2")
    assert len(sst2) == 67_349 and not any(s.endswith(("\t0", "\t1")) for s in sst2[:1000])
    conll = pretrain.extra_paragraphs("conll2003")
    assert conll[0] == "EU rejects German call to boycott British lamb ."  # words only, no tags
    # Only train text may join the corpus: validation sentences are never read.
    validation = {" ".join(w) for w in read_conll(shared_data / "conll2003" / "validation.txt")["tokens"]}
    assert len(set(conll) & validation) < 0.05 * len(validation)  # only stock lines like "LONDON 1996-08-30"


def test_extra_text_errors_name_the_fix(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="use some of"):
        pretrain.extra_paragraphs("imdb")
    monkeypatch.delenv("FTCOURSE_DATA", raising=False)
    with pytest.raises(ConfigError, match="FTCOURSE_DATA"):
        pretrain.extra_paragraphs("sst2")
    with pytest.raises(ConfigError, match=r"No sst2 train split"):
        pretrain.extra_paragraphs("sst2", data=tmp_path)
