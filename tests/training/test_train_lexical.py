"""The lexical recipe's two artifacts: what each trained on, as the manifest records it."""

import json

from deltaguard.classifiers.registry import CONVERSATION_ARTIFACT, DEFINITIONS_ARTIFACT
from deltaguard.models import MODELS_DIR
from training.train_lexical import RECIPES


def test_each_served_artifact_is_a_recipe_version():
    versions = {f"lexical-v{v}" for v in RECIPES}
    assert {CONVERSATION_ARTIFACT, DEFINITIONS_ARTIFACT} <= versions


def test_the_conversation_views_model_trained_on_every_chat_message_and_over_defence_rows():
    models = json.loads((MODELS_DIR / "manifest.json").read_text())["models"]
    recipe = RECIPES[CONVERSATION_ARTIFACT.removeprefix("lexical-v")]
    assert recipe.chitchat_messages is None and recipe.overdefence
    for head in ("prompt_injection", "jailbreak"):
        train = models[CONVERSATION_ARTIFACT]["rows"][head]["train"]
        v2 = models["lexical-v2"]["rows"][head]["train"]
        assert train["chitchat"]["0"] > 4 * v2["chitchat"]["0"] == 4 * RECIPES["2"].chitchat_messages
        assert train["overdefence"] == {"0": 1200} and "overdefence" not in v2
