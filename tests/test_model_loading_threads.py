"""The grader builds reference models in threads (``grading.grade_folder``). transformers' ``from_pretrained``
patches class attributes while it loads, so two loads at once can leave weight tying switched off for the
rest of the process; every load goes through ``models._load``, which holds ``models._loading``."""

import threading

from transformers import AutoModelForMaskedLM
from transformers.modeling_utils import PreTrainedModel

from ftcourse.config import COURSE_ENCODER_DIR, get_profile
from ftcourse.course.verdicts import Reference


def test_reference_models_built_in_threads_leave_weight_tying_on():
    original = PreTrainedModel.tie_weights
    reference = Reference(get_profile("offline"), tokenizer=None, dev_set=None, pretrained={}, num_labels=2)
    failures = []

    def build():
        try:
            for regime in ("frozen", "finetune", "frozen"):
                reference.model(regime)
        except Exception as error:  # noqa: BLE001 - reported below, with the thread's error
            failures.append(error)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert PreTrainedModel.tie_weights is original, "a racing load left from_pretrained's no-op tie_weights behind"
    mlm = AutoModelForMaskedLM.from_pretrained(str(COURSE_ENCODER_DIR), local_files_only=True)
    assert mlm.cls.predictions.decoder.bias.device.type == "cpu"
    assert mlm.cls.predictions.decoder.bias is mlm.cls.predictions.bias  # tied, as BERT's MLM head is
