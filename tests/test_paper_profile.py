"""The paper profile's code path, proven without the hub.

Stand-ins for bert-base-uncased and SBERT-NLI-base (random weights, the real architectures
and repository layouts, under the real ids) sit in a Hugging Face cache made offline
(``paper_hub`` in conftest.py, ``tests/paper_cache.py``). The models then resolve through
the libraries' normal hub code path, as after a real download.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from ftcourse import config, data, models

pytestmark = pytest.mark.paper

BERT_BASE_BACKBONE = 109_482_240  # with its pooler (derived.bert_base_parameters())
POOLER = 768 * 768 + 768


def test_paper_models_resolve_through_the_hub_cache(paper_hub, monkeypatch):
    from huggingface_hub import constants, try_to_load_from_cache

    # The hub's own cache lookup finds the stand-ins under the real ids...
    assert constants.HF_HUB_OFFLINE and constants.HF_HUB_CACHE == str(paper_hub)
    assert os.path.isfile(try_to_load_from_cache("bert-base-uncased", "model.safetensors"))
    # ...and ftcourse takes no local-folder shortcut to them: the profile's ids are hub ids.
    for role in ("encoder", "raw_encoder", "sentence"):
        source = models.model_source(role, "paper")
        assert not models.is_local(source), source
    assert models.describe("paper")["sentence"] == "sentence-transformers/bert-base-nli-mean-tokens"

    encoder = models.load_encoder("paper", add_pooling_layer=False)
    raw = models.load_raw_encoder("paper")
    assert (encoder.config.num_hidden_layers, encoder.config.hidden_size, encoder.config.vocab_size) == (12, 768, 30522)
    assert sum(p.numel() for p in raw.parameters()) == BERT_BASE_BACKBONE
    assert sum(p.numel() for p in encoder.parameters()) == BERT_BASE_BACKBONE - POOLER
    # The checkpoint's "bert." prefix was stripped: the weights loaded are the saved ones.
    assert models.fingerprint(raw) == models.fingerprint(models.load_raw_encoder("paper"))

    tokenizer = models.load_tokenizer("encoder", "paper")
    assert tokenizer.model_max_length == 512
    assert tokenizer.convert_ids_to_tokens(tokenizer("Hello, World")["input_ids"]) == [
        "[CLS]", "hello", ",", "world", "[SEP]"]  # uncased WordPiece

    sbert = models.load_sentence_model("paper", device="cpu")
    assert sbert[1].pooling_mode == "mean" and sbert.get_sentence_embedding_dimension() == 768
    assert sbert[0].auto_model.config.num_hidden_layers == 12
    assert tuple(sbert.encode(["A man plays a guitar."]).shape) == (1, 768)


@pytest.mark.parametrize("role, loader, variable", [
    ("encoder", lambda profile: models.load_encoder(profile), "FTCOURSE_ENCODER"),
    ("raw_encoder", lambda profile: models.load_raw_encoder(profile), "FTCOURSE_RAW_ENCODER"),
    ("sentence", lambda profile: models.load_sentence_model(profile, device="cpu"), "FTCOURSE_SENTENCE"),
])
def test_an_id_missing_from_the_offline_cache_is_a_clear_error(paper_hub, role, loader, variable):
    missing = "google/bert_uncased_L-2_H-128_A-2"
    profile = config.PROFILES["paper"].with_(**{role: missing})
    with pytest.raises(models.ModelNotAvailableError) as error:
        loader(profile)
    message = str(error.value)
    assert f"{missing!r} is missing from the cache at {paper_hub}" in message
    assert "HF_HUB_OFFLINE is set" in message
    assert "Fix: go online once" in message and f"hf download {missing}" in message
    assert variable in message


def test_tokenizer_missing_from_the_offline_cache_is_a_clear_error(paper_hub):
    profile = config.PROFILES["paper"].with_(encoder="nobody/no-such-model")
    with pytest.raises(models.ModelNotAvailableError, match=r"(?s)'nobody/no-such-model' is missing from the cache.*Fix"):
        models.load_tokenizer("encoder", profile)



def test_laptop_profile_loads_a_bert_whose_config_predates_model_type(paper_hub):
    """Google's BERT miniatures ship a TensorFlow-era config.json (no model_type) and only
    vocab.txt, which transformers 5's Auto classes refuse; models reads them as BERTs."""
    from transformers import AutoModelForSequenceClassification

    assert models.model_source("raw_encoder", "laptop") == "google/bert_uncased_L-4_H-256_A-4"
    encoder = models.load_raw_encoder("laptop", add_pooling_layer=False)
    assert (encoder.config.model_type, encoder.config.num_hidden_layers, encoder.config.hidden_size) == ("bert", 4, 256)
    assert encoder.pooler is None
    classifier = models.load_encoder("laptop", AutoModelForSequenceClassification, num_labels=2)
    assert classifier.config.num_labels == 2
    tokenizer = models.load_tokenizer("encoder", "laptop")
    assert tokenizer.model_max_length == 512
    assert tokenizer.convert_ids_to_tokens(tokenizer("Hello, World")["input_ids"]) == [
        "[CLS]", "hello", ",", "world", "[SEP]"]


def test_laptop_siamese_model_builds_on_the_old_config(paper_hub, tmp_path, monkeypatch):
    """sentence-transformers loads its encoder with the Auto classes itself: it gets a copy
    saved in today's format (lesson 4's siamese training)."""
    from ftcourse import similarity

    monkeypatch.setenv("FTCOURSE_CACHE", str(tmp_path))
    source = models.model_source("raw_encoder", "laptop")
    model = similarity.sentence_model(source, "cls", max_length=32, device="cpu")
    assert tuple(model.encode(["A man plays a guitar."]).shape) == (1, 256)
    copy = tmp_path / "models" / "google--bert_uncased_L-4_H-256_A-4"
    assert models.loadable_source(source) == str(copy) and (copy / "config.json").is_file()
    assert models.loadable_source("bert-base-uncased") == "bert-base-uncased"  # a modern config: as is


def test_saving_an_adapter_over_a_hub_model_offline_is_quiet(paper_hub, tiny_bert, tmp_path):
    """peft's save_pretrained asks the hub about the base model's vocabulary unless told
    not to; offline that is a warning printing a machine path into lesson 3's outputs."""
    import warnings

    from ftcourse import heads, lora

    tiny_bert.name_or_path = tiny_bert.config._name_or_path = "bert-base-uncased"  # as loaded from the hub
    model = lora.lora_task_model(tiny_bert, heads.SentenceClassifier(32, 2), rank=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lora.save_task_adapter(model, tmp_path / "sst2", "sst2")

# ----------------------------------------------------------------------------- datasets
# The loaders' hub path, on local stand-ins laid out as the hub repositories are (parquet
# files with the hub's columns and features). What only the hub can confirm is that these
# repositories still hold these files: see the README, "The paper profile".


def _hub_stand_ins(root):
    """Local dataset repositories shaped like the hub's, a few rows each."""
    import datasets as hf

    conll_features = hf.Features({
        "id": hf.Value("string"), "tokens": hf.List(hf.Value("string")),
        "pos_tags": hf.List(hf.ClassLabel(names=["NN", "NNP", "VB"])),
        "chunk_tags": hf.List(hf.ClassLabel(names=["O", "B-NP", "B-VP"])),
        "ner_tags": hf.List(hf.ClassLabel(names=data.CONLL_LABELS)),
    })
    conll = {"id": ["0", "1"], "tokens": [["EU", "rejects", "German"], ["Peter", "Blackburn"]],
             "pos_tags": [[1, 2, 1], [1, 1]], "chunk_tags": [[1, 2, 1], [1, 1]], "ner_tags": [[3, 0, 7], [1, 2]]}
    # eriktks/conll2003's parquet conversion branch: CONFIG/SPLIT/0000.parquet.
    for split in ("train", "validation", "test"):
        folder = root / "conll2003" / "conll2003" / split
        folder.mkdir(parents=True)
        hf.Dataset.from_dict(conll, features=conll_features).to_parquet(folder / "0000.parquet")
    sst_features = hf.Features({"idx": hf.Value("int32"), "sentence": hf.Value("string"),
                                "label": hf.ClassLabel(names=["negative", "positive"])})
    (root / "sst2" / "data").mkdir(parents=True)
    for split, labels in (("train", [1, 0]), ("validation", [0, 1]), ("test", [-1, -1])):  # GLUE's test: no labels
        rows = {"idx": [0, 1], "sentence": ["a gripping film ", "a tedious mess "], "label": labels}
        hf.Dataset.from_dict(rows, features=sst_features).to_parquet(root / "sst2" / "data" / f"{split}-00000-of-00001.parquet")
    (root / "sst5").mkdir()  # SetFit/sst5: JSON lines with text, label and label_text
    for split in ("train", "validation", "test"):
        rows = [{"text": "a gripping film", "label": 4, "label_text": "very positive"},
                {"text": "a tedious mess", "label": 0, "label_text": "very negative"}]
        (root / "sst5" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "stsb").mkdir()
    for split in ("train", "validation", "test"):
        rows = {"sentence1": ["A man plays.", "A cat sits."], "sentence2": ["A man sings.", "A dog runs."],
                "score": [0.5, 0.04]}  # the hub's copy divides the 0-5 scores by 5
        hf.Dataset.from_dict(rows).to_parquet(root / "stsb" / f"{split}-00000-of-00001.parquet")
    return root


@pytest.fixture
def hub_datasets(tmp_path, monkeypatch):
    """``datasets.load_dataset`` reads the stand-ins for the hub ids that ftcourse.data asks for;
    the calls are recorded, so a test sees the ids, configurations and revisions asked."""
    import datasets as hf

    stand_ins = _hub_stand_ins(tmp_path)
    real = hf.load_dataset
    calls = []

    def load_dataset(path, name=None, revision=None, **kwargs):
        calls.append({"path": path, "name": name, "revision": revision, **kwargs})
        local = {"eriktks/conll2003": "conll2003", "stanfordnlp/sst2": "sst2", "SetFit/sst5": "sst5",
                 "sentence-transformers/stsb": "stsb"}
        return real(str(stand_ins / local[path]), name, **kwargs)

    monkeypatch.delenv("FTCOURSE_DATA", raising=False)
    monkeypatch.setattr(data.datasets, "load_dataset", load_dataset)
    return calls


def test_hub_sources_need_no_dataset_script():
    # datasets >= 4 runs no loading scripts: eriktks/conll2003's main branch is one, so the
    # loader reads the parquet files the hub converted it to.
    assert data.HUB_SOURCES["conll2003"] == {"path": "eriktks/conll2003", "revision": "refs/convert/parquet"}
    assert {name: source["path"] for name, source in data.HUB_SOURCES.items()} == {
        "conll2003": "eriktks/conll2003", "sst2": "stanfordnlp/sst2", "sst5": "SetFit/sst5",
        "stsb": "sentence-transformers/stsb"}


def test_hub_conll2003_keeps_tokens_and_the_iob2_labels(hub_datasets):
    conll = data.load_conll2003("paper")
    assert hub_datasets == [{"path": "eriktks/conll2003", "name": None, "revision": "refs/convert/parquet"}]
    assert list(conll) == ["train", "validation"] and conll["train"].column_names == ["tokens", "ner_tags"]
    assert data.label_names(conll["train"], "ner_tags") == data.CONLL_LABELS
    assert [data.CONLL_LABELS[t] for t in conll["validation"][0]["ner_tags"]] == ["B-ORG", "O", "B-MISC"]


def test_hub_sst2_drops_the_unlabelled_test_split(hub_datasets):
    sst = data.load_sst2("paper")
    assert hub_datasets[0]["path"] == "stanfordnlp/sst2"
    assert list(sst) == ["train", "validation"] and sst["train"].column_names == ["sentence", "label"]
    assert sst["train"]["label"] == [1, 0] and data.label_names(sst["train"], "label") == data.SST2_LABELS


def test_hub_sst5_reads_as_sentence_and_five_named_labels(hub_datasets):
    sst5 = data.load_sst5("paper")
    assert hub_datasets[0]["path"] == "SetFit/sst5"
    assert list(sst5) == ["train", "validation", "test"] and sst5["train"].column_names == ["sentence", "label"]
    assert sst5["test"]["label"] == [4, 0] and data.label_names(sst5["train"], "label") == data.SST5_LABELS


def test_hub_stsb_scores_return_to_the_benchmark_scale(hub_datasets):
    stsb = data.load_stsb("paper")
    assert list(stsb) == ["train", "validation", "test"]
    assert stsb["test"].column_names == ["sentence1", "sentence2", "score"]
    assert stsb["test"]["score"] == pytest.approx([2.5, 0.2])


def test_hub_labels_that_differ_are_refused(hub_datasets, monkeypatch):
    monkeypatch.setattr(data, "CONLL_LABELS", data.CONLL_LABELS[::-1])
    with pytest.raises(data.DataFormatError, match="conll2003 on the hub has labels"):
        data.load_conll2003("paper")


# ----------------------------------------------------------------------------- 12 layers


def test_on_twelve_layers_weighted_sum_all_and_last4_read_different_layers(tokenizer):
    """On bert-base's 12 layers the paper's two scalar mixes differ (on a 4-layer encoder
    they would read the same layers): all reads 1..12, last4 reads 9..12 only."""
    import datasets as hf
    import torch
    from transformers import BertModel

    from ftcourse import readout

    torch.manual_seed(0)
    narrow = models.architecture_config(hidden_size=32, intermediate_size=64, num_attention_heads=2)
    encoder = BertModel(narrow, add_pooling_layer=False)  # bert-base's depth, a tiny width
    tags = hf.List(hf.ClassLabel(names=data.CONLL_LABELS))
    rows = hf.Dataset.from_dict({"tokens": [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]] * 4,
                                 "ner_tags": [[3, 0, 7, 0], [1, 2]] * 4},
                                features=hf.Features({"tokens": hf.List(hf.Value("string")), "ner_tags": tags}))
    features = readout.extract_features(encoder, tokenizer, rows, max_length=16, progress=False)
    assert features.num_layers == 12

    results = readout.evaluate_readouts(features, features, ["weighted_sum_all", "weighted_sum_last4"],
                                        "paper-smoke", head="linear", progress=False)
    every, last4 = results["weighted_sum_all"], results["weighted_sum_last4"]
    assert every.mix_layers == tuple(range(1, 13)) and len(every.mix_weights) == 12
    assert last4.mix_layers == (9, 10, 11, 12) and len(last4.mix_weights) == 4
    assert every.model is not last4.model  # trained apart, not merged as one readout

    # What each reads: changing layers 1..8 changes weighted_sum_all's input only.
    before = {name: readout._Batches(features, readout.resolve_readout(name, 12), "cpu").batch([0])[0]
              for name in results}
    features.states = features.states.clone()
    features.states[:, 1:9] += 1
    after = {name: readout._Batches(features, readout.resolve_readout(name, 12), "cpu").batch([0])[0]
             for name in results}
    assert not torch.equal(before["weighted_sum_all"], after["weighted_sum_all"])
    assert torch.equal(before["weighted_sum_last4"], after["weighted_sum_last4"])


# ----------------------------------------------------------------------------- notebooks
# Every notebook end to end with the paper profile's models (the stand-ins) on a few dozen
# examples (the paper-smoke profile). Copies run in memory; the committed notebooks are
# never written. About 5 minutes on 2 cores, most of it bert-base on the CPU.

from ftcourse.course import notebooks as course  # noqa: E402

NOTEBOOK_TIMEOUT = 900  # seconds per cell: a loaded CI machine is slow, not broken


def _texts(nb) -> list[str]:
    """Each code cell's printed text (stream and plain-text outputs), in cell order."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            texts.append("\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs))
    return texts


def _errors(nb) -> list[tuple[str, str]]:
    return [(o.ename, o.evalue) for cell in nb.cells if cell.cell_type == "code"
            for o in cell.outputs if o.output_type == "error"]


@pytest.fixture(scope="session")
def paper_smoke_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("ftcourse-cache")


@pytest.fixture
def paper_smoke_kernel(paper_hub, shared_data, paper_smoke_cache, monkeypatch):
    """Kernels started now see the paper-smoke profile, the stand-in hub cache (offline),
    the local benchmarks and a fresh ftcourse cache (shared by this session's notebooks)."""
    monkeypatch.setenv("FTCOURSE_PROFILE", "paper-smoke")
    monkeypatch.setenv("FTCOURSE_CACHE", str(paper_smoke_cache))
    return paper_hub


def _runs_under_the_paper_profile(path):
    student_copy = bool(course.EXPECTED_TO_RAISE.search(path.name)) and path.parent.name == "notebooks"
    nb = course.execute(path, timeout=NOTEBOOK_TIMEOUT, allow_errors=student_copy, cwd=path.parent)
    text = "\n".join(_texts(nb))
    assert "profile: paper-smoke" in text
    assert "encoder      bert-base-uncased" in text and "sentence-transformers/bert-base-nli-mean-tokens" in text
    errors = _errors(nb)
    if student_copy:  # the exercise stubs raise until a student fills them in (tracebacks show paths)
        assert errors and errors[0][0] == "NotImplementedError", errors
    else:
        assert not errors, errors
        assert not course.problems(nb), course.problems(nb)  # e.g. a library warning showing a machine path
    for check in NOTEBOOK_CHECKS.get(f"{path.parent.name}/{path.stem}", ()):
        check(text)


def _lesson2(text):
    assert "12 transformer layers + embeddings, hidden size 768" in text
    weights = {line.split(":")[0]: line.split("weights ")[1].count(",") + 1
               for line in text.splitlines() if line.startswith(("weighted_sum_all:", "weighted_sum_last4:"))}
    assert weights == {"weighted_sum_all": 12, "weighted_sum_last4": 4}  # two different mixes on 12 layers


def _lesson3(text):
    # peft's own count, with LoRA on bert-base's real module names (query, value) in a trained model.
    assert "encoder: 12 layers, hidden 768, 108,891,648 parameters" in text
    assert "LoRA trains 0.27% of what full fine-tuning trains" in text


def _lesson3b(text):
    # every method built on bert-base's real modules: LoRA r8 on query/value is the course's 294,912
    assert re.search(r"^LoRA r=8 +query, value +294,912 +1,538 ", text, re.MULTILINE), text[:3000]
    assert "Pareto front, fewest parameters first:" in text and "prompt tuning:" in text


def _lesson3c(text):
    # bert-base's 12 layers: partial freezing reads k = 0, 4, 8, 12, and the tactics freeze the lower 6
    assert re.search(r"^12 layers; k=2 leaves [\d,]+ of 108,891,648 parameters training; the package's freeze_lower "
                     r"leaves the same: True", text, re.MULTILINE), text[:3000]
    assert re.search(r"^k=12 +1,538 ", text, re.MULTILINE) and "lower 6 layers frozen" in text
    assert re.search(r"^LoRA r=8 +296,450 ", text, re.MULTILINE)  # 294,912 on query and value + the head


def _lesson1(text):
    # the text's loop and each addition, on bert-base: its encoder and a 1,538-parameter head
    assert "none (the text's loop)" in text and "+ length bucketing only" in text
    assert "one AdamW step over 108,893,186 parameters" in text


def _lesson4(text):
    assert "raw encoder: 12 layers, hidden size 768" in text
    assert "sentence model: 12 layers, hidden size 768, its own pooling: mean" in text
    assert "trained with mean pooling" in text and "trained with cls  pooling" in text


def _lesson4b(text):
    # the span and pair heads on bert-base's width: a 768 -> 2 span head alone when frozen
    assert re.search(r"^frozen +1,538 ", text, re.MULTILINE), text[:3000]
    assert "every pair of 10,000 sentences, extrapolated from the measured time per pass: 49,995,000 cross-encoder " \
        "passes against 10,000" in text


def _exercise_solution(text):
    # The trained LoRA model itself: 294,912 LoRA parameters + a 1,538-parameter head, 0.27%.
    row = re.search(r"^lora +[\d.]+ +[\d.]+ +([\d,]+) +([\d.]+%)", text, re.MULTILINE)
    assert row and row.group(1) == "296,450" and round(float(row.group(2).rstrip("%")), 2) == 0.27, row
    assert "lora regime: OK (trainable 294,912 LoRA + 1,538 head parameters)" in text
    # measured on the real peft model beside the course's formula, in a "derived" column
    assert re.search(r"^LoRA r8 parameters on bert-base +294,912 +294,912 +parameters", text, re.MULTILINE), text[-2000:]


NOTEBOOK_CHECKS = {
    "notebooks/01_composition": [_lesson1],
    "notebooks/02_feature_readout": [_lesson2],
    "notebooks/03_costs_and_lora": [_lesson3],
    "notebooks/03b_peft_frontier": [_lesson3b],
    "notebooks/03c_between_the_extremes": [_lesson3c],
    "notebooks/04_cls_vs_sbert": [_lesson4],
    "notebooks/04b_span_and_pair_heads": [_lesson4b],
    "solutions/05_exercise_bert_base": [_exercise_solution],
}


# One test class per notebook: xdist (--dist loadscope) hands each class to a worker as a unit, so the
# notebooks spread over the workers, heaviest first by their measured seconds (tests/suite_order.py).
import suite_order  # noqa: E402


def _notebook_class(path):
    key = f"{path.parent.name}/{path.stem}"

    def test_runs_under_the_paper_profile(self, paper_smoke_kernel):
        _runs_under_the_paper_profile(path)

    name = "TestPaperSmoke_" + re.sub(r"\W", "_", key)
    return name, type(name, (), {"test_runs_under_the_paper_profile": test_runs_under_the_paper_profile,
                                 "__doc__": f"{key} end to end under the paper-smoke profile."})


_classes = dict(_notebook_class(path) for path in course.course_notebooks())
for _name in suite_order.heaviest_first([f"tests/test_paper_profile.py::{n}" for n in _classes]):
    _name = _name.split("::")[1]
    globals()[_name] = _classes[_name]
