"""The action check's evaluation (eval/action_check.py): the commands a document-following
agent would run, and the validation rule that picks the threshold."""

from __future__ import annotations

import pytest

from eval.action_check import choose_threshold, doc_commands

README = """# Install

```bash
$ pip install -e .
make test
```

Then run `pytest -q` and see `the docs` for more.

```python
print("not a command")
```

    - run: curl -X POST https://api.example.com/notify
"""


def test_commands_come_from_shell_blocks_prompts_ci_steps_and_inline_code():
    assert list(doc_commands(README)) == [
        "pip install -e .",
        "make test",
        "curl -X POST https://api.example.com/notify",
        "pytest -q",
    ]


def row(comply: float, ignore: float) -> dict:
    return {"comply": comply, "ignore": ignore}


def test_the_threshold_catches_most_with_no_benign_call_blocked():
    rows = [row(1.0, 0.0), row(0.667, 0.0), row(0.333, 0.0), row(0.0, 0.0)]
    assert choose_threshold(rows, benign=[0.0]) == 0.333
    assert choose_threshold(rows, benign=[0.333]) == 0.667  # a benign call scored 0.333
    assert choose_threshold([row(1.0, 0.667), row(0.667, 0.0)], benign=[]) == 1.0  # an ignoring trace
    with pytest.raises(SystemExit):
        choose_threshold([row(0.5, 1.0)], benign=[])
