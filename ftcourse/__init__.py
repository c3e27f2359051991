"""ftcourse: the concepts of the course on adapting pretrained encoders.

A lesson imports these; each module is one idea, in the order the course meets them:

- ``session``: ``ftcourse.setup()``, the first cell of every notebook (seeds, quiet libraries, the profile);
- ``config``: the profiles (which models, how much data, which hardware) and the settings;
- ``data``: the benchmarks (SST-2, CoNLL-2003, STS-B) as ``datasets.DatasetDict``\\ s;
- ``models``: which model plays which role, loaded with a clear error when it cannot be had;
- ``heads``: ``y = Predict_ω(Encoder_θ(x))`` and the four shapes of head;
- ``training``: the transfer recipe as one small training loop;
- ``cache``: the feature cache, tensors an encoder computed once, keyed by all they depend on;
- ``readout``: which layer of a frozen encoder is worth reading (lesson 2);
- ``regimes``: frozen, LoRA and full fine-tuning on the same data and budget (lessons 1, 3);
- ``lora``: LoRA with peft, and one backbone serving many tasks (lesson 3);
- ``costs``: what each regime costs in parameters and bytes (lesson 3);
- ``methods``: which parameters move, for every adaptation method the course trains;
- ``engine`` (``ftcourse.experiments``, one experiment system): a declared run trained into one record;
- ``store``: each run stored once per build, so lessons quoting one comparison read one set of runs;
- ``choose``: one learning-rate chooser, on a validation part carved from the training split;
- ``grid``: the one grid search every chooser runs, extended past an edge its best sits on;
- ``compare``: verdicts from paired differences over seeds, with their intervals and ties;
- ``provenance``: which code made a result, as a digest of a module and all it imports;
- ``frontier``: every parameter-efficient method trained on one encoder and budget (lesson 3b);
- ``ablations``: partial freezing, the stability tactics one at a time, and what pretraining buys (lesson 3c);
- ``similarity``: sentence embeddings, [CLS] against mean, Sentence-BERT (lesson 4);
- ``spans``: the span head trained, extractive answers scored as SQuAD is (lesson 4b);
- ``pairs``: the pair head trained, a cross-encoder against a bi-encoder and its cost (lesson 4b);
- ``published``: the papers' figures, cited, each with its table and split;
- ``derived``: the course's own arithmetic about bert-base, computed from formulas (never "published");
- ``report``: results as tables, published beside measured, and each lesson's headline;
- ``plots``: the lessons' small figures;
- ``speed``: throughput as a fraction of the same machine's matmul.

The machinery that executes, publishes and grades the course lives apart, in
``ftcourse.course``; no module here imports it. (``ftcourse.checks`` is an alias of
``ftcourse.course.checks`` for exercise notebooks handed in before the move.)
"""

from .config import Profile, get_profile
from .session import seed_everything, setup

__all__ = ["Profile", "get_profile", "seed_everything", "setup"]
__version__ = "0.2.0"
