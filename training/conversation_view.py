"""The conversation view's operating point on real traffic: `python -m training.conversation_view`.

The conversation classifier (classifiers/conversation.py) judges user messages: its span
and EMA thresholds were chosen on chitchat and split attacks (eval/conversation_eval.py).
Real users also paste reference material into their requests (a policy, a README, a page
of documentation), and the lexical model behind the view reads long pasted prose as a
jailbreak template. This recipe runs the view over the user messages of the validation
split's real conversations (training/lib/agent_traffic.py: chats, writing requests with
pasted references, agent tasks) and raises each threshold, never lowers it, to the lowest
value that keeps every agent kind within CONVERSATION_BUDGET of its conversations
(training/lib/thresholds.py). The result is the manifest entry "conversation-view",
which classifiers/registry.py passes to the view (kept only if the view then passes
deltaguard.classifiers.checks).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from deltaguard.classifiers.conversation import EMA_THRESHOLD, SPAN_THRESHOLD, ConversationClassifier
from deltaguard.classifiers.lexical import LexicalClassifier
from deltaguard.classifiers.registry import CONVERSATION_ARTIFACT, LONG_USER_CHARS
from deltaguard.models import MODELS_DIR
from deltaguard.parsing import parse_item
from training.lib.conformance import publish_entry
from training.lib.thresholds import flagged_share, per_kind_floor

ENTRY = "conversation-view"
CONVERSATION_BUDGET = 0.005


def signal_maxima(convs: list[tuple[str, list[str]]]) -> tuple[np.ndarray, np.ndarray]:
    """Per conversation, the highest raw span and EMA probability (any category) the view
    reached over its user messages."""
    lexical = LexicalClassifier(MODELS_DIR, artifact=CONVERSATION_ARTIFACT).load()
    view = ConversationClassifier(MODELS_DIR, lexical=lexical, max_chars=LONG_USER_CHARS).load()
    span, ema = np.zeros(len(convs)), np.zeros(len(convs))
    for i, (_kind, user) in enumerate(convs):
        state = view.initial_state()
        for text in user:
            state = view.update(state, [parse_item({"role": "user", "content": text})]).state
            signals = view.signals(state)
            span[i] = max(span[i], *signals["span"].values())
            ema[i] = max(ema[i], *signals["ema"].values())
    return span, ema


def main() -> int:
    from training.lib.agent_traffic import conversation_texts

    t0 = time.time()
    convs = [(kind, user) for kind, user, _tools, _said in conversation_texts("validation") if user]
    kinds = [k for k, _ in convs]
    span, ema = signal_maxima(convs)
    span_t = max(SPAN_THRESHOLD, per_kind_floor(kinds, span, CONVERSATION_BUDGET))
    ema_t = max(EMA_THRESHOLD or 0.0, per_kind_floor(kinds, ema, CONVERSATION_BUDGET))
    before = flagged_share(kinds, (span >= SPAN_THRESHOLD) | (ema >= (EMA_THRESHOLD or 2.0)))
    after = flagged_share(kinds, (span >= span_t) | (ema >= ema_t))
    entry = {
        "model": CONVERSATION_ARTIFACT,
        "span_threshold": round(span_t + 5e-7, 6),
        "ema_threshold": round(ema_t + 5e-7, 6),
        "long_user_chars": LONG_USER_CHARS,  # longer user messages are the lexical view's
        "rule": f"each of classifiers/conversation.py's thresholds raised (never lowered) to the lowest "
        f"value at which no agent kind of the validation split's real conversations has more than "
        f"{CONVERSATION_BUDGET} of its conversations over it (training/conversation_view.py)",
        "validation_conversations_flagged": {"module_defaults": before, "chosen": after},
    }
    publish_entry(entry, ENTRY, ("conversation",), MODELS_DIR)
    print(json.dumps(entry, indent=1))
    print(f"[conversation_view] {len(convs)} conversations in {time.time() - t0:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
