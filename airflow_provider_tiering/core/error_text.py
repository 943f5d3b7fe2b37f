"""Turn an exception into the short, safe text stored as a table's ``last_error``."""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_ERROR_BYTES = 2048
# Pattern masking runs on at most this much text (known secrets are replaced everywhere first).
_SCAN_CHARS = 16_384
MASK = "***"

# Credentials that may sit inside a message even when the secret itself is unknown to us.
_URI_PASSWORD = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]{0,30}://[^:/@\s]{0,256}):(?P<secret>[^@\s/]{1,256})@")
_KEY_VALUE_SECRET = re.compile(
    r"(?P<key>\b(?:password|passwd|pwd|secret|token|access[_-]?key|secret[_-]?key|api[_-]?key)\b\s*[=:]\s*)"
    r"(?P<q>['\"]?)(?P<secret>[^'\"\s,;&)]+)(?P=q)",
    re.IGNORECASE,
)
# JVM frames and Python traceback noise inside Py4J / Spark messages.
_JVM_FRAME = re.compile(r"^\s+at [\w$.<>]+\(.*\)\s*$")
_CAUSED_BY = re.compile(r"^Caused by: (.*)$")
_TRACEBACK = "Traceback (most recent call last):"
# The exception line that ends a Python traceback: "module.path.ErrorName: message" (or a bare name).
_PY_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning))\b:?(?P<rest>.*)$"
    r"|^airflow_provider_tiering\.core\.errors\.(?P<own>\w+):?(?P<own_rest>.*)$"  # ours need not end in Error
)


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """Replace known secrets and anything that looks like a credential with ``***``."""
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = text[:_SCAN_CHARS]
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('scheme')}:{MASK}@", text)
    return _KEY_VALUE_SECRET.sub(lambda m: f"{m.group('key')}{m.group('q')}{MASK}{m.group('q')}", text)


def condense_jvm_error(text: str) -> str:
    """Keep the root cause of a JVM stack trace (the last ``Caused by:``) and drop the frames."""
    lines = text.splitlines()
    if not any(_JVM_FRAME.match(line) for line in lines):
        return text
    head = next((line.strip() for line in lines if line.strip() and not _JVM_FRAME.match(line)), "")
    causes = [m.group(1).strip() for line in lines if (m := _CAUSED_BY.match(line.strip()))]
    # Py4J puts the Java exception on the line after its "An error occurred while calling ...", as ": <exception>".
    thrown = next((line[2:].strip() for line in lines if line.startswith(": ") and line[2:].strip()), "")
    root = causes[-1] if causes else thrown
    if root:
        return f"{root} (in: {head})" if head and head not in root else root
    return head


def condense_python_traceback(text: str) -> str:
    """Keep the exception that ends the last Python traceback in ``text`` (e.g. Spark's ``PythonException``
    carries its worker's whole traceback) and drop the frames; the text before the traceback says where."""
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return text
    head = text[:at].strip().splitlines()
    frames_and_error = text[at + len(_TRACEBACK) :].splitlines()
    error_lines: list[str] = []
    for line in frames_and_error:
        if error_lines:
            if _JVM_FRAME.match(line) or line.startswith("\tat "):
                break
            error_lines.append(line)
        elif line.strip() and not line[0].isspace() and (match := _PY_EXCEPTION.match(line)):
            name, rest = (
                (match.group("name"), match.group("rest")) if match.group("name") else match.group("own", "own_rest")
            )
            error_lines.append(f"{name}:{rest}".rstrip(":"))
    if not error_lines:
        return text
    root = "\n".join(error_lines).strip()
    where = head[0].strip().rstrip(":") if head else ""
    return f"{root} (in: {where})" if where else root


def truncate_utf8(text: str, limit: int = MAX_ERROR_BYTES) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    marker = " …[truncated]"
    return data[: limit - len(marker.encode())].decode("utf-8", errors="ignore") + marker


def _condense(text: str) -> str:
    # The Python traceback first: a JVM trace may carry one (a Python worker's error) that it would cut short.
    return condense_jvm_error(condense_python_traceback(text))


def describe_error(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """The ``last_error`` text of an exception: type, root cause, secrets masked, at most 2 KiB."""
    message = _condense(str(exc) or repr(exc))
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause):
        cause_text = _condense(str(cause))
        # Py4J chains the Java exception that wraps the same Python error: name a cause only when it adds something.
        if cause_text.split(" (in: ", 1)[0] not in message:
            message = f"{message} (caused by {type(cause).__name__}: {cause_text})"
    text = f"{type(exc).__name__}: {message}"
    return truncate_utf8(mask_secrets(text, secrets))
