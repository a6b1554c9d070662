"""The secrets a stored record is redacted of, and how a text is redacted (builder/redaction.py)."""

from __future__ import annotations

import huggingface_hub.constants
import pytest

from builder.redaction import REDACTED, known_secrets, redact, redact_record, redact_value
from schemas import KernelRecord

KEY = "sk-live-0123456789abcdef"


@pytest.fixture
def no_hub_token(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))


def test_variables_named_like_credentials_give_their_values_longest_first(no_hub_token):
    environ = {"OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": "tok-abcdefgh", "DB_PASSWORD": "correct horse",
               "PATH": "/usr/local/bin:/usr/bin", "WANDB_KEY": "short", "HOME": "/root"}  # fmt: skip
    assert known_secrets(environ) == [KEY, "correct horse", "tok-abcdefgh"]  # "short": below the least length
    assert known_secrets({}, extra=["gen-key-12345678", None, ""]) == ["gen-key-12345678"]


def test_the_hub_token_saved_by_a_login_is_a_secret(no_hub_token, monkeypatch, tmp_path):
    saved = tmp_path / "token"
    saved.write_text("hf_savedLoginToken0123\n")
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(saved))
    assert known_secrets({}) == ["hf_savedLoginToken0123"]


def test_a_secret_is_redacted_whole_and_where_an_excerpt_cut_through_it():
    assert redact(f"error: {KEY} at line 3; again {KEY}", [KEY]) == f"error: {REDACTED} at line 3; again {REDACTED}"
    assert redact(f"... the log ends in {KEY[:11]}", [KEY]) == f"... the log ends in {REDACTED}"  # a tail's cut
    assert redact(f"{KEY[-9:]} and the rest", [KEY]) == f"{REDACTED} and the rest"  # a head's cut
    assert redact(f"ends in {KEY[:5]}", [KEY]) == f"ends in {KEY[:5]}"  # too short a part to be told from text
    assert redact("nothing to hide", [KEY, ""]) == "nothing to hide"


def test_every_string_in_a_value_is_redacted_and_nothing_else_changes():
    value = {"error": f"x{KEY}", "checks": [{"name": "tamper", "detail": KEY}], "count": 3, "ratio": 1.5}
    assert redact_value(value, [KEY]) == {"error": f"x{REDACTED}", "checks": [{"name": "tamper", "detail": REDACTED}],
                                          "count": 3, "ratio": 1.5}  # fmt: skip
    assert redact_value(value, []) is value


def test_a_record_is_redacted_but_for_its_identity_and_left_as_it_is_without_secrets():
    key = "sk-live-0123456789abcdef"
    record = KernelRecord(kernel_id=key, task_id="1/1", level=1, task_number=1, op_name="matmul", kernel_name="k",
                          backend="cpu", language="cpp", generator="bundled", cuda_code=f"// {key}\n",
                          status="runtime_error", ranking_eligible=False, error=f"raised {key}", flags=["crash"])  # fmt: skip
    redacted = redact_record(record, [key])
    assert redacted.kernel_id == key and redacted.task_id == "1/1"  # the record's identity: a rerun resumes by it
    assert redacted.cuda_code == f"// {REDACTED}\n" and redacted.error == f"raised {REDACTED}"
    assert redacted.flags == ["crash"] and redacted.level == 1
    assert redact_record(record, []) is record
