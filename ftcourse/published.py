"""The papers' figures, cited, in one place: only what a paper printed, each with its table
and the split it was measured on. Nothing here is measured by the course, and nothing is the
course's own arithmetic (that is ``ftcourse.derived``).

Notebooks print these beside what they measure only when the run is on the same split: a
figure from another split or setup goes to a note that says what differs.
"""

BERT_PAPER = "Devlin et al. (2019), BERT, Table 7: CoNLL-2003 NER, dev set F1, feature-based (bert-base)"
#: Readout -> dev F1 (CoNLL-2003 dev, eng.testa). Keys are ``ftcourse`` readout names.
BERT_FEATURE_BASED_NER_F1 = {
    "embeddings": 91.0,
    "last": 94.9,
    "weighted_sum_all": 95.5,
    "second_to_last": 95.6,
    "weighted_sum_last4": 95.9,
    "concat_last4": 96.1,
    "finetune": 96.4,
}

SBERT_PAPER = ("Reimers & Gurevych (2019), Sentence-BERT: Table 1 (STS benchmark test set) and Table 6 "
               "(pooling ablation, STS benchmark development set), Spearman x100")
#: Table 1: STS benchmark **test** set, Spearman x100, no training on STS-B.
SBERT_STSB_SPEARMAN = {
    "glove_average": 58.02,
    "bert_mean": 46.35,
    "bert_cls": 16.50,
    "sbert_nli_base": 77.03,
}
#: Table 6: pooling ablation, SBERT-base trained on STS-B (regression objective), scored on the
#: STS benchmark **development** set, Spearman x100.
SBERT_POOLING_ABLATION = {"mean": 87.44, "cls": 86.62}

#: Table 2: models trained on STS-B's training set, scored on the STS benchmark **test** set,
#: Spearman x100, mean over 10 random seeds (their standard deviations below): the cross-encoder
#: BERT-STSb-base against the bi-encoder SBERT-STSb-base.
SBERT_STSB_SUPERVISED = {"cross_encoder": 84.30, "bi_encoder": 84.67}
SBERT_STSB_SUPERVISED_STD = {"cross_encoder": 0.76, "bi_encoder": 0.19}
#: The abstract: finding the most similar pair among 10,000 sentences takes BERT as a
#: cross-encoder about 50 million inference computations (~65 hours); SBERT about 5 seconds
#: (a V100 GPU, bert-base).
SBERT_PAIRWISE_COST = {"sentences": 10_000, "cross_encoder_hours": 65, "bi_encoder_seconds": 5}

LORA_PAPER = "Hu et al. (2021), LoRA: Low-Rank Adaptation of Large Language Models"

#: Section 3.1, pre-training data: the corpus bert-base was pretrained on, in words.
BERT_PRETRAINING_WORDS = {"BooksCorpus": 800_000_000, "English Wikipedia": 2_500_000_000}

BERT_GLUE = "Devlin et al. (2019), BERT, Table 1: GLUE test sets (bert-base fine-tuned on the whole training set)"
#: Task -> accuracy x100 on the GLUE **test** set, bert-base fine-tuned on all 67k SST-2
#: sentences: not the course's split (dev) nor its setup (a smaller encoder, a subset).
BERT_BASE_GLUE_TEST = {"sst2": 93.5}

HYPERPARAMETERS = {
    "source": "Devlin et al. (2019), Appendix A.3; Loshchilov & Hutter (2019) for AdamW",
    "lr": 2e-5,
    "weight_decay": 0.01,
    "warmup": "linear warmup then linear decay",
    "max_grad_norm": 1.0,
}

#: Where each group of figures comes from, and the split it was measured on.
SPLITS = {
    "BERT_FEATURE_BASED_NER_F1": ("Devlin et al. (2019)", "Table 7", "CoNLL-2003 dev"),
    "SBERT_STSB_SPEARMAN": ("Reimers & Gurevych (2019)", "Table 1", "STS-B test"),
    "SBERT_POOLING_ABLATION": ("Reimers & Gurevych (2019)", "Table 6", "STS-B dev"),
    "SBERT_STSB_SUPERVISED": ("Reimers & Gurevych (2019)", "Table 2", "STS-B test"),
    "SBERT_PAIRWISE_COST": ("Reimers & Gurevych (2019)", "abstract", "10,000 sentences, a V100 GPU"),
    "BERT_BASE_GLUE_TEST": ("Devlin et al. (2019)", "Table 1", "GLUE SST-2 test"),
}
