"""No secret reaches any file of a run: a table of credential shapes, each placed in the
config (by key name and nested), the checkpoint loop state, the command line (after a
flag and as ``name=value``) and the code diff (an edited tracked file and a staged one);
every file the run leaves (config.json, checkpoints.jsonl, code.diff, index.html,
metrics.jsonl...) is then searched for the secret's bytes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rllog import RunLogger
from rllog._format.redact import (
    REDACTED,
    is_secret_key,
    redact_argv,
    redact_diff_lines,
    redact_text,
    redact_tree,
)

HEX40 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
PEM_BODY = "MIIEowIBAAKCAQEA7bq9zXyQpL2mN4vX7tR2Zq8PzL1mN4vX7tR2Zq8PzL1"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\nQWxhZGRpbjpvcGVuIHNlc2FtZQ0K\n-----END RSA PRIVATE KEY-----"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq"

# (id, dotted config path, value, the secret part that must not appear anywhere)
SHAPES = [
    # key-named: the value has no shape of its own
    ("api_key", "api_key", "Zq8PzL1mN4vX7tR2a", "Zq8PzL1mN4vX7tR2a"),
    ("camelCase", "openaiApiKey", "Kp3vX7tR2Zq8PzL1m", "Kp3vX7tR2Zq8PzL1m"),
    ("tracker key", "wandb.key", HEX40, HEX40),
    ("nested tracker key", "trackers.comet.api_key", "Rt5Yu7Io9Pa2Sd4F", "Rt5Yu7Io9Pa2Sd4F"),
    ("password", "db.password", "hunter2hunter2", "hunter2hunter2"),
    ("client secret", "oauth.client_secret", "Cs9Xx8Ww7Vv6Uu5T", "Cs9Xx8Ww7Vv6Uu5T"),
    (
        "AWS secret",
        "aws_secret_access_key",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    ),
    ("hf token", "hf_token", "Mn4Bv5Cx6Zl7Kj8H", "Mn4Bv5Cx6Zl7Kj8H"),
    ("refresh token", "auth.refresh_token", "Rf1Rf2Rf3Rf4Rf5Rf6", "Rf1Rf2Rf3Rf4Rf5Rf6"),
    ("passphrase", "ssh.passphrase", "correcthorsebattery", "correcthorsebattery"),
    ("cookie", "session_cookie", "Ck7Ck8Ck9Ck0CkAB", "Ck7Ck8Ck9Ck0CkAB"),
    ("credentials section", "credentials.user", "Us3rNam3Secr3tX", "Us3rNam3Secr3tX"),
    ("connection string key", "connection_string", "Server=tcp:x;Pwd=Pw9Pw8Pw7Pw6", "Pw9Pw8Pw7Pw6"),
    ("sas token", "storage.sas_token", "sv=2022-11-02&ss=b&sig=SaS5SaS6SaS7", "SaS5SaS6SaS7"),
    # value-shaped under neutral names
    ("redis url", "cache_url", "redis://:R3disPw99@cache:6379/0", "R3disPw99"),
    ("password with @", "db_url", "postgres://admin:p4ss@w0rd99@db:5432/x", "p4ss@w0rd99"),
    ("amqp url", "broker", "amqp://guest:Amqp77Pw@mq:5672//", "Amqp77Pw"),
    ("mongodb+srv", "mongo", "mongodb+srv://u:M0ngoPw55@cluster0.x.net/db", "M0ngoPw55"),
    (
        "azure connection string",
        "blob",
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE_KEY}==;EndpointSuffix=core.windows.net",
        AZURE_KEY,
    ),
    (
        "azure SAS url",
        "data_url",
        "https://acct.blob.core.windows.net/c/f?sv=2022&se=2030&sig=Sg7Hk9Lm2Qw4Er6T",
        "Sg7Hk9Lm2Qw4Er6T",
    ),
    (
        "S3 presigned url",
        "shard",
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIAXX%2F2024&X-Amz-Signature=a1b2c3d4e5f60718293a",
        "a1b2c3d4e5f60718293a",
    ),
    ("PEM block", "tls", PEM, PEM_BODY),
    ("JWT", "header_note", JWT, "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"),
    (
        "slack webhook",
        "alerts",
        "https://hooks.slack.com/services/T0AAA/B0BBB/Wh00kSecretXyz",
        "Wh00kSecretXyz",
    ),
    ("discord webhook", "notify", "https://discord.com/api/webhooks/1234/Dsc0rdT0kenAbc", "Dsc0rdT0kenAbc"),
    ("bearer text", "headers_note", "Authorization: Bearer be4rerT0kenXyz123", "be4rerT0kenXyz123"),
    ("free text", "comment", "my token is sk-abc123", "sk-abc123"),
    ("openai key", "model_note", "use sk-proj-Op3nA1K3yAbcdefGhij today", "sk-proj-Op3nA1K3yAbcdefGhij"),
    (
        "anthropic key",
        "anthropic_model",
        "sk-ant-api03-Anthr0picK3yAbcdef",
        "sk-ant-api03-Anthr0picK3yAbcdef",
    ),
    (
        "github token",
        "repo_note",
        "ghp_G1thubT0kenAbcdefghijklmnopqrstuv",
        "ghp_G1thubT0kenAbcdefghijklmnopqrstuv",
    ),
    (
        "github pat",
        "repo2",
        "github_pat_11ABCDEFG0123456789_abcdefghij",
        "github_pat_11ABCDEFG0123456789_abcdefghij",
    ),
    ("gitlab token", "gl", "glpat-Gl4bT0kenAbcdefghijk", "glpat-Gl4bT0kenAbcdefghijk"),
    ("aws access key id", "aws_id_note", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("slack bot token", "bot", "xoxb-123456789012-Sl4ckB0tT0ken", "xoxb-123456789012-Sl4ckB0tT0ken"),
    (
        "google api key",
        "maps",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
    ),
    ("stripe key", "billing", "sk_live_51HStr1peK3yAbcdef", "sk_live_51HStr1peK3yAbcdef"),
    ("hf token value", "hub", "hf_HuggingF4ceT0kenAbcdef", "hf_HuggingF4ceT0kenAbcdef"),
    ("key=value text", "extra_args", "--foo 1 password=Pa55Wd0rdZz", "Pa55Wd0rdZz"),
]
assert len(SHAPES) >= 30
#: shapes whose secrecy comes from the section they sit in, which a line of code does not
#: show (``CREDENTIALS_USER = "..."`` is a user name); they are checked in config and loop state
SECTION_ONLY = {"credentials section"}


def _nest(path: str, value: str) -> dict:
    out: dict = {}
    cur = out
    parts = path.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _repo_with_secrets(root: Path) -> Path:
    repo = root / "code"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "train.py").write_text("x = 1\n")
    _git(repo, "add", "train.py")
    _git(repo, "commit", "-q", "-m", "init")
    edited, staged = ["x = 1"], []
    for i, (id_, path, value, _secret) in enumerate(SHAPES):
        if id_ in SECTION_ONLY:
            continue
        name = path.replace(".", "_").upper()
        lines = value.split("\n")
        if len(lines) == 1:
            (edited if i % 2 else staged).append(f'{name} = "{value}"')
        else:  # a multi-line value (PEM) as a file of its own
            (edited if i % 2 else staged).extend(lines)
    (repo / "train.py").write_text("\n".join(edited) + "\n")
    (repo / "settings.py").write_text("\n".join(staged) + "\n")
    _git(repo, "add", "settings.py")
    (repo / ".env").write_text("OPENAI_API_KEY=sk-proj-Untr4ckedEnvF1leKey\n")  # untracked: listed by name
    return repo


def _argv() -> list[str]:
    argv = ["train.py"]
    for id_, path, value, _secret in SHAPES:
        if "\n" in value:
            continue
        if id_ not in SECTION_ONLY:
            argv += [f"--{path.replace('.', '-').replace('_', '-')}", value]
        argv.append(f"{path}={value}")
    return argv


def _leaks(run: Path) -> list[str]:
    found = []
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for id_, _path, _value, secret in SHAPES:
        for p, data in files.items():
            for form in {secret, secret.replace("/", "\\/")}:
                if form.encode() in data:
                    found.append(f"{id_} in {p.name}")
    return found


def test_thirty_credential_shapes_reach_no_file_of_a_run(tmp_path: Path, monkeypatch) -> None:
    import rllog._write.codediff as codediff

    repo = _repo_with_secrets(tmp_path)
    monkeypatch.setattr(codediff, "script_dir", lambda: repo)
    monkeypatch.setattr(sys, "argv", _argv())
    config: dict = {"lr": 3e-4, "max_tokens": 512}
    state: dict = {}
    for _id, path, value, _secret in SHAPES:
        for target in (config, state):
            top, _, rest = path.partition(".")
            nested = _nest(path, value)
            if top in target and isinstance(target[top], dict):
                target[top].update(nested[top])
            else:
                target.update(nested)
    config["sections"] = {"nested": dict(config)}  # the same shapes one level deeper
    run = tmp_path / "run"
    with RunLogger(run, config=config) as logger:
        logger.log_metrics(0, {"loss": 1.0})
        logger.log_checkpoint("000001", batch=1, **state)
    files = sorted(p.name for p in run.iterdir())
    assert {"config.json", "checkpoints.jsonl", "code.diff", "index.html", "metrics.jsonl"} <= set(files)
    assert _leaks(run) == [], f"{len(_leaks(run))} leaks: {_leaks(run)}"
    diff = (run / "code.diff").read_text()
    assert "# secrets:" in diff and "diff line(s) held a secret" in diff
    assert "x = 1" in diff and ".env" in diff  # the rest of the diff and the untracked name stay
    cfg = (run / "config.json").read_text()
    assert '"max_tokens": 512' in cfg and '"lr": 0.0003' in cfg  # what is not secret stays


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my token is sk-abc123", f"my token is {REDACTED}"),
        ("redis://:pw12345@host:6379", f"redis://:{REDACTED}@host:6379"),
        ("postgres://u:p@ss@db/x", f"postgres://u:{REDACTED}@db/x"),
        ("https://host/x?a=1", "https://host/x?a=1"),
        ("max_tokens: 5120, stop_tokens: ['</s>']", "max_tokens: 5120, stop_tokens: ['</s>']"),
        (
            "commit 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
            "commit 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
        ),
    ],
)
def test_free_text_redacts_the_secret_not_the_word_before_it(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_key_names_and_sections() -> None:
    assert is_secret_key("openaiApiKey") and is_secret_key("key", "wandb") and is_secret_key("WANDB_API_KEY")
    assert (
        not is_secret_key("key", "sort") and not is_secret_key("max_tokens") and not is_secret_key("bypass")
    )
    tree = redact_tree({"wandb": {"key": HEX40, "project": "p"}, "git": {"commit": HEX40}, "run_key": HEX40})
    assert tree == {"wandb": {"key": REDACTED, "project": "p"}, "git": {"commit": HEX40}, "run_key": REDACTED}


def test_command_line_values_after_secret_flags() -> None:
    argv = [
        "train.py",
        "--api-key",
        "V1abcdef",
        "--wandb-key=V2abcdef",
        "--lr",
        "3e-5",
        "wandb.key=V3",
        "--token",
    ]
    assert redact_argv(argv) == [
        "train.py",
        "--api-key",
        REDACTED,
        f"--wandb-key={REDACTED}",
        "--lr",
        "3e-5",
        f"wandb.key={REDACTED}",
        "--token",
    ]


def test_diff_lines_are_counted_and_pem_middles_redacted() -> None:
    lines = [
        b"+x = 1",
        b"+-----BEGIN PRIVATE KEY-----",
        b"+MIIEabc",
        b"+-----END PRIVATE KEY-----",
        b" y = 2",
    ]
    out, n = redact_diff_lines(lines)
    assert n == 3 and out[0] == b"+x = 1" and out[-1] == b" y = 2" and b"MIIE" not in b"".join(out)


def data_of(rows: list[bytes]) -> str:
    return b"".join(rows).decode()


def test_secrets_in_metric_string_values_reach_no_file_console_or_sink(tmp_path: Path, capsys) -> None:
    """Strings logged as metrics (a phase label, a URL, an error text) go through the same
    redaction as config values: to metrics.jsonl, the console and the sinks' rows."""
    rows: list[bytes] = []
    run = tmp_path / "run"
    metrics = {path.replace(".", "/"): value for _id, path, value, _ in SHAPES}
    metrics["phase"] = "train"
    with RunLogger(run, console=True, index=False) as logger:
        logger._metrics.tap = rows.append  # what the sinks' dispatcher receives
        logger.log_metrics(0, {**metrics, "loss": 1.0})
        logger.log_metrics(1, {"note": "retrying with key sk-proj-Ab12Cd34Ef56Gh78Ij90", "loss": 0.5})
    shown = capsys.readouterr().out
    assert _leaks(run) == []
    leaked = [
        id_ for id_, _p, _v, secret in SHAPES if secret in shown or any(secret.encode() in r for r in rows)
    ]
    assert leaked == []
    assert "sk-proj-Ab12" not in shown + data_of(rows) + (run / "metrics.jsonl").read_text()
    data = (run / "metrics.jsonl").read_text()
    assert '"phase":"train"' in data and '"loss":0.5' in data  # what is not secret stays
    assert f'"note":"retrying with key {REDACTED}"' in data
    assert len(rows) == 2


def test_the_secret_scanner_leaves_the_processs_warning_hook_alone(tmp_path: Path) -> None:
    """detect-secrets' import calls ``logging.captureWarnings(True)``: without care, every
    later warning of the user's process (rllog's own included) escapes ``catch_warnings``."""
    script = f"""
import warnings
from rllog import RunLogger
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with RunLogger({str(tmp_path / "run")!r}, config={{"note": "a long free-text value here"}}, index=False) as lg:
        lg.log_metrics(0, {{"phase": "a long free-text label"}})
    warnings.warn("after the scanner ran")
print(len(caught))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1", out.stderr
