"""The course's benchmarks as ``datasets.DatasetDict`` objects.

Each loader reads the original files from the folder named by ``FTCOURSE_DATA`` when it
is set (the offline mirror, e.g. ``../shared/datasets``), and otherwise the Hugging Face
hub. Either way the columns are the same:

- CoNLL-2003: ``tokens``, ``ner_tags`` (a ``ClassLabel`` sequence over ``CONLL_LABELS``);
- SST-2: ``sentence``, ``label`` (1 = positive);
- SST-5: ``sentence``, ``label`` (0 = very negative ... 4 = very positive): a real
  multi-class set, to bring another classification task through the same code;
- STS-B: ``sentence1``, ``sentence2``, ``score`` (0 to 5, the benchmark's own scale).

Training splits are subsampled as the profile says (seeded, so always the same subset);
evaluation splits are kept whole unless the profile says otherwise.
"""

from __future__ import annotations

import csv
from pathlib import Path

import datasets

from . import config

CONLL_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
SST2_LABELS = ["negative", "positive"]
SST5_LABELS = ["very negative", "negative", "neutral", "positive", "very positive"]
STSB_SCORE_RANGE = (0.0, 5.0)

# Online sources. CoNLL-2003's canonical repo is a loading script, which `datasets` no
# longer runs; its parquet conversion branch carries the same data without the script.
HUB_SOURCES = {
    "conll2003": {"path": "eriktks/conll2003", "revision": "refs/convert/parquet"},
    "sst2": {"path": "stanfordnlp/sst2"},
    "sst5": {"path": "SetFit/sst5"},
    "stsb": {"path": "sentence-transformers/stsb"},
}
LOCAL_FILES = {
    "conll2003": {"train": "train.txt", "validation": "validation.txt"},
    "sst2": {"train": "train.tsv", "validation": "validation.tsv"},
    "sst5": {"train": "train.tsv", "validation": "validation.tsv", "test": "test.tsv"},
    "stsb": {"train": "train.tsv", "validation": "validation.tsv", "test": "test.tsv"},
}


class DataError(Exception):
    """Base class: a dataset could not be loaded, and the message says how to fix it."""


class DataNotFoundError(DataError, FileNotFoundError):
    pass


class DataFormatError(DataError, ValueError):
    pass


class EmptySplitError(DataError, ValueError):
    pass


class ReportedSplitError(DataError, ValueError):
    """A helper that chooses settings was handed a split that is not a carved validation part."""


# ----------------------------------------------------------------------------- parsing


def read_conll(path: Path) -> dict:
    """Parse a CoNLL-2003 file (``word POS chunk NER`` per line, blank between sentences)."""
    label_ids = {name: i for i, name in enumerate(CONLL_LABELS)}
    sentences, tags = [], []
    words, word_tags = [], []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("-DOCSTART-"):
                if words:
                    sentences.append(words)
                    tags.append(word_tags)
                    words, word_tags = [], []
                continue
            fields = line.split()
            if len(fields) != 4:
                raise DataFormatError(
                    f"{path}:{line_number}: expected 4 fields 'word POS chunk NER', "
                    f"found {len(fields)} in {line!r}. Fix: restore the original CoNLL-2003 file."
                )
            if fields[3] not in label_ids:
                raise DataFormatError(
                    f"{path}:{line_number}: unknown NER tag {fields[3]!r}; "
                    f"expected one of {CONLL_LABELS} (IOB2). Fix: restore the original file."
                )
            words.append(fields[0])
            word_tags.append(label_ids[fields[3]])
    if words:
        sentences.append(words)
        tags.append(word_tags)
    return {"tokens": sentences, "ner_tags": tags}


def read_sst2(path: Path, labels: tuple = ("0", "1")) -> dict:
    """Parse GLUE SST-2 (header ``sentence<TAB>label``)."""
    allowed = labels
    sentences, labels = [], []
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header != ["sentence", "label"]:
            raise DataFormatError(
                f"{path}:1: expected the header 'sentence<TAB>label', found {header!r}."
            )
        for line_number, line in enumerate(f, start=2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 2 or fields[1] not in allowed:
                raise DataFormatError(
                    f"{path}:{line_number}: expected 'sentence<TAB>{'|'.join(allowed)}', found {line.strip()!r}."
                )
            sentences.append(fields[0].strip())
            labels.append(int(fields[1]))
    return {"sentence": sentences, "label": labels}


def read_stsb(path: Path) -> dict:
    """Parse the original STS benchmark CSV (tab-separated, score in column 5)."""
    low, high = STSB_SCORE_RANGE
    first, second, scores = [], [], []
    with open(path, encoding="utf-8") as f:
        # Sentences contain quotes, so quoting is off; extra trailing columns are notes.
        for line_number, fields in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if not fields:
                continue
            if len(fields) < 7:
                raise DataFormatError(
                    f"{path}:{line_number}: expected at least 7 tab-separated fields "
                    f"(genre, file, year, id, score, sentence1, sentence2), found {len(fields)}."
                )
            try:
                score = float(fields[4])
            except ValueError:
                raise DataFormatError(
                    f"{path}:{line_number}: the score {fields[4]!r} is not a number."
                ) from None
            if not low <= score <= high:
                raise DataFormatError(
                    f"{path}:{line_number}: score {score} is outside {low}..{high}."
                )
            first.append(fields[5])
            second.append(fields[6])
            scores.append(score)
    return {"sentence1": first, "sentence2": second, "score": scores}


def read_sst5(path: Path) -> dict:
    """Parse SST-5 in the same layout as SST-2 (header ``sentence<TAB>label``, labels 0-4)."""
    return read_sst2(path, labels=tuple(str(i) for i in range(len(SST5_LABELS))))


READERS = {"conll2003": read_conll, "sst2": read_sst2, "sst5": read_sst5, "stsb": read_stsb}


def _features(name: str) -> datasets.Features:
    if name == "conll2003":
        return datasets.Features(
            {
                "tokens": datasets.Sequence(datasets.Value("string")),
                "ner_tags": datasets.Sequence(datasets.ClassLabel(names=CONLL_LABELS)),
            }
        )
    if name in ("sst2", "sst5"):
        names = SST2_LABELS if name == "sst2" else SST5_LABELS
        return datasets.Features({"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=names)})
    return datasets.Features(
        {
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
            "score": datasets.Value("float32"),
        }
    )


# ----------------------------------------------------------------------------- sources


def _load_local(name: str, folder: Path) -> datasets.DatasetDict:
    folder = folder / name
    splits = {}
    for split, filename in LOCAL_FILES[name].items():
        path = folder / filename
        if not path.is_file():
            raise DataNotFoundError(
                f"{name}: the {split} split was looked for at {path} and is missing. "
                f"Fix: point FTCOURSE_DATA at a folder holding {name}/{filename} "
                f"(e.g. ../shared/datasets), or unset it to download from the hub."
            )
        columns = READERS[name](path)
        splits[split] = datasets.Dataset.from_dict(columns, features=_features(name))
    return datasets.DatasetDict(splits)


def _load_hub(name: str) -> datasets.DatasetDict:
    source = HUB_SOURCES[name]
    try:
        raw = datasets.load_dataset(**source)
    except Exception as error:  # connection errors come in many types; all mean the same here
        raise DataNotFoundError(
            f"{name}: could not load {source['path']!r} from the Hugging Face hub "
            f"({type(error).__name__}: {error}). Fix: go online, or set FTCOURSE_DATA to a "
            f"local folder holding {name}/ in its original format (e.g. ../shared/datasets)."
        ) from error
    if name == "conll2003":
        raw = raw.select_columns(["tokens", "ner_tags"])
        hub_names = raw["train"].features["ner_tags"].feature.names
        if hub_names != CONLL_LABELS:
            raise DataFormatError(f"conll2003 on the hub has labels {hub_names}, expected {CONLL_LABELS}.")
    elif name == "sst2":
        raw = raw.select_columns(["sentence", "label"])
        raw = raw.filter(lambda row: row["label"] >= 0)  # GLUE's test split is unlabelled
    elif name == "sst5":
        raw = raw.rename_column("text", "sentence").select_columns(["sentence", "label"])
    elif name == "stsb":
        # The hub copy divides scores by 5; the course keeps the benchmark's 0-5 scale.
        raw = raw.map(lambda row: {"score": row["score"] * 5.0})
    raw = raw.cast(_features(name))
    return datasets.DatasetDict({split: raw[split] for split in LOCAL_FILES[name] if split in raw})


def subsample(dataset: datasets.Dataset, n: int | None, seed: int = 0) -> datasets.Dataset:
    """A seeded random subset of ``n`` rows (the same rows every time), or all rows."""
    if n is None or n >= len(dataset):
        return dataset
    if n <= 0:
        raise ValueError(f"subsample size must be positive, got {n}.")
    return dataset.shuffle(seed=seed).select(range(n)).flatten_indices()


def carve_validation(split: datasets.Dataset, size: int, seed: int = 0) -> tuple[datasets.Dataset, datasets.Dataset]:
    """``(rest, validation)``: ``size`` rows of a training split held out with a fixed seed,
    for choosing settings (learning rates, epochs) without looking at the split a lesson
    reports. Draw training subsets from ``rest`` only: the two never share a row."""
    if not 0 < size < len(split):
        raise ValueError(f"A validation part of {size} rows cannot be carved from {len(split)}: it must leave "
                         "rows to train on. Fix: a size between 1 and the split's length minus 1.")
    order = datasets.Dataset.from_dict({"i": list(range(len(split)))}).shuffle(seed=seed)["i"]
    rest, validation = split.select(sorted(order[size:])), split.select(sorted(order[:size]))
    validation.info.description = VALIDATION_MARK  # kept by map, select and shuffle: tokenised, it is still marked
    return rest, validation


#: What ``carve_validation`` writes into its validation part's ``info.description``. Every helper
#: that chooses a setting by a score (``require_validation``) reads only a part so marked: the
#: split a lesson reports can never choose the settings it is then used to report.
VALIDATION_MARK = "ftcourse: a validation part carved from a training split (data.carve_validation)"


def require_validation(dataset: datasets.Dataset, chooser: str) -> datasets.Dataset:
    """``dataset`` if ``carve_validation`` made it; otherwise a ``ReportedSplitError`` naming ``chooser``."""
    if getattr(getattr(dataset, "info", None), "description", None) != VALIDATION_MARK:
        raise ReportedSplitError(
            f"{chooser} chooses a setting by its score, so it reads only a validation part carved from a training "
            f"split, never a split a lesson reports (this one has {len(dataset):,} rows and no carve mark). Fix: "
            "rest, validation = data.carve_validation(split['train'], size); train on rest, choose on validation.")
    return dataset


def load(name: str, profile=None, *, full: bool = False, seed: int = 0) -> datasets.DatasetDict:
    """Load benchmark ``name`` (``conll2003``, ``sst2``, ``sst5`` or ``stsb``), sized by the profile.

    ``full=True`` ignores the profile's sizes. Subsets are seeded by ``seed``.
    """
    if name not in READERS:
        raise DataError(
            f"Unknown dataset {name!r}. Known datasets: {', '.join(READERS)}."
        )
    profile = config.get_profile(profile)
    folder = config.data_dir()
    data = _load_local(name, folder) if folder else _load_hub(name)
    for split, dataset in data.items():
        if len(dataset) == 0:
            raise EmptySplitError(
                f"{name}: the {split} split is empty. Fix: check the files under "
                f"{folder / name if folder else HUB_SOURCES[name]['path']}."
            )
    if not full:
        for split in data:
            size = profile.train_size(name) if split == "train" else profile.eval_size(name)
            data[split] = subsample(data[split], size, seed=seed)
    return data


def load_conll2003(profile=None, **kwargs) -> datasets.DatasetDict:
    """CoNLL-2003 NER: ``tokens`` and ``ner_tags`` (names in ``CONLL_LABELS``)."""
    return load("conll2003", profile, **kwargs)


def load_sst2(profile=None, **kwargs) -> datasets.DatasetDict:
    """GLUE SST-2 sentiment: ``sentence`` and ``label`` (1 = positive)."""
    return load("sst2", profile, **kwargs)


def load_sst5(profile=None, **kwargs) -> datasets.DatasetDict:
    """SST-5 fine-grained sentiment: ``sentence`` and ``label`` (names in ``SST5_LABELS``)."""
    return load("sst5", profile, **kwargs)


def load_stsb(profile=None, **kwargs) -> datasets.DatasetDict:
    """STS benchmark: ``sentence1``, ``sentence2`` and ``score`` from 0 to 5."""
    return load("stsb", profile, **kwargs)


def label_names(dataset: datasets.Dataset, column: str) -> list[str]:
    """The class names of a ``ClassLabel`` column (or a sequence of them)."""
    feature = dataset.features[column]
    feature = getattr(feature, "feature", feature)
    return list(feature.names)


def tokenize(dataset: datasets.Dataset, tokenizer, max_length: int, text: str = "sentence",
             pair: str | None = None, label: str | None = "label") -> datasets.Dataset:
    """Token ids for a sentence (or sentence-pair) task, ready for ``ftcourse.training``.

    A pair is packed as ``[CLS] a [SEP] b [SEP]`` with token type ids 0 then 1. The label
    column, if any, is renamed ``labels``; every other column is dropped. No padding here:
    batches are padded to their own longest sentence when they are made.
    """
    missing = [c for c in (text, pair, label) if c and c not in dataset.column_names]
    if missing:
        raise ValueError(f"Columns {missing} are not in the dataset (it has {dataset.column_names}).")

    def encode(batch):
        second = batch[pair] if pair else None
        return tokenizer(batch[text], second, truncation=True, max_length=max_length)

    encoded = dataset.map(encode, batched=True, remove_columns=[c for c in dataset.column_names if c != label])
    return encoded.rename_column(label, "labels") if label and label != "labels" else encoded


def entity_question(tokens: list[str], tags: list[int], kind: str = "ORG"):
    """Turn a CoNLL-2003 sentence into a span-extraction example: a question asking for
    its first entity of ``kind``, the sentence as context, and the answer's character span.

    Returns ``(question, context, answer_start, answer_text)``.
    """
    kinds = {"PER": "person", "ORG": "organisation", "LOC": "place", "MISC": "name"}
    if kind not in kinds:
        raise ValueError(f"Unknown entity kind {kind!r}. Known kinds: {', '.join(kinds)}.")
    names = [CONLL_LABELS[t] for t in tags]
    try:
        first = names.index(f"B-{kind}")
    except ValueError:
        raise ValueError(f"The sentence has no {kind} entity.") from None
    last = first
    while last + 1 < len(names) and names[last + 1] == f"I-{kind}":
        last += 1
    context = " ".join(tokens)
    answer_start = len(" ".join(tokens[:first])) + (1 if first else 0)
    answer = " ".join(tokens[first : last + 1])
    assert context[answer_start : answer_start + len(answer)] == answer
    return f"Which {kinds[kind]} is mentioned?", context, answer_start, answer
