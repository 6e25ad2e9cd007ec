"""Secret redaction: the one layer every writer of a run uses (config.json, checkpoint loop
state, code.diff, index.html). Pure: no I/O.

A value is replaced by ``"<redacted>"`` (:data:`REDACTED`) when

- its **key name** looks secret (:func:`is_secret_key`): ``api_key``, ``token``,
  ``secret``, ``password``, ``access_key``, ``private_key``, ``credentials``,
  ``authorization``, ``cookie``, ``connection_string``, ``sas_token``, ``webhook_url``,
  ``wandb_key``... in any case and in camelCase (``openaiApiKey``), as a whole name or
  after ``_``/``-``/``.``; a field named ``key``/``secret``/``token`` inside a tracker or
  provider section (``wandb.key``); not ``max_tokens``, ``stop_tokens``, ``num_tokens``;
- or its **shape** is a credential, wherever it stands (:func:`redact_text`, span by
  span so the rest of a sentence or URL stays readable): PEM private-key blocks, JWTs,
  passwords in any URL (``redis://:pw@host``, ``postgres://u:p@ss@db``: up to the last
  ``@`` of the authority), webhook URLs (Slack, Discord, Teams, Zapier...), connection
  string and query parameters (``AccountKey=``, ``SharedAccessSignature=``, ``sig=``,
  ``X-Amz-Signature=``, ``password=``...), ``Bearer``/``Basic``/``token`` headers,
  ``password: v`` / ``my token is v`` assignments, provider key prefixes (OpenAI and
  Anthropic ``sk-``, ``hf_``, GitHub ``ghp_``/``github_pat_``, GitLab ``glpat-``, AWS
  ``AKIA``/``ASIA``, Slack ``xox?-``, Google ``AIza``, Stripe ``sk_live_``, SendGrid
  ``SG.``, npm ``npm_``, PyPI ``pypi-``); a whole value of 40 hex digits (a W&B key)
  under a key that is not a commit/hash/id;
- or, as a second opinion, one of the detectors of the maintained ``detect-secrets``
  library (Yelp; its regex plugins: AWS, Azure storage, GitHub, JWT, private keys,
  Slack, Stripe, Twilio, keyword assignments...) flags it: :func:`library_findings`.
  It is imported on first use (~0.2 s once), never by ``import rllog``; without it the
  patterns above still apply.

Functions: :func:`redact_text` (free text), :func:`redact_value` (a value under a key),
:func:`redact_tree` (a JSON tree: config, loop state), :func:`redact_argv` (a command
line), :func:`redact_diff_lines` (a diff, line by line, with a count).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "REDACTED",
    "is_secret_key",
    "redact_text",
    "redact_value",
    "redact_tree",
    "redact_argv",
    "redact_diff_lines",
    "library_findings",
]

#: what a secret is replaced by (config.json, checkpoint records, code.diff, index.html)
REDACTED = "<redacted>"

_SECRET_WORDS = (
    r"api_?keys?|apikeys?|tokens?|auth_?tokens?|access_?tokens?|refresh_?tokens?|id_?tokens?|"
    r"secrets?|secret_?keys?|client_?secrets?|passwords?|passwd|pwd|pass_?phrase|pass|"
    r"access_?keys?|private_?keys?|private_?key_?id|credentials?|creds?|auth|bearer|authorization|"
    r"cookies?|session_?keys?|connection_?strings?|conn_?str|dsn|sas|sas_?token|sas_?url|"
    r"signature|sig|webhooks?|webhook_?url|account_?key|shared_?access_?key|"
    r"(?:wandb|openai|anthropic|hf|huggingface|aws|gcp|azure|client|signing|encryption|session|"
    r"license|tracker|comet|neptune|mlflow|clearml|tinker|together|fireworks|groq|mistral|cohere|gemini|"
    r"google|deepseek|xai|replicate|pinecone|slack|discord|github|gitlab|db|database|master)_?keys?"
)
_SECRET_KEY = re.compile(rf"(?:^|[_\-.])(?:{_SECRET_WORDS})$", re.IGNORECASE)
#: never secret although they end in a secret word
_NOT_SECRET_KEY = re.compile(
    r"(?:^|[_\-.])(?:max|min|num|n|stop|special|pad|eos|bos|sep|unk|mask|total|new|prompt|"
    r"completion|output|input|extra|added|count|per|vocab)_?(?:tokens?)$"
    r"|(?:^|[_\-.])(?:by_?pass|compass|multi_?pass|first_?pass|second_?pass|num_?pass)$",
    re.IGNORECASE,
)
#: sections whose ``key``/``secret``/``token``/``id`` field is a credential
_PROVIDER_SECTIONS = re.compile(
    r"^(?:wandb|weights_?and_?biases|openai|anthropic|hf|huggingface|aws|s3|gcp|gcs|azure|comet|"
    r"neptune|mlflow|clearml|trackio|tinker|together|fireworks|groq|mistral|cohere|gemini|google|"
    r"deepseek|replicate|pinecone|slack|discord|github|gitlab|tracker|logger|api|auth|credentials?|"
    r"secrets?|provider|client)$",
    re.IGNORECASE,
)
_PROVIDER_FIELDS = {"key", "keys", "secret", "token", "password", "pass", "value"}
_HEX40 = re.compile(r"^[0-9a-fA-F]{40}$")
_HEX_OK_KEY = re.compile(
    r"(?:commit|sha|sha1|hash|digest|checksum|rev|revision|ref|head|id|uuid|version|fingerprint)$",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name)


def is_secret_key(name: str, parent: str | None = None) -> bool:
    """True when a value under key ``name`` (inside section ``parent``, when known) is a
    secret by its name alone (see the module docstring)."""
    if not isinstance(name, str) or not name:
        return False
    snake = _snake(name)
    if _NOT_SECRET_KEY.search(snake):
        return False
    if _SECRET_KEY.search(snake):
        return True
    if parent is not None and is_secret_key(parent.rsplit(".", 1)[-1]):
        return True  # everything inside a ``credentials`` section
    return (
        parent is not None
        and snake.lower() in _PROVIDER_FIELDS
        and bool(_PROVIDER_SECTIONS.match(_snake(parent).rsplit(".", 1)[-1]))
    )


# -- value shapes ----------------------------------------------------------------------

_R = REDACTED


def _assigned_secret(name: str) -> bool:
    section, _, leaf = name.rpartition(".")
    return is_secret_key(leaf, section or None) or is_secret_key(name)


def _keep1(m: re.Match[str]) -> str:
    return m.group(1) + _R


def _keep1_3(m: re.Match[str]) -> str:
    return m.group(1) + _R + m.group(3)


_SHAPES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    # PEM private keys: the whole block (an unterminated block: to the end of the text)
    (
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        lambda m: _R,
    ),
    # JSON Web Tokens (header.payload.signature, base64url)
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}(?:\.[A-Za-z0-9_\-]*)?"), lambda m: _R),
    # webhook URLs: the host stays, the path (which is the credential) goes
    (
        re.compile(
            r"(https?://(?:hooks\.slack\.com|(?:[\w-]+\.)?discord(?:app)?\.com/api/webhooks|"
            r"[\w.-]*webhook\.office\.com|outlook\.office\.com/webhook|hooks\.zapier\.com|"
            r"[\w.-]*\.webhook\.[\w.-]+|[^\s/'\"]+/(?:api/)?webhooks?))/[^\s'\"<>]*",
            re.IGNORECASE,
        ),
        lambda m: m.group(1) + "/" + _R,
    ),
    # a password in any URL: scheme://[user]:PASSWORD@host (to the authority's last '@')
    (
        re.compile(r"(\b[a-z][a-z0-9+.\-]*://[^\s:/@'\"]*:)([^\s/'\"<>]*)(@[^\s@/'\"<>]+)", re.IGNORECASE),
        _keep1_3,
    ),
    # connection-string and query parameters: AccountKey=..., sig=..., password=...
    (
        re.compile(
            r"((?:^|[;&?\s,{(\"'])(?:account_?key|shared_?access_?key|shared_?access_?signature|sig|"
            r"signature|x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|"
            r"x-goog-credential|access_?token|refresh_?token|id_?token|client_?secret|api_?key|apikey|"
            r"password|passwd|pwd|secret|token|key|auth)=)([^\s;&'\"<>,)}]+)",
            re.IGNORECASE,
        ),
        _keep1,
    ),
    # Authorization headers: Bearer / Basic / Token <credential>
    (
        re.compile(
            r"(\b(?:bearer|basic|token)\s+)(?=[A-Za-z0-9._~+/=\-]*\d)[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE
        ),
        _keep1,
    ),
    # key: value / key = value / "key": "value" / ENV["KEY"] = value, under a secret name
    (
        re.compile(
            r"(?<![\w.\-])([A-Za-z_][\w.\-]*)(['\"]?\]?\s*(?:=|:|=>)\s*(?:[rbfu]?['\"])?)"
            r"(?!<redacted>)([^\s'\",;)}\]]{4,})"
        ),
        lambda m: m.group(1) + m.group(2) + _R if _assigned_secret(m.group(1)) else m.group(0),
    ),
    # prose: "my token is X", "the password was X"
    (
        re.compile(
            r"(\b(?:api[ _\-]?key|token|secret|password|passwd|passphrase|credentials?)\s+(?:is|was|=|:)\s+)"
            r"(?!<redacted>)([^\s'\",;)}\]]{4,})",
            re.IGNORECASE,
        ),
        _keep1,
    ),
    # provider key prefixes
    (
        re.compile(
            r"\b(?:sk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_\-]{6,}|sk_(?:live|test)_[A-Za-z0-9]{10,}|"
            r"rk_(?:live|test)_[A-Za-z0-9]{10,}|hf_[A-Za-z0-9]{10,}|gh[pousr]_[A-Za-z0-9]{20,}|"
            r"github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}|"
            r"xox[abposr]-[A-Za-z0-9\-]{10,}|xapp-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{30,}|"
            r"SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}|npm_[A-Za-z0-9]{30,}|"
            r"pypi-[A-Za-z0-9_\-]{30,}|dop_v1_[a-f0-9]{32,}|shpat_[a-fA-F0-9]{32}|"
            r"tskey-[A-Za-z0-9\-]{10,}|gsk_[A-Za-z0-9]{20,}|r8_[A-Za-z0-9]{20,}|"
            r"wandb_v1_[A-Za-z0-9_]{20,})"
        ),
        lambda m: _R,
    ),
]


def _shapes(text: str) -> str:
    for pattern, repl in _SHAPES:
        if len(text) < 8:
            break
        text = pattern.sub(repl, text)
    return text


def redact_text(text: str) -> str:
    """``text`` with every secret-shaped span replaced by ``<redacted>`` (the words
    around it kept); detect-secrets' findings that the patterns missed are replaced too.
    Never raises; a str subclass comes back as a plain str."""
    text = str.__str__(text)
    if len(text) < 8:
        return text
    out = _shapes(text)
    for found in library_findings(out):
        if REDACTED not in found and len(found) >= 6:
            out = out.replace(found, REDACTED)
    return out


def redact_value(key: str | None, value: str, parent: str | None = None) -> str:
    """A string config or loop-state value under ``key``: ``<redacted>`` when the key is
    secret (an empty string stays empty) or the whole value is a 40-hex key under a
    key that is not a commit/hash/id; else :func:`redact_text`."""
    if key is not None and is_secret_key(key, parent):
        return REDACTED if value else value
    if _HEX40.match(value) and not (key and _HEX_OK_KEY.search(_snake(key))):
        return REDACTED
    return redact_text(value)


def redact_metric(key: str, value: str) -> str:
    """A string logged as metric ``key`` (``/``-separated like ``"wandb/api_key"``):
    ``<redacted>`` when the key or its section names a secret, else
    :func:`redact_value` under its last part."""
    name = key.replace("/", ".")
    if value and _assigned_secret(name):
        return REDACTED
    return redact_value(name.rpartition(".")[2], value)


def redact_tree(value: Any, key: str | None = None, parent: str | None = None) -> Any:
    """A JSON tree (dicts, lists, strings, numbers) with every secret replaced: string
    leaves by :func:`redact_value` under their key; every string under a secret key (a
    ``credentials`` section) redacted whole. Non-string leaves are kept. Returns a new
    tree; the input is not changed."""
    if isinstance(value, str):
        return redact_value(key, value, parent)
    if isinstance(value, dict):
        if key is not None and is_secret_key(key, parent):
            return _redact_all(value)
        return {k: redact_tree(v, k if isinstance(k, str) else None, key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if key is not None and is_secret_key(key, parent):
            return _redact_all(list(value))
        return [redact_tree(v, key, parent) for v in value]
    return value


def _redact_all(value: Any) -> Any:
    if isinstance(value, str):
        return REDACTED if value else value
    if isinstance(value, dict):
        return {k: _redact_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_all(v) for v in value]
    return value


_FLAG = re.compile(r"^(-{1,2}[\w.\-]+)(=(.*))?$", re.DOTALL)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with the value after (or ``=`` of) every secret-looking flag
    (``--api-key V``, ``--wandb-key=V``, ``-p V`` is not judged: only named flags),
    every ``name=value`` override under a secret name (``wandb.key=V``), and every
    secret-shaped word replaced by ``<redacted>``."""
    out: list[str] = []
    redact_next = False
    for arg in argv:
        arg = str(arg)
        if redact_next:
            redact_next = False
            if not arg.startswith("-") or len(arg) > 1 and not arg[1:2].isalpha():
                out.append(REDACTED)
                continue
        flag = _FLAG.match(arg)
        if flag is not None and is_secret_key(flag.group(1).lstrip("-").replace("-", "_")):
            if flag.group(2) is None:
                out.append(arg)
                redact_next = True
            else:
                out.append(flag.group(1) + "=" + REDACTED)
            continue
        name, eq, value = arg.partition("=")
        if eq and not arg.startswith("-") and "/" not in name:
            section, _, leaf = name.rpartition(".")
            if is_secret_key(leaf, section or None) or is_secret_key(name):
                out.append(f"{name}={REDACTED}")
                continue
        out.append(redact_text(arg))
    return out


def redact_diff_lines(lines: Iterable[bytes]) -> tuple[list[bytes], int]:
    """Diff lines (bytes, without their newline) with each line that holds a secret
    replaced by its first character (``+``, ``-``, `` ``) and ``<redacted by rllog:
    the line holds a secret>``; returns the lines and how many were redacted. Header
    lines (``diff --git``, ``index``, ``@@``) are judged like the others."""
    out: list[bytes] = []
    count = 0
    in_key = False  # inside a PEM private-key block, whose middle lines have no marker
    for line in lines:
        text = line.decode("utf-8", "surrogateescape")
        begins = bool(_PEM_BEGIN.search(text))
        secret = (
            in_key or begins or len(text) >= 8 and (_shapes(text) != text or bool(library_findings(text)))
        )
        if begins:
            in_key = True
        if in_key and _PEM_END.search(text):
            in_key = False
        if secret:
            prefix = text[:1] if text[:1] in "+- " else ""
            out.append(f"{prefix}<redacted by rllog: the line holds a secret>".encode())
            count += 1
        else:
            out.append(line)
    return out, count


_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")


# -- the detect-secrets library ----------------------------------------------------------

#: detect-secrets plugins used (regex detectors; the entropy and IP ones flag commit
#: hashes and addresses, which are not secrets in a run's record)
_PLUGINS = (
    ("detect_secrets.plugins.aws", "AWSKeyDetector"),
    ("detect_secrets.plugins.azure_storage_key", "AzureStorageKeyDetector"),
    ("detect_secrets.plugins.artifactory", "ArtifactoryDetector"),
    ("detect_secrets.plugins.basic_auth", "BasicAuthDetector"),
    ("detect_secrets.plugins.discord", "DiscordBotTokenDetector"),
    ("detect_secrets.plugins.github_token", "GitHubTokenDetector"),
    ("detect_secrets.plugins.gitlab_token", "GitLabTokenDetector"),
    ("detect_secrets.plugins.jwt", "JwtTokenDetector"),
    ("detect_secrets.plugins.keyword", "KeywordDetector"),
    ("detect_secrets.plugins.mailchimp", "MailchimpDetector"),
    ("detect_secrets.plugins.npm", "NpmDetector"),
    ("detect_secrets.plugins.openai", "OpenAIDetector"),
    ("detect_secrets.plugins.private_key", "PrivateKeyDetector"),
    ("detect_secrets.plugins.pypi_token", "PypiTokenDetector"),
    ("detect_secrets.plugins.sendgrid", "SendGridDetector"),
    ("detect_secrets.plugins.slack", "SlackDetector"),
    ("detect_secrets.plugins.square_oauth", "SquareOAuthDetector"),
    ("detect_secrets.plugins.stripe", "StripeDetector"),
    ("detect_secrets.plugins.telegram_token", "TelegramBotTokenDetector"),
    ("detect_secrets.plugins.twilio", "TwilioKeyDetector"),
)


@functools.lru_cache(maxsize=1)
def _detectors() -> tuple[Any, ...]:
    import importlib
    import warnings

    # detect-secrets' import calls ``logging.captureWarnings(True)``, which would send every
    # warning of the user's process (rllog's own "could not write" included) to logging
    # and out of ``warnings.catch_warnings``: the hook is put back as it was.
    showwarning = warnings.showwarning
    found = []
    try:
        for module, name in _PLUGINS:
            try:
                found.append(getattr(importlib.import_module(module), name)())
            except Exception:  # detect-secrets missing or a plugin renamed: the patterns still apply
                continue
    finally:
        warnings.showwarning = showwarning
    return tuple(found)


def library_findings(text: str) -> list[str]:
    """The secret strings detect-secrets' detectors find in ``text`` (``[]`` when the
    library is not installed). Never raises."""
    if len(text) < 8:
        return []
    out: list[str] = []
    for detector in _detectors():
        try:
            out.extend(s for s in detector.analyze_string(text) if isinstance(s, str) and s)
        except Exception:
            continue
    return out
