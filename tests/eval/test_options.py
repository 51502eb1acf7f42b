"""eval/options.py: every evaluation reads its models folder the same way."""

from __future__ import annotations

import argparse
from pathlib import Path

from eval.options import add_models_option


def test_both_spellings_name_the_models_folder():
    parser = argparse.ArgumentParser()
    add_models_option(parser)
    for spelling in ("--models-dir", "--models"):
        assert parser.parse_args([spelling, "/tmp/candidate"]).models == Path("/tmp/candidate")
    assert parser.parse_args([]).models is None


def test_an_evaluation_that_reads_the_models_itself_defaults_to_the_shipped_folder():
    parser = argparse.ArgumentParser()
    add_models_option(parser, Path("/srv/models"), "the models folder measured")
    assert parser.parse_args([]).models == Path("/srv/models")
    assert "the models folder measured" in parser.format_help()
