"""Submissions that try to earn marks without doing the work, graded as a class (smoke profile,
sandboxed). The verdicts are computed in the grader's own process from the data the evidence
kernel wrote (``ftcourse.course.verdicts``), so none of these may pass a part it faked.

Four classes of mechanism, each with cases written independently of one another:

1. hiding an exception from the kernel's error messages (a custom exception handler, a traceback
   renderer that raises, an exception group printed as text);
2. disabling the in-kernel guard (its ``changes``, the runner's name);
3. code that runs at definition time (a decorator, a class body, a default value)
   rewriting what the checks or the evidence rely on, up to forging the evidence files (once, or from a
   thread that keeps rewriting them after every recording cell);
4. typed-in or wrong figures: results without a trained model, an untrained model, a model scored on
   the training set, a frozen encoder that moved, a result with a key missing, noise added to every
   trainable weight instead of training (the descent check), an encoder never frozen whose model shows
   the recorder a frozen copy (two views of the model disagree: REVIEW), and digests made to look
   changed by a patched hashlib or a patched ``Tensor.numpy`` (no weight moved); and training on other
   data than the notebook's: 3 epochs on train + dev (REVIEW, by the held-out check), or on 2 sentences
   (the descent check).

The honest solution is graded in the same class and must get 5 of 5. CI grades the class at smoke;
``FTCOURSE_CLASS_PROFILE=grading pytest tests/test_grading_verdicts.py`` grades it at ``ftcourse grade``'s
default profile, where the seed study re-scores a second seed of every run (``GRADING_HONEST``).
"""

import os

import nbformat
import pytest

from ftcourse.course import exercise, grading

SOLUTION = exercise.SOLUTIONS_DIR / "05_exercise_bert_base.ipynb"
STUDENT = exercise.student_path(SOLUTION)
NAME = "05_exercise_bert_base.ipynb"
PROFILE = os.environ.get("FTCOURSE_CLASS_PROFILE", "smoke")
ENV = {"FTCOURSE_PROFILE": PROFILE}
TIMEOUT = {"smoke": 240}.get(PROFILE, 600)  # seconds a notebook: the grading profile trains 128 sentences a run
ANSWERS = ("add_lora", "build_model", "train_loop", "run_regime", "summarize")

TYPED_RUN = """\
def run_regime(regime, seed=0, **changes):
    return {"regime": regime, "seed": seed, "accuracy": 0.91, "seconds_per_epoch": 2.0,
            "trainable": {"frozen": 770, "finetune": 22566146, "lora": 74498}[regime], "peak_mib": 300.0}"""
TYPED_SUMMARY = """\
def summarize(accuracies):
    return {"mean": 0.83, "std": 0.05, "range": 0.12}"""

# Each case: answer name -> its source (answers not named stay stubs, or take the solution's with "solution").
CASES = {
    # 1. Hiding an exception.
    "custom_exception_handler": {
        "add_lora": "def add_lora(encoder, _=get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)):\n"
                    "    raise NotImplementedError()",
        "run_regime": TYPED_RUN, "summarize": TYPED_SUMMARY},
    "traceback_renderer_raises": {
        "add_lora": "class Quiet(Exception):\n    def _render_traceback_(self):\n        raise RuntimeError('none')\n\n\n"
                    "def add_lora(encoder):\n    raise Quiet()",
        "build_model": "def build_model(regime, seed=0):\n    raise Quiet()",
        "summarize": "def summarize(accuracies):\n    raise Quiet()"},
    "exception_group_printed_as_text": {
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    import traceback\n    try:\n"
                      "        raise ExceptionGroup('stub', [NotImplementedError()])\n"
                      "    except ExceptionGroup as group:\n        traceback.print_exception(group)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': 0.9, 'seconds_per_epoch': 1.0,\n"
                      "            'trainable': 770, 'peak_mib': 1.0}"},
    # 2. The guard.
    "guard_blinded": {
        "summarize": "import ftcourse.course.guard as _g\n_g.Guard.changes = lambda self: []\n\n\n"
                     "def summarize(accuracies, _=setattr(_g.Guard, 'changes', lambda self: [])):\n"
                     "    return {'mean': 0.8, 'std': 0.0, 'range': 0.0}",
        "run_regime": TYPED_RUN},
    "guard_runner_renamed": {
        "add_lora": "def __ftcourse_run__(code):\n    exec(code, globals())\n\n\n"
                    "def add_lora(encoder):\n    return encoder",
        "run_regime": TYPED_RUN, "summarize": TYPED_SUMMARY},
    # 3. Definition-time code.
    "decorator_rigs_isclose": {
        "summarize": "import math\n\n\ndef _rig(function):\n    math.isclose = lambda *a, **k: True\n    return function\n\n\n"
                     "@_rig\ndef summarize(accuracies):\n    return {'mean': 0.0, 'std': 0.0, 'range': 0.0}"},
    "class_body_forges_the_evidence_past_a_blind_guard": {
        "add_lora": """\
import ftcourse.course.evidence as _e
import ftcourse.course.guard as _g


class _Forge:
    _g.Guard.changes = lambda self: []  # the guard sees nothing from here on

    def _lora(add_lora):
        from ftcourse.course.checks import bert_base_architecture
        config = {"r": 8, "lora_alpha": 8, "lora_dropout": 0.1, "target_modules": ["query", "value"], "bias": "none"}
        _e._write_json("lora.json", {"config": config, "parameters": _e.parameters(bert_base_architecture())})

    def _runs(namespace, regimes, seeds, file):
        _e._write_json(file, [{"regime": r, "seed": s, "models_built": 1, "changed": [], "digests": {}, "parameters": [],
                               "file": "none.safetensors",
                               "result": {"regime": r, "seed": s, "accuracy": 0.9, "seconds_per_epoch": 1.0,
                                          "trainable": 770.0, "peak_mib": 1.0}} for r in regimes for s in seeds])

    _e.record_lora, _e.record_runs = _lora, _runs


def add_lora(encoder):
    return encoder""", "summarize": TYPED_SUMMARY},
    # 4. Figures that are typed in or wrong (add_lora, build_model and summarize solved where named).
    "typed_in_results": {"run_regime": TYPED_RUN, "summarize": TYPED_SUMMARY},
    "untrained_model": {
        "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    model = build_model(regime, seed)\n"
                      "    logits, labels = predict(model, dev_set, pad_token_id=tokenizer.pad_token_id)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': accuracy(logits, labels)['accuracy'],\n"
                      "            'seconds_per_epoch': 1.0, 'trainable': count_parameters(model)['trainable'], 'peak_mib': 1.0}"},
    "scored_on_the_training_set": {
        "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    model = build_model(regime, seed)\n"
                      "    history = train(model, train_set, train_config(regime, seed, epochs=4, **changes),\n"
                      "                    pad_token_id=tokenizer.pad_token_id)\n"
                      "    logits, labels = predict(model, train_set, pad_token_id=tokenizer.pad_token_id)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': accuracy(logits, labels)['accuracy'],\n"
                      "            'seconds_per_epoch': history.seconds_per_epoch,\n"
                      "            'trainable': count_parameters(model)['trainable'], 'peak_mib': 1.0}"},
    "frozen_encoder_moved": {
        "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    model = build_model(regime, seed)\n"
                      "    trainable = count_parameters(model)['trainable']\n"
                      "    set_regime(model, 'finetune') if regime == 'frozen' else None  # the encoder trains too\n"
                      "    history = train(model, train_set, train_config(regime, seed, **changes),\n"
                      "                    pad_token_id=tokenizer.pad_token_id)\n"
                      "    set_regime(model, 'frozen') if regime == 'frozen' else None  # and looks frozen again\n"
                      "    logits, labels = predict(model, dev_set, pad_token_id=tokenizer.pad_token_id)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': accuracy(logits, labels)['accuracy'],\n"
                      "            'seconds_per_epoch': history.seconds_per_epoch, 'trainable': trainable, 'peak_mib': 1.0}"},
    "noise_instead_of_training": {
        "add_lora": "solution", "build_model": "solution", "summarize": "solution",
        "train_loop": "def train_loop(model, data, lr, epochs, seed=0):\n    with torch.no_grad():\n"
                      "        for p in model.parameters():\n            if p.requires_grad:\n"
                      "                p.add_(1e-6 * torch.randn_like(p))  # every trainable weight changes\n    return 1.0",
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    model = build_model(regime, seed)\n"
                      "    train_loop(model, train_set, 0.0, 1)\n"
                      "    logits, labels = predict(model, dev_set, pad_token_id=tokenizer.pad_token_id)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': accuracy(logits, labels)['accuracy'],\n"
                      "            'seconds_per_epoch': 1.0, 'trainable': count_parameters(model)['trainable'], 'peak_mib': 1.0}"},
    "never_frozen_but_shown_frozen": {
        "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    import copy\n    model = build_model(regime, seed)\n"
                      "    shown = copy.deepcopy(model)  # what the recorder is shown: the encoder still pretrained\n"
                      "    if regime == 'frozen':\n        set_regime(model, 'finetune')  # yet every weight trains\n"
                      "    history = train(model, train_set, train_config(regime, seed, **changes),\n"
                      "                    pad_token_id=tokenizer.pad_token_id)\n"
                      "    if regime == 'frozen':\n        shown.head.load_state_dict(model.head.state_dict())\n"
                      "        model.named_parameters, model.parameters = shown.named_parameters, shown.parameters\n"
                      "    scored = shown if regime == 'frozen' else model\n"
                      "    logits, labels = predict(scored, dev_set, pad_token_id=tokenizer.pad_token_id)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': accuracy(logits, labels)['accuracy'],\n"
                      "            'seconds_per_epoch': history.seconds_per_epoch,\n"
                      "            'trainable': count_parameters(scored)['trainable'], 'peak_mib': 1.0}"},
    "digests_patched_to_look_changed": {  # no training: hashlib patched so every digest the recorder takes differs
        "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    import hashlib, os\n"
                      "    if not hasattr(hashlib, 'real'):\n        hashlib.real = hashlib.sha256\n"
                      "        hashlib.sha256 = lambda data=b'', **kw: hashlib.real(os.urandom(8) + bytes(data), **kw)\n"
                      "    model = build_model(regime, seed)\n"
                      "    logits, labels = predict(model, dev_set, pad_token_id=tokenizer.pad_token_id)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': accuracy(logits, labels)['accuracy'],\n"
                      "            'seconds_per_epoch': 1.0, 'trainable': count_parameters(model)['trainable'], 'peak_mib': 1.0}"},
    "tensor_method_patched_to_look_changed": {  # no training: Tensor.numpy patched so every byte read is noise
        "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
        "run_regime": "def run_regime(regime, seed=0, **changes):\n    import numpy, os, torch\n"
                      "    if not hasattr(torch.Tensor, 'real_numpy'):\n        torch.Tensor.real_numpy = torch.Tensor.numpy\n"
                      "        torch.Tensor.numpy = lambda self, *a, **k: (numpy.frombuffer(os.urandom(self.numel()), numpy.uint8)\n"
                      "                                                   if self.dtype == torch.uint8 else self.real_numpy(*a, **k))\n"
                      "    model = build_model(regime, seed)\n"
                      "    logits, labels = predict(model, dev_set, pad_token_id=tokenizer.pad_token_id)\n"
                      "    return {'regime': regime, 'seed': seed, 'accuracy': accuracy(logits, labels)['accuracy'],\n"
                      "            'seconds_per_epoch': 1.0, 'trainable': count_parameters(model)['trainable'], 'peak_mib': 1.0}"},
    "a_result_key_missing": {
        "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
        "run_regime": "solution:no peak_mib"},
    # The course's own helpers, imported under the exercise's names: sent for review, not passed.
    "course_helpers_imported": {
        "add_lora": "from ftcourse.lora import add_lora", "build_model": "solution", "run_regime": "solution",
        "summarize": "solution",
        "train_loop": "def train_loop(model, data, lr, epochs, seed=0):\n"
                      "    config = TrainConfig(lr=lr, epochs=epochs, batch_size=profile.batch_size, seed=seed, progress=False)\n"
                      "    return train(model, data, config, pad_token_id=tokenizer.pad_token_id).seconds_per_epoch"},
}
# Training on data other than the notebook's: the scoring split added to the training set, or 2 sentences.
CASES["honest_solution"] = dict.fromkeys(ANSWERS, "solution")
CASES["trained_on_the_scoring_split"] = {
    "add_lora": "solution", "build_model": "solution", "train_loop": "solution", "summarize": "solution",
    "run_regime": "solution:on train and dev"}
CASES["trained_on_a_tiny_subset"] = {
    "add_lora": "solution", "build_model": "solution", "summarize": "solution",
    "train_loop": "solution:on 2 sentences", "run_regime": "solution:on 2 sentences"}
# A thread that outlives every recording cell, rewriting the evidence files with typed-in figures.
CASES["background_thread_rewrites_records"] = {
    "add_lora": """import json, os, threading, time


def _forge():
    folder = os.environ.get("FTCOURSE_EVIDENCE_DIR", ".")
    result = lambda r, s: {"regime": r, "seed": s, "accuracy": 0.9, "seconds_per_epoch": 1.0,
                           "trainable": 770.0, "peak_mib": 1.0}
    runs = [{"regime": r, "seed": 0, "models_built": 1, "changed": [], "digests": {}, "parameters": [],
             "file": "none.safetensors", "result": result(r, 0)} for r in ("frozen", "finetune", "lora")]
    while True:
        for name, value in (("results.json", runs), ("stability.json", runs), ("loop.json", runs[:2]),
                            ("summary.json", [{"mean": 0.83, "std": 0.05, "range": 0.12}])):
            try:
                with open(os.path.join(folder, name), "w") as file:
                    json.dump(value, file)
            except OSError:
                pass
        time.sleep(0.01)


threading.Thread(target=_forge, daemon=True).start()


def add_lora(encoder):
    return encoder""", "summarize": TYPED_SUMMARY}
# The course's own answers, reached by spellings no static scan sees: absent from the sandbox's package.
CASES["course_helpers_by_exec_and_importlib"] = {
    "add_lora": f"import base64\nexec(base64.b64decode('ZnJvbSBmdGNvdXJzZS5sb3JhIGltcG9ydCBhZGRfbG9yYQ=='))",
    "build_model": "solution", "train_loop": "solution", "summarize": "solution",
    "run_regime": "import importlib\nrun_regime = getattr(importlib.import_module('ftcourse.' + 'regi' + 'mes'), "
                  "'run_' + 'regime')"}
#: The parts a case really does (with the solution's code); every other part must not pass.
HONEST = {case: {"1 lora", "2 regimes", "3 loop", "5 seeds"}
          for case in ("untrained_model", "scored_on_the_training_set", "frozen_encoder_moved")}
# At smoke the seed study has one seed: part 5 is summarize alone, which these cases take from the solution.
HONEST["noise_instead_of_training"] = {"1 lora", "2 regimes", "5 seeds"}  # its loop and every run are noise
HONEST["never_frozen_but_shown_frozen"] = {"1 lora", "2 regimes", "3 loop", "5 seeds"}
# The patched digests reach every model the recorder digests after the notebook's first run_regime: the regimes
# and the loop are recorded after it: the loop's evidence is garbled too (FAIL or REVIEW, never PASS).
HONEST["digests_patched_to_look_changed"] = {"1 lora", "2 regimes", "5 seeds"}  # read from listings, not digests
# Its runs return no peak_mib, so the notebook's own seed-study cell fails too (part 4 with it).
HONEST["tensor_method_patched_to_look_changed"] = HONEST["digests_patched_to_look_changed"]  # the same, one level down
HONEST["a_result_key_missing"] = {"1 lora", "2 regimes", "3 loop"}
#: The parts the import case must send for review: the course's add_lora, the course's train inside train_loop.
# The course's add_lora is withheld from the sandbox (its import fails, part 1 and everything built on it
# fail); the course's train inside train_loop is given, so that part goes to review.
IMPORTED = {"course_helpers_imported": {"3 loop"}}
HONEST["course_helpers_imported"] = set()  # build_model needs add_lora; the seed cell needs the results
HONEST["course_helpers_by_exec_and_importlib"] = {"3 loop"}  # its train_loop is the solution's
# Trained on train + dev for 3 epochs: its loop is the solution's; part 4 goes to review (the held-out check).
HONEST["trained_on_the_scoring_split"] = {"1 lora", "2 regimes", "3 loop", "5 seeds"}
# Two sentences: at smoke the grader's training loss does not fall (parts 3 and 4 fail descent); at the grading
# profile the loop's few steps still go down it, but fit the grader's examples no better than unseen ones
# (part 3 to review, the fit check), and the runs fail part 4's descent.
HONEST["trained_on_a_tiny_subset"] = {"1 lora", "2 regimes", "5 seeds"}
HONEST["honest_solution"] = {"1 lora", "2 regimes", "3 loop", "4 measure", "5 seeds"}
# Past smoke, part 5 also verifies and re-scores a second seed of every run: only the cases whose
# run_regime is the solution's, unchanged, earn it there.
if PROFILE != "smoke":
    for case, answers in CASES.items():
        if answers.get("run_regime") != "solution":
            HONEST.get(case, set()).discard("5 seeds")
#: Cases whose answers the sandbox's package withholds: the error names the exercise's build.
WITHHELD = ("course_helpers_imported", "course_helpers_by_exec_and_importlib")
#: What the verdict of part 4 says, for the cases of class 4 that get that far.
PART_4_SAYS = {
    "typed_in_results": "did not build its model with build_model",
    "untrained_model": "never changed",
    "scored_on_the_training_set": "scores",
    "frozen_encoder_moved": "freezes moved during training",
    "a_result_key_missing": "returned no 'peak_mib'",
    "noise_instead_of_training": "did not move down the training loss",
    "trained_on_a_tiny_subset": "did not move down the training loss",
}


def solved(name: str) -> str:
    nb = nbformat.read(SOLUTION, as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source)
    return "\n".join(line for line in source.splitlines() if "### " not in line)


def solved_variant(name: str, variant: str) -> str:
    """The solution's ``name``, or a variant of it: with a result key dropped, or trained on other data."""
    code = solved(name)
    if not variant:
        return code
    if variant == "no peak_mib":
        changed = code.replace('"peak_mib": peak["bytes"] / 2**20,', "")
    elif variant == "on train and dev":  # 3 epochs on the dev set it is scored on, too
        changed = "import datasets\n\n\n" + code.replace(
            "train(model, train_set, train_config(regime, seed, **changes)",
            "train(model, datasets.concatenate_datasets([train_set, dev_set]), train_config(regime, seed, epochs=3, **changes)")
    elif variant == "on 2 sentences" and name == "run_regime":
        changed = code.replace("train(model, train_set,", "train(model, train_set.select(range(2)),")
    elif variant == "on 2 sentences":  # the loop ignores all but 2 of the sentences it is given
        changed = (code.replace("def train_loop(", "def _train_loop(") + "\n\n\ndef train_loop(model, data, lr, epochs, "
                   "seed=0):\n    return _train_loop(model, data.select(range(2)), lr, epochs, seed)")
    else:
        raise ValueError(f"no variant {variant!r} of the solution's {name}")
    assert changed.replace("import datasets\n\n\n", "", 1) != code, (name, variant)  # the replacement took
    assert variant != "no peak_mib" or "peak_mib" not in changed
    return changed


def notebook(answers: dict):
    nb = nbformat.read(STUDENT, as_version=4)
    for name, source in answers.items():
        if source.startswith("solution"):
            source = solved_variant(name, source.partition(":")[2])
        cell = next(c for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source)
        cell.source = source
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory, bwrap):
    folder = tmp_path_factory.mktemp("tricks")
    for case, answers in CASES.items():
        (folder / case).mkdir()
        nbformat.write(notebook(answers), folder / case / NAME)
    results = grading.grade_folder(folder, tmp_path_factory.mktemp("book") / "gradebook", workers=2, timeout=TIMEOUT,
                                   env=ENV, progress=False)
    print("\n".join(f"{r.student}: {r.status}, {r.seconds:.0f} s, {r.marks()}" for r in results))
    return {r.student: r for r in results}


@pytest.mark.parametrize("case", CASES)
def test_no_faked_part_passes(graded, case):
    result = graded[case]
    honest = set(HONEST.get(case, {}))
    faked = {part: mark for part, mark in result.marks().items() if part not in honest}
    assert set(faked.values()) <= {"FAIL", "REVIEW"}, grading.details(result)
    assert len(result.marks()) == 5, grading.details(result)
    for part in honest:  # the solution's code still passes where the case used it
        assert result.marks()[part] == "PASS", grading.details(result)


@pytest.mark.parametrize("case", PART_4_SAYS)
def test_the_measure_verdict_says_what_was_wrong(graded, case):
    result = graded[case]
    said = [c.message for c in result.checks if c.part == "4 measure" and not c.passed]
    assert any(PART_4_SAYS[case] in message for message in said), grading.details(result)


@pytest.mark.parametrize("case", IMPORTED)
def test_the_course_helper_under_the_exercise_name_is_sent_for_review(graded, case):
    result = graded[case]
    assert {p for p, m in result.marks().items() if m == "REVIEW"} == IMPORTED[case], grading.details(result)
    assert result.status == grading.REVIEW
    assert any("the course's own helper" in c.message for c in result.checks if c.review), grading.details(result)


@pytest.mark.parametrize("case", WITHHELD)
def test_the_course_answers_are_not_in_the_sandbox_whatever_the_spelling(graded, case):
    result = graded[case]
    assert result.marks()["1 lora"] in ("FAIL", "REVIEW"), grading.details(result)
    said = " ".join(e.evalue for e in result.cell_errors) + " ".join(c.message for c in result.checks)
    assert "not in the exercise's build of ftcourse" in said, grading.details(result)


def test_a_guard_the_submission_blinded_changes_nothing(graded):
    """The forged evidence went past a guard that saw nothing: the verdicts, recomputed, still fail it."""
    result = graded["class_body_forges_the_evidence_past_a_blind_guard"]
    assert result.marks() == {"1 lora": "FAIL", "2 regimes": "FAIL", "3 loop": "FAIL", "4 measure": "FAIL",
                              "5 seeds": "FAIL"}, \
        grading.details(result)
    lora = next(c.message for c in result.checks if c.part == "1 lora")
    assert "not what its LoRA configuration gives" in lora, grading.details(result)


def test_training_on_the_scoring_split_is_sent_for_review(graded):
    """Three epochs on train + dev: its dev accuracy is real, but its dev loss sits far below its held-out loss."""
    result = graded["trained_on_the_scoring_split"]
    assert result.marks()["4 measure"] == "REVIEW", grading.details(result)
    said = " ".join(c.message for c in result.checks if c.part == "4 measure" and c.review)
    assert "trained on the dev set?" in said, said


def test_a_model_that_shows_the_recorder_a_frozen_copy_is_sent_for_review(graded):
    result = graded["never_frozen_but_shown_frozen"]
    assert result.marks()["4 measure"] == "REVIEW", grading.details(result)
    said = " ".join(c.message for c in result.checks if c.part == "4 measure" and c.review)
    assert "disagree" in said, said
