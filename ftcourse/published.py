"""The papers' figures, cited, in one place. Nothing here is measured by the course.

Notebooks print these beside what they measure; they never mix the two in one table
without saying which column is which.
"""

BERT_PAPER = "Devlin et al. (2019), BERT, Table 7: CoNLL-2003 NER dev F1, feature-based (bert-base)"
#: Readout -> dev F1. Keys are ``ftcourse`` readout names.
BERT_FEATURE_BASED_NER_F1 = {
    "embeddings": 91.0,
    "last": 94.9,
    "weighted_sum_all": 95.5,
    "second_to_last": 95.6,
    "weighted_sum_last4": 95.9,
    "concat_last4": 96.1,
    "finetune": 96.4,
}

SBERT_PAPER = "Reimers & Gurevych (2019), Sentence-BERT, Tables 1 and 6: STS benchmark test, Spearman x100"
SBERT_STSB_SPEARMAN = {
    "glove_average": 58.02,
    "bert_mean": 46.35,
    "bert_cls": 16.50,
    "sbert_nli_base": 77.03,
}
#: Table 6: pooling ablation, SBERT trained on STS-B (regression objective).
SBERT_POOLING_ABLATION = {"mean": 87.44, "cls": 86.62}

LORA_PAPER = "Hu et al. (2021), LoRA: Low-Rank Adaptation of Large Language Models"
#: The course's claim for bert-base-uncased with LoRA r=8 on query and value.
LORA_BERT_BASE = {"rank": 8, "targets": ("query", "value"), "parameters": 294_912, "percent": 0.27}

BERT_BASE = {"parameters": 109_482_240, "fp32_mib": 417.6}

BERT_GLUE = "Devlin et al. (2019), BERT, Table 1: GLUE test sets (bert-base, fine-tuned)"
#: Task -> accuracy x100 on the GLUE test set (the course measures on the dev set).
BERT_BASE_GLUE_TEST = {"sst2": 93.5}

HYPERPARAMETERS = {
    "source": "Devlin et al. (2019), Appendix A.3; Loshchilov & Hutter (2019) for AdamW",
    "lr": 2e-5,
    "weight_decay": 0.01,
    "warmup": "linear warmup then linear decay",
    "max_grad_norm": 1.0,
}

#: The course's storage claims for bert-base-uncased, fp32, MiB = 2**20 bytes, KiB = 2**10:
#: a 2-label linear head; LoRA r=8 on query and value with its head, per task; how many
#: times less than a full copy (backbone + head) per task; and 8 tasks on one backbone.
LORA_BERT_BASE_STORAGE = {
    "head_kib": 6,
    "per_task_mib": 1.13,
    "times_less_than_full_copy": 369,
    "tasks": 8,
    "total_mib": 426.7,
}
