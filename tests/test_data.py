import re

import datasets
import pytest

from ftcourse import config, data


def test_conll_full_sizes_and_labels(shared_data):
    conll = data.load_conll2003(full=True)
    assert len(conll["train"]) == 14041
    assert len(conll["validation"]) == 3250
    assert sum(len(t) for t in conll["validation"]["tokens"]) == 51362
    assert data.label_names(conll["train"], "ner_tags") == data.CONLL_LABELS
    first = conll["train"][0]
    assert first["tokens"][:3] == ["EU", "rejects", "German"]
    assert [data.CONLL_LABELS[t] for t in first["ner_tags"][:3]] == ["B-ORG", "O", "B-MISC"]


def test_sst2_and_stsb_columns(shared_data):
    sst = data.load_sst2(full=True)
    assert (len(sst["train"]), len(sst["validation"])) == (67349, 872)
    assert set(sst["train"]["label"]) == {0, 1}
    stsb = data.load_stsb(full=True)
    assert [len(stsb[s]) for s in ("train", "validation", "test")] == [5749, 1500, 1379]
    assert stsb["test"].column_names == ["sentence1", "sentence2", "score"]
    assert 0 <= min(stsb["train"]["score"]) and max(stsb["train"]["score"]) <= 5


def test_sst5_is_a_five_label_set_with_its_three_splits(shared_data):
    sst5 = data.load_sst5(full=True)
    assert [len(sst5[s]) for s in ("train", "validation", "test")] == [8544, 1101, 2210]
    assert data.label_names(sst5["train"], "label") == data.SST5_LABELS
    assert set(sst5["train"]["label"]) == {0, 1, 2, 3, 4}
    assert sst5["train"].column_names == ["sentence", "label"]


def test_a_label_outside_the_set_is_a_clear_error(tmp_path):
    (tmp_path / "bad.tsv").write_text("sentence\tlabel\na fine film\t5\n")
    with pytest.raises(data.DataFormatError, match=r"bad.tsv:2: expected 'sentence<TAB>0\|1\|2\|3\|4'"):
        data.read_sst5(tmp_path / "bad.tsv")


def test_profile_subsets_training_only_and_is_deterministic(shared_data):
    a = data.load_sst2("offline")
    b = data.load_sst2("offline")
    assert len(a["train"]) == config.PROFILES["offline"].train_size("sst2")
    assert len(a["validation"]) == 872  # evaluation is never subsampled offline
    assert a["train"]["sentence"] == b["train"]["sentence"]
    assert data.load_sst2("offline", seed=1)["train"]["sentence"] != a["train"]["sentence"]


def test_unknown_dataset_and_profile():
    with pytest.raises(data.DataError, match="Known datasets: conll2003, sst2, sst5, stsb"):
        data.load("imdb")
    with pytest.raises(config.ConfigError, match="Known profiles"):
        config.get_profile("no-such-profile")


def test_missing_folder_names_the_path_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCOURSE_DATA", str(tmp_path))
    with pytest.raises(data.DataNotFoundError, match=r"sst2/train.tsv.*FTCOURSE_DATA"):
        data.load_sst2()
    monkeypatch.setenv("FTCOURSE_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(config.ConfigError, match="is not a folder"):
        data.load_sst2()


def _write(folder, name, files):
    (folder / name).mkdir(parents=True)
    for filename, text in files.items():
        (folder / name / filename).write_text(text)


def test_malformed_lines_give_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCOURSE_DATA", str(tmp_path))
    good = "EU NNP B-NP B-ORG\n\n"
    _write(tmp_path, "conll2003", {"train.txt": good + "Peter NNP B-NP\n", "validation.txt": good})
    with pytest.raises(data.DataFormatError, match=r"train.txt:3: expected 4 fields"):
        data.load_conll2003()
    _write(tmp_path, "sst2", {"train.tsv": "sentence\tlabel\ngood\t1\nbad\tneg\n", "validation.tsv": "sentence\tlabel\n"})
    with pytest.raises(data.DataFormatError, match=r"train.tsv:3"):
        data.load_sst2()


def test_empty_split_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCOURSE_DATA", str(tmp_path))
    _write(tmp_path, "sst2", {"train.tsv": "sentence\tlabel\ngood\t1\n", "validation.tsv": "sentence\tlabel\n"})
    with pytest.raises(data.EmptySplitError, match="validation split is empty"):
        data.load_sst2()


def test_stsb_score_out_of_range(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCOURSE_DATA", str(tmp_path))
    row = "main-captions\tMSRvid\t2012test\t0001\t{}\tA man.\tA woman.\n"
    _write(tmp_path, "stsb", {"train.tsv": row.format("7.5"), "validation.tsv": row.format("1"), "test.tsv": row.format("1")})
    with pytest.raises(data.DataFormatError, match=r"train.tsv:1: score 7.5 is outside"):
        data.load_stsb()


def test_hub_unreachable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("FTCOURSE_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(data.DataNotFoundError, match=r"(?s)stanfordnlp/sst2.*go online.*FTCOURSE_DATA"):
        data.load_sst2()


def test_subsample_rejects_non_positive():
    import datasets

    ds = datasets.Dataset.from_dict({"x": [1, 2, 3]})
    assert len(data.subsample(ds, 2)) == 2
    with pytest.raises(ValueError, match="positive"):
        data.subsample(ds, 0)


def test_tokenize_packs_pairs_and_renames_labels(tokenizer):
    import datasets as hf

    ds = hf.Dataset.from_dict({"sentence1": ["a man plays"], "sentence2": ["a woman sings"], "score": [2.5]})
    encoded = data.tokenize(ds, tokenizer, 32, text="sentence1", pair="sentence2", label="score")
    assert set(encoded.column_names) == {"labels", "input_ids", "token_type_ids", "attention_mask"}
    assert encoded[0]["token_type_ids"] == [0] * 5 + [1] * 4
    with pytest.raises(ValueError, match=r"\['text'\] are not in the dataset"):
        data.tokenize(ds, tokenizer, 32, text="text", label="score")


def test_entity_question_finds_the_span():
    tokens = ["EU", "rejects", "German", "call", "from", "Deutsche", "Bank"]
    tags = [data.CONLL_LABELS.index(t) for t in ["B-ORG", "O", "B-MISC", "O", "O", "O", "O"]]
    question, context, start, answer = data.entity_question(tokens, tags, "ORG")
    assert (question, answer, start) == ("Which organisation is mentioned?", "EU", 0)
    tags[0] = data.CONLL_LABELS.index("O")
    tags[5:7] = [data.CONLL_LABELS.index("B-ORG"), data.CONLL_LABELS.index("I-ORG")]
    _, context, start, answer = data.entity_question(tokens, tags, "ORG")
    assert answer == "Deutsche Bank" and context[start:start + len(answer)] == answer
    with pytest.raises(ValueError, match="no PER entity"):
        data.entity_question(tokens, tags, "PER")


# --------------------------------------------------------------------- tuning never reads a reported split


def _choosers():
    """Every helper in the package that chooses a setting by a score: ``choose_*`` and ``sweep``."""
    import ast
    import importlib
    import pkgutil

    import ftcourse

    found = {}
    names = [info.name for info in pkgutil.iter_modules(ftcourse.__path__)] + ["experiments.choose"]
    for name in names:
        if name.startswith("__"):  # __main__ runs the command line
            continue
        module = importlib.import_module(f"ftcourse.{name}")
        tree = ast.parse(open(module.__file__).read())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and (node.name.startswith("choose_") or node.name == "sweep") \
                    and node.name != "choose_profile":  # picks a profile from the machine, not by a score
                found[f"{name.split('.')[-1]}.{node.name}"] = ast.unparse(node)
    return found


def test_every_chooser_reads_only_a_carved_validation_part():
    choosers = _choosers()
    assert {"pairs.choose_lr", "pairs.choose_epochs", "choose.choose_lr"} <= set(choosers)
    # each checks its part itself, or hands it to a chooser that does (pairs.choose_cross_encoder to choose_lr)
    delegates = {name for name, source in choosers.items()
                 if re.search(r"\bchoose_(lr|epochs)\(encoder, train, validation", source)}
    assert [name for name, source in choosers.items()
            if "data.require_validation(validation" not in source and name not in delegates] == []
    assert "pairs.choose_cross_encoder" in delegates


def test_a_reported_split_is_refused_and_the_carved_part_is_accepted_tokenised():
    from ftcourse import experiments, pairs

    split = datasets.Dataset.from_dict({"sentence": [f"s{i}" for i in range(20)], "label": [i % 2 for i in range(20)]})
    rest, validation = data.carve_validation(split, 5)
    assert data.require_validation(validation.map(lambda row: {"n": len(row["sentence"])}).shuffle(seed=1), "x")
    for part in (split, rest):  # a whole split, or the part that trains, never chooses
        with pytest.raises(data.ReportedSplitError, match="carve_validation"):
            data.require_validation(part, "x")
    for choose in (lambda v: pairs.choose_lr(None, None, v, [1e-4]),
                   lambda v: pairs.choose_epochs(None, None, v, 1e-4),
                   lambda v: experiments.choose_lr(experiments.RunSpec("k=0", 1e-4), [1e-4], None, None, v)):
        with pytest.raises(data.ReportedSplitError, match="never a split a lesson reports"):
            choose(split)
