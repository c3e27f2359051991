"""ftcourse.course: the machinery that executes, publishes and grades the course.

Students never need to import these; the lessons' concepts are in ``ftcourse`` itself.

- ``catalog``: which notebooks make the course, in order;
- ``notebooks``: execute, clean and check notebooks; ``build`` runs the whole course;
- ``freshness``: each executed notebook's stamp of its inputs, and whether a committed one is stale;
- ``site``: the course as a website (Jupyter Book) from the executed notebooks;
- ``layout``: the package's module map, read from the modules' own docstrings;
- ``exercise``: the student copies of the exercise, generated from the solved ones;
- ``checks``: the checks a student runs in the exercise notebooks;
- ``grading``: grading submitted notebooks; its docstring gives the design;
- ``exercise_bert_base``: the bert-base exercise declared for the grader: parts, records, verdicts;
- ``sandbox``: the security boundary: a submission's code runs only inside bubblewrap;
- ``withheld``: the exercise's build of the package, the course's answers left out of the sandbox;
- ``kernelrun``: inside the sandbox, one notebook executed in a fresh kernel;
- ``evidence``: inside the sandbox, calls a submission's functions and writes what they made, as data;
- ``verdicts``: in the grader's own process, every verdict recomputed from that data;
- ``guard``: inside the sandboxed kernel, a second line against tampering;
- ``cli``: the ``ftcourse`` command (``ftcourse grade``).

A module here may import the concepts; a concept never imports a module here
(``tests/test_layering.py``).
"""
