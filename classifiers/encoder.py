"""Monitor-lane encoder classifiers: the encoder model (classifiers/encoder_model.py: an
int8 ONNX MiniLM on onnxruntime + linear heads) folded over a conversation's items.

Each scored item is tokenized once. Its token ids are cut into windows of at most
`WINDOW_TOKENS` (with [CLS]/[SEP]) that overlap by `WINDOW_TOKENS - 2 - WINDOW_STRIDE`;
the item's score per head is the max over its windows, because an injection anywhere
in a tool output is an injection. With `context_tokens > 0` (off by default, see
CONTEXT_TOKENS), an item that fits in one window also sees the last `context_tokens` ids
of the previous scored item, kept in the state so history is never re-tokenized: they
take part in attention but not in the pooled mean, so the item's score stays its own
evidence. Assistant items get zeros and leave the context alone. Files attached to a
message (`Item.attachments`) are judged as a tool output is, alone and without context,
by the heads of role "tool", and the item takes the max of its own and its files' scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.classifiers import identifiers, normalize
from deltaguard.classifiers.base import (
    PRINCIPAL_ONLY,
    Finding,
    Lane,
    Scores,
    State,
    Update,
    count_tokens,
    running_max,
    zero_scores,
)
from deltaguard.classifiers.encoder_items import ItemMemo, ItemResult, Pending, Plan
from deltaguard.classifiers.encoder_model import (
    ARTIFACT_FILES,
    ARTIFACT_NAME,
    BATCH_WINDOWS,
    EMBEDDING_DIM,
    FORMAT_VERSION,
    MAX_ITEM_WINDOWS,
    WINDOW_STRIDE,
    WINDOW_TOKENS,
    EncoderModel,
    Window,
    WindowShape,
    batch_inputs,
    length_chunks,
    pooled,
    verified_files,
)
from deltaguard.classifiers.lexical import LexicalClassifier
from deltaguard.classifiers.scaled import scale
from deltaguard.classifiers.window_screen import WindowScreen, load_window_screen
from deltaguard.errors import EncoderNotLoadedError, ModelArtifactError
from deltaguard.items import Item
from deltaguard.models import MODELS_DIR

# The model's names stay importable from here, where the classifier that serves them is.
__all__ = [
    "ARTIFACT_FILES",
    "ARTIFACT_NAME",
    "BATCH_WINDOWS",
    "CONTEXT_TOKENS",
    "EMBEDDING_DIM",
    "FORMAT_VERSION",
    "MASKED_ROLES",
    "MAX_ITEM_WINDOWS",
    "MEMO_ITEMS",
    "PASTED_ROLE",
    "SCORED_ROLES",
    "UNTRUSTED_ROLE",
    "WINDOW_STRIDE",
    "WINDOW_TOKENS",
    "EncoderClassifier",
    "EncoderModel",
    "Window",
    "WindowShape",
    "batch_inputs",
    "length_chunks",
    "pooled",
    "verified_files",
]

# Context off by default: measured on 150 held-back chitchat conversations and 300 S-Labs
# injections split over two messages, 16 context tokens raised per-message FPR from 0.83%
# to 1.26% and tokens by 48% for +1.4 points of split-injection recall (97.3% -> 98.7%).
CONTEXT_TOKENS = 0

MEMO_ITEMS = 4096  # item results remembered (~200 bytes each, ~600 with a located window)

SCORED_ROLES = frozenset({"user", "system", "developer", "tool"})

UNTRUSTED_ROLE = "tool"  # content from outside the conversation, and files attached to messages
# A long user message (a pasted document) is judged by the heads for untrusted content, but
# it is the user's: a jailbreak there is the user's own (base.PRINCIPAL_ONLY).
PASTED_ROLE = "user/pasted"
# Read as they are (never masked), so a finding can say where in the text it is.
LOCATED_ROLES = frozenset({UNTRUSTED_ROLE, PASTED_ROLE})

# The conversation's own words: a file they name is an identifier (classifiers/identifiers.py).
# A long user message is judged as untrusted content and never masked.
MASKED_ROLES = frozenset({"user", "system", "developer"})


class EncoderClassifier:
    """Monitor-lane classifier: a MiniLM encoder + linear heads, conversation score = running max.

    One class serves two manifest entries: "encoder" (the frozen sentence encoder with
    logistic heads, opt-in) and "detector" (a MiniLM student fine-tuned end to end, on by
    default). What differs is read from the entry:

        roles                           the roles scored (default SCORED_ROLES); the detector
                                        leaves system and developer messages alone: they
                                        are the operator's own instructions, and its
                                        jailbreak head flags ordinary ones (the operator
                                        view, classifiers/operator.py, judges them)
        window_tokens / window_stride   the window shape (default 256 / 192)
        normalize                       score classifiers/normalize.py's views (max over
                                        views) rather than the raw text
        role_heads                      the head that judges a category for a role, e.g.
                                        {"tool": {"prompt_injection": "indirect_injection"}}:
                                        tool outputs are judged by the head trained on them,
                                        and never for jailbreak (base.PRINCIPAL_ONLY)
        head_thresholds                 per head; scores come out scaled so that each
                                        head's threshold is 0.5 (classifiers/scaled.py)
        screen                          {"artifact", "floor"}: a lexical model scores each
                                        item first, and an item whose every lexical head is
                                        under the floor is cleared (all zeros) without the
                                        encoder; its tokens are the lexical model's work
                                        (training/detector_screen.py chooses the floor)
        window_screen                   {"artifact", "cutoff"}: then, in tool outputs and
                                        attached files, each window the window screen
                                        clears (classifiers/window_screen.py) scores zero
                                        without the encoder (training/train_window_screen.py)

    >>> clf = EncoderClassifier(artifact="detector").load()              # doctest: +SKIP
    >>> upd = clf.update(clf.initial_state(), [parse_item({"role": "user", "content": "hi"})])
    """

    lane: Lane = "monitor"
    max_state_bytes = 1024  # {"max": two floats, "context": up to ~100 ids}

    def __init__(
        self,
        models_dir: Path = MODELS_DIR,
        threads: int = 1,
        max_item_windows: int | None = MAX_ITEM_WINDOWS,
        context_tokens: int = CONTEXT_TOKENS,
        memo_items: int = MEMO_ITEMS,
        artifact: str = ARTIFACT_NAME,
        screen: bool = True,
        lexical: Mapping[str, LexicalClassifier] | None = None,
        window_screen: bool = True,
        long_user_chars: int | None = None,
        mask_paths: bool = True,
    ) -> None:
        """`screen=False` leaves the manifest's screens out (every item reaches the model),
        `window_screen=False` the window screen only (the model reads every window of what
        the item screen lets through); `lexical` holds lexical models already loaded, by
        manifest entry, for the screen to share instead of loading a second copy.
        `long_user_chars`: a user message this long is a pasted reference (a document, a
        page, a file's text), judged by the heads of untrusted content: instructions inside
        it are not the user's own. `mask_paths`: paths and links in the messages of
        MASKED_ROLES are read as PLACEHOLDER (classifiers/identifiers.py)."""
        self.long_user_chars = long_user_chars
        self.mask_paths = mask_paths
        self.models_dir = Path(models_dir)
        self.artifact = artifact
        self.name = artifact
        self.threads = threads
        self.max_item_windows = max_item_windows
        self.context_tokens = context_tokens
        self.memo_items = memo_items
        self._memo = ItemMemo(memo_items)
        self._model: EncoderModel | None = None
        self._entry: dict[str, Any] | None = None
        self._categories: tuple[str, ...] = ()
        self._views: str | None = None  # normalize version of the views it reads (None: raw text)
        self._roles: frozenset[str] = SCORED_ROLES
        self._heads: dict[str, tuple[int, ...]] = {}  # role -> head index of each category
        self._head_thresholds: tuple[float, ...] = ()
        self.use_screen = screen
        self.use_window_screen = screen and window_screen
        self._lexical = dict(lexical or {})
        self._screen: LexicalClassifier | None = None
        self._floor = 0.0
        self._window_screen: WindowScreen | None = None

    def load(self) -> EncoderClassifier:
        """Hash-check the artifacts and create the onnxruntime session (once)."""
        paths, entry = verified_files(self.models_dir, self.artifact)
        shape = WindowShape(
            int(entry.get("window_tokens", WINDOW_TOKENS)), int(entry.get("window_stride", WINDOW_STRIDE))
        )
        model = EncoderModel.from_files(
            paths["model"], paths["tokenizer"], paths["heads"], self.threads, shape
        )
        where = f"model {self.artifact!r}"
        categories = tuple(entry.get("categories", model.heads))
        role_heads = entry.get("role_heads", {})
        roles = frozenset(entry.get("roles", SCORED_ROLES))
        try:
            thresholds = tuple(float(entry["head_thresholds"][h]) for h in model.heads)
            heads = {
                role: tuple(model.heads.index(role_heads.get(role, {}).get(c, c)) for c in categories)
                for role in roles
            }
            if UNTRUSTED_ROLE in heads:
                heads[PASTED_ROLE] = heads[UNTRUSTED_ROLE]
        except (KeyError, ValueError) as exc:
            raise ModelArtifactError(
                f"{where}: heads {model.heads} do not match the manifest ({exc})"
            ) from exc
        trained_on = entry.get("normalize")
        if trained_on is not None and trained_on not in normalize.VERSIONS:
            raise ModelArtifactError(
                f"{where}: trained on normalize v{trained_on}, this serves {normalize.VERSIONS}"
            )
        if trained_on is not None:
            normalize.warm()
        self._views = trained_on  # the views it was trained on, None for raw text
        self._screen, self._floor = self._load_screen(entry.get("screen"), where)
        model_sha = entry["files"]["model"]["sha256"]
        self._window_screen = self._load_window_screen(entry.get("window_screen"), where, model, model_sha)
        self._categories, self._heads, self._head_thresholds = categories, heads, thresholds
        self._roles = roles
        self._model, self._entry = model, entry
        return self

    def _load_screen(self, spec: Any, where: str) -> tuple[LexicalClassifier | None, float]:
        if spec is None or not self.use_screen:
            return None, 0.0
        try:
            artifact, floor = str(spec["artifact"]), float(spec["floor"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelArtifactError(f"{where}: screen {spec!r} needs an artifact and a floor") from exc
        if not 0.0 <= floor < 1.0:
            raise ModelArtifactError(f"{where}: screen floor {floor} is not in [0, 1)")
        screen = LexicalClassifier(self.models_dir, artifact=artifact)
        return screen.share(self._lexical.get(artifact)), floor

    def _load_window_screen(
        self, spec: Any, where: str, model: EncoderModel, model_sha: str
    ) -> WindowScreen | None:
        if spec is None or not self.use_window_screen:
            return None
        return load_window_screen(self.models_dir, spec, where, model_sha, model.tokenizer.get_vocab_size())

    def share(self, loaded: EncoderClassifier) -> EncoderClassifier:
        """Use `loaded`'s session and artifacts (one model in memory for several settings)."""
        self._model, self._entry = loaded._model, loaded._entry
        self._categories, self._heads, self._head_thresholds = (
            loaded._categories,
            loaded._heads,
            loaded._head_thresholds,
        )
        self._views, self._roles = loaded._views, loaded._roles
        if self.use_screen:
            self._screen, self._floor = loaded._screen, loaded._floor
        if self.use_window_screen:
            self._window_screen = loaded._window_screen
        return self

    def without_memo(self) -> EncoderClassifier:
        """The same loaded model with the item memo off: every update does its own work
        (benchmarks compare modes that would otherwise reuse each other's results)."""
        fresh = EncoderClassifier(
            self.models_dir,
            self.threads,
            self.max_item_windows,
            self.context_tokens,
            0,
            self.artifact,
            self.use_screen,
            window_screen=self.use_window_screen,
            long_user_chars=self.long_user_chars,
            mask_paths=self.mask_paths,
        )
        return fresh.share(self)

    def _loaded_entry(self, what: str) -> dict[str, Any]:
        if self._entry is None:
            raise AttributeError(f"EncoderClassifier.{what} is read from the artifacts: call load() first")
        return self._entry

    @property
    def version(self) -> str:
        """The manifest entry's version, "+paths" where user messages' paths are masked."""
        version = str(self._loaded_entry("version")["version"])
        return f"{version}+paths" if self.mask_paths else version

    @property
    def categories(self) -> tuple[str, ...]:
        self._loaded_entry("categories")
        return self._categories

    @property
    def thresholds(self) -> dict[str, float]:
        """0.5 for every category: each head's threshold chosen on validation (the
        manifest's `head_thresholds`) is scaled to 0.5 before heads become categories."""
        self._loaded_entry("thresholds")
        return dict.fromkeys(self._categories, 0.5)

    @property
    def screen(self) -> tuple[LexicalClassifier, float] | None:
        """The lexical model that clears items before the encoder runs, and its floor."""
        return None if self._screen is None else (self._screen, self._floor)

    @property
    def window_screen(self) -> WindowScreen | None:
        """The model that clears windows of untrusted content before the encoder reads them."""
        return self._window_screen

    @property
    def model(self) -> EncoderModel:
        if self._model is None:
            raise EncoderNotLoadedError("EncoderClassifier is not loaded: call load() before update()")
        return self._model

    def initial_state(self) -> State:
        return {"max": zero_scores(self.categories), "context": []}

    def update(self, state: State, items: Sequence[Item]) -> Update:
        return self.update_batch([(state, items)])[0]

    def update_batch(self, requests: Sequence[tuple[State, Sequence[Item]]]) -> list[Update]:
        """Score several conversations' new items with shared onnxruntime calls.

        Returns exactly what `update(state, items)` returns for each request.
        """
        model = self.model
        windows: list[Window] = []
        plans = [self._plan(model, state, items, windows) for state, items in requests]
        probs = model.head_probabilities(model.embed(windows)) if windows else np.zeros((0, 0))
        return [
            self._finish(state, items, plan, probs, windows)
            for (state, items), plan in zip(requests, plans, strict=True)
        ]

    def _plan(self, model: EncoderModel, state: State, items: Sequence[Item], windows: list[Window]) -> Plan:
        """Tokenize the request's scored items once and append their windows."""
        context = self._tail(state.get("context", []))
        entries: list[tuple[ItemResult, str] | Pending | None] = []
        for item in items:
            if not (item.scored and item.role in self._roles and item.text):
                entries.append(None)
                continue
            role = self._judged_as(item)
            masked = self.mask_paths and role in MASKED_ROLES
            text = identifiers.mask_paths(item.text) if masked else item.text
            key = ItemMemo.key(text, context)
            known = self._memo.get(key)
            if known is None:
                # Screened and counted as it is judged: the memo keeps one result per text.
                known = self._cleared_text(text, count_tokens(text) if masked else item.tokens)
                if known is not None:
                    self._memo.put(key, known)
            if known is not None and not self.context_tokens:
                entries.append((known, role))  # with context on, the tail needs the ids anyway
                continue
            # The primary view's ids make the context tail; an extra view (something was
            # hidden or encoded) adds the windows of its own that differ, without context.
            texts = self.views_of(text)
            ids = model.tokenize(texts[0])
            if known is not None:
                entries.append((known, role) if ids or len(texts) > 1 else None)
            else:
                primary = model.windows(ids, context, self.max_item_windows) if ids else []
                views = [
                    w for more in texts[1:] for w in model.view_windows(more, texts[0], self.max_item_windows)
                ]
                written = texts[0] == text
                entries.append(self._pending(role, key, text, primary, views, written, windows, item.tokens))
            if ids:
                context = self._tail(ids)
        attached = []
        if UNTRUSTED_ROLE in self._roles:  # with the tool-output head, never with context
            for index, item in enumerate(items):
                if item.attachments.strip():
                    found = self._attachment(model, item.attachments, windows)
                    if found is not None:
                        attached.append((index, found))
        return Plan(entries=entries, context=context, attached=attached)

    def views_of(self, text: str) -> list[str]:
        """The texts it reads for `text`, as served: the normaliser's views of the version it
        was trained on, the primary first (the text itself when it reads raw text)."""
        return list(normalize.views(text, self._views).texts()) if self._views else [text]

    def _judged_as(self, item: Item) -> str:
        """The role whose heads judge `item` (see `long_user_chars`)."""
        long = self.long_user_chars is not None and len(item.text) >= self.long_user_chars
        if long and item.role == "user" and UNTRUSTED_ROLE in self._heads:
            return PASTED_ROLE
        return item.role

    def _attachment(
        self, model: EncoderModel, text: str, windows: list[Window]
    ) -> tuple[ItemResult, str] | Pending | None:
        """The result of a message's attached files, judged as a tool output is (alone)."""
        key = ItemMemo.key(text, ())
        known = self._memo.get(key) or self._cleared_text(text, count_tokens(text))
        if known is not None:
            return known, UNTRUSTED_ROLE
        texts = self.views_of(text)
        found, primary = model.standalone_windows(texts, self.max_item_windows)
        written = texts[0] == text  # the primary view is the file as it is
        cut = found[:primary], found[primary:]
        return self._pending(UNTRUSTED_ROLE, key, text, *cut, written, windows, count_tokens(text))

    def _pending(
        self,
        role: str,
        key: bytes,
        text: str,
        primary: list[Window],
        views: list[Window],
        written: bool,
        windows: list[Window],
        tokens: int,
    ) -> tuple[ItemResult, str] | Pending | None:
        """Queue a text's windows (the primary view's, then the extra views') for the encoder,
        less those the window screen clears in untrusted content. A finding may point into
        the primary view's windows when that view is the text as `written`. None without
        windows; zeros, remembered, when the screen clears every one."""
        if not (primary or views):
            return None
        screen = self._window_screen
        if screen is not None and role == UNTRUSTED_ROLE:
            primary = [w for w in primary if not screen.clears(w.ids)]
            views = [w for w in views if not screen.clears(w.ids)]
            if not (primary or views):
                known = ItemResult((0.0,) * len(self.model.heads), tokens)
                self._memo.put(key, known)
                return known, role
        lo = len(windows)
        windows.extend(primary + views)
        return Pending(lo, len(windows), key, role, len(primary) if written else 0, text)

    def _cleared_text(self, text: str, tokens: int) -> ItemResult | None:
        """The text's result if the screen clears it: zeros, and the screen's own tokens."""
        if self._screen is None or not text.strip():
            return None
        scores, extra = self._screen.score_text_counted(text)
        if max(scores.values()) >= self._floor:
            return None
        return ItemResult((0.0,) * len(self.model.heads), tokens + extra)

    def _result(
        self, entry: tuple[ItemResult, str] | Pending, probs: np.ndarray, windows: Sequence[Window]
    ) -> tuple[ItemResult, str]:
        """An entry's result: known, or read from its windows' probabilities (and remembered)."""
        if not isinstance(entry, Pending):
            return entry
        best = probs[entry.lo : entry.hi].max(axis=0)
        cost = sum(len(w.ids) for w in windows[entry.lo : entry.hi])
        located: tuple[tuple[int, int, float] | None, ...] = ()
        if entry.own and any(p >= t for p, t in zip(best, self._head_thresholds, strict=True)):
            # only what may be flagged, read once per text: the memo keeps the characters
            own = probs[entry.lo : entry.lo + entry.own]
            where = own.argmax(axis=0).tolist()
            spans = self.model.char_ranges(entry.text, [windows[entry.lo + w].content for w in where])
            located = tuple(
                None if span is None else (*span, float(own[w, h]))
                for h, (w, span) in enumerate(zip(where, spans, strict=True))
            )
        result = ItemResult(tuple(float(p) for p in best), cost, located)
        self._memo.put(entry.key, result)
        return result, entry.role

    def _scores(self, result: ItemResult, role: str) -> Scores:
        """The item's categories through `role`'s heads; untrusted content is never guilty
        of what only a principal can be (base.PRINCIPAL_ONLY)."""
        return {
            c: 0.0
            if role == UNTRUSTED_ROLE and c in PRINCIPAL_ONLY
            else scale(result.scores[h], self._head_thresholds[h])
            for c, h in zip(self.categories, self._heads[role], strict=True)
        }

    def _tail(self, ids: Sequence[int]) -> list[int]:
        """The last `context_tokens` ids (none when context is off: ids[-0:] is all of them)."""
        n = self.context_tokens
        return [int(i) for i in ids[len(ids) - n :]] if n > 0 else []

    def _finish(
        self, state: State, items: Sequence[Item], plan: Plan, probs: np.ndarray, windows: Sequence[Window]
    ) -> Update:
        cats = self.categories
        item_scores: list[Scores] = []
        findings: list[Finding] = []
        tokens = 0
        for index, entry in enumerate(plan.entries):
            if entry is None:
                item_scores.append(zero_scores(cats))
                continue
            result, role = self._result(entry, probs, windows)
            item_scores.append(self._scores(result, role))
            if role in LOCATED_ROLES:
                findings += self._located(index, self.name, items[index].text, result, role, item_scores[-1])
            # The item's cost whether or not the memo saved the work: an Update is a pure
            # function of (state, items).
            tokens += result.tokens
        for index, entry in plan.attached:
            result, role = self._result(entry, probs, windows)
            own, files = item_scores[index], self._scores(result, role)
            item_scores[index] = {c: max(own[c], v) for c, v in files.items()}
            attached = items[index].attachments
            findings += self._located(index, f"{self.name}/attachment", attached, result, role, files)
            tokens += result.tokens
        previous = state.get("max") or zero_scores(cats)
        scores = running_max(previous, item_scores)
        new_state = {"max": dict(scores), "context": list(plan.context)}
        return Update(new_state, item_scores, scores, tokens, findings)

    def _located(
        self, index: int, kind: str, text: str, result: ItemResult, role: str, scores: Scores
    ) -> list[Finding]:
        """Where `text` is over a category's threshold (`scores`, its categories through
        `role`'s heads): the characters of the window that scored highest, when that window
        read the text as it is and is over the threshold itself."""
        out = []
        for c, h in zip(self.categories, self._heads[role], strict=True):
            found = result.located[h] if result.located and scores[c] >= 0.5 else None
            if found is None:
                continue
            start, end, p = found
            score = scale(p, self._head_thresholds[h])
            if score >= 0.5:
                out.append(Finding(c, kind, index, text[start:end][:60], start, end, score))
        return out
