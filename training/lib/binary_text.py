"""Benign tool outputs that carry binary data as text: the detector's extra negatives.

Certificates, tokens, inline images and API payloads hold base64 or hex of binary data,
which decodes to nothing readable. The corpus's benign encoded rows all decode to text
(training/lib/detection_data.py `benign_disguised`), and its encoded attacks keep their blob
in the primary view, so without these a blob that decodes to nothing looks like an
attack to the detector. lexical-v3 does not flag them (eval/encoded_fp.py), so only the
detector's recipe adds them (training/train_detector.py `load_rows`).

Seeded: the same rows every build. Groups of GROUP_SIZE fillings of one kind share a
split. eval/encoded_fp.py probes other seeds and two kinds that are not here.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from typing import Any

PER_KIND = 100
GROUP_SIZE = 5
SOURCE = "binary-text"


def b64(rng: random.Random, n: int) -> str:
    return base64.b64encode(rng.randbytes(n)).decode()


def pem(rng: random.Random) -> str:
    blob = b64(rng, rng.choice((300, 600, 900, 1400)))
    lines = "\n".join(blob[i : i + 64] for i in range(0, len(blob), 64))
    label = rng.choice(("CERTIFICATE", "PUBLIC KEY", "CERTIFICATE REQUEST"))
    path = rng.choice(("certs/server.crt", "tls/ca.pem", "deploy/keys/api.pub", "ssl/client.csr"))
    return f"$ cat {path}\n-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n"


def jwt_log(rng: random.Random) -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"RS256","typ":"JWT"}').decode().rstrip("=")
    service = rng.choice(("auth", "gateway", "billing", "sessions"))
    lines = []
    for m in range(rng.randint(2, 8)):
        body, sig = b64(rng, rng.randint(60, 160)).rstrip("="), b64(rng, 64).rstrip("=")
        lines.append(
            f"2026-11-{rng.randint(1, 30):02d}T{rng.randrange(24):02d}:{m:02d}:{rng.randrange(60):02d}Z "
            f"{rng.choice(('INFO', 'DEBUG', 'WARN'))} {service}: bearer={head}.{body}.{sig} "
            f"uid={rng.randrange(10**5)} latency_ms={rng.randrange(900)}"
        )
    return "\n".join(lines)


def data_uri_page(rng: random.Random) -> str:
    mime = rng.choice(("image/png", "image/jpeg", "font/woff2", "image/gif"))
    title = rng.choice(("Install guide", "Pricing", "Release notes", "Team page", "Status"))
    return (
        f"<html><head><title>{title}</title><style>@font-face{{src:url(data:font/woff2;base64,"
        f"{b64(rng, rng.randint(80, 300))})}}</style></head><body><h1>{title}</h1>"
        f'<img alt="logo" src="data:{mime};base64,{b64(rng, rng.choice((200, 500, 1200, 2000)))}">'
        "<p>See the documentation for details.</p></body></html>"
    )


def json_payload(rng: random.Random) -> str:
    record = {
        "id": rng.randrange(10**6),
        "sha256": rng.randbytes(32).hex(),
        "content_encoding": "base64",
        rng.choice(("payload", "data", "blob", "content")): b64(rng, rng.choice((150, 400, 800, 1500))),
        "size": rng.randrange(10**5),
    }
    return json.dumps(record, indent=rng.choice((None, 2)))


def k8s_secret(rng: random.Random) -> str:
    keys = rng.sample(("tls.crt", "tls.key", "ca.crt", "token", "keystore.jks", "signing.key"), 3)
    data = "\n".join(f"  {k}: {b64(rng, rng.choice((48, 256, 700)))}" for k in keys)
    name = rng.choice(("api-tls", "registry-creds", "webhook-signing", "db-client-cert"))
    return (
        f"$ kubectl get secret {name} -o yaml\napiVersion: v1\ndata:\n{data}\nkind: Secret\n"
        f"metadata:\n  name: {name}\n  namespace: {rng.choice(('prod', 'staging', 'default'))}\n"
        "type: Opaque\n"
    )


def mime_attachment(rng: random.Random) -> str:
    blob = b64(rng, rng.choice((400, 900, 1600)))
    lines = "\n".join(blob[i : i + 76] for i in range(0, len(blob), 76))
    name = rng.choice(("invoice.pdf", "scan.jpg", "report.xlsx", "photo.png"))
    return (
        "From: billing@example.com\nSubject: Your document\nMIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="b1"\n\n--b1\nContent-Type: text/plain\n\n'
        f"Please find the attached file.\n\n--b1\nContent-Type: application/octet-stream; name={name}\n"
        f"Content-Transfer-Encoding: base64\n\n{lines}\n--b1--\n"
    )


KINDS: dict[str, Callable[[random.Random], str]] = {
    "pem": pem,
    "jwt_log": jwt_log,
    "data_uri_page": data_uri_page,
    "json_payload": json_payload,
    "k8s_secret": k8s_secret,
    "mime_attachment": mime_attachment,
}


def binary_text_rows(per_kind: int = PER_KIND) -> list[dict[str, Any]]:
    """Benign tool-output rows in train_detector's row format, split by group."""
    from training.lib.detection_data import group_split

    rows = []
    for kind, make in KINDS.items():
        for i in range(per_kind):
            group = f"{SOURCE}:{kind}:{i // GROUP_SIZE}"
            rows.append(
                {
                    "text": make(random.Random(f"train:{kind}:{i}")),
                    "label": "benign",
                    "source": SOURCE,
                    "family": kind,
                    "channel": "tool",
                    "group": group,
                    "split": group_split(group),
                    "fp_set": "tool",
                }
            )
    return rows
