"""The review page's routes: one static page and a small JSON API over a recording store.

    GET  /review                                         the page (HTML, JS and CSS served by the app)
    GET  /review/api/conversations?category=&tenant=&decision=&since=&until=
    GET  /review/api/conversations/{id}                  transcript, highlights, scores per turn, labels
    PUT  /review/api/conversations/{id}/labels/{category}   {"verdict": "confirmed"|"false_positive"|null}
    GET  /review/api/export                              reviewed recordings as a transcript file

Loopback only: a request from any other address is refused (403), whatever address the
server binds. With tenant keys (`DELTAGUARD_API_KEYS`), every API call needs the
gateway's `Authorization: Bearer KEY` and sees that tenant's recordings only; without
keys, the operator on this machine sees every tenant's (the `tenant` filter picks one).
The page itself carries no data, so it is served without a key and asks for one.

From a browser, only the page itself may drive the API: the app refuses a foreign Host
(DNS rebinding) or Origin (`deltaguard.access.HostOriginGuard`), a state-changing call must
be JSON (which no cross-site form can send) and not marked cross-site by the browser's
`Sec-Fetch-Site`, and the page's responses carry a Content-Security-Policy allowing only
its own files, `X-Frame-Options: DENY` and `nosniff`.

Each call opens the store in a worker thread (a SQLite connection belongs to its thread),
so the gateway recording into the same file is never blocked for long (WAL journal).
"""

from __future__ import annotations

import ipaddress
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from deltaguard.access import PAGE_HEADERS
from deltaguard.classifiers.base import CATEGORIES
from deltaguard.errors import RecordingStoreError
from deltaguard.items import Item
from deltaguard.recording import REVIEW_VERDICTS, RecordedTranscript, TranscriptStore
from deltaguard.recording.labels import flag_turns, reviewed_lines, to_jsonl
from deltaguard.recording.redaction import mask_text, redacted_range
from deltaguard.review.highlight import highlights
from deltaguard.state.policy import Policy
from deltaguard.state.scoring import Scorer
from deltaguard.tenants import tenant_for

PREFIX = "/review"
_STATIC = {"review.js": "text/javascript", "review.css": "text/css", "index.html": "text/html"}
_DECISIONS = ("flag", "block")
_MASK_KINDS = "[REDACTED:"


class ReviewError(Exception):
    """A request the API refuses: HTTP status, error code, the parameter at fault."""

    def __init__(self, message: str, code: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.status, self.param = code, status, param

    def response(self) -> JSONResponse:
        body = {"message": str(self), "code": self.code, "param": self.param}
        return JSONResponse({"error": body}, status_code=self.status)


def _check_same_site(request: Request) -> None:
    """CSRF: a state-changing call is JSON (a cross-site form cannot send that, and a
    cross-site script must ask first, which this API never grants) and, from a browser,
    not marked cross-site; a foreign Origin never reaches here (HostOriginGuard)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ReviewError("a change must be sent as application/json", "csrf_refused", 403)
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise ReviewError(f"a {site} request may not change recordings", "csrf_refused", 403)


def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _time(params: Mapping[str, str], name: str) -> float | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ReviewError(
            f"{name} must be a time in seconds since the epoch, got {raw!r}", "invalid_filter", param=name
        )
    return value


def parse_filters(params: Mapping[str, str]) -> dict[str, Any]:
    """The list filters of a query string, validated: category, tenant, decision, since, until."""
    unknown = sorted(set(params) - {"category", "tenant", "decision", "since", "until"})
    if unknown:
        raise ReviewError(
            f"unknown filter {unknown[0]!r}; expected category, tenant, decision, since or until",
            "invalid_filter",
            param=unknown[0],
        )
    category = params.get("category") or None
    if category is not None and category not in CATEGORIES:
        raise ReviewError(
            f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}",
            "invalid_filter",
            param="category",
        )
    decision = params.get("decision") or None
    if decision is not None and decision not in _DECISIONS:
        raise ReviewError(
            f"decision must be flag or block, got {decision!r}", "invalid_filter", param="decision"
        )
    since, until = _time(params, "since"), _time(params, "until")
    if since is not None and until is not None and since > until:
        raise ReviewError("since is after until", "invalid_filter", param="since")
    return {
        "category": category,
        "tenant": params.get("tenant") or None,
        "decision": decision,
        "since": since,
        "until": until,
    }


def _matches(row: Mapping[str, Any], f: Mapping[str, Any]) -> bool:
    return (
        (f["category"] is None or f["category"] in row["categories"])
        and (f["tenant"] is None or row["tenant"] == f["tenant"])
        and (f["decision"] is None or row["decision"] == f["decision"])
        and (f["since"] is None or row["updated_at"] >= f["since"])
        and (f["until"] is None or row["created_at"] <= f["until"])
    )


def _masks(items: list[dict[str, Any]]) -> list[str]:
    text = json.dumps(items, ensure_ascii=False)
    kinds, at = [], text.find(_MASK_KINDS)
    while at >= 0:
        end = text.find("]", at)
        kinds.append(text[at + len(_MASK_KINDS) : end])
        at = text.find(_MASK_KINDS, end)
    return kinds


def _item_view(item: Item, source: str, mark: dict[str, Any], redacted: bool) -> dict[str, Any]:
    raw = item.raw
    kind = raw.get("type", "message")
    view = {
        "kind": kind,
        "role": raw.get("role") or ("tool" if kind.endswith("_output") else None),
        "source": source,  # input: the client sent it; output: the model produced it
        "text": item.text or json.dumps(raw, ensure_ascii=False),
        "text_is_raw": not item.text,  # the wire JSON stands in: located ranges do not apply
        "flagged": mark["categories"],
        "scores": mark["scores"],
    }
    if item.attachments:  # attached files are recorded as sent: masked here when redacting
        view["attachments"] = mask_text(item.attachments)[0] if redacted else item.attachments
    return view


def _finding_view(f: Mapping[str, Any], inputs: Sequence[Item], redacted: bool) -> dict[str, Any] | None:
    """A recorded finding as the page shows it, its located range checked against the
    recorded item and clamped to its text; `start`/`end` are dropped when they name no
    input item's text (the page then lists the finding without a highlight). `in` says
    which text the range is in, "text" or "attachments", when the page can highlight it."""
    if not isinstance(f, Mapping):
        return None
    row = {k: f[k] for k in ("item", "category", "kind", "preview", "score", "redacted") if k in f}
    n, start, end = f.get("item"), f.get("start"), f.get("end")
    located = all(isinstance(v, int) and not isinstance(v, bool) for v in (n, start, end))
    if not located or not 0 <= n < len(inputs) or not 0 <= start <= end:
        return row
    if f.get("redacted"):  # a range in the text before redaction: listed, not highlighted
        row["start"], row["end"] = start, end
        return row
    item = inputs[n]
    where, target = "text", item.text
    if str(f.get("kind", "")).endswith("/attachment"):
        where, target = "attachments", item.attachments
        if redacted and target:  # masked for the page: the range moves with the masks
            target, cuts = mask_text(target)
            start, end = redacted_range(cuts, start, end)
    if target:  # clamped to the text as shown (code points; the page converts)
        row |= {"in": where, "start": min(start, len(target)), "end": min(end, len(target))}
    return row


def _turn_findings(
    verdict: Mapping[str, Any] | None,
    inputs: Sequence[Item],
    raw_turn: Mapping[str, Any],
    rec: RecordedTranscript,
) -> list[dict[str, Any]]:
    """The turn's findings: located ones with their ranges; in a redacted recording the
    others (their previews dropped at recording) become what redaction left, the masks."""
    rows = [_finding_view(f, inputs, rec.redacted) for f in (verdict or {}).get("findings", [])]
    findings = [r for r in rows if r is not None]
    if rec.redacted:
        kind_categories = rec.redactions.get("kind_categories", {})
        findings = [f for f in findings if "start" in f]
        findings += [
            {"category": kind_categories.get(k, "-"), "kind": k, "preview": f"[REDACTED:{k}]"}
            for k in dict.fromkeys(_masks([*raw_turn["input"], *raw_turn.get("output", [])]))
        ]
    return findings


def detail(rec: RecordedTranscript, marks: Mapping[str, Any], scorer: Scorer | None) -> dict[str, Any]:
    """A recording as the page shows it."""
    conv = rec.conversation()
    rows = highlights(rec, scorer)
    policy = Policy.model_validate(rec.policy) if rec.policy else Policy()
    turns = []
    for t, turn in enumerate(conv.turns):
        items = [
            _item_view(item, "input" if n < len(turn.input) else "output", rows[t][n], rec.redacted)
            for n, item in enumerate((*turn.input, *turn.output))
        ]
        verdict = rec.verdicts[t] if t < len(rec.verdicts) else None
        findings = _turn_findings(verdict, turn.input, rec.transcript["turns"][t], rec)
        turns.append(
            {
                "index": t,
                "response_id": rec.response_ids[t] if t < len(rec.response_ids) else None,
                "items": items,
                "decision": verdict["decision"] if verdict else None,
                "category_scores": verdict["category_scores"] if verdict else {},
                "flagged_categories": verdict["flagged_categories"] if verdict else [],
                "findings": findings,
            }
        )
    return {
        "id": rec.id,
        "tenant": rec.tenant,
        "conversation_id": rec.conversation_id,
        "decision": rec.decision,
        "categories": rec.categories,
        "redacted": rec.redacted,
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
        "thresholds": {c: policy.threshold(c) for c in CATEGORIES},
        "flag_turns": flag_turns(rec),
        "turns": turns,
        "flags": [
            {k: e.get(k) for k in ("lane", "decision", "categories", "response_id", "created_at", "reason")}
            for e in rec.flags
        ],
        "labels": dict(marks),
    }


class ReviewApi:
    """The review routes over the store at `path` (see the module docstring)."""

    def __init__(
        self,
        path: Path | str,
        api_keys: Mapping[str, str] | None = None,
        scorer: Scorer | Callable[[], Scorer] | None = None,
    ) -> None:
        self.path = Path(path)
        self.api_keys = dict(api_keys or {})
        self._scorer = scorer
        self._scorer_lock = threading.Lock()

    def scorer(self) -> Scorer | None:
        """The scorer used for highlights; a factory is called once, on first use."""
        with self._scorer_lock:
            if callable(self._scorer) and not isinstance(self._scorer, Scorer):
                self._scorer = self._scorer()
            return self._scorer

    def routes(self) -> list[Route]:
        return [
            Route(PREFIX, self.page, methods=["GET"]),
            Route(PREFIX + "/static/{name}", self.static, methods=["GET"]),
            Route(PREFIX + "/api/session", self.session, methods=["GET"]),
            Route(PREFIX + "/api/conversations", self.conversations, methods=["GET"]),
            Route(PREFIX + "/api/conversations/{id:int}", self.conversation, methods=["GET"]),
            Route(PREFIX + "/api/conversations/{id:int}/labels/{category}", self.label, methods=["PUT"]),
            Route(PREFIX + "/api/export", self.export, methods=["GET"]),
        ]

    # -- access

    def _scope(self, request: Request, api: bool = True) -> str | Literal["*"]:
        """The tenant whose recordings the request may see ("*": every tenant)."""
        if not _is_loopback(request.client.host if request.client else None):
            raise ReviewError("the review page answers loopback clients only", "forbidden", 403)
        if not api:
            return "*"
        tenant = tenant_for(self.api_keys, request.headers)
        if tenant is None:
            raise ReviewError("Incorrect API key provided.", "invalid_api_key", 401)
        return tenant if self.api_keys else "*"

    def _open(self) -> TranscriptStore:
        try:
            return TranscriptStore(self.path).open(create=False)
        except RecordingStoreError as exc:
            raise ReviewError(str(exc), "store_unavailable", 503) from None

    async def _call(self, request: Request, work: Callable[[str | Literal["*"]], Response]) -> Response:
        try:
            scope = self._scope(request)
            if request.method not in ("GET", "HEAD"):
                _check_same_site(request)
            response = await run_in_threadpool(work, scope)
        except ReviewError as err:
            response = err.response()
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    # -- the page

    async def page(self, request: Request) -> Response:
        return await self.static(request, "index.html")

    async def static(self, request: Request, name: str | None = None) -> Response:
        name = name or request.path_params["name"]
        try:
            self._scope(request, api=False)
        except ReviewError as err:
            return err.response()
        if name not in _STATIC:
            return ReviewError(f"no such file {name!r}", "not_found", 404).response()
        body = resources.files("deltaguard.review").joinpath("static", name).read_bytes()
        return Response(body, media_type=_STATIC[name], headers={"Cache-Control": "no-store", **PAGE_HEADERS})

    # -- the API

    async def session(self, request: Request) -> Response:
        def work(scope: str) -> Response:
            return JSONResponse({"tenant": None if scope == "*" else scope, "keys": bool(self.api_keys)})

        return await self._call(request, work)

    async def conversations(self, request: Request) -> Response:
        def work(scope: str) -> Response:
            filters = parse_filters(request.query_params)
            with self._open() as store:
                rows = [r for r in store.summaries() if scope == "*" or r["tenant"] == scope]
                marks = store.labels([r["id"] for r in rows])
            shown = []
            for r in rows:
                if _matches(r, filters):
                    r["labels"] = {c: m["verdict"] for c, m in marks.get(r["id"], {}).items()}
                    shown.append(r)
            return JSONResponse(
                {
                    "conversations": shown,
                    "total": len(rows),
                    "tenants": sorted({str(r["tenant"]) for r in rows}),
                    "categories": list(CATEGORIES),
                }
            )

        return await self._call(request, work)

    def _recording(self, store: TranscriptStore, rid: int, scope: str) -> RecordedTranscript:
        found = store.read(ids=[rid])
        if not found or (scope != "*" and found[0].tenant != scope):
            raise ReviewError(f"no recording {rid}", "not_found", 404)
        return found[0]

    async def conversation(self, request: Request) -> Response:
        def work(scope: str) -> Response:
            rid = request.path_params["id"]
            with self._open() as store:
                rec = self._recording(store, rid, scope)
                marks = store.labels([rid]).get(rid, {})
            return JSONResponse(detail(rec, marks, self.scorer()))

        return await self._call(request, work)

    async def label(self, request: Request) -> Response:
        body = await request.body()

        def work(scope: str) -> Response:
            rid, category = request.path_params["id"], request.path_params["category"]
            if len(body) > 4096:  # {"verdict": ...} is a few bytes
                raise ReviewError("a label is a small JSON object", "invalid_label", 413)
            try:
                payload = json.loads(body or b"null")
            except (ValueError, RecursionError):
                raise ReviewError('the body must be JSON: {"verdict": ...}', "invalid_json") from None
            if not isinstance(payload, dict) or "verdict" not in payload:
                raise ReviewError(
                    'expected {"verdict": "confirmed" | "false_positive" | null}', "invalid_label"
                )
            verdict = payload["verdict"]
            if verdict is not None and verdict not in REVIEW_VERDICTS:
                raise ReviewError(
                    f"verdict must be confirmed, false_positive or null, got {verdict!r}",
                    "invalid_label",
                    param="verdict",
                )
            with self._open() as store:
                rec = self._recording(store, rid, scope)
                if category not in rec.categories:
                    raise ReviewError(
                        f"recording {rid} was not flagged for {category!r}; "
                        f"its flags: {', '.join(rec.categories)}",
                        "invalid_label",
                        param="category",
                    )
                store.set_label(rid, category, verdict, None if scope == "*" else scope)
                marks = store.labels([rid]).get(rid, {})
            return JSONResponse({"id": rid, "labels": marks})

        return await self._call(request, work)

    async def export(self, request: Request) -> Response:
        def work(scope: str) -> Response:
            with self._open() as store:
                lines, left_out = reviewed_lines(store, scope)
            return Response(
                to_jsonl(lines),
                media_type="application/x-ndjson",
                headers={
                    "Content-Disposition": 'attachment; filename="reviewed.jsonl"',
                    "X-Deltaguard-Unreviewed": str(left_out),
                },
            )

        return await self._call(request, work)


def review_routes(
    path: Path | str,
    api_keys: Mapping[str, str] | None = None,
    scorer: Scorer | Callable[[], Scorer] | None = None,
) -> list[Route]:
    """The review routes, to mount in an app (the gateway's, with `serve --record`)."""
    return ReviewApi(path, api_keys, scorer).routes()
