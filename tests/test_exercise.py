"""The student versions are generated from the solutions, give nothing away, and
regenerating never destroys a student's work."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from ftcourse.course import exercise

SOLUTIONS = exercise.solution_notebooks()


def test_there_is_a_solved_exercise():
    assert [p.name for p in SOLUTIONS] == ["05_exercise_bert_base.ipynb"]


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_committed_student_version_is_what_the_generator_makes(solution):
    committed = nbformat.read(exercise.student_path(solution), as_version=4)
    generated = exercise.student_version(nbformat.read(solution, as_version=4))
    assert exercise.content(committed) == exercise.content(generated), (
        "The student notebook is stale: run python -m ftcourse.course.exercise generate")
    assert not exercise.stale(solution)


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_no_solution_text_in_the_student_version(solution):
    solved = nbformat.read(solution, as_version=4)
    student = nbformat.read(exercise.student_path(solution), as_version=4)
    # Lines outside the regions (instructions, given code) are public; every other line of a region is secret.
    public_text = "\n".join(exercise.replace_regions(cell.source)[0] for cell in solved.cells)
    public = {line.strip() for line in public_text.splitlines()}
    secret = {line.strip() for cell in solved.cells for region in exercise.solution_regions(cell.source)
              for line in region.splitlines()} - public - {""}
    assert len(secret) >= 10  # the regions were found
    student_text = "\n".join(cell.source for cell in student.cells)
    leaked = [line for line in secret if line in student_text and line not in public_text]
    assert leaked == []
    assert exercise.BEGIN not in student_text and exercise.END not in student_text
    for cell in student.cells:  # what the student notebook printed can only come from its own code
        for output in cell.get("outputs", []):
            assert not any(line in str(output) for line in secret)


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_stubs_raise_and_only_cells_after_them_are_tagged(solution):
    student = nbformat.read(exercise.student_path(solution), as_version=4)
    code = [cell for cell in student.cells if cell.cell_type == "code"]
    stubs = [i for i, cell in enumerate(code) if "raise NotImplementedError()" in cell.source]
    solved = nbformat.read(solution, as_version=4).cells
    assert len(stubs) == len([r for c in solved if c.cell_type == "code" for r in exercise.solution_regions(c.source)])
    answers = [c for c in student.cells if c.cell_type == "markdown" and c.source == exercise.MARKDOWN_STUB]
    assert len(answers) == len([r for c in solved if c.cell_type == "markdown" for r in exercise.solution_regions(c.source)])
    tagged = [i for i, cell in enumerate(code) if exercise.RAISES_TAG in cell.metadata.get("tags", [])]
    assert set(stubs) <= set(tagged)
    assert min(tagged) == stubs[0]  # everything before the first stub must run as it is
    assert all(cell.execution_count is None and not cell.outputs for cell in code) or all(
        cell.execution_count is not None for cell in code)


def test_regions_become_indented_stubs():
    source = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\nprint(f)"
    text, count = exercise.replace_regions(source)
    assert count == 1
    assert text == "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\nprint(f)"
    compile(text, "stub", "exec")
    assert exercise.replace_regions("### BEGIN SOLUTION\nan answer\n### END SOLUTION", markdown=True)[0] == "YOUR ANSWER HERE"
    assert exercise.solution_regions(source) == ["    return x + y"]


@pytest.mark.parametrize("source, problem", [
    ("### BEGIN SOLUTION\nx = 1", "never closed"),
    ("x = 1\n### END SOLUTION", "without"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "inside another region"),
])
def test_malformed_regions_are_named(source, problem):
    with pytest.raises(exercise.ExerciseError, match=problem):
        exercise.replace_regions(source, where="cell 3")


def test_dependent_cells_follow_names_through_cells():
    sources = [
        "import torch\nsize = 3",  # 0: before the stub
        "def answer():\n    raise NotImplementedError()",  # 1: the stub
        "value = answer()",  # 2: calls it
        "print(size)",  # 3: independent
        "rows = []\nrows.append(value)",  # 4: depends through value, and taints rows
        "print(len(rows))",  # 5: depends through rows
        "%matplotlib inline\nprint(size * 2)",  # 6: magics are ignored; independent
    ]
    assert exercise.dependent_cells(sources, {1}) == {1, 2, 4, 5}


def toy_solution():
    return new_notebook(cells=[
        new_markdown_cell("# Toy\nWrite `double`."),
        new_code_cell("import ftcourse\nprofile = ftcourse.setup()"),
        new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
        new_code_cell("print(double(2))", execution_count=3, outputs=[nbformat.v4.new_output("stream", text="4\n")]),
    ])


def test_student_version_of_a_toy(tmp_path):
    student = exercise.student_version(toy_solution())
    assert student.cells[2].source == "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert [c.metadata.get("tags") for c in student.cells[1:]] == [None, ["raises-exception"], ["raises-exception"]]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in student.cells if c.cell_type == "code")
    with pytest.raises(exercise.ExerciseError, match="nothing for the student to do"):
        exercise.student_version(new_notebook(cells=[new_code_cell("x = 1")]))


def test_generate_never_overwrites_a_students_work(tmp_path):
    solution, target = tmp_path / "solutions" / "01_exercise_toy.ipynb", tmp_path / "notebooks" / "01_exercise_toy.ipynb"
    solution.parent.mkdir()
    nbformat.write(toy_solution(), solution)
    exercise.generate(solution, target)
    exercise.generate(solution, target)  # regenerating an untouched copy is fine
    worked = nbformat.read(target, as_version=4)
    worked.cells[2].source = "def double(x):\n    return x + x"  # the student's answer
    nbformat.write(worked, target)
    before = target.read_bytes()
    with pytest.raises(exercise.ExerciseError, match=r"cell 2 \(code\): 'def double\(x\):'.*--force"):
        exercise.generate(solution, target)
    assert target.read_bytes() == before
    exercise.generate(solution, target, force=True)
    assert "NotImplementedError" in nbformat.read(target, as_version=4).cells[2].source


def test_command_line_check_says_up_to_date(capsys):
    assert exercise.main(["check"]) == 0
    assert "up to date" in capsys.readouterr().out
